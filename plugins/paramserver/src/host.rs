//! The host calls the plugin makes, behind a trait: the component passes
//! [`Wasm`] (the real imports), the native tests a fake that records.

use sonde_plugin_sdk::host;
use sonde_plugin_sdk::types::{Decision, LogRecord, MetricDesc, PointBatch, Severity};

pub trait Host {
    fn now(&mut self) -> u64;
    fn log(&mut self, level: Severity, message: &str);
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64;
    fn cancel_timer(&mut self, id: u64);
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String>;
    fn emit_points(&mut self, points: &PointBatch);
    fn emit_logs(&mut self, records: &[LogRecord]);
    fn emit_decision(&mut self, decision: &Decision);
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
    fn emit_logs(&mut self, records: &[LogRecord]) {
        host::emit_logs(records)
    }
    fn emit_decision(&mut self, decision: &Decision) {
        host::emit_decision(decision)
    }
}

#[cfg(test)]
pub mod fake {
    //! A host for native tests: a settable clock, timers, and everything
    //! emitted, with points resolved to their metric and attributes.

    use std::collections::BTreeMap;

    use super::*;
    use sonde_plugin_sdk::types::Value;

    #[derive(Debug, Clone, PartialEq)]
    pub struct Point {
        pub metric: String,
        pub unit: String,
        pub attrs: Vec<(String, String)>,
        pub time: u64,
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
        pub records: Vec<LogRecord>,
        pub decisions: Vec<Decision>,
    }

    impl Fake {
        /// (time, value) of `metric` points whose attributes include `having`.
        pub fn series(&self, metric: &str, having: &[(&str, &str)]) -> Vec<(u64, f64)> {
            self.points
                .iter()
                .filter(|p| {
                    p.metric == metric
                        && having
                            .iter()
                            .all(|(k, v)| p.attrs.iter().any(|(a, b)| a == k && b == v))
                })
                .map(|p| (p.time, p.value))
                .collect()
        }

        pub fn decisions_of(&self, kind: &str) -> Vec<&Decision> {
            self.decisions.iter().filter(|d| d.kind == kind).collect()
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
                    unit: d.unit.clone(),
                    attrs,
                    time: points.time[i],
                    value: points.value[i],
                });
            }
        }
        fn emit_logs(&mut self, records: &[LogRecord]) {
            self.records.extend_from_slice(records);
        }
        fn emit_decision(&mut self, decision: &Decision) {
            self.decisions.push(decision.clone());
        }
    }
}
