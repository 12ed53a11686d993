//! Example: the smallest useful plugin. Samples in, one metric out.
//!
//! Every tick the host samples the share of time each CPU spent in each
//! `cpu.mode`; this plugin emits the busiest core's busy share (every mode
//! but idle and iowait, the SDK's one rule) as `cpu.max`. It shows the shape
//! every plugin has:
//!
//! 1. a type holding the plugin's state (`CpuMax`),
//! 2. `start`, which builds it, and `manifest`, which says what to deliver,
//! 3. the hooks it uses (here only `on_samples`; the others default to no-ops),
//! 4. `export_plugin!`, which makes it the component's exports.
//!
//! Build the component:
//! `cargo build --manifest-path plugins/Cargo.toml -p sonde-plugin-sdk --example cpu_max --release --target wasm32-wasip2`
//! (`scripts/build-plugins.sh` builds every example into `target/plugins/examples/`).
//! Test it natively: `cargo test --manifest-path plugins/Cargo.toml -p sonde-plugin-sdk --example cpu_max`.

use sonde_plugin_sdk::types::{Manifest, MetricDesc, MetricKind, SampleBatch, SampleRequest, StartInfo};
use sonde_plugin_sdk::{CpuBusyColumns, CpuSeries, Host, MetricRegistry, Plugin, PointBuffer, SampleView, SeriesTable};

struct CpuMax {
    /// Series descriptions: the host sends each one once, then only its id.
    series: SeriesTable,
    /// Metric handles: `declare-metric` is called once per series, then cached.
    metrics: MetricRegistry,
    /// Points collected during a call, emitted with one host call at its end.
    points: PointBuffer,
}

impl Plugin for CpuMax {
    fn start(_host: &mut impl Host, _info: StartInfo) -> Result<Self, String> {
        Ok(CpuMax {
            series: SeriesTable::new(),
            metrics: MetricRegistry::new(),
            points: PointBuffer::new(),
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Busiest CPU per tick".into(),
            // Sample every 100 ms, deliver ten ticks per call: fewer, bigger calls.
            samples: Some(SampleRequest {
                period_ms: 100,
                deliver_every_ms: 1000,
                metrics: vec!["system.cpu.utilization".into()],
            }),
            ..Default::default()
        }
    }

    fn on_samples(&mut self, host: &mut impl Host, mut batch: SampleBatch) -> Result<(), String> {
        self.series.absorb(&mut batch); // remember new series descriptions
        let max = MetricDesc::new("cpu.max", MetricKind::Gauge, "1", "Busiest CPU");
        let handle = self.metrics.declare_in(host, &max)?;
        let view = SampleView::new(&batch)?; // values[s * T + t] as per-series slices
        // Each core's busy share per tick, from its mode series.
        let mut busy = CpuBusyColumns::new(view.ticks());
        for series in view.iter() {
            let Some(cpu) = self.series.get(series.id).and_then(CpuSeries::of) else {
                continue;
            };
            if cpu.cpu.is_some() {
                busy.add(cpu, series.values);
            }
        }
        let cores: Vec<Vec<f64>> = busy.cores().filter_map(|c| busy.busy(Some(c))).collect();
        for (t, &time) in view.timestamps().iter().enumerate() {
            // NaN is a share the host could not read; f64::max skips it.
            let busiest = cores.iter().map(|core| core[t]).fold(f64::NAN, f64::max);
            if !busiest.is_nan() {
                self.points.push(handle, time, busiest);
            }
        }
        self.points.flush_to(host); // one emit-points call
        Ok(())
    }
}

sonde_plugin_sdk::export_plugin!(CpuMax);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{Attribute, SeriesInfo, SeriesKind};

    use super::*;

    /// The `mode` series of logical CPU `core` (`None`: all CPUs).
    fn cpu(id: u32, core: Option<i64>, mode: &str) -> SeriesInfo {
        let mut attributes = vec![Attribute::new("cpu.mode", mode)];
        if let Some(n) = core {
            attributes.push(Attribute::new("cpu.logical_number", n));
        }
        SeriesInfo {
            id,
            metric: "system.cpu.utilization".into(),
            unit: "1".into(),
            kind: SeriesKind::Gauge,
            attributes,
        }
    }

    #[test]
    fn emits_the_busiest_core_of_each_tick_and_skips_unread_values() {
        let mut host = FakeHost::default();
        let mut p = CpuMax::start(&mut host, StartInfo::default()).unwrap();
        // Idle shares of two cores and of all CPUs, three ticks, series-major;
        // core 1 was unreadable at tick 1, and at tick 2 neither core could
        // be read. Core 0's iowait counts as idle; the all-CPU series is not a core.
        let batch = SampleBatch {
            new_series: vec![
                cpu(0, Some(0), "idle"),
                cpu(1, Some(1), "idle"),
                cpu(2, Some(0), "iowait"),
                cpu(3, None, "idle"),
            ],
            timestamps: vec![10, 20, 30],
            series: vec![0, 1, 2, 3],
            values: vec![
                0.5,
                0.25,
                f64::NAN, //
                0.125,
                f64::NAN,
                f64::NAN, //
                0.25,
                0.25,
                0.0, //
                0.0,
                0.0,
                0.0,
            ],
        };
        p.on_samples(&mut host, batch).unwrap();
        assert_eq!(host.series("cpu.max", &[]), vec![(10, 0.875), (20, 0.5)]);
        // Later batches carry ids only; the table remembers the descriptions.
        let later = SampleBatch {
            timestamps: vec![40],
            series: vec![0, 1, 2],
            values: vec![0.875, 0.75, 0.0],
            ..Default::default()
        };
        p.on_samples(&mut host, later).unwrap();
        assert_eq!(host.last("cpu.max", &[]), Some(0.25));
        assert_eq!(host.declared.len(), 1, "declared once");
    }
}
