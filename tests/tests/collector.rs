//! sonde exporting to a real OpenTelemetry collector (rotel): what arrives,
//! under which names, units, attributes and values; both OTLP protocols; a
//! collector that is down; and a clean, bounded shutdown.

use std::time::Duration;

use sonde_e2e::*;

fn find<'a>(ms: &'a [SeenMetric], name: &str) -> Vec<&'a SeenMetric> {
    ms.iter().filter(|m| m.name == name).collect()
}

/// The CPU points of the whole machine (no `cpu.logical_number`).
fn all_cpus<'a>(cpu: &[&'a SeenMetric]) -> Vec<&'a (Vec<String>, f64)> {
    cpu.iter()
        .flat_map(|m| &m.points)
        .filter(|(a, _)| !a.iter().any(|a| a.starts_with("cpu.logical_number=")))
        .collect()
}

/// How many ticks `points` cover: one idle share each.
fn idle_ticks(points: &[&(Vec<String>, f64)]) -> usize {
    points
        .iter()
        .filter(|(a, _)| a.iter().any(|a| a == "cpu.mode=Str(idle)"))
        .count()
}

#[test]
fn system_metrics_decisions_and_self_metrics_reach_rotel_over_grpc() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    let mut sonde = Sonde::start(
        tmp.path(),
        &[
            (plugin_file("bundled/sysmetrics.wasm"), "sysmetrics"),
            (plugin_file("testing/testbed.wasm"), "echo"),
        ],
        &[
            "--export-endpoint",
            &endpoint,
            "--set",
            "export.interval_ms=300",
            "--set",
            "export.self_metrics_interval_ms=500",
            "--set",
            "plugin.echo.settings.timer_ms=200",
        ],
    );
    let out = sonde.output();
    assert!(
        out.contains(&format!("export     OTLP gRPC to {endpoint}")),
        "the banner says what it exports:\n{out}"
    );
    assert!(out.contains(&format!("dashboard  http://{}/", sonde.api)), "{out}");

    // Five ticks of the all-CPU idle share: sysmetrics's first delivery comes
    // at the first whole second after it started, and may hold a single tick.
    let arrived = wait_for(Duration::from_secs(20), || {
        let ms = parse_rotel_metrics(&rotel.received());
        idle_ticks(&all_cpus(&find(&ms, "system.cpu.utilization"))) >= 5 && !find(&ms, "sonde.plugin.calls").is_empty()
    });
    // A graceful stop flushes what is buffered and exits 0 well within its deadline.
    let status = sonde.proc.terminate(Duration::from_secs(8));
    assert_eq!(
        status.map(|s| s.success()),
        Some(true),
        "sonde did not exit cleanly:\n{}",
        sonde.output()
    );
    assert!(arrived, "nothing arrived at rotel:\n{}", sonde.output());

    let log = rotel.received();
    let ms = parse_rotel_metrics(&log);
    // Resource attributes.
    for attr in [
        "service.name: Str(sonde)",
        "host.name: Str(",
        "service.instance.id: Str(",
        "process.pid: Int(",
    ] {
        assert!(log.contains(attr), "resource attribute {attr} missing");
    }
    // CPU: a gauge of ratios per `cpu.mode`, total and per logical CPU.
    let cpu = find(&ms, "system.cpu.utilization");
    assert!(
        cpu.iter()
            .all(|m| m.unit == "1" && m.data_type == "Gauge" && m.scope.starts_with("sonde.plugin.sysmetrics"))
    );
    let values: Vec<f64> = cpu.iter().flat_map(|m| m.points.iter().map(|p| p.1)).collect();
    assert!(
        values.len() >= 10 && values.iter().all(|v| (0.0..=1.0).contains(v)),
        "{values:?}"
    );
    assert!(
        cpu.iter()
            .flat_map(|m| &m.points)
            .any(|(a, _)| a.iter().any(|a| a == "cpu.logical_number=Int(0)"))
    );
    // Every point has a mode; for all CPUs, each tick's seven modes add up to 1.
    let points: Vec<&(Vec<String>, f64)> = cpu.iter().flat_map(|m| &m.points).collect();
    assert!(
        points
            .iter()
            .all(|(a, _)| a.iter().any(|a| a.starts_with("cpu.mode=Str(")))
    );
    let total = all_cpus(&cpu);
    let ticks = idle_ticks(&total);
    let sum: f64 = total.iter().map(|p| p.1).sum();
    assert!(
        ticks >= 5 && total.len() == 7 * ticks && (sum - ticks as f64).abs() < 1e-6 * ticks as f64,
        "{ticks} ticks, {} points of all CPUs summing to {sum}",
        total.len()
    );
    // Memory: cumulative non-monotonic sums in bytes, by state; used + free never exceed the limit.
    let mem = find(&ms, "system.memory.usage");
    assert!(
        mem.iter()
            .all(|m| m.unit == "By" && m.data_type == "Sum" && m.monotonic == Some(false))
    );
    let used: Vec<f64> = mem
        .iter()
        .flat_map(|m| &m.points)
        .filter(|(a, _)| a.contains(&"system.memory.state=Str(used)".to_string()))
        .map(|p| p.1)
        .collect();
    let limit: Vec<f64> = find(&ms, "system.memory.limit")
        .iter()
        .flat_map(|m| &m.points)
        .map(|p| p.1)
        .collect();
    assert!(!used.is_empty() && !limit.is_empty());
    assert!(
        used.iter().all(|u| *u > 0.0 && *u < limit[0]),
        "used {used:?} limit {limit:?}"
    );
    // Counters are monotonic sums; loopback is not reported by default.
    for m in find(&ms, "system.network.io")
        .iter()
        .chain(find(&ms, "system.disk.io").iter())
    {
        assert_eq!(
            (m.data_type.as_str(), m.monotonic, m.unit.as_str()),
            ("Sum", Some(true), "By"),
            "{m:?}"
        );
        assert!(
            !m.points
                .iter()
                .any(|(a, _)| a.iter().any(|a| a == "network.interface.name=Str(lo)"))
        );
    }
    // The host's self-metrics, per plugin.
    let calls = find(&ms, "sonde.plugin.calls");
    assert!(
        calls
            .iter()
            .flat_map(|m| &m.points)
            .any(|(a, v)| a.contains(&"sonde.plugin.name=Str(sysmetrics)".to_string()) && *v > 0.0)
    );
    // Decisions travel as OTLP log records.
    assert!(log.contains("sonde.decision"), "no decision log records arrived");
}

