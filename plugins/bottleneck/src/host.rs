//! Every host call the plugin makes, behind one trait whose methods are named
//! as the WIT host functions: the plugin passes [`Wasm`] (the real imports),
//! the native tests a [`fake::Fake`] that records what was emitted.

use sonde_plugin_sdk::host;
use sonde_plugin_sdk::types::{Decision, MetricDesc, PointBatch, Severity};

pub trait Host {
    fn now(&mut self) -> u64;
    fn log(&mut self, level: Severity, message: &str);
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64;
    fn cancel_timer(&mut self, id: u64);
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String>;
    fn emit_points(&mut self, points: &PointBatch);
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
    fn emit_decision(&mut self, decision: &Decision) {
        host::emit_decision(decision)
    }
}

#[cfg(test)]
pub mod fake {
    //! A host for native tests: a settable clock, timers, and everything
    //! emitted, points resolved to their declarations.

    use super::*;
    use sonde_plugin_sdk::types::Value;

    #[derive(Debug, Clone, PartialEq)]
    pub struct Point {
        pub metric: String,
        pub attrs: Vec<(String, String)>,
        pub time: u64,
        pub value: f64,
    }

    #[derive(Default)]
    pub struct Fake {
        pub now: u64,
        pub logs: Vec<(Severity, String)>,
        pub timers: Vec<(u64, u64, bool)>,
        pub declared: Vec<MetricDesc>,
        pub points: Vec<Point>,
        pub decisions: Vec<Decision>,
    }

    impl Host for Fake {
        fn now(&mut self) -> u64 {
            self.now
        }
        fn log(&mut self, level: Severity, message: &str) {
            self.logs.push((level, message.to_string()));
        }
        fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64 {
            let id = self.timers.len() as u64 + 1;
            self.timers.push((id, after_ms, repeat));
            id
        }
        fn cancel_timer(&mut self, id: u64) {
            self.timers.retain(|t| t.0 != id);
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
        fn emit_decision(&mut self, decision: &Decision) {
            self.decisions.push(decision.clone());
        }
    }
}
