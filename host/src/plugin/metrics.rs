//! Self-metrics kept per plugin: calls, items, errors, traps, timeouts,
//! drops, call latency and memory. Updated from the plugin's own thread with
//! relaxed atomics; read by the API and the self-metrics exporter.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Call-latency histogram buckets: powers of two from 1 µs to ~1 s.
const BUCKETS: usize = 21;

#[derive(Default)]
pub struct PluginMetrics {
    pub calls: AtomicU64,
    /// Samples (series × ticks) and events delivered.
    pub items: AtomicU64,
    /// Hooks that returned `err`.
    pub errors: AtomicU64,
    pub traps: AtomicU64,
    /// Traps caused by the call deadline (also counted in `traps`).
    pub timeouts: AtomicU64,
    /// Work dropped because the queue was full or the plugin was not running.
    pub dropped: AtomicU64,
    pub points_emitted: AtomicU64,
    pub call_ns_total: AtomicU64,
    pub call_ns_max: AtomicU64,
    /// The most CPU time the plugin's thread spent in one call: what the
    /// deadline counts. `call_ns_max` also counts the time a call waited for
    /// a core, which on a busy machine can be most of it.
    pub call_cpu_ns_max: AtomicU64,
    pub memory_bytes: AtomicU64,
    pub memory_peak_bytes: AtomicU64,
    latency: [AtomicU64; BUCKETS],
    /// What the longest call was, so a slow one can be told apart: the
    /// plugin's own work (CPU), the host's state store and sinks
    /// (`host_io_us`), waiting for a core (`queued_us`), or blocked.
    longest: parking_lot::Mutex<Option<LongestCall>>,
}

/// The longest call on the wall so far.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LongestCall {
    /// `on-timer`, `on-samples`, `on-events`, `on-request`, `configure`, `start` or `stop`.
    pub hook: &'static str,
    pub wall_us: f64,
    pub cpu_us: f64,
    /// Time in the host's state store and sinks during the call.
    pub host_io_us: f64,
    /// Time the plugin's thread waited for a core during the call (Linux's
    /// schedstat). The wall less the CPU and this is time the thread was
    /// blocked: in the host's I/O, on a lock or on a page fault.
    pub queued_us: Option<f64>,
}

impl PluginMetrics {
    pub fn record_call(&self, ns: u64) {
        self.calls.fetch_add(1, Relaxed);
        self.call_ns_total.fetch_add(ns, Relaxed);
        self.call_ns_max.fetch_max(ns, Relaxed);
        let us = (ns / 1000).max(1);
        let b = (63 - us.leading_zeros() as usize).min(BUCKETS - 1);
        self.latency[b].fetch_add(1, Relaxed);
    }

    pub fn record_call_cpu(&self, ns: u64) {
        self.call_cpu_ns_max.fetch_max(ns, Relaxed);
    }

    /// Keeps `call` when it is the longest on the wall so far.
    pub fn record_longest(&self, call: LongestCall) {
        let mut l = self.longest.lock();
        if l.as_ref().is_none_or(|l| call.wall_us > l.wall_us) {
            *l = Some(call);
        }
    }

    pub fn set_memory(&self, bytes: u64) {
        self.memory_bytes.store(bytes, Relaxed);
        self.memory_peak_bytes.fetch_max(bytes, Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let hist: Vec<u64> = self.latency.iter().map(|b| b.load(Relaxed)).collect();
        let calls = self.calls.load(Relaxed);
        MetricsSnapshot {
            calls,
            items: self.items.load(Relaxed),
            errors: self.errors.load(Relaxed),
            traps: self.traps.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            points_emitted: self.points_emitted.load(Relaxed),
            call_us_mean: if calls == 0 {
                0.0
            } else {
                self.call_ns_total.load(Relaxed) as f64 / calls as f64 / 1000.0
            },
            call_us_p50: quantile_us(&hist, 0.50),
            call_us_p99: quantile_us(&hist, 0.99),
            call_us_max: self.call_ns_max.load(Relaxed) as f64 / 1000.0,
            call_cpu_us_max: self.call_cpu_ns_max.load(Relaxed) as f64 / 1000.0,
            memory_bytes: self.memory_bytes.load(Relaxed),
            memory_peak_bytes: self.memory_peak_bytes.load(Relaxed),
            longest_call: self.longest.lock().clone(),
        }
    }
}

/// Upper bound of the bucket holding quantile `q` (in µs); 0 with no data.
fn quantile_us(hist: &[u64], q: f64) -> f64 {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return (1u64 << (i + 1)) as f64;
        }
    }
    (1u64 << hist.len()) as f64
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct MetricsSnapshot {
    pub calls: u64,
    pub items: u64,
    pub errors: u64,
    pub traps: u64,
    pub timeouts: u64,
    pub dropped: u64,
    pub points_emitted: u64,
    pub call_us_mean: f64,
    /// Upper bounds of power-of-two latency buckets.
    pub call_us_p50: f64,
    pub call_us_p99: f64,
    pub call_us_max: f64,
    /// The most CPU time of the plugin's thread in one call.
    pub call_cpu_us_max: f64,
    pub memory_bytes: u64,
    pub memory_peak_bytes: u64,
    /// The longest call on the wall, its hook and where its time went.
    pub longest_call: Option<LongestCall>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_come_from_buckets() {
        let m = PluginMetrics::default();
        for _ in 0..98 {
            m.record_call(3_000); // 3 µs -> bucket [2,4)
        }
        m.record_call(1_000_000); // 1 ms
        m.record_call(1_000_000);
        let s = m.snapshot();
        assert_eq!(s.calls, 100);
        assert_eq!(s.call_us_p50, 4.0);
        assert_eq!(s.call_us_p99, 1024.0);
        assert_eq!(s.call_us_max, 1000.0);
        assert!((s.call_us_mean - (98.0 * 3.0 + 2000.0) / 100.0).abs() < 1e-9);
    }

    #[test]
    fn the_longest_call_is_kept_with_its_hook() {
        let m = PluginMetrics::default();
        let call = |hook, wall_us| LongestCall {
            hook,
            wall_us,
            cpu_us: wall_us / 2.0,
            host_io_us: 1.0,
            queued_us: Some(2.0),
        };
        m.record_longest(call("on-timer", 30.0));
        m.record_longest(call("on-events", 20.0));
        assert_eq!(m.snapshot().longest_call, Some(call("on-timer", 30.0)));
        m.record_longest(call("on-samples", 40.0));
        assert_eq!(m.snapshot().longest_call.map(|l| l.hook), Some("on-samples"));
    }

    #[test]
    fn memory_peak_is_kept() {
        let m = PluginMetrics::default();
        m.set_memory(10);
        m.set_memory(30);
        m.set_memory(20);
        let s = m.snapshot();
        assert_eq!((s.memory_bytes, s.memory_peak_bytes), (20, 30));
    }
}
