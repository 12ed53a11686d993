//! The sender task: takes encoded requests off the queue (or the spool) one
//! at a time and delivers each, with the per-request timeout, retries with
//! jittered exponential backoff, counted failures and quiet logging that the
//! pipeline's top comment describes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

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

pub(super) async fn sender_task(s: Arc<Shared>) {
    let mut healthy = true;
    let mut gen_rx = s.client_gen.subscribe();
    let mut last_reject_warn: Option<Instant> = None;
    if s.spool.is_some() {
        return spool_sender(&s, &mut healthy, &mut gen_rx, &mut last_reject_warn).await;
    }
    loop {
        let item = {
            let mut q = s.queue.lock();
            let item = q.items.pop_front();
            if let Some(it) = &item {
                match it.signal {
                    Signal::Metrics => q.points -= it.items,
                    Signal::Logs => q.records -= it.items,
                    Signal::Traces => q.spans -= it.items,
                }
                q.inflight = Some((it.signal, it.items));
            }
            item
        };
        let Some(item) = item else {
            if s.batcher_done.load(Ordering::Acquire) {
                return;
            }
            s.sender_wake.notified().await;
            continue;
        };
        deliver(&s, item, &mut healthy, &mut gen_rx, &mut last_reject_warn).await;
        s.queue.lock().inflight = None;
    }
}

/// The sender with the queue on disk: the oldest record is read back, sent,
/// and removed from the spool only once answered.
async fn spool_sender(
    s: &Shared,
    healthy: &mut bool,
    gen_rx: &mut watch::Receiver<u64>,
    last_reject_warn: &mut Option<Instant>,
) {
    let sp = s.spool.as_ref().expect("spool_sender needs a spool");
    loop {
        let (rec, lost) = sp.peek();
        for (sig, n) in [Signal::Metrics, Signal::Logs, Signal::Traces].into_iter().zip(lost) {
            if n > 0 {
                s.failed(sig, n);
            }
        }
        let Some(rec) = rec else {
            if s.batcher_done.load(Ordering::Acquire) {
                return;
            }
            s.sender_wake.notified().await;
            continue;
        };
        let item = Encoded {
            signal: rec.signal,
            body: rec.body.clone(),
            items: rec.items,
        };
        match deliver(s, item, healthy, gen_rx, last_reject_warn).await {
            Outcome::Done => {
                // The count and the removal together, under the lock stats() takes.
                let _q = s.queue.lock();
                sp.ack(&rec);
            }
            Outcome::Paused => {
                if s.batcher_done.load(Ordering::Acquire) {
                    return;
                }
                s.sender_wake.notified().await;
            }
        }
    }
}

/// Sends one request until it succeeds, fails for good, or runs out of retry time.
async fn deliver(
    s: &Shared,
    item: Encoded,
    healthy: &mut bool,
    gen_rx: &mut watch::Receiver<u64>,
    last_reject_warn: &mut Option<Instant>,
) -> Outcome {
    let durable = s.spool.is_some();
    let mut tuning = *s.tuning.lock();
    let mut start = Instant::now();
    let mut delay = tuning.retry_initial;
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
        let err = match client.send(item.signal, item.body.clone()).await {
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
                    if last_reject_warn.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                        tracing::warn!("{msg} (further rejections are logged at debug for a minute)");
                        *last_reject_warn = Some(Instant::now());
                    } else {
                        tracing::debug!("{msg}");
                    }
                    *s.last_error.lock() = Some(msg);
                }
                if !*healthy {
                    tracing::info!(collector = %client.describe(), "collector is accepting exports again");
                    *healthy = true;
                }
                return Outcome::Done;
            }
            Err(e) => e,
        };
        *s.last_error.lock() = Some(err.msg.clone());
        if *healthy {
            tracing::warn!(
                collector = %client.describe(),
                retryable = err.retryable,
                "export failing: {}; retrying quietly, will log when it recovers",
                err.msg
            );
            *healthy = false;
        } else {
            tracing::debug!(retryable = err.retryable, "export attempt failed: {}", err.msg);
        }
        let jittered = delay.mul_f64(0.5 + 0.5 * rand::random::<f64>());
        let wait = jittered.max(err.retry_after.unwrap_or_default());
        // With the spool, a refusal of our credentials waits for the config
        // to be fixed (a reconfigure restarts the backoff) instead of losing the data.
        let keep = err.retryable || (durable && err.refused);
        if !keep || (!durable && start.elapsed() + wait > tuning.retry_max_elapsed) {
            tracing::debug!(items = item.items, "giving up on an export request: {}", err.msg);
            s.failed(item.signal, item.items);
            s.c.requests_failed.fetch_add(1, Ordering::Relaxed);
            return Outcome::Done;
        }
        s.c.retries.fetch_add(1, Ordering::Relaxed);
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
