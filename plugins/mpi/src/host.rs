//! The host calls the plugin makes, behind a trait: the plugin passes [`Wasm`]
//! (the real imports), the native tests a fake that records.

use sonde_plugin_sdk::host;
use sonde_plugin_sdk::types::{MetricDesc, PointBatch, Severity, SinkSpec};

pub trait Host {
    fn now(&mut self) -> u64;
    fn log(&mut self, level: Severity, message: &str);
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64;
    fn cancel_timer(&mut self, id: u64);
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String>;
    fn emit_points(&mut self, points: &PointBatch);
    fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String>;
    fn write_bytes(&mut self, sink: u32, data: &[u8]) -> Result<(), String>;
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
    fn cancel_timer(&mut self, id: u64) {
        host::cancel_timer(id)
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
    fn write_bytes(&mut self, sink: u32, data: &[u8]) -> Result<(), String> {
        host::write_bytes(sink, data)
    }
}

#[cfg(test)]
pub mod fake {
    //! A host for native tests: a settable clock, timers, declared metrics,
    //! emitted points resolved to their declarations, and sink files in memory.

    use std::collections::BTreeMap;

    use sonde_plugin_sdk::types::Value;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    pub struct Point {
        pub metric: String,
        pub attrs: Vec<(String, String)>,
        pub value: f64,
    }

    #[derive(Default)]
    pub struct Fake {
        pub now: u64,
        pub logs: Vec<(Severity, String)>,
        pub timers: BTreeMap<u64, (u64, bool)>,
        pub next_timer: u64,
        pub declared: Vec<MetricDesc>,
        pub points: Vec<Point>,
        pub sinks: Vec<SinkSpec>,
        /// sink name -> its content (replace mode: the last write).
        pub files: BTreeMap<String, String>,
        pub sink_error: Option<String>,
    }

    impl Fake {
        /// The latest value of `metric` whose attributes include all of `having`.
        pub fn last(&self, metric: &str, having: &[(&str, &str)]) -> Option<f64> {
            self.points
                .iter()
                .rev()
                .find(|p| {
                    p.metric == metric
                        && having
                            .iter()
                            .all(|(k, v)| p.attrs.iter().any(|(pk, pv)| pk == k && pv == v))
                })
                .map(|p| p.value)
        }
    }

    impl Host for Fake {
        fn now(&mut self) -> u64 {
            self.now
        }
        fn log(&mut self, level: Severity, message: &str) {
            self.logs.push((level, message.to_string()));
        }
        fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64 {
            self.next_timer += 1;
            self.timers.insert(self.next_timer, (after_ms, repeat));
            self.next_timer
        }
        fn cancel_timer(&mut self, id: u64) {
            self.timers.remove(&id);
        }
        fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String> {
            if let Some(i) = self.declared.iter().position(|d| d == desc) {
                return Ok(i as u32);
            }
            self.declared.push(desc.clone());
            Ok(self.declared.len() as u32 - 1)
        }
        fn emit_points(&mut self, points: &PointBatch) {
            for i in 0..points.series.len() {
                let d = &self.declared[points.series[i] as usize];
                let attrs = d
                    .attributes
                    .iter()
                    .map(|a| {
                        let v = match &a.value {
                            Value::Str(s) => s.clone(),
                            Value::Int(i) => i.to_string(),
                            other => format!("{other:?}"),
                        };
                        (a.key.clone(), v)
                    })
                    .collect();
                self.points.push(Point {
                    metric: d.name.clone(),
                    attrs,
                    value: points.value[i],
                });
            }
        }
        fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String> {
            if let Some(e) = &self.sink_error {
                return Err(e.clone());
            }
            self.sinks.push(spec.clone());
            Ok(self.sinks.len() as u32 - 1)
        }
        fn write_bytes(&mut self, sink: u32, data: &[u8]) -> Result<(), String> {
            let name = self.sinks[sink as usize].name.clone();
            self.files.insert(name, String::from_utf8(data.to_vec()).unwrap());
            Ok(())
        }
    }
}
