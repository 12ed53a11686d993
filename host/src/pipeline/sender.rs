//! The sender: takes encoded requests off the queue (or the spool) in order
//! and delivers up to `export.max_in_flight` of them at once, each in a task
//! of its own with the per-request timeout, retries with jittered
//! exponential backoff, counted failures and the quiet logging that the
//! pipeline's top comment describes.
//!
//! ```text
//!  queue / spool ──(in order)──► flight 1 ─┐
//!                                flight 2 ─┼─► collector     answers come back in any order
//!                                  …  ≤ max_in_flight
//! ```
//! - Requests start in queue order. While one of them waits to be retried no
//!   new one starts: a failing collector gets the retries of the requests
//!   already in flight, not a growing crowd, and a later request overtakes an
//!   earlier one only when both were in flight together.
//! - With the spool a record is removed only once answered, and the spool's
//!   cursor moves only past records answered in order (`spool.rs`): after a
//!   crash, whatever was in flight is sent again (at least once), with the
//!   identity it was first sent with (`export/sequence.rs`): a sonde receiver
//!   takes it once.
//! - Export switched off with the spool on: flights come back `Paused`, their
//!   records stay spooled, and sending starts again from the oldest
//!   unanswered one when export comes back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::spool::Record;
use super::{Encoded, Shared};
use crate::export::client::Signal;

/// How [`deliver`] left a request.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Answered: accepted, or given up on (counted either way).
    Done,
    /// Export is switched off: a spooled request waits for it to come back.
    Paused,
}

/// One request on its way, and where it came from.
enum Job {
    /// From the memory queue.
    Queued(Encoded),
    /// From the spool: removed from it once answered.
    Spooled(Record),
}

pub(super) async fn sender_task(s: Arc<Shared>) {
    let mut flights: JoinSet<(Outcome, Option<Record>, Signal, usize)> = JoinSet::new();
    // Some flight came back Paused: start nothing until the others are back,
    // then read the spool again from its oldest unanswered record.
    let mut paused = false;
    loop {
        let max = s.tuning.lock().max_in_flight;
        while !paused && flights.len() < max && s.retrying.load(Ordering::Acquire) == 0 {
            let Some(job) = next_job(&s) else { break };
            let s = s.clone();
            flights.spawn(async move {
                let (item, record) = match job {
                    Job::Queued(item) => (item, None),
                    Job::Spooled(rec) => (
                        Encoded {
                            signal: rec.signal,
                            body: rec.body.clone(),
                            items: rec.items,
                            id: rec.id.clone(),
                        },
                        Some(rec),
                    ),
                };
                let (signal, items) = (item.signal, item.items);
                (deliver(&s, item).await, record, signal, items)
            });
        }
        if flights.is_empty() {
            if paused {
                paused = false;
                if let Some(sp) = &s.spool {
                    sp.rewind();
                }
            } else if s.batcher_done.load(Ordering::Acquire) {
                return;
            }
            s.sender_wake.notified().await;
            continue;
        }
        tokio::select! {
            done = flights.join_next() => {
                let Some(Ok((outcome, record, signal, items))) = done else { continue };
                match (outcome, record) {
                    (Outcome::Done, Some(rec)) => {
                        // The count and the removal together, under the lock stats() takes.
                        let mut q = s.queue.lock();
                        q.inflight_requests -= 1;
                        if let Some(sp) = &s.spool {
                            sp.ack(&rec);
                        }
                    }
                    (Outcome::Done, None) => s.queue.lock().landed(signal, items),
                    (Outcome::Paused, _) => {
                        s.queue.lock().inflight_requests -= 1;
                        paused = true;
                    }
                }
            }
            _ = s.sender_wake.notified() => {}
        }
    }
}

/// The next request to send, in queue order: from the memory queue (counted
/// in flight from now on) or read back from the spool.
fn next_job(s: &Shared) -> Option<Job> {
    let Some(sp) = &s.spool else {
        return s.queue.lock().take_next().map(Job::Queued);
    };
    let (rec, lost) = sp.next_unsent();
    for (sig, n) in [Signal::Metrics, Signal::Logs, Signal::Traces].into_iter().zip(lost) {
        if n > 0 {
            s.failed(sig, n);
        }
    }
    let rec = rec?;
    // Still counted in the spool until answered; here only as a request in flight.
    s.queue.lock().inflight_requests += 1;
    Some(Job::Spooled(rec))
}

