//! [`FakeHost`]: a [`Host`] that records every call, for native tests.

use std::collections::BTreeMap;

use super::sink_file;
use crate::Host;
use crate::types::{
    Column, Decision, LogRecord, MetricDesc, PointBatch, SampleRequest, Severity, SinkSpec, Timestamp, Value,
};

/// A host for native tests. Everything a plugin asks of it is kept in public
/// fields for the test to read (and to set, for the clock and failures):
///
/// - a clock that only moves when the test moves it (`now`, [`FakeHost::advance_ms`]);
/// - `log` lines, emitted log records, decisions, sample requests;
/// - declared metrics, with the real host's rules (same name and attributes →
///   same handle; an empty name or a changed kind is refused), and points
///   resolved to their metric, unit and attributes ([`Point`]);
/// - timers that are set and not cancelled;
/// - sinks, with the text the real host would have written to each file;
/// - the state store, key/value and streams, which [`FakeHost::restarted`]
///   carries into a new fake as a restart of sonde would;
/// - failure injection: `fail_open_sink`, `fail_state_writes`.
#[derive(Debug, Default)]
pub struct FakeHost {
    /// What `now()` returns, ns since the Unix epoch.
    pub now: Timestamp,
    /// `log` calls, in order.
    pub logs: Vec<(Severity, String)>,
    /// Timers set and not cancelled, by id (ids start at 1).
    pub timers: BTreeMap<u64, Timer>,
    /// The id the latest `set-timer` returned (0: none yet).
    pub last_timer: u64,
    /// Every `request-samples` call, in order.
    pub sample_requests: Vec<Option<SampleRequest>>,
    /// Declared metrics; a handle is an index into this list.
    pub declared: Vec<MetricDesc>,
    /// Every point emitted with a known handle, in order.
    pub points: Vec<Point>,
    /// Points whose handle was never declared (the real host drops and counts them).
    pub dropped_points: usize,
    /// `emit-logs` records, in order.
    pub records: Vec<LogRecord>,
    /// `emit-decision` calls, in order.
    pub decisions: Vec<Decision>,
    /// Sinks opened; a handle is an index into this list.
    pub sinks: Vec<SinkSpec>,
    /// File name → the text the real host would have on disk.
    pub files: BTreeMap<String, String>,
    /// The state store.
    pub store: Store,
    /// Successful `state-put` calls.
    pub puts: usize,
    /// When set, `open-sink` fails with this reason (an unwritable sink directory).
    pub fail_open_sink: Option<String>,
    /// When set, `state-put` and `state-append` fail with this reason (a full disk).
    pub fail_state_writes: Option<String>,
}

/// A timer the plugin set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer {
    pub after_ms: u64,
    pub repeat: bool,
}

/// An emitted point with its declaration resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub metric: String,
    pub unit: String,
    /// Attributes as (key, value), values as text: strings as they are,
    /// numbers in decimal, booleans as `true`/`false`.
    pub attrs: Vec<(String, String)>,
    pub time: Timestamp,
    pub value: f64,
}

impl Point {
    /// The value of attribute `key`, if the point has it.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether every (key, value) of `having` is among the attributes.
    pub fn has(&self, having: &[(&str, &str)]) -> bool {
        having.iter().all(|(k, v)| self.attr(k) == Some(*v))
    }
}

/// What the host persists for a plugin: survives traps and restarts.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Store {
    pub kv: BTreeMap<String, Vec<u8>>,
    /// Stream → sequence number → record.
    pub streams: BTreeMap<String, BTreeMap<u64, Vec<u8>>>,
    /// Stream → last sequence number given (trimming never reuses one).
    pub last_seq: BTreeMap<String, u64>,
}

impl FakeHost {
    /// A fake whose clock reads `now`.
    pub fn at(now: Timestamp) -> FakeHost {
        FakeHost {
            now,
            ..FakeHost::default()
        }
    }

    /// A new host process at `now` over this one's state store and sink
    /// files (what survives a restart of sonde); nothing else carries over.
    pub fn restarted(&self, now: Timestamp) -> FakeHost {
        FakeHost {
            now,
            store: self.store.clone(),
            files: self.files.clone(),
            ..FakeHost::default()
        }
    }

    /// Moves the clock forward.
    pub fn advance_ms(&mut self, ms: u64) {
        self.now += ms * 1_000_000;
    }

    /// Points of `metric` whose attributes include every (key, value) of `having`.
    pub fn points_of(&self, metric: &str, having: &[(&str, &str)]) -> Vec<&Point> {
        self.points
            .iter()
            .filter(|p| p.metric == metric && p.has(having))
            .collect()
    }

    /// (time, value) of those points, in emission order.
    pub fn series(&self, metric: &str, having: &[(&str, &str)]) -> Vec<(Timestamp, f64)> {
        self.points_of(metric, having)
            .iter()
            .map(|p| (p.time, p.value))
            .collect()
    }

    /// The latest value of those points.
    pub fn last(&self, metric: &str, having: &[(&str, &str)]) -> Option<f64> {
        self.points_of(metric, having).last().map(|p| p.value)
    }