#[test]
fn http_protobuf_export_works_too() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let endpoint = format!("http://127.0.0.1:{}", rotel.http);
    let mut sonde = Sonde::start(
        tmp.path(),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[
            "--export-endpoint",
            &endpoint,
            "--export-protocol",
            "http/protobuf",
            "--set",
            "export.interval_ms=300",
        ],
    );
    let ok = wait_for(Duration::from_secs(20), || {
        !find(&parse_rotel_metrics(&rotel.received()), "system.memory.utilization").is_empty()
    });
    sonde.proc.terminate(Duration::from_secs(8));
    assert!(ok, "nothing arrived over HTTP:\n{}", sonde.output());
}

#[test]
fn a_dead_collector_costs_nothing_but_counted_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = format!("http://127.0.0.1:{}", free_port());
    let mut sonde = Sonde::start(
        tmp.path(),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[
            "--export-endpoint",
            &dead,
            "--set",
            "export.interval_ms=200",
            "--set",
            "export.retry_max_elapsed_ms=500",
            "--set",
            "export.queue_capacity=4",
        ],
    );
    let first = sonde.json("/api/status");
    let t0 = first["sampler"]["period"]["ticks"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let st = sonde.json("/api/status");
    let ticks = st["sampler"]["period"]["ticks"].as_u64().unwrap() - t0;
    // Sampling goes on at its period (about 30 ticks in 3 s).
    assert!(ticks >= 20, "only {ticks} ticks in 3 s with a dead collector");
    let ex = &st["export"]["stats"];
    let lost = ex["points_failed"].as_u64().unwrap() + ex["points_dropped"].as_u64().unwrap();
    assert!(lost > 0, "failures are counted: {ex}");
    assert_eq!(ex["points_exported"].as_u64().unwrap(), 0);
    assert!(ex["last_error"].as_str().is_some(), "{ex}");
    // Shutdown stays bounded even though nothing can be delivered.
    let t = std::time::Instant::now();
    let status = sonde.proc.terminate(Duration::from_secs(8));
    assert!(status.is_some(), "sonde hung on shutdown with a dead collector");
    assert!(t.elapsed() < Duration::from_secs(6), "shutdown took {:?}", t.elapsed());
}

#[test]
fn bad_config_is_refused_with_the_key_and_the_reason() {
    let out = std::process::Command::new(sonde_bin())
        .args([
            "--set",
            "sampler.period_ms=5",
            "--set",
            "export.endpoint=ftp://x",
            "--check-config",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sampler.period_ms: 5 is out of range 10..=60000"), "{err}");
    assert!(err.contains("export.endpoint:"), "{err}");
    let out = std::process::Command::new(sonde_bin())
        .args(["--set", "sampler.perod_ms=50", "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("perod_ms"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
