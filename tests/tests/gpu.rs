//! GPUs end to end through the fake NVML library (`./dev fake-nvml`): sonde
//! loads `target/fake-nvml/libnvidia-ml.so.1` through nvml-wrapper's normal
//! path (`sampler.nvml_library`), the library answers from a script
//! (`FAKE_NVML_SCRIPT`, format in tests/fake-nvml/README.md), and what sonde
//! makes of it is read where a user would read it: rotel's log, `/api/status`,
//! the dlrover and determined plugins' routes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use sonde_e2e::*;

fn uuid(i: usize) -> String {
    fake_gpu_uuid(i)
}

/// Sonde on the fake library with `script`, these plugins and extra flags.
fn start(dir: &Path, script: &str, plugins: &[(PathBuf, &str)], args: &[&str]) -> Sonde {
    std::fs::create_dir_all(dir).unwrap();
    let script_path = dir.join("gpus.script");
    std::fs::write(&script_path, script).unwrap();
    let lib = format!("sampler.nvml_library=\"{}\"", fake_nvml().display());
    let mut all = vec!["--set", lib.as_str()];
    all.extend_from_slice(args);
    let script_env = script_path.to_string_lossy().into_owned();
    Sonde::start_env(dir, plugins, &all, &[("FAKE_NVML_SCRIPT", &script_env)], free_port())
}

fn gpu_status(s: &Sonde) -> String {
    let v = s.json("/api/status");
    v["sampler"]["gpu"].as_str().unwrap_or_default().to_string()
}

fn points_of<'a>(ms: &'a [SeenMetric], name: &str) -> Vec<&'a (Vec<String>, f64)> {
    ms.iter()
        .filter(|m| m.name == name)
        .flat_map(|m| m.points.iter())
        .collect()
}

fn has_attr(p: &(Vec<String>, f64), a: &str) -> bool {
    p.0.iter().any(|x| x == a)
}

