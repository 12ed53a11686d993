//! The host calls the plugin makes, behind a trait: the plugin passes [`Wasm`]
//! (the real imports) and the native tests a fake with a settable clock and an
//! in-memory state store.

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
    fn state_append(&mut self, stream: &str, record: &[u8]) -> Result<u64, String>;
    fn state_read(&mut self, stream: &str, from: u64, max: u32) -> Vec<(u64, Vec<u8>)>;
    fn state_trim(&mut self, stream: &str, before: u64);
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
    fn state_append(&mut self, stream: &str, record: &[u8]) -> Result<u64, String> {
        host::state_append(stream, record)
    }
    fn state_read(&mut self, stream: &str, from: u64, max: u32) -> Vec<(u64, Vec<u8>)> {
        host::state_read(stream, from, max)
    }
    fn state_trim(&mut self, stream: &str, before: u64) {
        host::state_trim(stream, before)
    }
}

#[cfg(test)]
pub mod fake {
    //! A host for native tests: a settable clock, a state store with streams,
    //! timers, and everything emitted. Cloning the store into a new `Fake`
    //! stands for a restart of sonde.

    use std::collections::BTreeMap;

    use super::*;

    #[derive(Default, Clone)]
    pub struct Store {
        pub kv: BTreeMap<String, Vec<u8>>,
        pub streams: BTreeMap<String, BTreeMap<u64, Vec<u8>>>,
        pub seq: BTreeMap<String, u64>,
    }

    #[derive(Default)]
    pub struct Fake {
        pub now: u64,
        pub logs: Vec<(Severity, String)>,
        pub timers: BTreeMap<u64, (u64, bool)>,
        next_timer: u64,
        pub sample_requests: Vec<Option<SampleRequest>>,
        pub declared: Vec<MetricDesc>,
        /// (metric name, time, value)
        pub points: Vec<(String, u64, f64)>,
        pub records: Vec<LogRecord>,
        pub decisions: Vec<Decision>,
        pub store: Store,
        /// Fail every state write (a full disk).
        pub fail_writes: bool,
        pub puts: usize,
    }

    impl Fake {
        pub fn at(now: u64) -> Fake {
            Fake { now, ..Fake::default() }
        }

        /// A new host process over the same store (a restart).
        pub fn restarted(&self, now: u64) -> Fake {
            Fake {
                now,
                store: self.store.clone(),
                ..Fake::default()
            }
        }

        pub fn decisions_of(&self, kind: &str) -> Vec<&Decision> {
            self.decisions.iter().filter(|d| d.kind == kind).collect()
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
                let name = self.declared[points.series[i] as usize].name.clone();
                self.points.push((name, points.time[i], points.value[i]));
            }
        }
        fn emit_logs(&mut self, records: &[LogRecord]) {
            self.records.extend_from_slice(records);
        }
        fn emit_decision(&mut self, decision: &Decision) {
            self.decisions.push(decision.clone());
        }
        fn state_get(&mut self, key: &str) -> Option<Vec<u8>> {
            self.store.kv.get(key).cloned()
        }
        fn state_put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
            if self.fail_writes {
                return Err("disk full".into());
            }
            self.puts += 1;
            self.store.kv.insert(key.to_string(), value.to_vec());
            Ok(())
        }
        fn state_delete(&mut self, key: &str) {
            self.store.kv.remove(key);
        }
        fn state_keys(&mut self, prefix: &str) -> Vec<String> {
            self.store
                .kv
                .keys()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect()
        }
        fn state_append(&mut self, stream: &str, record: &[u8]) -> Result<u64, String> {
            if self.fail_writes {
                return Err("disk full".into());
            }
            let seq = self.store.seq.entry(stream.to_string()).or_insert(0);
            *seq += 1;
            let s = *seq;
            self.store
                .streams
                .entry(stream.to_string())
                .or_default()
                .insert(s, record.to_vec());
            Ok(s)
        }
        fn state_read(&mut self, stream: &str, from: u64, max: u32) -> Vec<(u64, Vec<u8>)> {
            self.store
                .streams
                .get(stream)
                .map(|m| {
                    m.range(from..)
                        .take(max as usize)
                        .map(|(k, v)| (*k, v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        }
        fn state_trim(&mut self, stream: &str, before: u64) {
            if let Some(m) = self.store.streams.get_mut(stream) {
                m.retain(|k, _| *k >= before);
            }
        }
    }
}
