//! The host calls the profiler makes, behind a trait: the plugin passes
//! [`Wasm`] (the real imports) and the native tests a fake that records.

use sonde_plugin_sdk::host;
use sonde_plugin_sdk::types::{Decision, LogRecord, MetricDesc, PointBatch, SampleRequest, Severity};

pub trait Host {
    fn now(&mut self) -> u64;
    fn log(&mut self, level: Severity, message: &str);
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64;
    fn cancel_timer(&mut self, id: u64);
    fn request_samples(&mut self, request: Option<&SampleRequest>);
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String>;
    fn emit_points(&mut self, points: &PointBatch);
    fn emit_logs(&mut self, records: &[LogRecord]);
    fn emit_decision(&mut self, decision: &Decision);
    fn state_get(&mut self, key: &str) -> Option<Vec<u8>>;
    fn state_put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    fn state_delete(&mut self, key: &str);
    fn state_keys(&mut self, prefix: &str) -> Vec<String>;
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
    fn request_samples(&mut self, request: Option<&SampleRequest>) {
        host::request_samples(request)
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
    fn state_get(&mut self, key: &str) -> Option<Vec<u8>> {
        host::state_get(key)
    }
    fn state_put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        host::state_put(key, value)
    }
    fn state_delete(&mut self, key: &str) {
        host::state_delete(key)
    }
    fn state_keys(&mut self, prefix: &str) -> Vec<String> {
        host::state_keys(prefix)
    }
}

#[cfg(test)]
pub mod fake {
    //! A host for native tests: a settable clock, a state store, timers,
    //! and everything emitted, with points resolved to their declarations.

    use std::collections::BTreeMap;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    pub struct Point {
        pub metric: String,
        pub attrs: Vec<(String, String)>,
        pub time: u64,
        pub value: f64,
    }

    impl Point {
        pub fn attr(&self, key: &str) -> Option<&str> {
            self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
        }
    }

    #[derive(Default)]
    pub struct Fake {
        pub now: u64,
        pub logs: Vec<(Severity, String)>,
        pub timers: BTreeMap<u64, (u64, bool)>,
        next_timer: u64,
        pub sample_requests: Vec<Option<SampleRequest>>,
        pub declared: Vec<MetricDesc>,
        pub points: Vec<Point>,
        pub records: Vec<LogRecord>,
        pub decisions: Vec<Decision>,
        pub state: BTreeMap<String, Vec<u8>>,
    }

    impl Fake {
        pub fn at(now: u64) -> Fake {
            Fake { now, ..Fake::default() }
        }

        /// Points of `metric` whose attributes include every (key, value) of `having`.
        pub fn points_of(&self, metric: &str, having: &[(&str, &str)]) -> Vec<&Point> {
            self.points
                .iter()
                .filter(|p| p.metric == metric && having.iter().all(|(k, v)| p.attr(k) == Some(*v)))
                .collect()
        }

        /// (time, value) of those points.
        pub fn series(&self, metric: &str, having: &[(&str, &str)]) -> Vec<(u64, f64)> {
            self.points_of(metric, having)
                .iter()
                .map(|p| (p.time, p.value))
                .collect()
        }

        pub fn decision_reasons(&self) -> Vec<String> {
            self.decisions
                .iter()
                .map(|d| {
                    let body: serde_json::Value = serde_json::from_str(&d.body).unwrap();
                    body["reason"].as_str().unwrap().to_string()
                })
                .collect()
        }

        pub fn logged(&self, needle: &str) -> bool {
            self.logs.iter().any(|(_, m)| m.contains(needle))
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
        fn request_samples(&mut self, request: Option<&SampleRequest>) {
            self.sample_requests.push(request.cloned());
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
                            sonde_plugin_sdk::types::Value::Str(s) => s.clone(),
                            other => format!("{other:?}"),
                        };
                        (a.key.clone(), v)
                    })
                    .collect();
                self.points.push(Point {
                    metric: d.name.clone(),
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
        fn state_get(&mut self, key: &str) -> Option<Vec<u8>> {
            self.state.get(key).cloned()
        }
        fn state_put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
            self.state.insert(key.to_string(), value.to_vec());
            Ok(())
        }
        fn state_delete(&mut self, key: &str) {
            self.state.remove(key);
        }
        fn state_keys(&mut self, prefix: &str) -> Vec<String> {
            self.state.keys().filter(|k| k.starts_with(prefix)).cloned().collect()
        }
    }
}
