//! Recording what the host hands its plugins (`GET /api/record`), and the
//! file it makes, which `sonde plugin test` replays.
//!
//! ```text
//!  sampler thread ─► PluginManager::on_tick ───────► Recorder::tick    a `series` line when the table grew, a `tick` line
//!  ingest hub ─────► PluginManager::publish_events ─► Recorder::events  one `events` line per batch, every kind in it
//!                                                        │ JSON lines appended to one buffer
//!                                                        ▼
//!  GET /api/record?seconds=N ─► Recording::finish ─► header, the lines, an `end` line
//! ```
//!
//! Limits: one recording at a time (a second one is refused, [`RecordError::Busy`]);
//! at most [`MAX_SECONDS`]; the buffer stays within `max_bytes` (at most
//! [`MAX_BYTES`]) but for the one line that crosses it: then the recording
//! stops, its buffer is freed and `finish` answers [`RecordError::Overflow`].
//! While nothing records, each tap costs one atomic load; while something
//! does, the line is written on the thread that hands the data out (the
//! sampler's, the hub's).
//!
//! The format (version [`VERSION`], documented in docs/plugins.md): JSON
//! lines, each an object with one key naming what it is. Ticks hold the raw
//! readings, not per-plugin sample batches, so a replay builds the batches a
//! plugin asks for exactly as the host does (`instance::SampleAcc`); event
//! batches hold every kind and event table the hub made, and a replay keeps
//! the kinds and tables the plugin subscribed to (`manager::events_for`).
//! Series, ticks and event batches are the host's own types with serde
//! derives (`crate::model`, the generated `bindings::types`), so the format
//! follows the contract. JSON has no NaN or infinity: an event batch's
//! non-finite floats are written as 0 and named, by their JSON pointer, in
//! the line's `non_finite`, which the reader puts back ([`NonFinite`]).
//!
//! Version 2 (contract 0.2) holds event tables (`batch.tables`); version 1
//! held contract 0.1's `requests`, `actions` and `mpi_samples` columns and
//! is refused with that reason: it was never made by a released sonde, and
//! a replay would have to rebuild 0.2's tables from 0.1's columns.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::bindings::types;
use crate::model::{SeriesInfo, Tick, now_ns};

/// The `format` of a recording's header.
pub const FORMAT: &str = "sonde-recording";
/// The version of the format this host writes and reads.
pub const VERSION: u32 = 2;
/// The longest recording.
pub const MAX_SECONDS: u64 = 600;
/// The largest recording, and the default cap.
pub const MAX_BYTES: usize = 256 << 20;
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;
/// Room kept for the `end` line.
const END_ROOM: usize = 256;

