//! What one NVML sample costs with 8 GPUs: `Sampler::sample_part_into(Gpu)`
//! against the fake NVML library (`./dev fake-nvml`), every reading on (buffered
//! utilisation samples, memory, power, energy, temperature, SM clock, PCIe,
//! throttle reasons, ECC, GPM, 4 NVLink links, 2 processes per GPU, XID events).
//! The budget is the 100 ms sampling period; the fake answers in microseconds,
//! so this is the cost of sonde's side (nvml-wrapper and the reader) plus the
//! fake's, not of a real driver's ioctls (see the README).
//!
//!   ./dev fake-nvml && cargo bench -p sonde --bench nvml      (release; quote the median)

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use sonde::sample::config::SamplerConfig;
use sonde::sample::{Part, Sampler};

fn nvml(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let lib = root.join("target/fake-nvml/libnvidia-ml.so.1");
    assert!(lib.exists(), "{} missing: run `./dev fake-nvml`", lib.display());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("gpus.script");
    let mut text = String::from("gpus 8\n");
    for i in 0..8 {
        text += &format!(
            "gpu {i} nvlinks 4\nat 0 gpu {i} util 90 sm_active 70 power 350000 pcie_rx 1000 nvlink_tx 20000\n\
             at 0 gpu {i} proc {} 4294967296 45\nat 0 gpu {i} proc {} 1073741824 20\n",
            1000 + 2 * i,
            1001 + 2 * i
        );
    }
    std::fs::write(&script, text).unwrap();
    // SAFETY: set before any thread that reads the environment starts.
    unsafe { std::env::set_var("FAKE_NVML_SCRIPT", &script) };
    let mut s = Sampler::new(&SamplerConfig {
        nvml_library: Some(lib.to_string_lossy().into_owned()),
        ..Default::default()
    });
    let mut tick = s.new_tick();
    s.sample_part_into(Part::Gpu, &mut tick);
    println!("sampler: {} series; GPU: {}", s.series().len(), s.gpu_status());
    assert!(s.gpu_status().starts_with("8 GPUs via NVML"), "{}", s.gpu_status());
    c.bench_function("nvml/sample_8_gpus", |b| {
        b.iter(|| s.sample_part_into(Part::Gpu, black_box(&mut tick)))
    });
}

criterion_group!(benches, nvml);
criterion_main!(benches);
