//! The banner `sonde run` prints once it is ready: version, where the
//! dashboard, API, ingest, export, sinks and data are, and which plugins run.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::config::Config;
use crate::ingest;
use crate::plugin::PluginManager;

pub(super) fn print_banner(
    cfg: &Config,
    plugins: &PluginManager,
    series: usize,
    gpu: &str,
    receivers: &[ingest::otlp::Bound],
    started: Instant,
) {
    let export = match &cfg.export.endpoint {
        Some(e) => format!(
            "OTLP {} to {e} (metrics and logs, every {} ms)",
            match cfg.export.protocol {
                crate::export::config::Protocol::Grpc => "gRPC",
                crate::export::config::Protocol::HttpProtobuf => "HTTP/protobuf",
            },
            cfg.export.interval_ms
        ),
        None => "off (no collector configured; set --export-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)".into(),
    };
    let statuses = plugins.statuses();
    let list: Vec<String> = statuses
        .iter()
        .map(|s| match &s.reason {
            Some(r) if s.state != crate::plugin::RunState::Running => format!("{} ({}: {r})", s.name, s.state.as_str()),
            _ => format!("{} ({})", s.name, s.state.as_str()),
        })
        .collect();
    println!(
        "sonde {} (plugin contract sonde:plugin@{})",
        env!("CARGO_PKG_VERSION"),
        crate::plugin::engine::CONTRACT_VERSION
    );
    let scheme = if cfg.api.tls.is_some() { "https" } else { "http" };
    println!("  dashboard  {scheme}://{}/", cfg.api.listen);
    println!("  API        {scheme}://{}/api/status", cfg.api.listen);
    println!(
        "  sampling   every {} ms, {series} series; GPU: {gpu}",
        plugins.sample_plan().period_ms.load(Ordering::Relaxed)
    );
    println!(
        "  plugins    {} ({})",
        plugins.dir().display(),
        if list.is_empty() {
            "none".into()
        } else {
            list.join(", ")
        }
    );
    let mut ingest: Vec<String> = receivers
        .iter()
        .map(|b| match (&b.address, &b.error) {
            (Some(a), _) if cfg.ingest.tls.is_some() => format!("OTLP {} {a} (TLS)", b.protocol),
            (Some(a), _) => format!("OTLP {} {a}", b.protocol),
            (None, e) => format!("OTLP {} off ({})", b.protocol, e.as_deref().unwrap_or("")),
        })
        .collect();
    ingest.push(format!("JSON POST {scheme}://{}/api/ingest", cfg.api.listen));
    println!(
        "  ingest     {}{}",
        ingest.join(", "),
        if cfg.ingest.forward {
            "; forwarding to the export endpoint"
        } else {
            ""
        }
    );
    println!("  export     {export}");
    println!("  sinks      {}", cfg.sinks.dir.display());
    // Sinks a plugin opened elsewhere (the config's [sinks.plugins.*], or its
    // own default): where each directory is, or why nothing is written there.
    for s in &statuses {
        let mut dirs: Vec<(&str, &str, Option<&str>)> = Vec::new();
        for k in s.sinks.iter().filter(|k| k.from != "sinks.dir") {
            let entry = (k.dir.as_str(), k.from.as_str(), k.error.as_deref());
            if !dirs.iter().any(|d| d.0 == entry.0) {
                dirs.push(entry);
            }
        }
        for (dir, from, error) in dirs {
            match error {
                None => println!("  sinks      {}: {dir} (from {from})", s.name),
                Some(e) => println!(
                    "  sinks      {}: {dir} (from {from}): {e}; no {} files will be written",
                    s.name, s.name
                ),
            }
        }
    }
    println!("  data       {}", cfg.host.data_dir.display());
    println!("  ready in {} ms; Ctrl-C stops", started.elapsed().as_millis());
}