/// One line of a recording. An owned `events` line is much larger than the
/// others; lines are read and written one at a time, so it is not boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line<'a> {
    /// The first line.
    Header(Header),
    /// Series the sampler described since the last `series` line (the first
    /// one holds the whole table); ticks index their values by series id.
    Series(SeriesLine<'a>),
    /// One sampling tick: every series read at `time_ns` (`null`: not read).
    Tick(Cow<'a, Tick>),
    /// An event batch as the ingest hub handed it to the plugins.
    Events(EventsLine<'a>),
    /// The last line.
    End(End),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    pub version: u32,
    /// The sonde that recorded, and the contract it spoke.
    pub host_version: String,
    pub contract: String,
    /// When the recording began, ns since the Unix epoch.
    pub started_ns: u64,
    /// The seconds asked for.
    pub seconds: u64,
    /// The host's sampling period when the recording began.
    pub period_ms: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SeriesLine<'a> {
    pub time_ns: u64,
    pub series: Cow<'a, [SeriesInfo]>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventsLine<'a> {
    /// When the hub handed the batch out.
    pub time_ns: u64,
    pub batch: Cow<'a, types::EventBatch>,
    /// The batch's floats JSON cannot hold, by JSON pointer into `batch`
    /// (`/points/value/3`); the batch holds 0 there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub non_finite: BTreeMap<String, NonFinite>,
}

/// A float JSON has no number for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum NonFinite {
    #[serde(rename = "NaN")]
    NaN,
    #[serde(rename = "inf")]
    Inf,
    #[serde(rename = "-inf")]
    NegInf,
}

impl NonFinite {
    fn of(v: f64) -> Option<NonFinite> {
        match v {
            v if v.is_nan() => Some(NonFinite::NaN),
            f64::INFINITY => Some(NonFinite::Inf),
            f64::NEG_INFINITY => Some(NonFinite::NegInf),
            _ => None,
        }
    }

    fn value(self) -> f64 {
        match self {
            NonFinite::NaN => f64::NAN,
            NonFinite::Inf => f64::INFINITY,
            NonFinite::NegInf => f64::NEG_INFINITY,
        }
    }
}

/// Calls `f` with every float of an event batch and its JSON pointer (built
/// only when asked for: a batch holds many floats, and few need naming).
/// Every f64 the contract puts in an `event-batch` is here: attribute values
/// (origins, point series, node and custom events), forwarded points, and
/// `f64` table columns.
fn each_float(b: &mut types::EventBatch, f: &mut dyn FnMut(&mut f64, &dyn Fn() -> String)) {
    let mut attrs = |at: &str, i: usize, list: &mut [types::Attribute]| {
        for (j, a) in list.iter_mut().enumerate() {
            if let types::Value::Float(v) = &mut a.value {
                f(v, &|| format!("/{at}/{i}/attributes/{j}/value/Float"));
            }
        }
    };
    for (i, o) in b.origins.iter_mut().enumerate() {
        attrs("origins", i, &mut o.attributes);
    }
    for (i, s) in b.point_series.iter_mut().enumerate() {
        attrs("point_series", i, &mut s.attributes);
    }
    for (i, e) in b.node_events.iter_mut().enumerate() {
        attrs("node_events", i, &mut e.attributes);
    }
    for (i, e) in b.custom.iter_mut().enumerate() {
        attrs("custom", i, &mut e.attributes);
    }
    if let Some(p) = &mut b.points {
        for (i, v) in p.value.iter_mut().enumerate() {
            f(v, &|| format!("/points/value/{i}"));
        }
    }
    for (t, rows) in b.tables.iter_mut().enumerate() {
        for (c, col) in rows.columns.iter_mut().enumerate() {
            if let types::TableColumn::F64s(vs) = col {
                for (i, v) in vs.iter_mut().enumerate() {
                    f(v, &|| format!("/tables/{t}/columns/{c}/F64s/{i}"));
                }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub ended_ns: u64,
    pub ticks: u64,
    pub event_batches: u64,
    /// The file's size without this line.
    pub bytes: u64,
}

/// Why a recording could not be made or kept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    #[error(
        "a recording is already running (started {started_s_ago:.1} s ago, for {seconds} s); one at a time, try again when it ends"
    )]
    Busy { started_s_ago: f64, seconds: u64 },
    #[error(
        "the recording passed max_bytes ({max_bytes} bytes) after {after_s:.1} s of the {seconds} s asked and was dropped: \
         ask for fewer seconds, or a larger max_bytes (at most {MAX_BYTES})"
    )]
    Overflow {
        max_bytes: usize,
        after_s: f64,
        seconds: u64,
    },
}

/// What `/api/status` shows of a running recording.
#[derive(Clone, Debug, Serialize)]
pub struct Running {
    pub started_s_ago: f64,
    pub seconds: u64,
    pub bytes: usize,
}

/// The tap the plugin manager calls; cheap to clone.
#[derive(Clone, Default)]
pub struct Recorder {
    on: Arc<AtomicBool>,
    session: Arc<Mutex<Option<Session>>>,
    next_id: Arc<AtomicU64>,
}

struct Session {
    id: u64,
    out: Vec<u8>,
    max_bytes: usize,
    seconds: u64,
    started: Instant,
    /// Series described so far (ids are dense: `0..series_told`).
    series_told: usize,
    ticks: u64,
    event_batches: u64,
    overflowed_after_s: Option<f64>,
    full: Arc<tokio::sync::Notify>,
    /// Told by [`Recorder::stop`]: the recording ends before its seconds.
    stop: Arc<tokio::sync::Notify>,
}

