//! What one full machine read costs: `Sampler::sample_into` (every series), each
//! part alone, and the sysinfo calls the procfs readers replaced.
//!
//!   cargo bench -p sonde --bench sample            (release; quote the median)
//!   cargo bench -p sonde --bench sample -- --quick
//!
//! Before benchmarking it prints the series count, the GPU status and the heap
//! allocations per `sample_into` in steady state (counted by a wrapping global
//! allocator; it must be 0).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use sonde::sample::config::SamplerConfig;
use sonde::sample::{Part, Sampler};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn sample(c: &mut Criterion) {
    let mut s = Sampler::new(&SamplerConfig::default());
    let mut tick = s.new_tick();
    s.sample_into(&mut tick);
    s.sample_into(&mut tick);
    let n = 1000;
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..n {
        s.sample_into(&mut tick);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    println!(
        "sampler: {} series; GPU: {}; heap allocations per sample_into (steady state): {}",
        s.series().len(),
        s.gpu_status(),
        allocs as f64 / n as f64
    );

    c.bench_function("sample_into/all", |b| b.iter(|| s.sample_into(black_box(&mut tick))));
    for (name, part) in [
        ("cpu", Part::Cpu),
        ("memory", Part::Memory),
        ("network", Part::Network),
        ("disk", Part::Disk),
        ("gpu", Part::Gpu),
    ] {
        c.bench_function(&format!("sample_part/{name}"), |b| {
            b.iter(|| s.sample_part_into(part, black_box(&mut tick)))
        });
    }

    // What the procfs readers replaced (see the headers of sample/net.rs, memory.rs, cpu.rs).
    let mut nets = sysinfo::Networks::new_with_refreshed_list();
    c.bench_function("sysinfo/networks_refresh", |b| b.iter(|| nets.refresh(true)));
    let mut sys = sysinfo::System::new();
    c.bench_function("sysinfo/refresh_memory", |b| b.iter(|| sys.refresh_memory()));
    // refresh_cpu_usage re-reads /proc/stat at most every 200 ms, so a
    // repeated call measures nothing; a fresh System forces the read (and adds
    // its one-off /proc/cpuinfo read).
    c.bench_function("sysinfo/new_system_refresh_cpu_usage", |b| {
        b.iter(|| {
            let mut s = sysinfo::System::new();
            s.refresh_cpu_usage();
            black_box(s.global_cpu_usage())
        })
    });
}

criterion_group!(benches, sample);
criterion_main!(benches);