/// Eight GPUs, each with its own figures; every documented name reaches
/// rotel with its unit, and each GPU's values are its own.
#[test]
fn eight_gpus_reach_rotel_under_the_documented_names() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let mut script = String::from("gpus 8\nsample_ms 50\n");
    for i in 0..8 {
        script += &format!(
            "gpu {i} nvlinks 2\nat 0 gpu {i} util {} power {} temp {} mem_used {} sm_active {} pcie_rx 2000 nvlink_tx 1000 throttle 4 ecc_corrected {i}\n",
            10 * (i + 1),
            100_000 + 10_000 * i,
            40 + i,
            (i as u64 + 1) << 30,
            5 * (i + 1),
        );
    }
    script += "at 0 gpu 3 proc 31337 2147483648 42\n";
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    let sonde = start(
        &tmp.path().join("sonde"),
        &script,
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &["--export-endpoint", &endpoint, "--set", "export.interval_ms=300"],
    );
    assert_eq!(gpu_status(&sonde), "8 GPUs via NVML (driver 550.54.15-fake)");
    let names = [
        ("hw.gpu.utilization", "1"),
        ("hw.gpu.memory.usage", "By"),
        ("hw.gpu.memory.limit", "By"),
        ("hw.gpu.memory.utilization", "1"),
        ("hw.power", "W"),
        ("hw.energy", "J"),
        ("hw.temperature", "Cel"),
        ("hw.status", "1"),
        ("hw.errors", "{error}"),
        ("sonde.gpu.clock.sm", "MHz"),
        ("sonde.gpu.pcie.io", "By/s"),
        ("sonde.gpu.nvlink.io", "By"),
        ("sonde.gpu.throttle", "1"),
        ("sonde.gpu.xid.last", "1"),
        ("sonde.gpu.sm.active", "1"),
        ("sonde.gpu.tensor.active", "1"),
        ("sonde.gpu.process.memory.usage", "By"),
        ("sonde.gpu.process.utilization", "1"),
    ];
    let arrived = wait_for(Duration::from_secs(40), || {
        let ms = parse_rotel_metrics(&rotel.received());
        names.iter().all(|(n, _)| !points_of(&ms, n).is_empty())
            && (0..8).all(|i| {
                points_of(&ms, "hw.gpu.utilization")
                    .iter()
                    .any(|p| has_attr(p, &format!("hw.id=Str({})", uuid(i))))
            })
    });
    let log = rotel.received();
    let ms = parse_rotel_metrics(&log);
    let missing: Vec<&str> = names
        .iter()
        .filter(|(n, _)| points_of(&ms, n).is_empty())
        .map(|(n, _)| *n)
        .collect();
    assert!(arrived, "missing at rotel: {missing:?}\n{}", sonde.output());
    for (name, unit) in names {
        let m = ms.iter().find(|m| m.name == name).unwrap();
        assert_eq!(m.unit, unit, "{name}");
    }
    // Each GPU's own figures (the last point of each series).
    for i in 0..8 {
        let id = format!("hw.id=Str({})", uuid(i));
        let last = |name: &str, extra: &str| {
            points_of(&ms, name)
                .into_iter()
                .rfind(|p| has_attr(p, &id) && (extra.is_empty() || has_attr(p, extra)) && !p.1.is_nan())
                .map(|p| p.1)
        };
        assert_eq!(
            last("hw.gpu.utilization", ""),
            Some((10 * (i + 1)) as f64 / 100.0),
            "GPU {i}"
        );
        assert_eq!(last("hw.power", ""), Some(100.0 + 10.0 * i as f64), "GPU {i}");
        assert_eq!(
            last("hw.gpu.memory.usage", ""),
            Some(((i as u64 + 1) << 30) as f64),
            "GPU {i}"
        );
        assert_eq!(
            last("hw.errors", "error.type=Str(ecc_corrected)"),
            Some(i as f64),
            "GPU {i}"
        );
        assert_eq!(
            last("sonde.gpu.throttle", "sonde.gpu.throttle.reason=Str(sw_power_cap)"),
            Some(1.0)
        );
        let sm = last("sonde.gpu.sm.active", "").unwrap();
        assert!((sm - 0.05 * (i + 1) as f64).abs() < 1e-6, "GPU {i}: {sm}");
        // the temperature is a sensor whose parent is the GPU
        let temp = points_of(&ms, "hw.temperature")
            .into_iter()
            .rfind(|p| has_attr(p, &format!("hw.parent=Str({})", uuid(i))))
            .unwrap();
        assert_eq!(temp.1, 40.0 + i as f64);
        assert!(has_attr(temp, "hw.type=Str(temperature)"), "{temp:?}");
    }
    // The process maps to GPU 3 by its PID.
    let procs: Vec<_> = points_of(&ms, "sonde.gpu.process.memory.usage");
    assert!(
        procs.iter().any(|p| has_attr(p, "process.pid=Int(31337)")
            && has_attr(p, &format!("hw.id=Str({})", uuid(3)))
            && p.1 == 2147483648.0),
        "{procs:?}"
    );
    let util: Vec<_> = points_of(&ms, "sonde.gpu.process.utilization");
    assert!(
        util.iter()
            .any(|p| has_attr(p, "process.pid=Int(31337)") && p.1 == 0.42),
        "{util:?}"
    );
    // NVLink: a counter per link and direction that grows (1000 KB/s per link)
    let link0: Vec<f64> = points_of(&ms, "sonde.gpu.nvlink.io")
        .into_iter()
        .filter(|p| has_attr(p, "sonde.gpu.nvlink.link=Int(0)") && has_attr(p, "network.io.direction=Str(transmit)"))
        .filter(|p| has_attr(p, &format!("hw.id=Str({})", uuid(0))))
        .map(|p| p.1)
        .collect();
    assert!(link0.len() >= 2 && link0.last() > link0.first(), "{link0:?}");
}