impl Recorder {
    /// Starts recording for `seconds` (the caller ends it; the number goes in
    /// the header) within `max_bytes`.
    pub fn start(&self, seconds: u64, max_bytes: usize, period_ms: u32) -> Result<Recording, RecordError> {
        let mut slot = self.session.lock();
        if let Some(s) = slot.as_ref() {
            return Err(RecordError::Busy {
                started_s_ago: s.started.elapsed().as_secs_f64(),
                seconds: s.seconds,
            });
        }
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            host_version: env!("CARGO_PKG_VERSION").into(),
            contract: super::engine::CONTRACT_VERSION.into(),
            started_ns: now_ns(),
            seconds,
            period_ms,
        };
        let mut out = Vec::new();
        write_line(&mut out, &Line::Header(header));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let full = Arc::new(tokio::sync::Notify::new());
        let stop = Arc::new(tokio::sync::Notify::new());
        *slot = Some(Session {
            id,
            out,
            max_bytes,
            seconds,
            started: Instant::now(),
            series_told: 0,
            ticks: 0,
            event_batches: 0,
            overflowed_after_s: None,
            full: full.clone(),
            stop: stop.clone(),
        });
        self.on.store(true, Ordering::Release);
        Ok(Recording {
            recorder: self.clone(),
            id,
            full,
            stop,
        })
    }

    /// The recording running now, if any (`/api/status`).
    pub fn running(&self) -> Option<Running> {
        self.session.lock().as_ref().map(|s| Running {
            started_s_ago: s.started.elapsed().as_secs_f64(),
            seconds: s.seconds,
            bytes: s.out.len(),
        })
    }

    /// Ends the running recording now rather than after its seconds: its
    /// request answers with what it holds. False when none is running.
    pub fn stop(&self) -> bool {
        match self.session.lock().as_ref() {
            Some(s) => {
                // A permit: the recording's wait may not have started yet.
                s.stop.notify_one();
                true
            }
            None => false,
        }
    }

    /// A sampling tick, with the series table it indexes.
    pub fn tick(&self, tick: &Tick, series: &[SeriesInfo]) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        self.append(|s| {
            if series.len() > s.series_told {
                let line = Line::Series(SeriesLine {
                    time_ns: tick.time_ns,
                    series: Cow::Borrowed(&series[s.series_told..]),
                });
                write_line(&mut s.out, &line);
                s.series_told = series.len();
            }
            write_line(&mut s.out, &Line::Tick(Cow::Borrowed(tick)));
            s.ticks += 1;
        });
    }

    /// An event batch on its way to the plugins.
    pub fn events(&self, batch: &types::EventBatch) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        self.append(|s| {
            // The recording's own copy, where non-finite floats become 0 and
            // are named (a copy costs less than the JSON it becomes).
            let mut b = batch.clone();
            let mut non_finite = BTreeMap::new();
            each_float(&mut b, &mut |v, path| {
                if let Some(k) = NonFinite::of(*v) {
                    non_finite.insert(path(), k);
                    *v = 0.0;
                }
            });
            let line = Line::Events(EventsLine {
                time_ns: now_ns(),
                batch: Cow::Owned(b),
                non_finite,
            });
            write_line(&mut s.out, &line);
            s.event_batches += 1;
        });
    }

    fn append(&self, write: impl FnOnce(&mut Session)) {
        let mut slot = self.session.lock();
        let Some(s) = slot.as_mut().filter(|s| s.overflowed_after_s.is_none()) else {
            return;
        };
        write(s);
        if s.out.len() + END_ROOM > s.max_bytes {
            s.overflowed_after_s = Some(s.started.elapsed().as_secs_f64());
            s.out = Vec::new();
            self.on.store(false, Ordering::Release);
            s.full.notify_one();
        }
    }
}

/// A running recording; dropping it (a client that went away) ends it.
pub struct Recording {
    recorder: Recorder,
    id: u64,
    full: Arc<tokio::sync::Notify>,
    stop: Arc<tokio::sync::Notify>,
}

impl Recording {
    /// Waits until `d` has passed, the recording filled up, or it was
    /// stopped ([`Recorder::stop`]).
    pub async fn run_for(&self, d: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = self.full.notified() => {}
            _ = self.stop.notified() => {}
        }
    }

    /// Ends the recording: the whole file, or why there is none.
    pub fn finish(self) -> Result<Vec<u8>, RecordError> {
        let Some(mut s) = self.take() else {
            unreachable!("a session lives as long as its Recording")
        };
        if let Some(after_s) = s.overflowed_after_s {
            return Err(RecordError::Overflow {
                max_bytes: s.max_bytes,
                after_s,
                seconds: s.seconds,
            });
        }
        let end = End {
            ended_ns: now_ns(),
            ticks: s.ticks,
            event_batches: s.event_batches,
            bytes: s.out.len() as u64,
        };
        write_line(&mut s.out, &Line::End(end));
        Ok(std::mem::take(&mut s.out))
    }

    fn take(&self) -> Option<Session> {
        let mut slot = self.recorder.session.lock();
        if slot.as_ref().is_some_and(|s| s.id == self.id) {
            self.recorder.on.store(false, Ordering::Release);
            slot.take()
        } else {
            None
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.take();
    }
}

