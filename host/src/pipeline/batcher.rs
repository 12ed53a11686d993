//! The batcher: the buffer taken every `interval_ms` (or early, once a
//! request's worth waits), cut into requests of at most `max_batch_points`,
//! encoded once, and queued in memory or appended to the spool, dropping
//! and counting what does not fit.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use tokio::sync::watch;
use tokio::time::Instant;

use super::spool::AppendError;
use super::{Buffer, Encoded, Refused, Shared, Tuning};
use crate::export::client::Signal;
use crate::export::otlp;
use crate::model::{LogRecord, Point, Scope};

impl Shared {
    /// The buffer holds a whole request (or anything at all while export is
    /// off, which only counts it): flush without waiting for the interval.
    fn holds_a_full_request(&self, b: &Buffer) -> bool {
        let max = self.max_batch.load(Ordering::Relaxed);
        b.points >= max
            || b.records >= max
            || (!self.enabled.load(Ordering::Acquire) && (b.points > 0 || b.records > 0))
    }

    /// Takes the buffer, encodes it into requests of at most `max_batch` items and queues them.
    fn flush(&self) {
        let tuning = *self.tuning.lock();
        let (metrics, logs) = {
            let mut b = self.buf.lock();
            // `points`/`records` stay counted until each request is queued.
            (std::mem::take(&mut b.metrics), std::mem::take(&mut b.logs))
        };
        if metrics.is_empty() && logs.is_empty() {
            return;
        }
        let enabled = self.enabled.load(Ordering::Acquire);
        let max = tuning.max_batch;

        let mut parts: Vec<(&Scope, &[Point])> = Vec::new();
        let mut count = 0usize;
        for b in &metrics {
            let mut pts = b.points.as_slice();
            while !pts.is_empty() {
                let take = pts.len().min(max - count);
                parts.push((&*b.scope, &pts[..take]));
                count += take;
                pts = &pts[take..];
                if count == max {
                    self.emit_metrics(&parts, count, enabled, &tuning);
                    parts.clear();
                    count = 0;
                }
            }
        }
        if count > 0 {
            self.emit_metrics(&parts, count, enabled, &tuning);
        }
        drop(parts);

        let mut parts: Vec<(&Scope, &[LogRecord])> = Vec::new();
        let mut count = 0usize;
        for b in &logs {
            let mut recs = b.records.as_slice();
            while !recs.is_empty() {
                let take = recs.len().min(max - count);
                parts.push((&*b.scope, &recs[..take]));
                count += take;
                recs = &recs[take..];
                if count == max {
                    self.emit_logs(&parts, count, enabled, &tuning);
                    parts.clear();
                    count = 0;
                }
            }
        }
        if count > 0 {
            self.emit_logs(&parts, count, enabled, &tuning);
        }
        // One sync for everything this flush spooled (a failure is logged and
        // kept in `last_error`: our own samples have no sender to refuse).
        let _ = self.sync_spool();
    }

    fn emit_metrics(&self, parts: &[(&Scope, &[Point])], count: usize, enabled: bool, tuning: &Tuning) {
        let item = enabled.then(|| {
            let body = otlp::encode_metric_parts_to_bytes(&self.resource, parts);
            Encoded {
                signal: Signal::Metrics,
                body: Bytes::from(body),
                items: count,
                id: Some(self.sequencer.next()),
            }
        });
        let _ = self.enqueue(Signal::Metrics, count, item, tuning, false);
    }

    fn emit_logs(&self, parts: &[(&Scope, &[LogRecord])], count: usize, enabled: bool, tuning: &Tuning) {
        let item = enabled.then(|| {
            let req = otlp::encode_log_parts(self.resource.clone(), parts);
            Encoded {
                signal: Signal::Logs,
                body: Bytes::from(req.encode_to_vec()),
                items: count,
                id: Some(self.sequencer.next()),
            }
        });
        let _ = self.enqueue(Signal::Logs, count, item, tuning, false);
    }