/// Two GPUs; GPU 1 falls off the bus after a second: it is marked lost (in
/// `/api/status` and `hw.status`), GPU 0 and the CPU keep being sampled, and
/// dlrover's failure handling sees a hardware error on this node. An XID on
/// GPU 0 arrives as a node event too.
#[test]
fn a_lost_gpu_and_an_xid_become_dlrover_node_events_while_sampling_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let script =
        "gpus 2\nsample_ms 50\nat 0 gpu * util 60\nat 800 gpu 0 xid 13\nat 1500 gpu 1 lost\nat 2500 gpu 0 util 70\n";
    let sonde = start(
        &tmp.path().join("sonde"),
        script,
        &[(plugin_file("bundled/dlrover.wasm"), "dlrover")],
        &[
            "--set",
            "plugin.dlrover.settings={node=\"gpu-node\", tick_ms=100, stats_interval_s=0.3, sample_period_ms=100, deliver_every_ms=200}",
        ],
    );
    let lost = wait_for(Duration::from_secs(30), || {
        gpu_status(&sonde).contains(&format!("GPU 1 ({}) lost", uuid(1)))
    });
    assert!(lost, "status: {}\n{}", gpu_status(&sonde), sonde.output());
    assert!(
        gpu_status(&sonde).starts_with("2 GPUs via NVML"),
        "{}",
        gpu_status(&sonde)
    );

    // dlrover: the node's GPUs, GPU 0 still read after GPU 1 went (70 % from 2.5 s on)
    let gpus_read = wait_for(Duration::from_secs(30), || {
        let v = sonde.json("/api/plugins/dlrover/nodes");
        v.as_array().unwrap().iter().any(|n| {
            n["name"] == "gpu-node"
                && n["gpus"]
                    .as_array()
                    .is_some_and(|g| g.iter().any(|g| g["id"] == uuid(0).as_str() && g["utilization"] == 0.7))
        })
    });
    assert!(gpus_read, "{}", sonde.get("/api/plugins/dlrover/nodes").1);
    // the lost GPU ended the node as a hardware error; the XID 13 (an application error) did not
    let failed = wait_for(Duration::from_secs(20), || {
        let v = sonde.json("/api/plugins/dlrover/failures");
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["node"] == "gpu-node" && n["exit_reason"] == "HardwareError")
    });
    assert!(
        failed,
        "{}\n{}",
        sonde.get("/api/plugins/dlrover/failures").1,
        sonde.output()
    );
    // both events reached the plugin as node events
    let state = sonde.json("/api/plugins/dlrover/state");
    assert_eq!(state["counters"]["node_events"], 2, "{state}");
    // and the sampler never stopped
    let ticks = || {
        sonde.json("/api/status")["sampler"]["period"]["ticks"]
            .as_u64()
            .unwrap()
    };
    let before = ticks();
    let more = wait_for(Duration::from_secs(10), || ticks() >= before + 5);
    assert!(more, "the sampler stopped after the GPU was lost: {before} ticks");
}

