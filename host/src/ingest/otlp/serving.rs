//! Serving telemetry over OTLP: how a serving controller reports finished
//! requests and actions with any OpenTelemetry SDK (see `ingest::ServedRequest`
//! for the rows). Either signal works; pick one per row.
//!
//! * a **span** named `serving.request` / `serving.action`: its start is the
//!   request's arrival / the action's send, its end the request's departure /
//!   the action's result receipt (unless the attributes below give them);
//! * a **log record** whose event name (or `event.name` attribute) is
//!   `serving.request` / `serving.action`: every time comes from the
//!   attributes (`serving.arrival` + `serving.departure`, `serving.sent` +
//!   `serving.result_received` are required).
//!
//! Attributes (ints; times are ns since the epoch, controller clock; absent = 0):
//!
//! | request attribute | row field | | action attribute | row field |
//! |---|---|---|---|---|
//! | `serving.request.id` (required) | request_id | | `serving.action.id` (required) | action_id |
//! | `serving.user.id` | user_id | | `serving.action.type` (required; 1 load, 2 infer, 3 evict) | action_type |
//! | `serving.model.id` (required) | model_id | | `serving.action.status` | status |
//! | `serving.slo_factor` (double or int) | slo_factor | | `serving.model.id` (required) | model_id |
//! | `serving.arrival`, `serving.departure` | arrival, departure | | `serving.worker.id`, `serving.gpu.id` | worker_id, gpu_id |
//! | `serving.deadline` | deadline (absolute; 0 none) | | `serving.batch_size` (default 1) | batch_size |
//! | `serving.result` | result (0 ok, 4 timeout) | | `serving.expected.duration`, `serving.worker.duration` | expected/worker_exec_duration |
//! | `serving.copies.arrival`, `serving.copies.departure` | arrival/departure_copies | | `serving.sent`, `serving.result_received`, `serving.result_processed` | sent, result_received, result_processed |
//! | `serving.action.id` | action_id | | `serving.expected.complete`, `serving.worker.complete` | expected/worker_exec_complete |
//! | `serving.client.sent`, `serving.client.received` | client_sent/received | | `serving.gpu_clock.expected`, `.before`, `.after` (MHz) | expected_gpu_clock, gpu_clock_before/after |
//! | | | | `serving.worker.copy_output_complete`, `.action_received`, `.result_sent` | worker milestones |
//! | | | | `serving.requests_queued`, `serving.copies_loaded`, `serving.requests_in_time` | counts |
//!
//! A row that is missing a required attribute or fails the checks of
//! `ingest::check_request` / `check_action` is skipped, with the reason in sonde's debug log; it never
//! becomes a timing or a custom event.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::ingest::{Report, ServedAction, ServedRequest, check_action, check_request};

pub const REQUEST: &str = "serving.request";
pub const ACTION: &str = "serving.action";

/// What a span or log record turned out to be.
#[derive(Debug, PartialEq)]
pub enum Taken {
    /// Not serving telemetry: the caller maps it as usual.
    No,
    /// Added to the report.
    Row,
    /// Serving telemetry, but invalid: skipped (the reason says why).
    Skipped(String),
}

