//! Every metric name, unit and attribute key sonde exports for what it
//! samples (CPU, memory, network, disks, GPUs through the fake NVML library),
//! plus its own self-metrics and resource attributes, checked against the
//! OpenTelemetry semantic conventions as the pinned
//! `opentelemetry-semantic-conventions` package carries them
//! (tests/py/semconv_check.py): a name the conventions define (and do not
//! deprecate) with their unit, or a `sonde.` name; and the values of the
//! attributes the conventions enumerate (`cpu.mode`, `system.memory.state`,
//! `hw.type`, ...), one of theirs. The CPU is sampled per `cpu.mode`, every
//! CPU series carries one, and the modes are the conventions' seven.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

use sonde_e2e::*;

/// What one metric carried: its unit, its attribute keys, and the string
/// values seen per key.
type Seen = (String, BTreeSet<String>, BTreeMap<String, BTreeSet<String>>);

#[test]
fn exported_names_follow_the_semantic_conventions() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let dir = tmp.path().join("sonde");
    std::fs::create_dir_all(&dir).unwrap();
    // GPUs with everything the fake can show: NVLink, a process, MIG, GPM
    let script = dir.join("gpus.script");
    std::fs::write(
        &script,
        "gpus 2\ngpu 0 nvlinks 2\ngpu 1 mig 2\nat 0 gpu 0 proc 4242 1073741824 30\n",
    )
    .unwrap();
    let lib = format!(
        "sampler.nvml_library=\"{}\"",
        repo().join("target/fake-nvml/libnvidia-ml.so.1").display()
    );
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    let script = script.to_string_lossy().into_owned();
    let sonde = Sonde::start_env(
        &dir,
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[
            "--export-endpoint",
            &endpoint,
            "--set",
            &lib,
            "--set",
            "export.interval_ms=300",
            "--set",
            "export.self_metrics_interval_ms=300",
        ],
        &[("FAKE_NVML_SCRIPT", &script)],
        free_port(),
    );
    let arrived = wait_for(Duration::from_secs(30), || {
        let ms = parse_rotel_metrics(&rotel.received());
        [
            "hw.gpu.utilization",
            "sonde.gpu.process.memory.usage",
            "system.memory.usage",
            "sonde.plugin.calls",
        ]
        .iter()
        .all(|n| ms.iter().any(|m| &m.name == n))
    });
    assert!(arrived, "not everything arrived:\n{}", sonde.output());
    let log = rotel.received();
    // name -> (unit, attribute keys, string values by key)
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    // The CPU series: how many points lack `cpu.mode`.
    let mut cpu_without_mode = 0;
    for m in parse_rotel_metrics(&log) {
        let e = seen
            .entry(m.name.clone())
            .or_insert_with(|| (m.unit.clone(), Default::default(), Default::default()));
        for (attrs, _) in &m.points {
            for (k, v) in attrs.iter().filter_map(|a| a.split_once('=')) {
                e.1.insert(k.to_string());
                // The debug exporter writes a string as Str(text).
                if let Some(text) = v.strip_prefix("Str(").and_then(|v| v.strip_suffix(')')) {
                    e.2.entry(k.to_string()).or_default().insert(text.to_string());
                }
            }
            if m.name == "system.cpu.utilization" && !attrs.iter().any(|a| a.starts_with("cpu.mode=")) {
                cpu_without_mode += 1;
            }
        }
    }
    assert_eq!(cpu_without_mode, 0, "CPU points without cpu.mode");
    let modes = &seen["system.cpu.utilization"].2["cpu.mode"];
    assert_eq!(
        modes.iter().map(String::as_str).collect::<Vec<_>>(),
        ["idle", "interrupt", "iowait", "nice", "steal", "system", "user"],
        "every mode, for all CPUs and per core"
    );
    let body = serde_json::json!({
        "metrics": seen.iter().map(|(name, (unit, keys, values))| serde_json::json!({"name": name, "unit": unit, "attributes": keys, "values": values})).collect::<Vec<_>>(),
        "resource": parse_rotel_resource_keys(&log),
    });
    let mut check = Command::new("python3")
        .arg(repo().join("tests/py/semconv_check.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.to_string().as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "names or values off the conventions:\n{text}\nseen: {body:#}"
    );
    let checked = text.lines().find(|l| l.starts_with("checked ")).unwrap_or_default();
    for key in ["cpu.mode", "system.memory.state", "hw.type"] {
        assert!(
            checked.contains(key),
            "the oracle did not check {key}'s values: {checked}"
        );
    }
    assert!(seen.len() >= 25, "{} metrics checked: {:?}", seen.len(), seen.keys());
}