/// `gpu-hang-suspected`: the job's global step stops while its GPU reads busy
/// with idle SMs; the same job on a GPU doing real work (SMs busy) is not suspected.
#[test]
fn gpu_hang_suspected_only_when_sms_idle_and_progress_stopped() {
    for (sm_active, expect) in [(0, true), (85, false)] {
        let tmp = tempfile::tempdir().unwrap();
        let script = format!("sample_ms 50\nat 0 gpu 0 util 100 sm_active {sm_active}\n");
        let sonde = start(
            &tmp.path().join("sonde"),
            &script,
            &[(plugin_file("bundled/dlrover.wasm"), "dlrover")],
            &[
                "--set",
                "plugin.dlrover.settings={node=\"gpu-node\", tick_ms=100, stats_interval_s=0.2, sample_period_ms=100, \
                 deliver_every_ms=200, gpu_hang_after_s=1.5}",
            ],
        );
        // a few global steps, then none
        for step in 1..=3u64 {
            let body = serde_json::json!({"origin": {"job": "", "node": "worker-0", "role": "worker", "index": 0},
                "progress": [{"name": "global_step", "value": step, "time_ns": now_ns()}]});
            let (code, text) = post_json(&sonde.api, "/api/ingest", &body);
            assert!(code < 300, "{code}: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let hung = |s: &Sonde| {
            let v: Value = s.json("/api/plugins/dlrover/failures");
            v["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "gpu-hang-suspected")
        };
        if expect {
            let seen = wait_for(Duration::from_secs(30), || hung(&sonde));
            assert!(
                seen,
                "no gpu-hang-suspected: {}",
                sonde.get("/api/plugins/dlrover/failures").1
            );
            let d = sonde.get("/api/decisions").1;
            assert!(d.contains("gpu-hang-suspected") && d.contains(&uuid(0)), "{d}");
        } else {
            // well past the hang time, with the SMs at work
            std::thread::sleep(Duration::from_secs(5));
            assert!(!hung(&sonde), "{}", sonde.get("/api/plugins/dlrover/failures").1);
            let v = sonde.json("/api/plugins/dlrover/nodes");
            let node = v.as_array().unwrap().iter().find(|n| n["name"] == "gpu-node");
            let sm = node.and_then(|n| n["gpus"][0]["sm_active"].as_f64());
            assert!(
                sm.is_some_and(|sm| (sm - 0.85).abs() < 1e-6),
                "the SM activity was read: {v}"
            );
        }
    }
}

/// The determined plugin's GPU system metrics come from NVML through the fake
/// library: per GPU (by UUID), Determined's `gpu_util` in percent and
/// `gpu_free_memory` in bytes, for the batches of a job reported over the JSON ingest.
#[test]
fn determined_gpu_system_metrics_from_nvml() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    // GPU 0 40 % busy with 60 of 80 GiB free; GPU 1 80 % busy with 20 GiB free
    let script =
        "gpus 2\nsample_ms 50\nat 0 gpu 0 util 40 mem_used 21474836480\nat 0 gpu 1 util 80 mem_used 64424509440\n";
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    let mut sonde = start(
        &tmp.path().join("sonde"),
        script,
        &[(plugin_file("bundled/determined.wasm"), "determined")],
        &[
            "--export-endpoint",
            &endpoint,
            "--set",
            "export.interval_ms=200",
            "--set",
            "plugin.determined.settings={begin_on_batch=1, end_after_batch=6, flush_every_s=1.0, lag_ms=600, deliver_every_ms=200}",
        ],
    );
    let job = "gpu-job";
    let origin = serde_json::json!({"job": job, "node": "gpu-node", "rank": 0, "local_rank": 0});
    for idx in 0..9u64 {
        let start = now_ns();
        let (code, body) = post_json(
            &sonde.api,
            "/api/ingest",
            &serde_json::json!({"origin": origin,
            "progress": [{"name": "batch_idx", "value": idx, "time_ns": start}]}),
        );
        assert_eq!(code, 202, "{body}");
        std::thread::sleep(Duration::from_millis(250));
        let (code, body) = post_json(
            &sonde.api,
            "/api/ingest",
            &serde_json::json!({"origin": origin,
            "timings": [{"name": "train_batch", "start_ns": start, "end_ns": now_ns(), "batch_idx": idx}]}),
        );
        assert_eq!(code, 202, "{body}");
    }
    let ended = wait_for(Duration::from_secs(15), || {
        sonde
            .json("/api/plugins/determined/state")
            .to_string()
            .contains("\"ended\":true")
    });
    assert!(ended, "{}", sonde.get("/api/plugins/determined/state").1);
    let status = sonde.proc.terminate(Duration::from_secs(10));
    assert_eq!(status.map(|s| s.success()), Some(true), "{}", sonde.output());
    wait_quiet(&rotel.log, Duration::from_millis(500), Duration::from_secs(10));
    let records: Vec<Value> = parse_rotel_logs(&rotel.received())
        .into_iter()
        .filter(|r| r.event_name == "determined.profiler.batch")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    for (gpu, util, free) in [(0, 40.0, 64424509440.0), (1, 80.0, 21474836480.0)] {
        let of = |metric: &str| -> Vec<f64> {
            records
                .iter()
                .filter(|r| r["metric"] == metric && r["gpu_uuid"] == uuid(gpu).as_str() && r["trial"] == job)
                .flat_map(|r| r["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()))
                .collect()
        };
        let u = of("gpu_util");
        assert!(
            u.len() >= 3 && u.iter().all(|v| (v - util).abs() < 1e-6),
            "GPU {gpu} gpu_util: {u:?}\n{records:?}"
        );
        let f = of("gpu_free_memory");
        assert!(
            f.len() >= 3 && f.iter().all(|v| *v == free),
            "GPU {gpu} gpu_free_memory: {f:?}"
        );
    }
}
