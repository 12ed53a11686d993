//! A complete, minimal plugin: the example in plugins/README.md.
//! `cargo test` compiles it natively; for a component run
//! `cargo build --manifest-path plugins/Cargo.toml -p sonde-plugin-sdk --example cpu_max --release --target wasm32-wasip2`.

use sonde_plugin_sdk::types::{
    EventBatch, HttpRequest, HttpResponse, Manifest, MetricDesc, MetricKind, SampleBatch, SampleRequest, StartInfo,
};
use sonde_plugin_sdk::{Guest, InstanceCell, MetricRegistry, PointBuffer, SampleView, SeriesTable};

#[derive(Default)]
struct State {
    series: SeriesTable,
    metrics: MetricRegistry,
    points: PointBuffer,
}

static STATE: InstanceCell<State> = InstanceCell::new();

struct CpuMax;

impl Guest for CpuMax {
    fn start(_info: StartInfo) -> Result<Manifest, String> {
        STATE.set(State::default());
        Ok(Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Busiest CPU per batch".into(),
            samples: Some(SampleRequest {
                period_ms: 100,
                deliver_every_ms: 1000,
                metrics: vec!["system.cpu.utilization".into()],
            }),
            events: vec![],
        })
    }

    fn on_samples(mut batch: SampleBatch) -> Result<(), String> {
        STATE.with(|s| {
            s.series.absorb(&mut batch); // remember new series descriptions
            let max = MetricDesc::new("cpu.max", MetricKind::Gauge, "1", "Busiest CPU");
            let handle = s.metrics.declare(&max)?; // declared with the host once
            let view = SampleView::new(&batch)?; // values[s * T + t] as per-series slices
            for (t, &time) in view.timestamps().iter().enumerate() {
                let busiest = view.iter().map(|cpu| cpu.values[t]).fold(f64::NAN, f64::max); // NaN-skipping max
                if !busiest.is_nan() {
                    s.points.push(handle, time, busiest);
                }
            }
            s.points.flush(); // one host::emit_points call
            Ok(())
        })?
    }

    fn configure(_settings: String) -> Result<(), String> {
        Ok(())
    }
    fn on_events(_batch: EventBatch) -> Result<(), String> {
        Ok(())
    }
    fn on_timer(_id: u64) -> Result<(), String> {
        Ok(())
    }
    fn on_request(_req: HttpRequest) -> HttpResponse {
        HttpResponse::error(404, "no routes")
    }
    fn stop() {}
}

sonde_plugin_sdk::export!(CpuMax);