/// Counts a flight among those waiting to be retried while it is alive.
struct Retrying<'a>(&'a Shared);

impl Drop for Retrying<'_> {
    fn drop(&mut self) {
        self.0.retrying.fetch_sub(1, Ordering::AcqRel);
        // New flights may start again.
        self.0.sender_wake.notify_one();
    }
}

/// Sends one request until it succeeds, fails for good, or runs out of retry time.
async fn deliver(s: &Shared, item: Encoded) -> Outcome {
    let durable = s.spool.is_some();
    let mut gen_rx = s.client_gen.subscribe();
    let mut tuning = *s.tuning.lock();
    let mut start = Instant::now();
    let mut delay = tuning.retry_initial;
    let mut retrying: Option<Retrying> = None;
    loop {
        gen_rx.borrow_and_update();
        let Some(client) = s.client.lock().clone() else {
            if durable {
                return Outcome::Paused;
            }
            // Export was switched off while this waited.
            s.dropped(item.signal, item.items);
            return Outcome::Done;
        };
        // An attempt in flight is not interrupted by a reconfigure (that could
        // deliver the request twice); it is bounded by the timeout, and a retry
        // after it goes to the new endpoint.
        let err = match client.send_with(item.signal, item.body.clone(), item.id.as_ref()).await {
            Ok(acc) => {
                let rejected = (acc.rejected as usize).min(item.items);
                s.exported(item.signal, item.items - rejected);
                s.c.requests_ok.fetch_add(1, Ordering::Relaxed);
                s.c.last_success_ns.store(crate::model::now_ns(), Ordering::Relaxed);
                if rejected > 0 {
                    s.failed(item.signal, rejected);
                    let msg = format!(
                        "collector rejected {rejected} of {} {:?} items: {}",
                        item.items, item.signal, acc.message
                    );
                    let mut last = s.last_reject_warn.lock();
                    if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        tracing::warn!("{msg} (further rejections are logged at debug for a minute)");
                        *last = Some(Instant::now());
                    } else {
                        tracing::debug!("{msg}");
                    }
                    drop(last);
                    *s.last_error.lock() = Some(msg);
                }
                if !s.healthy.swap(true, Ordering::AcqRel) {
                    tracing::info!(collector = %client.describe(), "collector is accepting exports again");
                }
                return Outcome::Done;
            }
            Err(e) => e,
        };
        *s.last_error.lock() = Some(err.msg.clone());
        if s.healthy.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                collector = %client.describe(),
                retryable = err.retryable,
                "export failing: {}; retrying quietly, will log when it recovers",
                err.msg
            );
        } else {
            tracing::debug!(retryable = err.retryable, "export attempt failed: {}", err.msg);
        }
        let jittered = delay.mul_f64(0.5 + 0.5 * rand::random::<f64>());
        let wait = jittered.max(err.retry_after.unwrap_or_default());
        // With the spool, a refusal of our credentials waits for the config
        // to be fixed (a reconfigure restarts the backoff) instead of losing the data.
        let keep = err.retryable || (durable && err.refused);
        if !keep || (!durable && start.elapsed() + wait > tuning.retry_max_elapsed) {
            // Data is lost here: said at warn, at most once a minute (shared with rejections).
            let mut last = s.last_reject_warn.lock();
            if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                tracing::warn!(
                    items = item.items,
                    retryable = err.retryable,
                    "giving up on an export request: {} (further ones are logged at debug for a minute)",
                    err.msg
                );
                *last = Some(Instant::now());
            } else {
                tracing::debug!(items = item.items, "giving up on an export request: {}", err.msg);
            }
            drop(last);
            s.failed(item.signal, item.items);
            s.c.requests_failed.fetch_add(1, Ordering::Relaxed);
            return Outcome::Done;
        }
        s.c.retries.fetch_add(1, Ordering::Relaxed);
        if retrying.is_none() {
            s.retrying.fetch_add(1, Ordering::AcqRel);
            retrying = Some(Retrying(s));
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {
                delay = (delay * 2).min(tuning.retry_max);
            }
            _ = gen_rx.changed() => {
                tuning = *s.tuning.lock();
                start = Instant::now();
                delay = tuning.retry_initial;
            }
        }
    }
}
