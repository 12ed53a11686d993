//! The host calls the plugin makes, behind a trait: the plugin passes
//! [`Wasm`] (the real imports) and the native tests a fake that records.

use sonde_plugin_sdk::host;
use sonde_plugin_sdk::types::{Column, MetricDesc, PointBatch, Severity, SinkSpec};

pub trait Host {
    fn now(&mut self) -> u64;
    fn log(&mut self, level: Severity, message: &str);
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64;
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String>;
    fn emit_points(&mut self, points: &PointBatch);
    fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String>;
    fn write_rows(&mut self, sink: u32, columns: &[Column]) -> Result<(), String>;
}

/// The real host (only callable inside it).
pub struct Wasm;

impl Host for Wasm {
    fn now(&mut self) -> u64 {
        host::now()
    }
    fn log(&mut self, level: Severity, message: &str) {
        host::log(level, message)
    }
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64 {
        host::set_timer(after_ms, repeat)
    }
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String> {
        host::declare_metric(desc)
    }
    fn emit_points(&mut self, points: &PointBatch) {
        host::emit_points(points)
    }
    fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String> {
        host::open_sink(spec)
    }
    fn write_rows(&mut self, sink: u32, columns: &[Column]) -> Result<(), String> {
        host::write_rows(sink, columns)
    }
}

#[cfg(test)]
pub mod fake {
    //! A host for native tests: a settable clock, sinks that render the
    //! text the real host would write, and every point with its metric.

    use super::*;

    #[derive(Default)]
    pub struct Fake {
        pub now: u64,
        pub logs: Vec<(Severity, String)>,
        pub declared: Vec<MetricDesc>,
        /// (metric name, attributes "k=v", time, value)
        pub points: Vec<(String, Vec<String>, u64, f64)>,
        /// Sink name → text written (header first).
        pub files: Vec<(String, String)>,
        /// When set, `open-sink` fails with this reason.
        pub sink_error: Option<String>,
    }

    impl Host for Fake {
        fn now(&mut self) -> u64 {
            self.now
        }
        fn log(&mut self, level: Severity, message: &str) {
            self.logs.push((level, message.to_string()));
        }
        fn set_timer(&mut self, _after_ms: u64, _repeat: bool) -> u64 {
            1
        }
        fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String> {
            if let Some(i) = self.declared.iter().position(|d| d == desc) {
                return Ok(i as u32);
            }
            self.declared.push(desc.clone());
            Ok(self.declared.len() as u32 - 1)
        }
        fn emit_points(&mut self, p: &PointBatch) {
            for i in 0..p.series.len() {
                let d = &self.declared[p.series[i] as usize];
                let attrs = d
                    .attributes
                    .iter()
                    .map(|a| match &a.value {
                        sonde_plugin_sdk::types::Value::Str(s) => format!("{}={s}", a.key),
                        v => format!("{}={v:?}", a.key),
                    })
                    .collect();
                self.points.push((d.name.clone(), attrs, p.time[i], p.value[i]));
            }
        }
        fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String> {
            if let Some(e) = &self.sink_error {
                return Err(e.clone());
            }
            self.files.push((spec.name.clone(), spec.columns.join("\t") + "\n"));
            Ok(self.files.len() as u32 - 1)
        }
        fn write_rows(&mut self, sink: u32, columns: &[Column]) -> Result<(), String> {
            let n = match &columns[0] {
                Column::U64s(v) => v.len(),
                Column::S64s(v) => v.len(),
                Column::F64s(v) => v.len(),
                Column::Strings(v) => v.len(),
            };
            let text = &mut self.files[sink as usize].1;
            for i in 0..n {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|c| match c {
                        Column::U64s(v) => v[i].to_string(),
                        Column::S64s(v) => v[i].to_string(),
                        Column::F64s(v) => v[i].to_string(),
                        Column::Strings(v) => v[i].clone(),
                    })
                    .collect();
                text.push_str(&cells.join("\t"));
                text.push('\n');
            }
            Ok(())
        }
    }
}