fn value<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn int(kvs: &[KeyValue], key: &str) -> Result<Option<u64>, String> {
    match value(kvs, key) {
        None => Ok(None),
        Some(any_value::Value::IntValue(i)) if *i >= 0 => Ok(Some(*i as u64)),
        Some(any_value::Value::DoubleValue(d)) if *d >= 0.0 && d.fract() == 0.0 => Ok(Some(*d as u64)),
        Some(any_value::Value::StringValue(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{key}: {s:?} is not an integer >= 0")),
        Some(other) => Err(format!("{key}: {other:?} is not an integer >= 0")),
    }
}

/// Reads attributes by key, remembering the first problem.
struct Attrs<'a> {
    kvs: &'a [KeyValue],
    err: Option<String>,
}

impl Attrs<'_> {
    fn opt(&mut self, key: &str) -> Option<u64> {
        match int(self.kvs, key) {
            Ok(v) => v,
            Err(e) => {
                self.err.get_or_insert(e);
                None
            }
        }
    }
    fn get(&mut self, key: &str) -> u64 {
        self.opt(key).unwrap_or(0)
    }
    fn required(&mut self, key: &str) -> u64 {
        let v = self.opt(key);
        if v.is_none() {
            self.err.get_or_insert(format!("{key} is required"));
        }
        v.unwrap_or(0)
    }
    fn u32(&mut self, key: &str) -> u32 {
        let v = self.get(key);
        u32::try_from(v).unwrap_or_else(|_| {
            self.err.get_or_insert(format!("{key}: {v} is too large"));
            0
        })
    }
    fn i32(&mut self, key: &str) -> i32 {
        match value(self.kvs, key) {
            Some(any_value::Value::IntValue(i)) => i32::try_from(*i).unwrap_or_else(|_| {
                self.err.get_or_insert(format!("{key}: {i} is out of range"));
                0
            }),
            None => 0,
            Some(other) => {
                self.err.get_or_insert(format!("{key}: {other:?} is not an integer"));
                0
            }
        }
    }
    fn float(&mut self, key: &str) -> f64 {
        match value(self.kvs, key) {
            Some(any_value::Value::DoubleValue(d)) => *d,
            Some(any_value::Value::IntValue(i)) => *i as f64,
            None => 0.0,
            Some(other) => {
                self.err.get_or_insert(format!("{key}: {other:?} is not a number"));
                0.0
            }
        }
    }
}

/// `span` fills the two times that a span's start and end stand for.
fn request(kvs: &[KeyValue], span: Option<(u64, u64)>) -> Result<ServedRequest, String> {
    let mut a = Attrs { kvs, err: None };
    let (arrival, departure) = match span {
        Some((s, e)) => (
            a.opt("serving.arrival").unwrap_or(s),
            a.opt("serving.departure").unwrap_or(e),
        ),
        None => (a.required("serving.arrival"), a.required("serving.departure")),
    };
    let r = ServedRequest {
        request_id: a.required("serving.request.id"),
        user_id: a.get("serving.user.id"),
        model_id: a.required("serving.model.id"),
        slo_factor: a.float("serving.slo_factor"),
        arrival,
        departure,
        deadline: a.get("serving.deadline"),
        result: a.i32("serving.result"),
        arrival_copies: a.u32("serving.copies.arrival"),
        departure_copies: a.u32("serving.copies.departure"),
        action_id: a.get("serving.action.id"),
        client_sent: a.get("serving.client.sent"),
        client_received: a.get("serving.client.received"),
    };
    if let Some(e) = a.err {
        return Err(e);
    }
    check_request(&r, REQUEST).map_err(|e| e.to_string())?;
    Ok(r)
}

fn action(kvs: &[KeyValue], span: Option<(u64, u64)>) -> Result<ServedAction, String> {
    let mut a = Attrs { kvs, err: None };
    let (sent, received) = match span {
        Some((s, e)) => (
            a.opt("serving.sent").unwrap_or(s),
            a.opt("serving.result_received").unwrap_or(e),
        ),
        None => (a.required("serving.sent"), a.required("serving.result_received")),
    };
    let action_type = a.required("serving.action.type");
    let x = ServedAction {
        action_id: a.required("serving.action.id"),
        action_type: u8::try_from(action_type).map_err(|_| format!("serving.action.type: {action_type} > 255"))?,
        status: a.i32("serving.action.status"),
        worker_id: a.u32("serving.worker.id"),
        gpu_id: a.u32("serving.gpu.id"),
        model_id: a.required("serving.model.id"),
        batch_size: match a.opt("serving.batch_size") {
            None => 1,
            Some(b) => u32::try_from(b).map_err(|_| format!("serving.batch_size: {b} is too large"))?,
        },
        expected_exec_duration: a.get("serving.expected.duration"),
        worker_exec_duration: a.get("serving.worker.duration"),
        sent,
        expected_exec_complete: a.get("serving.expected.complete"),
        worker_exec_complete: a.get("serving.worker.complete"),
        expected_gpu_clock: a.u32("serving.gpu_clock.expected"),
        gpu_clock_before: a.u32("serving.gpu_clock.before"),
        gpu_clock_after: a.u32("serving.gpu_clock.after"),
        copy_output_complete: a.get("serving.worker.copy_output_complete"),
        action_received: a.get("serving.worker.action_received"),
        result_sent: a.get("serving.worker.result_sent"),
        result_received: received,
        result_processed: a.opt("serving.result_processed").unwrap_or(received),
        requests_queued: a.u32("serving.requests_queued"),
        copies_loaded: a.u32("serving.copies_loaded"),
        requests_in_time: a.u32("serving.requests_in_time"),
    };
    if let Some(e) = a.err {
        return Err(e);
    }
    check_action(&x, ACTION).map_err(|e| e.to_string())?;
    Ok(x)
}

