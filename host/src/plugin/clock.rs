//! The clock a plugin sees: what `now` answers and when its timers fire.
//!
//! In a running sonde it is the wall clock. Under `sonde plugin test` it is
//! the recording's clock, which the replay moves forward line by line, so a
//! plugin's `now` reads the time its input was recorded at and its timers
//! fire at the recorded times, without the replay waiting for them. Call
//! deadlines are not on this clock: they always measure real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where a plugin's time comes from.
#[derive(Clone, Default)]
pub enum Clock {
    /// The host's wall clock (and `Instant::now()` for timers).
    #[default]
    Wall,
    /// A clock that moves only when the replay moves it.
    Replay(Arc<ReplayClock>),
}

impl Clock {
    /// ns since the Unix epoch.
    pub fn now_ns(&self) -> u64 {
        match self {
            Clock::Wall => crate::model::now_ns(),
            Clock::Replay(c) => c.now_ns(),
        }
    }

    /// The same moment as an `Instant`, which timers are kept in.
    pub fn instant(&self) -> Instant {
        match self {
            Clock::Wall => Instant::now(),
            Clock::Replay(c) => c.instant_at(c.now_ns()),
        }
    }
}

/// A recording's clock: ns since the Unix epoch, mapped onto `Instant`s from
/// the moment it was made, so the timer wheel needs no second kind of time.
pub struct ReplayClock {
    base: Instant,
    base_ns: u64,
    now_ns: AtomicU64,
}

impl ReplayClock {
    /// A clock standing at `start_ns`.
    pub fn new(start_ns: u64) -> Arc<Self> {
        Arc::new(ReplayClock {
            base: Instant::now(),
            base_ns: start_ns,
            now_ns: AtomicU64::new(start_ns),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::Relaxed)
    }

    /// Moves the clock to `ns`; never backwards (a recording's lines are in
    /// the order the host handed them out, and the wall clock may have
    /// stepped back in between).
    pub fn advance_to(&self, ns: u64) {
        self.now_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// The `Instant` standing for `ns` on this clock.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns.saturating_sub(self.base_ns))
    }

    /// The time on this clock an `Instant` from [`instant_at`](Self::instant_at) stands for.
    pub fn ns_at(&self, at: Instant) -> u64 {
        self.base_ns + at.saturating_duration_since(self.base).as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_clock_moves_only_forward_and_maps_both_ways() {
        let c = ReplayClock::new(5_000_000_000);
        let clock = Clock::Replay(c.clone());
        assert_eq!(clock.now_ns(), 5_000_000_000);
        let t0 = clock.instant();
        c.advance_to(5_250_000_000);
        assert_eq!(clock.instant() - t0, Duration::from_millis(250));
        c.advance_to(5_100_000_000);
        assert_eq!(clock.now_ns(), 5_250_000_000, "never backwards");
        assert_eq!(c.ns_at(c.instant_at(7_000_000_123)), 7_000_000_123);
    }
}
