//! The cost of crossing into a plugin, measured on the store directly (no
//! queue or thread hop): no-op hook calls; `on-samples` with columnar
//! batches of 1 000 and 10 000 items lifted into a guest that only reads their
//! length (the boundary itself); and the same batches summed by the testbed's
//! `sum` mode (boundary plus the guest's work on every item). Floors from the foundation issue: no-op call <= 250 ns, <= 5 ns per
//! item for columns of >= 1000 items. Needs `scripts/build-plugins.sh` first.

use std::path::Path;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sonde::plugin::bindings::{Plugin, PluginPre, types};
use sonde::plugin::config::Grants;
use sonde::plugin::engine::PluginEngine;
use sonde::plugin::host_api::{MetricRegistry, PluginState};
use sonde::plugin::metrics::PluginMetrics;
use sonde::plugin::sandbox::wasi_ctx;
use wasmtime::Store;
use wasmtime::component::{HasSelf, Linker};

fn instance(mode: &str, tmp: &Path) -> (Store<PluginState>, Plugin) {
    let bytes = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/testing/testbed.wasm"))
        .expect("run scripts/build-plugins.sh first");
    let engine = PluginEngine::new(&tmp.join("cache")).unwrap();
    let loaded = engine.load_component(&bytes).unwrap();
    let mut linker = Linker::<PluginState>::new(&engine.engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    Plugin::add_to_linker::<PluginState, HasSelf<PluginState>>(&mut linker, |s| s).unwrap();
    let pre = PluginPre::new(linker.instantiate_pre(&loaded.component).unwrap()).unwrap();
    let state = sonde::state::StateStore::open(&tmp.join(format!("{mode}.redb"))).unwrap();
    let data = PluginState::new(
        mode,
        wasi_ctx(mode, &Grants::default(), Default::default()).unwrap(),
        64 << 20,
        MetricRegistry::default(),
        state.namespace(mode),
        sonde::sinks::config::SinksConfig {
            dir: tmp.to_path_buf(),
            ..Default::default()
        },
        Arc::new(PluginMetrics::default()),
        Default::default(),
    );
    let mut store = Store::new(&engine.engine, data);
    store.limiter(|s| &mut s.memory);
    // Deadlines are not under test here: give the calls all the time in the world.
    store.set_epoch_deadline(u64::MAX / 2);
    let plugin = pre.instantiate(&mut store).unwrap();
    let info = types::StartInfo {
        name: mode.into(),
        host_version: "bench".into(),
        contract_version: sonde::plugin::engine::CONTRACT_VERSION.into(),
        settings: format!("{{\"mode\":\"{mode}\"}}"),
        restarts: 0,
    };
    plugin
        .sonde_plugin_hooks()
        .call_start(&mut store, &info)
        .unwrap()
        .unwrap();
    // Keep the engine's ticker alive for the store's life.
    std::mem::forget(engine);
    (store, plugin)
}

fn batch(series: u32, ticks: usize) -> types::SampleBatch {
    types::SampleBatch {
        new_series: vec![],
        timestamps: (0..ticks as u64)
            .map(|t| 1_700_000_000_000_000_000 + t * 100_000_000)
            .collect(),
        series: (0..series).collect(),
        values: (0..series as usize * ticks).map(|i| i as f64 * 0.5).collect(),
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, plugin) = instance("noop", tmp.path());
    c.bench_function("noop_hook_call", |b| {
        b.iter(|| {
            plugin
                .sonde_plugin_hooks()
                .call_on_timer(&mut store, 1)
                .unwrap()
                .unwrap()
        })
    });

    // No arguments, no result: the floor of a call into a component.
    c.bench_function("noop_hook_call_no_result", |b| {
        b.iter(|| plugin.sonde_plugin_hooks().call_stop(&mut store).unwrap())
    });
    // The boundary alone: the batch is lifted into the guest, which only reads its length.
    let mut g = c.benchmark_group("on_samples_columns_lift_only");
    for (series, ticks) in [(10u32, 100usize), (100, 100)] {
        let b = batch(series, ticks);
        g.throughput(Throughput::Elements(b.values.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(b.values.len()), &b, |bench, b| {
            bench.iter(|| {
                plugin
                    .sonde_plugin_hooks()
                    .call_on_samples(&mut store, b)
                    .unwrap()
                    .unwrap()
            })
        });
    }
    g.finish();

    let (mut store, plugin) = instance("sum", tmp.path());
    let mut g = c.benchmark_group("on_samples_columns");
    for (series, ticks) in [(10u32, 100usize), (100, 100)] {
        let b = batch(series, ticks);
        let items = b.values.len() as u64;
        g.throughput(Throughput::Elements(items));
        g.bench_with_input(BenchmarkId::from_parameter(items), &b, |bench, b| {
            bench.iter(|| {
                plugin
                    .sonde_plugin_hooks()
                    .call_on_samples(&mut store, b)
                    .unwrap()
                    .unwrap();
                // Drop what the plugin emitted so the outbox does not grow.
                store.data_mut().outbox.points.clear();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
