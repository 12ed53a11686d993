//! The sampler's beat: while the sampler ticks, it wakes plugin threads for
//! their repeating timers, so a plugin thread never sleeps on a timeout of its
//! own.
//!
//! ```text
//!  sampler thread, every tick                 plugin thread, before it blocks
//!  beat.ticked(now)        (SeqCst store)     due.publish(earliest driven timer)  (SeqCst store)
//!  for each plugin:                           if the beat is live and no tick came
//!    batch due   -> offer Samples               at or after that timer:
//!    else timer due (take) -> poke                wait for work until timer + 2 periods
//!  (the thread fires due timers after           else: wait until the timer itself
//!   any work it was woken for)
//! ```
//!
//! Why: on a virtual machine a thread woken by its own timeout costs several
//! times the CPU of one woken by another thread's futex, waker included
//! (docs/benchmarks.md). The sampler pays the timeout wake-up every tick
//! anyway; a plugin's 500 ms timer now rides on it, and when the same tick
//! delivers the plugin's samples it costs no wake-up at all.
//!
//! Limits:
//! - Only repeating timers whose period is at least the sampling period are
//!   driven. They lie on the sampler's grid (`host_api::Timers`), so they
//!   fire at the tick that falls on their deadline; a period that is not a
//!   multiple of the sampling period fires at the first tick after its
//!   deadline, at most one sampling period late. One-shot and shorter timers
//!   wake the thread themselves, as before.
//! - The beat is live while the last tick is at most two sampling periods
//!   old. If the sampler stalls or stops, a driven timer fires at most two
//!   periods late, once; then the thread waits on its own deadlines again.
//! - A replay (`sonde plugin test`) has no sampler: its beat never ticks.
//! - Sample deliveries lie on the same grid: a plugin asking for its samples
//!   every second gets them at the tick on each whole second of
//!   CLOCK_MONOTONIC (`instance::SampleAcc`), the tick its 1 s timer is due
//!   at, so the two share one wake-up.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

/// CLOCK_MONOTONIC in ns: the clock whose multiples the sampler's deadlines,
/// the driven timers and the sample deliveries lie on. Off Linux, where
/// nothing is put on a grid, ns since the first call.
pub fn monotonic_ns() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec for CLOCK_MONOTONIC, which always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    #[cfg(not(target_os = "linux"))]
    {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// No timer: what a [`TimerDue`] holds when the sampler has nothing to wake.
const NONE: u64 = u64::MAX;

/// When the sampler last ticked, and at what period. One per host, shared by
/// the sampler's fan-out (`PluginManager::on_tick`) and every plugin thread.
pub struct SamplerBeat {
    /// Times are ns after this instant.
    base: Instant,
    /// The last tick (0: none yet).
    last_tick_ns: AtomicU64,
    period_ns: AtomicU64,
}

impl Default for SamplerBeat {
    fn default() -> Self {
        SamplerBeat {
            base: Instant::now(),
            last_tick_ns: AtomicU64::new(0),
            period_ns: AtomicU64::new(0),
        }
    }
}

impl SamplerBeat {
    /// `t` in this beat's ns (0 before its base; never 0 after it).
    pub fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_nanos() as u64 + 1
    }

    /// The sampler ticked at `now`, sampling every `period`; returns `now` in ns.
    pub fn ticked(&self, now: Instant, period: Duration) -> u64 {
        let now_ns = self.ns(now);
        self.period_ns.store(period.as_nanos() as u64, Relaxed);
        self.last_tick_ns.store(now_ns, SeqCst);
        now_ns
    }

    /// The sampling period while the sampler ticks (its last tick at most two
    /// periods before `now`); None before the first tick or once it stalls.
    pub fn live_period(&self, now: Instant) -> Option<Duration> {
        let last = self.last_tick_ns.load(SeqCst);
        let period = self.period_ns.load(Relaxed);
        (last != 0 && period != 0 && self.ns(now).saturating_sub(last) <= 2 * period)
            .then(|| Duration::from_nanos(period))
    }

    /// Whether a tick was taken at or after `at`.
    pub fn ticked_since(&self, at: Instant) -> bool {
        self.last_tick_ns.load(SeqCst) >= self.ns(at)
    }
}

/// The deadline of one plugin's earliest sampler-driven timer, as the plugin's
/// thread published it before blocking.
pub struct TimerDue(AtomicU64);

impl Default for TimerDue {
    fn default() -> Self {
        TimerDue(AtomicU64::new(NONE))
    }
}

impl TimerDue {
    pub fn publish(&self, beat: &SamplerBeat, at: Option<Instant>) {
        self.0.store(at.map_or(NONE, |t| beat.ns(t)), SeqCst);
    }

    /// True once for a deadline at or before `now_ns` (the sampler's tick):
    /// the deadline is taken, so a thread that is slow to wake is not poked
    /// again on every tick. The thread publishes its next deadline itself.
    pub fn take_if_due(&self, now_ns: u64) -> bool {
        let at = self.0.load(SeqCst);
        at <= now_ns && self.0.compare_exchange(at, NONE, SeqCst, Relaxed).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_beat_is_live_for_two_periods_after_a_tick() {
        let beat = SamplerBeat::default();
        let t0 = Instant::now();
        assert_eq!(beat.live_period(t0), None, "no tick yet");
        let p = Duration::from_millis(100);
        beat.ticked(t0, p);
        assert_eq!(beat.live_period(t0 + Duration::from_millis(150)), Some(p));
        assert_eq!(beat.live_period(t0 + Duration::from_millis(200)), Some(p));
        assert_eq!(beat.live_period(t0 + Duration::from_millis(201)), None, "stalled");
        assert!(beat.ticked_since(t0));
        assert!(!beat.ticked_since(t0 + Duration::from_micros(1)));
    }

    #[test]
    fn a_due_timer_is_taken_once_and_a_later_one_not_at_all() {
        let beat = SamplerBeat::default();
        let t0 = Instant::now();
        let due = TimerDue::default();
        assert!(!due.take_if_due(u64::MAX - 1), "nothing published");
        due.publish(&beat, Some(t0 + Duration::from_millis(500)));
        let tick = |ms| beat.ns(t0 + Duration::from_millis(ms));
        assert!(!due.take_if_due(tick(400)), "not yet due");
        assert!(due.take_if_due(tick(500)), "due at its own tick");
        assert!(!due.take_if_due(tick(600)), "taken: the thread publishes the next one");
        due.publish(&beat, None);
        assert!(!due.take_if_due(tick(10_000)));
    }
}
