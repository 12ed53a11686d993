//! Request identity: who sent an OTLP request and its number, so that a
//! receiver can take a re-sent request once (Kafka's idempotent producer, for
//! OTLP between sondes).
//!
//! ```text
//!  sender (agent, gateway)                          receiver (master, gateway)
//!  pipeline: each request it queues gets            ingest/dedup.rs: a window of the
//!  (producer, seq), kept with it in the             (producer, seq) it has taken,
//!  queue or the spool record                        per producer, persisted
//!        │  every attempt, retries and spool
//!        │  replays included, sends the same two headers:
//!        └── sonde-producer: <service.instance.id>  ─────────►  taken before: answer OK, drop, count
//!            sonde-seq: <1, 2, 3, …>                            new: take, then mark taken
//! ```
//!
//! - The producer is the sending process's `service.instance.id` (a random
//!   UUID per process), so numbers start at 1 in every process and never
//!   collide with an earlier run's; a spool keeps the id and number a request
//!   was queued with, so a replay after a restart is recognised too.
//! - A gateway passes an incoming request's identity on unchanged (the master
//!   then sees the agent's numbers whatever path they took); a request that
//!   arrived without one gets the gateway's own.
//! - An agent's heartbeat carries none: it is sent once, never retried or
//!   spooled (`cluster/heartbeat.rs`), so it cannot arrive twice.
//! - They travel as HTTP headers (gRPC metadata on gRPC): sonde to sonde,
//!   directly or through a sonde gateway. A foreign collector in between
//!   (the OpenTelemetry Collector, rotel) does not pass request headers on
//!   and may split or merge requests, so that path has no identity at the
//!   master: its repeats are not recognised (system points are still
//!   deduplicated by their natural key, series and time).

use std::sync::Arc;

/// The header naming the sending process.
pub const PRODUCER_HEADER: &str = "sonde-producer";
/// The header with the request's number, decimal, from 1.
pub const SEQ_HEADER: &str = "sonde-seq";
/// Longest producer name taken (a UUID is 36 bytes).
pub const MAX_PRODUCER_BYTES: usize = 128;

/// One request's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub producer: Arc<str>,
    pub seq: u64,
}

impl RequestId {
    /// Reads the identity from a request's two headers: None when neither is
    /// there; an error (a clear one, for a 400) when they are half there or
    /// malformed.
    pub fn from_headers(producer: Option<&[u8]>, seq: Option<&[u8]>) -> Result<Option<RequestId>, String> {
        let (p, s) = match (producer, seq) {
            (None, None) => return Ok(None),
            (Some(p), Some(s)) => (p, s),
            _ => return Err(format!("send both {PRODUCER_HEADER} and {SEQ_HEADER}, or neither")),
        };
        let p = std::str::from_utf8(p)
            .ok()
            .filter(|p| !p.is_empty() && p.len() <= MAX_PRODUCER_BYTES && p.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| format!("{PRODUCER_HEADER}: 1 to {MAX_PRODUCER_BYTES} printable ASCII characters"))?;
        let seq = std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{SEQ_HEADER}: a whole number from 1"))?;
        Ok(Some(RequestId {
            producer: Arc::from(p),
            seq,
        }))
    }
}

/// Hands out this process's numbers, from 1.
#[derive(Debug)]
pub struct Sequencer {
    producer: Arc<str>,
    next: std::sync::atomic::AtomicU64,
}

impl Sequencer {
    pub fn new(producer: &str) -> Self {
        Sequencer {
            producer: Arc::from(producer),
            next: std::sync::atomic::AtomicU64::new(1),
        }
    }

    pub fn next(&self) -> RequestId {
        RequestId {
            producer: self.producer.clone(),
            seq: self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_both_or_neither_and_well_formed() {
        assert_eq!(RequestId::from_headers(None, None), Ok(None));
        let id = RequestId::from_headers(Some(b"abc-1"), Some(b"42")).unwrap().unwrap();
        assert_eq!((&*id.producer, id.seq), ("abc-1", 42));
        assert!(RequestId::from_headers(Some(b"abc"), None).is_err());
        assert!(RequestId::from_headers(Some(b"abc"), Some(b"0")).is_err());
        assert!(RequestId::from_headers(Some(b"abc"), Some(b"-3")).is_err());
        assert!(RequestId::from_headers(Some(b"a b"), Some(b"3")).is_err());
        assert!(RequestId::from_headers(Some(&[b'x'; 200]), Some(b"3")).is_err());
        let s = Sequencer::new("p");
        assert_eq!((s.next().seq, s.next().seq), (1, 2));
    }
}