fn write_line(out: &mut Vec<u8>, line: &Line<'_>) {
    serde_json::to_writer(&mut *out, line).expect("a recording line serializes");
    out.push(b'\n');
}

/// Reads a recording line by line, checking its header first.
pub struct Reader<R> {
    lines: std::io::Lines<R>,
    /// The line number of the last line read (1-based).
    pub line_no: usize,
    pub header: Header,
}

impl<R: BufRead> Reader<R> {
    /// Reads the header; Err names what is wrong with the file.
    pub fn new(input: R) -> Result<Self, String> {
        let mut lines = input.lines();
        let first = match lines.next() {
            None => return Err("the file is empty: a recording starts with a header line".into()),
            Some(Err(e)) => return Err(format!("line 1: {e}")),
            Some(Ok(l)) => l,
        };
        let header = match serde_json::from_str::<Line>(&first) {
            Ok(Line::Header(h)) => h,
            Ok(_) => return Err("line 1 is not a header: this is not a whole recording".into()),
            Err(e) => {
                return Err(format!(
                    "line 1: not a sonde recording ({e}); make one with `sonde record` or GET /api/record"
                ));
            }
        };
        if header.format != FORMAT {
            return Err(format!("line 1: format {:?}, expected {FORMAT:?}", header.format));
        }
        if header.version == 1 {
            return Err(format!(
                "a recording of format version 1, made for contract 0.1 (its `requests`, `actions` and \
                 `mpi_samples` columns); this sonde reads version {VERSION}, which holds event tables: \
                 record it again with this sonde"
            ));
        }
        if header.version != VERSION {
            return Err(format!(
                "a recording of format version {} (this sonde reads version {VERSION}): record it again with this sonde",
                header.version
            ));
        }
        Ok(Reader {
            lines,
            line_no: 1,
            header,
        })
    }

    /// The next line after the header; `Ok(None)` at the end of the file.
    pub fn next_line(&mut self) -> Result<Option<Line<'static>>, String> {
        loop {
            let Some(l) = self.lines.next() else { return Ok(None) };
            self.line_no += 1;
            let l = l.map_err(|e| format!("line {}: {e}", self.line_no))?;
            if l.trim().is_empty() {
                continue;
            }
            return match serde_json::from_str::<Line>(&l) {
                Ok(Line::Header(_)) => Err(format!("line {}: a second header", self.line_no)),
                Ok(Line::Events(mut e)) => {
                    restore_non_finite(&mut e).map_err(|e| format!("line {}: {e}", self.line_no))?;
                    Ok(Some(Line::Events(e)))
                }
                Ok(line) => Ok(Some(line)),
                Err(e) => Err(format!("line {}: {e}", self.line_no)),
            };
        }
    }
}

