//! The GPU reader against the fake NVML library (`./dev fake-nvml` builds it):
//! each test copies the library into its own directory beside its script, so
//! that it gets its own library state (one dlopen per file).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;
use crate::model::SeriesInfo;

fn fake_library(variant: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/fake-nvml")
        .join(variant)
        .join("libnvidia-ml.so.1");
    assert!(p.exists(), "{} missing: run `./dev fake-nvml` first", p.display());
    p
}

/// A directory holding a copy of the fake library and `script`.
fn setup(variant: &str, script: &str) -> (tempfile::TempDir, SamplerConfig) {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake_library(variant), &lib).unwrap();
    std::fs::write(dir.path().join("fake-nvml.script"), script).unwrap();
    let cfg = SamplerConfig {
        nvml_library: Some(lib.to_string_lossy().into_owned()),
        ..Default::default()
    };
    (dir, cfg)
}

struct Fixture {
    reader: GpuReader,
    series: Vec<SeriesInfo>,
    values: Vec<f64>,
}

impl Fixture {
    fn new(cfg: &SamplerConfig) -> Self {
        let (mut series, mut values) = (Vec::new(), Vec::new());
        let reader = GpuReader::new(
            cfg,
            &mut Out {
                series: &mut series,
                values: &mut values,
            },
        );
        Fixture { reader, series, values }
    }

    fn read(&mut self) {
        self.values.clear();
        self.values.resize(self.series.len(), f64::NAN);
        self.reader.read(&mut Out {
            series: &mut self.series,
            values: &mut self.values,
        });
    }

    /// The value of the series `metric` whose attributes include all of `with`.
    fn value(&self, metric: &str, with: &[(&str, &str)]) -> Option<f64> {
        let s = self.series.iter().find(|s| {
            s.metric == metric
                && with
                    .iter()
                    .all(|(k, v)| s.attributes.iter().any(|(a, b)| a == k && b.text() == *v))
        })?;
        Some(self.values[s.id as usize])
    }