fn take(r: &mut Report, name: &str, kvs: &[KeyValue], span: Option<(u64, u64)>) -> Taken {
    let res = match name {
        REQUEST => request(kvs, span).map(|q| r.requests.push(q)),
        ACTION => action(kvs, span).map(|a| r.actions.push(a)),
        _ => return Taken::No,
    };
    match res {
        Ok(()) => Taken::Row,
        Err(e) => {
            tracing::debug!("OTLP {name} skipped: {e}");
            Taken::Skipped(e)
        }
    }
}

/// A span named `serving.request` / `serving.action` becomes a row.
pub fn span(r: &mut Report, s: &Span) -> Taken {
    take(
        r,
        &s.name,
        &s.attributes,
        Some((s.start_time_unix_nano, s.end_time_unix_nano.max(s.start_time_unix_nano))),
    )
}

/// A log record whose event name is `serving.request` / `serving.action` becomes a row.
pub fn log_record(r: &mut Report, l: &LogRecord) -> Taken {
    let name = if !l.event_name.is_empty() {
        l.event_name.as_str()
    } else {
        match value(&l.attributes, "event.name") {
            Some(any_value::Value::StringValue(s)) => s.as_str(),
            _ => return Taken::No,
        }
    };
    take(r, name, &l.attributes, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
    }
    fn i(k: &str, v: i64) -> KeyValue {
        kv(k, any_value::Value::IntValue(v))
    }

    #[test]
    fn a_request_span_uses_its_start_and_end_for_arrival_and_departure() {
        let s = Span {
            name: REQUEST.into(),
            start_time_unix_nano: 100,
            end_time_unix_nano: 250,
            attributes: vec![
                i("serving.request.id", 68),
                i("serving.model.id", 30),
                i("serving.deadline", 200),
                i("serving.result", 4),
                i("serving.copies.departure", 2),
                kv("serving.slo_factor", any_value::Value::DoubleValue(2.5)),
            ],
            ..Default::default()
        };
        let mut r = Report::default();
        assert_eq!(span(&mut r, &s), Taken::Row);
        let q = &r.requests[0];
        assert_eq!((q.arrival, q.departure, q.deadline, q.result), (100, 250, 200, 4));
        assert_eq!(
            (q.request_id, q.model_id, q.departure_copies, q.slo_factor),
            (68, 30, 2, 2.5)
        );
        let other = Span {
            name: "train_batch".into(),
            ..Default::default()
        };
        assert_eq!(span(&mut r, &other), Taken::No);
    }

    #[test]
    fn an_action_log_record_needs_its_times_in_attributes() {
        let mut l = LogRecord {
            event_name: ACTION.into(),
            attributes: vec![
                i("serving.action.id", 7),
                i("serving.action.type", 2),
                i("serving.model.id", 1),
                i("serving.batch_size", 4),
                i("serving.requests_in_time", 3),
                i("serving.sent", 1000),
                i("serving.result_received", 9000),
                i("serving.gpu_clock.before", 1380),
            ],
            ..Default::default()
        };
        let mut r = Report::default();
        assert_eq!(log_record(&mut r, &l), Taken::Row);
        let a = &r.actions[0];
        assert_eq!((a.sent, a.result_received, a.result_processed), (1000, 9000, 9000));
        assert_eq!((a.batch_size, a.requests_in_time, a.gpu_clock_before), (4, 3, 1380));
        l.attributes.retain(|kv| kv.key != "serving.sent");
        match log_record(&mut r, &l) {
            Taken::Skipped(e) => assert!(e.contains("serving.sent is required"), "{e}"),
            t => panic!("{t:?}"),
        }
        l.attributes.push(i("serving.sent", 10_000));
        match log_record(&mut r, &l) {
            Taken::Skipped(e) => assert!(e.contains("result_received_ns: is before sent_ns"), "{e}"),
            t => panic!("{t:?}"),
        }
        assert_eq!(r.actions.len(), 1, "skipped rows are not kept");
    }
}