    /// Moves `count` items from the buffer's tally into the queue (or into
    /// `dropped` when export was switched off: `item` is None), dropping the
    /// oldest requests beyond the capacity, or the new one when the spool is
    /// full or cannot write.
    ///
    /// With `refuse` (a forwarded request, which its sender keeps until it is
    /// taken) nothing is dropped: a full queue or spool, or a spool that
    /// cannot write, returns the reason instead and counts nothing.
    pub(super) fn enqueue(
        &self,
        signal: Signal,
        count: usize,
        item: Option<Encoded>,
        tuning: &Tuning,
        refuse: bool,
    ) -> Result<(), Refused> {
        let mut evicted: Vec<(Signal, usize)> = Vec::new();
        let mut refused = None;
        {
            let mut q = self.queue.lock();
            if let (Some(sp), Some(item)) = (&self.spool, &item) {
                match sp.append(item.signal, item.items, item.id.as_ref(), &item.body) {
                    Ok(ticket) => {
                        self.unsynced.fetch_max(ticket, Ordering::AcqRel);
                        if self.spool_full.swap(false, Ordering::Relaxed) {
                            tracing::info!("export spool has room again");
                        }
                    }
                    Err(e) => {
                        let msg = match e {
                            AppendError::Full => format!(
                                "export spool full: a request of {} {:?} items dropped",
                                item.items, item.signal
                            ),
                            AppendError::Io(e) => format!("export spool write failed: {e}"),
                        };
                        if !self.spool_full.swap(true, Ordering::Relaxed) {
                            tracing::warn!("{msg}; dropping new requests until it has room (counted)");
                        } else {
                            tracing::debug!("{msg}");
                        }
                        *self.last_error.lock() = Some(msg.clone());
                        if refuse {
                            refused = Some(Refused::Spool(msg));
                        } else {
                            evicted.push((signal, count));
                        }
                    }
                }
            } else if item.is_some() && refuse && q.items.len() >= tuning.queue_capacity {
                refused = Some(Refused::QueueFull(q.items.len()));
            } else if let Some(item) = item {
                while q.items.len() >= tuning.queue_capacity {
                    let Some(old) = q.items.pop_front() else {
                        break;
                    };
                    match old.signal {
                        Signal::Metrics => q.points -= old.items,
                        Signal::Logs => q.records -= old.items,
                        Signal::Traces => q.spans -= old.items,
                    }
                    evicted.push((old.signal, old.items));
                }
                match signal {
                    Signal::Metrics => q.points += count,
                    Signal::Logs => q.records += count,
                    Signal::Traces => q.spans += count,
                }
                q.items.push_back(item);
            } else {
                evicted.push((signal, count));
            }
            // Same critical section as the queue push, so stats never see the items twice.
            let mut b = self.buf.lock();
            match signal {
                Signal::Metrics => b.points = b.points.saturating_sub(count),
                Signal::Logs => b.records = b.records.saturating_sub(count),
                Signal::Traces => {}
            }
        }
        for (sig, n) in evicted {
            self.dropped(sig, n);
        }
        self.sender_wake.notify_one();
        match refused {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }
}

/// Flushes every `interval` while the buffer holds something, early when a
/// request is full; with the buffer empty it sleeps until the first batch
/// arrives (an idle host, or export off, never wakes it). Flushes keep the
/// interval's grid: the first batch after a quiet spell goes out at the next
/// multiple of the interval since the last flush.
pub(super) async fn batcher_task(s: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut last = Instant::now();
    loop {
        let interval = s.tuning.lock().interval;
        let (empty, full) = {
            let b = s.buf.lock();
            (b.metrics.is_empty() && b.logs.is_empty(), s.holds_a_full_request(&b))
        };
        if full {
            // A request filled up while the last flush was encoding: its
            // crossing woke no one (the flushed points were still counted),
            // so flush now instead of at the interval.
            tokio::task::yield_now().await;
            s.flush();
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(last + interval), if !empty => {
                last = Instant::now();
                s.flush();
            }
            _ = s.batcher_wake.notified() => {
                if empty {
                    // The first batch after a quiet spell: back onto the grid.
                    let now = Instant::now();
                    if last + interval <= now {
                        let into_window = (now - last).as_nanos() % interval.as_nanos().max(1);
                        last = now - Duration::from_nanos(into_window as u64);
                    }
                }
                // Early: enough for a full request. Otherwise new data or a
                // reconfigure; loop round to pick up the new interval.
                let full = s.holds_a_full_request(&s.buf.lock());
                if full {
                    s.flush();
                }
            }
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    s.flush();
                    break;
                }
            }
        }
    }
    s.batcher_done.store(true, Ordering::Release);
    s.sender_wake.notify_one();
}