    /// Reads until `f` holds (the fake's time runs from its nvmlInit).
    fn read_until(&mut self, what: &str, f: impl Fn(&Fixture) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.read();
            if f(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; status: {}",
                self.reader.watch().status()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

const GPU0: &str = "GPU-fa6e0000-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-fa6e0000-0000-4000-8000-000000000001";

#[test]
fn off_in_config() {
    let f = Fixture::new(&SamplerConfig {
        gpu: false,
        ..Default::default()
    });
    assert_eq!(f.reader.watch().status(), "GPU sampling off in config");
    assert!(f.series.is_empty());
}

#[test]
fn missing_library_is_a_status_not_a_failure() {
    let mut f = Fixture::new(&SamplerConfig {
        nvml_library: Some("/nonexistent/libnvidia-ml.so.1".into()),
        ..Default::default()
    });
    let status = f.reader.watch().status();
    assert!(
        status.starts_with("no GPU: NVML not available from /nonexistent/libnvidia-ml.so.1"),
        "{status}"
    );
    assert!(f.series.is_empty());
    f.read();
}

#[test]
fn init_failure_is_a_status() {
    let (_dir, cfg) = setup("", "init_error 9\n");
    let f = Fixture::new(&cfg);
    let status = f.reader.watch().status();
    assert!(status.starts_with("no GPU: NVML not available"), "{status}");
    assert!(status.contains("river"), "names the driver error: {status}");
}

#[test]
fn two_gpus_read_what_the_script_says() {
    let script = "gpus 2\nsample_ms 20\n\
        at 0 gpu 0 util 75 mem_used 21474836480 power 250000 temp 61 sm_clock 1755 pcie_rx 1000 throttle 4\n\
        at 0 gpu 1 util 10 temp 40\n\
        gpu 0 gpm 0\n";
    let (_dir, cfg) = setup("", script);
    let mut f = Fixture::new(&cfg);
    assert_eq!(f.reader.watch().status(), "2 GPUs via NVML (driver 550.54.15-fake)");
    f.read_until("both GPUs' utilisation samples", |f| {
        f.value("hw.gpu.utilization", &[("hw.id", GPU0)])
            .is_some_and(|v| (v - 0.75).abs() < 1e-9)
            && f.value("hw.gpu.utilization", &[("hw.id", GPU1)])
                .is_some_and(|v| (v - 0.10).abs() < 1e-9)
    });
    assert_eq!(f.value("hw.gpu.memory.usage", &[("hw.id", GPU0)]), Some(21474836480.0));
    assert_eq!(f.value("hw.gpu.memory.limit", &[("hw.id", GPU0)]), Some(85899345920.0));
    assert_eq!(f.value("hw.gpu.memory.utilization", &[("hw.id", GPU0)]), Some(0.25));
    assert_eq!(f.value("hw.power", &[("hw.id", GPU0)]), Some(250.0));
    assert_eq!(f.value("sonde.gpu.clock.sm", &[("hw.id", GPU0)]), Some(1755.0));
    assert_eq!(f.value("hw.temperature", &[("hw.parent", GPU0)]), Some(61.0));
    assert_eq!(f.value("hw.temperature", &[("hw.parent", GPU1)]), Some(40.0));
    assert_eq!(
        f.value(
            "sonde.gpu.pcie.io",
            &[("hw.id", GPU0), ("network.io.direction", "receive")]
        ),
        Some(1e6)
    );
    assert_eq!(
        f.value(
            "sonde.gpu.throttle",
            &[("hw.id", GPU0), ("sonde.gpu.throttle.reason", "sw_power_cap")]
        ),
        Some(1.0)
    );
    assert_eq!(
        f.value(
            "sonde.gpu.throttle",
            &[("hw.id", GPU0), ("sonde.gpu.throttle.reason", "gpu_idle")]
        ),
        Some(0.0)
    );
    assert_eq!(f.value("hw.status", &[("hw.id", GPU1), ("hw.state", "ok")]), Some(1.0));
    // the energy counter is the integral of the power: it grows
    let e0 = f.value("hw.energy", &[("hw.id", GPU0)]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    f.read();
    assert!(f.value("hw.energy", &[("hw.id", GPU0)]).unwrap() > e0);
    // GPM only where the GPU has it
    assert!(f.value("sonde.gpu.sm.active", &[("hw.id", GPU0)]).is_none());
    assert!(f.value("sonde.gpu.sm.active", &[("hw.id", GPU1)]).is_some());
}

#[test]
fn processes_xid_and_a_lost_gpu() {
    let script = "gpus 2\n\
        at 0 gpu 1 proc 4242 1073741824 55\n\
        at 0 gpu 1 sm_active 80\n\
        at 100 gpu 0 xid 79\n\
        at 300 gpu 0 lost\n";
    let (_dir, cfg) = setup("", script);
    let mut f = Fixture::new(&cfg);
    f.read_until("the process's memory and utilisation", |f| {
        f.value(
            "sonde.gpu.process.memory.usage",
            &[("hw.id", GPU1), ("process.pid", "4242")],
        ) == Some(1073741824.0)
            && f.value(
                "sonde.gpu.process.utilization",
                &[("hw.id", GPU1), ("process.pid", "4242")],
            ) == Some(0.55)
    });
    f.read_until("the XID", |f| {
        f.value("sonde.gpu.xid.last", &[("hw.id", GPU0)]) == Some(79.0)
    });
    assert_eq!(
        f.value("hw.errors", &[("hw.id", GPU0), ("error.type", "xid")]),
        Some(1.0)
    );
    f.read_until("GPU 0 lost", |f| {
        f.value("hw.status", &[("hw.id", GPU0), ("hw.state", "failed")]) == Some(1.0)
    });
    let status = f.reader.watch().status();
    assert!(status.contains(&format!("GPU 0 ({GPU0}) lost")), "{status}");
    // the other GPU keeps reading
    f.read_until("GPM on GPU 1", |f| {
        f.value("sonde.gpu.sm.active", &[("hw.id", GPU1)]) == Some(0.8)
    });
    assert!(f.value("hw.power", &[("hw.id", GPU0)]).unwrap().is_nan());
    let events = f.reader.watch().take_events();
    let kinds: Vec<(&str, Option<i32>, &str)> = events.iter().map(|e| (e.kind, e.code, e.gpu.as_str())).collect();
    assert_eq!(kinds, [("gpu-xid", Some(79), GPU0), ("gpu-lost", None, GPU0)]);
    assert!(f.reader.watch().take_events().is_empty());
}

#[test]
fn failing_calls_show_in_the_status_and_clear() {
    let script = "at 0 fail nvmlDeviceGetPowerUsage 10\nat 3000 fail nvmlDeviceGetPowerUsage 0\n";
    let (_dir, cfg) = setup("", script);
    let mut f = Fixture::new(&cfg);
    f.read_until("power failing", |f| {
        f.reader
            .watch()
            .status()
            .contains("GPU 0: power failing (the provided timeout was reached)")
    });
    assert!(f.value("hw.power", &[]).unwrap().is_nan());
    assert_eq!(
        f.value("hw.gpu.memory.limit", &[]),
        Some(85899345920.0),
        "the rest reads"
    );
    f.read_until("power back", |f| f.value("hw.power", &[]) == Some(70.0));
    assert_eq!(f.reader.watch().status(), "1 GPU via NVML (driver 550.54.15-fake)");
}

#[test]
fn a_library_missing_symbols_reads_what_it_has() {
    let (_dir, cfg) = setup("minimal", "at 0 gpu 0 util 30\n");
    let mut f = Fixture::new(&cfg);
    f.read_until("utilisation from the plain reading", |f| {
        f.value("hw.gpu.utilization", &[]) == Some(0.3)
    });
    let status = f.reader.watch().status();
    assert!(status.contains("not in this NVML library: "), "{status}");
    assert!(status.contains("power"), "{status}");
    assert!(status.contains("XID events not available"), "{status}");
    assert_eq!(f.value("hw.gpu.memory.limit", &[]), Some(85899345920.0));
}

#[test]
fn mig_instances_are_their_own_hw_id() {
    let (_dir, cfg) = setup("", "gpu 0 mig 2\n");
    let mut f = Fixture::new(&cfg);
    f.read();
    let migs: Vec<&SeriesInfo> = f
        .series
        .iter()
        .filter(|s| s.metric == "hw.gpu.memory.limit" && s.attributes.iter().any(|(k, _)| k == "hw.parent"))
        .collect();
    assert_eq!(migs.len(), 2);
    assert_eq!(
        f.value("hw.gpu.memory.limit", &[("hw.parent", GPU0)]),
        Some(42949672960.0)
    );
}