/// Puts the floats JSON could not hold back into the batch.
fn restore_non_finite(e: &mut EventsLine<'_>) -> Result<(), String> {
    if e.non_finite.is_empty() {
        return Ok(());
    }
    let mut found = std::collections::BTreeSet::new();
    each_float(e.batch.to_mut(), &mut |v, path| {
        let path = path();
        if let Some(k) = e.non_finite.get(&path) {
            *v = k.value();
            found.insert(path);
        }
    });
    match e.non_finite.keys().find(|p| !found.contains(*p)) {
        Some(p) => Err(format!("non_finite names {p:?}, which is not a float of the batch")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttrValue, SeriesKind};

    fn series(n: u32) -> Vec<SeriesInfo> {
        (0..n)
            .map(|id| SeriesInfo {
                id,
                metric: "system.cpu.utilization".into(),
                unit: "1".into(),
                kind: SeriesKind::Gauge,
                attributes: vec![("cpu.logical_number".into(), AttrValue::Int(id as i64))],
            })
            .collect()
    }

    fn progress_batch() -> types::EventBatch {
        types::EventBatch {
            origins: vec![types::Origin {
                job: "j".into(),
                node: "n".into(),
                role: String::new(),
                index: -1,
                rank: 3,
                local_rank: 0,
                attributes: vec![],
            }],
            names: vec!["batch_idx".into()],
            progress: Some(types::ProgressColumns {
                origin: vec![0],
                name: vec![0],
                time: vec![u64::MAX - 1],
                value: vec![41],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn what_is_recorded_reads_back_the_same() {
        let r = Recorder::default();
        let rec = r.start(5, DEFAULT_MAX_BYTES, 100).unwrap();
        let all = series(3);
        r.tick(
            &Tick {
                time_ns: 10,
                values: vec![0.5, f64::NAN, 2.0],
            },
            &all[..2],
        );
        r.events(&progress_batch());
        r.tick(
            &Tick {
                time_ns: 20,
                values: vec![0.25, 1.0, 3.0],
            },
            &all,
        );
        let bytes = rec.finish().unwrap();
        let mut reader = Reader::new(bytes.as_slice()).unwrap();
        assert_eq!(reader.header.seconds, 5);
        assert_eq!(reader.header.period_ms, 100);
        let mut lines = Vec::new();
        while let Some(l) = reader.next_line().unwrap() {
            lines.push(l);
        }
        assert_eq!(lines.len(), 6, "{lines:?}");
        let Line::Series(s) = &lines[0] else {
            panic!("{:?}", lines[0])
        };
        assert_eq!(&*s.series, &all[..2]);
        let Line::Tick(t) = &lines[1] else { panic!() };
        assert!(t.values[1].is_nan(), "a value not read comes back as NaN");
        assert_eq!(t.values[2], 2.0);
        let Line::Events(e) = &lines[2] else { panic!() };
        let json = |b: &types::EventBatch| serde_json::to_value(b).unwrap();
        assert_eq!(json(&e.batch), json(&progress_batch()));
        assert_eq!(
            e.batch.progress.as_ref().unwrap().time,
            [u64::MAX - 1],
            "u64 times survive JSON"
        );
        let Line::Series(s) = &lines[3] else { panic!() };
        assert_eq!(&*s.series, &all[2..], "only the new series");
        let Line::End(end) = &lines[5] else { panic!() };
        assert_eq!((end.ticks, end.event_batches), (2, 1));
        let end_line = String::from_utf8_lossy(&bytes).lines().last().unwrap().len() + 1;
        assert_eq!(end.bytes as usize, bytes.len() - end_line);
    }

    /// A batch with a non-finite float in every place the contract has one,
    /// and an event table.
    fn batch_with_non_finite() -> types::EventBatch {
        let float = |v| types::Attribute {
            key: "x".into(),
            value: types::Value::Float(v),
        };
        let mut b = progress_batch();
        b.origins[0].attributes = vec![float(f64::NAN), float(1.5)];
        b.custom = vec![types::CustomEvent {
            origin: 0,
            time: 5,
            name: "c".into(),
            attributes: vec![float(f64::NEG_INFINITY)],
            body: String::new(),
        }];
        b.points = Some(types::PointColumns {
            origin: vec![0, 0, 0],
            series: vec![0, 0, 0],
            time: vec![1, 2, 3],
            value: vec![0.5, f64::NAN, f64::INFINITY],
        });
        b.tables = vec![types::TableRows {
            name: "steps".into(),
            column_names: vec!["rank".into(), "loss".into()],
            origin: vec![0, 0],
            columns: vec![
                types::TableColumn::U32s(vec![1, 2]),
                types::TableColumn::F64s(vec![f64::NAN, -0.25]),
            ],
        }];
        b
    }

    #[test]
    fn non_finite_floats_in_an_event_batch_come_back_as_they_were() {
        let r = Recorder::default();
        let rec = r.start(5, DEFAULT_MAX_BYTES, 100).unwrap();
        let sent = batch_with_non_finite();
        r.events(&sent);
        let bytes = rec.finish().unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(r#""/points/value/1":"NaN""#), "{text}");
        assert!(text.contains(r#""/tables/0/columns/1/F64s/0":"NaN""#), "{text}");
        let mut reader = Reader::new(bytes.as_slice()).unwrap();
        let Some(Line::Events(e)) = reader.next_line().unwrap() else {
            panic!("an events line")
        };
        let got = &e.batch;
        let bits = |b: &types::EventBatch| {
            let mut all = Vec::new();
            each_float(&mut b.clone(), &mut |v, _| all.push(v.to_bits()));
            all
        };
        assert_eq!(bits(got), bits(&sent), "every float, NaN and infinities included");
        assert_eq!(bits(got).len(), 8);
        let finite = |b: &types::EventBatch| {
            let mut b = b.clone();
            each_float(&mut b, &mut |v, _| {
                if !v.is_finite() {
                    *v = 0.0
                }
            });
            b
        };
        assert_eq!(finite(got), finite(&sent), "and everything else, the table included");
    }

    #[test]
    fn a_pointer_to_no_float_is_named() {
        let r = Recorder::default();
        let rec = r.start(5, DEFAULT_MAX_BYTES, 100).unwrap();
        r.events(&batch_with_non_finite());
        let text = String::from_utf8(rec.finish().unwrap()).unwrap();
        let text = text.replace("/points/value/1", "/points/value/9");
        let mut reader = Reader::new(text.as_bytes()).unwrap();
        let e = reader.next_line().unwrap_err();
        assert_eq!(
            e,
            r#"line 2: non_finite names "/points/value/9", which is not a float of the batch"#
        );
    }

    #[test]
    fn one_recording_at_a_time_and_a_dropped_one_frees_the_slot() {
        let r = Recorder::default();
        let first = r.start(60, DEFAULT_MAX_BYTES, 100).unwrap();
        assert!(matches!(
            r.start(1, DEFAULT_MAX_BYTES, 100),
            Err(RecordError::Busy { seconds: 60, .. })
        ));
        drop(first);
        let second = r.start(1, DEFAULT_MAX_BYTES, 100).unwrap();
        assert!(second.finish().is_ok());
    }

    #[tokio::test]
    async fn a_stopped_recording_ends_before_its_seconds_with_what_it_holds() {
        let r = Recorder::default();
        assert!(!r.stop(), "nothing to stop");
        let rec = r.start(600, DEFAULT_MAX_BYTES, 100).unwrap();
        r.tick(
            &Tick {
                time_ns: 1,
                values: vec![2.5],
            },
            &series(1),
        );
        // Stopped before anyone waits: the wait still ends.
        assert!(r.stop());
        tokio::time::timeout(Duration::from_secs(60), rec.run_for(Duration::from_secs(600)))
            .await
            .expect("run_for ended once stopped");
        let bytes = rec.finish().unwrap();
        let mut reader = Reader::new(&bytes[..]).unwrap();
        let mut ticks = 0;
        while let Some(line) = reader.next_line().unwrap() {
            ticks += matches!(line, Line::Tick(_)) as u32;
        }
        assert_eq!(ticks, 1);
        assert!(!r.stop(), "the slot is free again");
    }

    #[test]
    fn past_max_bytes_the_recording_stops_and_says_so() {
        let r = Recorder::default();
        let rec = r.start(60, 4096, 100).unwrap();
        let all = series(50);
        for i in 0..100 {
            r.tick(
                &Tick {
                    time_ns: i,
                    values: vec![1.5; 50],
                },
                &all,
            );
        }
        assert!(!r.on.load(Ordering::Relaxed), "the tap is off once full");
        let e = rec.finish().unwrap_err();
        assert!(matches!(e, RecordError::Overflow { max_bytes: 4096, .. }), "{e}");
        assert!(e.to_string().contains("max_bytes (4096 bytes)"), "{e}");
        assert!(r.start(1, 4096, 100).is_ok(), "the slot is free again");
    }

    #[test]
    fn bad_files_are_named() {
        let err = |text: &str| Reader::new(text.as_bytes()).err().unwrap();
        assert!(err("").contains("empty"));
        assert!(err("hello").contains("not a sonde recording"));
        assert!(err(r#"{"tick":{"time_ns":1,"values":[]}}"#).contains("not a header"));
        let future = r#"{"header":{"format":"sonde-recording","version":9,"host_version":"x","contract":"0.1.0","started_ns":1,"seconds":1,"period_ms":100}}"#;
        assert!(err(future).contains("format version 9"));
        let v1 = future.replace("\"version\":9", "\"version\":1");
        assert!(err(&v1).contains("version 1, made for contract 0.1"), "{}", err(&v1));
        let good = future.replace("\"version\":9", "\"version\":2");
        let text = format!("{good}\n{{\"tick\":{{\"time_ns\":1}}}}\n");
        let mut r = Reader::new(text.as_bytes()).unwrap();
        let e = r.next_line().unwrap_err();
        assert!(e.starts_with("line 2: missing field `values`"), "{e}");
    }
}
