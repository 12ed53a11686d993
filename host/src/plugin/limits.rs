//! What the host enforces on every plugin (the "What the host enforces"
//! section of `wit/sonde-plugin.wit`), in one place: the linear-memory cap,
//! the call deadline with its credit for durable host work, and the limits
//! on traps, backoff and queued work that the instance's thread applies.
//! The epoch clock the deadlines count in is ticked by `engine.rs`; WASI
//! capabilities (denied unless granted) are built in `sandbox.rs`.

use std::time::Duration;

use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

use super::config::{PluginConfig, PluginsConfig};

/// How often the epoch advances while a plugin call is running: the
/// resolution of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// One plugin's limits: its settings with the per-plugin overrides applied.
#[derive(Clone, Copy)]
pub struct Limits {
    pub memory: usize,
    pub call_timeout: Duration,
    pub max_traps: usize,
    pub trap_window: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub queue: usize,
}

impl Limits {
    pub fn from(p: &PluginsConfig, c: &PluginConfig) -> Self {
        Limits {
            memory: (c.memory_limit_mb.unwrap_or(p.memory_limit_mb) as usize) << 20,
            call_timeout: Duration::from_millis(c.call_timeout_ms.unwrap_or(p.call_timeout_ms) as u64),
            max_traps: p.max_traps as usize,
            trap_window: Duration::from_secs(p.trap_window_s as u64),
            backoff_initial: Duration::from_millis(p.backoff_initial_ms as u64),
            backoff_max: Duration::from_millis(p.backoff_max_ms as u64),
            queue: p.queue_capacity as usize,
        }
    }
}

/// Number of epoch ticks that make up `timeout`, rounded up, plus one so a
/// call never gets less than its full budget.
pub fn deadline_ticks(timeout: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    (timeout.as_nanos().div_ceil(tick) as u64).max(1) + 1
}

/// Store data that carries a memory cap and the host-work credit of a call.
pub trait Limited: 'static {
    fn memory(&mut self) -> &mut MemoryCap;
    fn io(&mut self) -> &mut HostIo;
}

/// Puts a new store under the memory cap and the call deadline.
pub fn enforce<T: Limited>(store: &mut Store<T>, call_timeout: Duration) {
    store.limiter(|s| s.memory());
    // At the deadline: extend by host time spent in durable writes, else trap.
    store.epoch_deadline_callback(|mut cx| {
        Ok(match cx.data_mut().io().extension() {
            Some(more) => UpdateDeadline::Continue(deadline_ticks(more)),
            None => UpdateDeadline::Interrupt,
        })
    });
    store.set_epoch_deadline(deadline_ticks(call_timeout));
}

/// Gives the next guest call its full deadline and no host-work credit yet.
pub fn start_call<T: Limited>(store: &mut Store<T>, call_timeout: Duration) {
    store.set_epoch_deadline(deadline_ticks(call_timeout));
    *store.data_mut().io() = HostIo::default();
}

/// Whether a trap is the call deadline striking (not a guest fault).
pub fn is_deadline(e: &wasmtime::Error) -> bool {
    matches!(e.downcast_ref::<wasmtime::Trap>(), Some(wasmtime::Trap::Interrupt))
}

/// Caps linear memory; the error it returns becomes the trap message.
pub struct MemoryCap {
    pub limit: usize,
    pub current: usize,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::format_err!(
                "plugin memory limit exceeded: growing linear memory to {} MiB, the cap is {} MiB (plugins.memory_limit_mb)",
                desired >> 20,
                self.limit >> 20
            ));
        }
        self.current = desired;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// Most host time one call can have credited to its deadline: a plugin that
/// commits state in a loop still ends.
pub const HOST_IO_GRACE: Duration = Duration::from_secs(2);

/// The deadline of a call measures the guest's own work. A state-store commit
/// (a durable disk write) or a sink write can take longer than a whole call's
/// budget on a slow disk, and that time is not the plugin running away, so it
/// is credited: when the deadline strikes, it is extended by the host time not
/// yet credited (up to [`HOST_IO_GRACE`] per call).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct HostIo {
    pub spent: Duration,
    pub credited: Duration,
}

impl HostIo {
    /// How much longer the call may run when its deadline strikes; `None`
    /// interrupts it.
    pub fn extension(&mut self) -> Option<Duration> {
        let owed = self
            .spent
            .saturating_sub(self.credited)
            .min(HOST_IO_GRACE.saturating_sub(self.credited));
        if owed.is_zero() {
            return None;
        }
        self.credited += owed;
        Some(owed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_io_extends_a_deadline_once_per_time_spent_and_within_the_grace() {
        let ms = Duration::from_millis;
        let mut io = HostIo::default();
        assert_eq!(io.extension(), None, "no host work: the deadline interrupts");
        io.spent = ms(165);
        assert_eq!(io.extension(), Some(ms(165)));
        assert_eq!(io.extension(), None, "the same time is credited once");
        io.spent += ms(10);
        assert_eq!(io.extension(), Some(ms(10)));
        io.spent = ms(60_000);
        assert_eq!(io.extension(), Some(HOST_IO_GRACE - ms(175)), "capped by the grace");
        assert_eq!(io.extension(), None);
    }

    #[test]
    fn deadline_ticks_round_up() {
        assert_eq!(deadline_ticks(Duration::from_millis(100)), 21);
        assert_eq!(deadline_ticks(Duration::from_millis(1)), 2);
        assert_eq!(deadline_ticks(Duration::from_millis(7)), 3);
    }
}