    /// Decisions of one kind, in order.
    pub fn decisions_of(&self, kind: &str) -> Vec<&Decision> {
        self.decisions.iter().filter(|d| d.kind == kind).collect()
    }

    /// Whether some `log` line contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.logs.iter().any(|(_, m)| m.contains(needle))
    }

    /// The text of the sink file `name`, if one was opened.
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files.get(name).map(String::as_str)
    }

    fn sink(&mut self, handle: u32) -> Result<(&SinkSpec, &mut String), String> {
        let spec = self
            .sinks
            .get(handle as usize)
            .ok_or_else(|| format!("no sink with handle {handle}"))?;
        let file = self.files.entry(spec.name.clone()).or_default();
        Ok((spec, file))
    }

    fn state_write_allowed(&self) -> Result<(), String> {
        match &self.fail_state_writes {
            Some(reason) => Err(reason.clone()),
            None => Ok(()),
        }
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
    }
}

impl Host for FakeHost {
    fn log(&mut self, level: Severity, message: &str) {
        self.logs.push((level, message.to_string()));
    }

    fn now(&mut self) -> Timestamp {
        self.now
    }

    fn set_timer(&mut self, after_ms: u64, repeat: bool) -> u64 {
        self.last_timer += 1;
        self.timers.insert(self.last_timer, Timer { after_ms, repeat });
        self.last_timer
    }

    fn cancel_timer(&mut self, id: u64) {
        self.timers.remove(&id);
    }

    fn request_samples(&mut self, request: Option<&SampleRequest>) {
        self.sample_requests.push(request.cloned());
    }

    fn declare_metric(&mut self, desc: &MetricDesc) -> Result<u32, String> {
        if desc.name.trim().is_empty() {
            return Err("metric name must not be empty".into());
        }
        if let Some(other) = self
            .declared
            .iter()
            .find(|d| d.name == desc.name && d.kind != desc.kind)
        {
            return Err(format!(
                "metric {} was declared as {:?} before; it cannot also be {:?}",
                desc.name, other.kind, desc.kind
            ));
        }
        let same = |d: &&MetricDesc| d.name == desc.name && d.attributes == desc.attributes;
        if let Some(i) = self.declared.iter().position(|d| same(&d)) {
            return Ok(i as u32);
        }
        self.declared.push(desc.clone());
        Ok(self.declared.len() as u32 - 1)
    }

    fn emit_points(&mut self, points: &PointBatch) {
        let n = points.series.len();
        if points.time.len() != n || points.value.len() != n {
            self.dropped_points += n;
            return;
        }
        for i in 0..n {
            let Some(d) = self.declared.get(points.series[i] as usize) else {
                self.dropped_points += 1;
                continue;
            };
            self.points.push(Point {
                metric: d.name.clone(),
                unit: d.unit.clone(),
                attrs: d
                    .attributes
                    .iter()
                    .map(|a| (a.key.clone(), value_text(&a.value)))
                    .collect(),
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

    fn open_sink(&mut self, spec: &SinkSpec) -> Result<u32, String> {
        if let Some(reason) = &self.fail_open_sink {
            return Err(reason.clone());
        }
        sink_file::check_name(&spec.name)?;
        sink_file::check_default_dir(spec)?;
        if self.sinks.len() >= sink_file::MAX_SINKS {
            return Err(format!("too many sinks open ({})", sink_file::MAX_SINKS));
        }
        // A file already there keeps its content: an append sink writes no
        // second header, as on disk.
        self.files
            .entry(spec.name.clone())
            .or_insert_with(|| sink_file::header_on_open(spec));
        self.sinks.push(spec.clone());
        Ok(self.sinks.len() as u32 - 1)
    }

    fn write_rows(&mut self, sink: u32, columns: &[Column]) -> Result<(), String> {
        let (spec, file) = self.sink(sink)?;
        sink_file::write_rows(spec, file, columns)
    }

    fn write_bytes(&mut self, sink: u32, data: &[u8]) -> Result<(), String> {
        let (spec, file) = self.sink(sink)?;
        sink_file::write_bytes(spec, file, data)
    }

    fn state_get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.store.kv.get(key).cloned()
    }

    fn state_put(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        self.state_write_allowed()?;
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
        self.state_write_allowed()?;
        let seq = self.store.last_seq.entry(stream.to_string()).or_insert(0);
        *seq += 1;
        let seq = *seq;
        self.store
            .streams
            .entry(stream.to_string())
            .or_default()
            .insert(seq, record.to_vec());
        Ok(seq)
    }

    fn state_read(&mut self, stream: &str, from: u64, max: u32) -> Vec<(u64, Vec<u8>)> {
        // The real host reads at most 10 000 records per call.
        let max = max.min(10_000) as usize;
        self.store
            .streams
            .get(stream)
            .map(|s| s.range(from..).take(max).map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default()
    }

    fn state_trim(&mut self, stream: &str, before: u64) {
        if let Some(s) = self.store.streams.get_mut(stream) {
            s.retain(|seq, _| *seq >= before);
        }
    }
}
