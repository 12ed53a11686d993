//! [`Host`]: every function of the contract's `host` interface as a trait, so
//! a plugin's logic takes `&mut impl Host` and runs against the real host
//! ([`WasmHost`], inside sonde) or against `testing::FakeHost` in a
//! native test, unchanged.
//!
//! The methods mirror `sonde:plugin/host` one for one, with the signatures
//! the generated imports have (records by reference). `&mut self` lets a fake
//! record what it was asked; the real host keeps no state of its own here.

use crate::host;
use crate::types::{Column, Decision, LogRecord, MetricDesc, PointBatch, SampleRequest, Severity, SinkSpec, Timestamp};

/// The functions the host provides to a plugin (`sonde:plugin/host`). See
/// `wit/sonde-plugin.wit` for what each one promises.
pub trait Host {
    /// Writes to the host's log, tagged with the plugin's name.
    fn log(&mut self, level: Severity, message: &str);
    /// The host's wall clock, ns since the Unix epoch.
    fn now(&mut self) -> Timestamp;
    /// Starts a timer; `on-timer(id)` is called when it fires.
    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64;
    /// Cancels a timer; unknown ids are ignored.
    fn cancel_timer(&mut self, id: u64);
    /// Changes what is sampled for this plugin (`None` stops samples).
    fn request_samples(&mut self, request: Option<&SampleRequest>);
    /// Declares a metric series; the handle goes into `emit_points`.
    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String>;
    /// Emits metric points (columns of handle, time, value).
    fn emit_points(&mut self, points: &PointBatch);
    /// Emits log records.
    fn emit_logs(&mut self, records: &[LogRecord]);
    /// Emits a decision.
    fn emit_decision(&mut self, decision: &Decision);
    /// Opens (or creates) a named file sink.
    fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String>;
    /// Appends rows, given as columns of equal length, to a tsv/csv sink.
    fn write_rows(&mut self, sink: u32, columns: &[Column]) -> Result<(), String>;
    /// Writes bytes to a raw sink.
    fn write_bytes(&mut self, sink: u32, data: &[u8]) -> Result<(), String>;
    /// Reads a value from the host's state store.
    fn state_get(&mut self, key: &str) -> Option<Vec<u8>>;
    /// Stores a value: read back at once, on disk a moment later (see the WIT's `state-put`).
    fn state_put(&mut self, key: &str, value: &[u8]) -> Result<(), String>;
    /// Removes a key; absent keys are ignored.
    fn state_delete(&mut self, key: &str);
    /// Keys starting with `prefix`, ascending.
    fn state_keys(&mut self, prefix: &str) -> Vec<String>;
    /// Appends a record to a stream; returns its sequence number (from 1).
    fn state_append(&mut self, stream: &str, record: &[u8]) -> Result<u64, String>;
    /// Up to `max` records with sequence >= `from`.
    fn state_read(&mut self, stream: &str, from: u64, max: u32) -> Vec<(u64, Vec<u8>)>;
    /// Drops records with sequence < `before`.
    fn state_trim(&mut self, stream: &str, before: u64);
}

/// The real host: each method is the generated import. Only callable inside
/// sonde; in a native build every call panics (`unreachable`), which is why
/// native tests use `testing::FakeHost`.
#[derive(Debug, Default, Clone, Copy)]
pub struct WasmHost;

impl Host for WasmHost {
    fn log(&mut self, level: Severity, message: &str) {
        host::log(level, message)
    }
    fn now(&mut self) -> Timestamp {
        host::now()
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
    fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String> {
        host::open_sink(spec)
    }
    fn write_rows(&mut self, sink: u32, columns: &[Column]) -> Result<(), String> {
        host::write_rows(sink, columns)
    }
    fn write_bytes(&mut self, sink: u32, data: &[u8]) -> Result<(), String> {
        host::write_bytes(sink, data)
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
