//! What the host enforces on every plugin (the "What the host enforces"
//! section of `wit/sonde-plugin.wit`), in one place: the linear-memory cap,
//! the call deadline with its credit for host I/O (state store, sinks), and the limits
//! on traps, backoff and queued work that the instance's thread applies.
//! The epoch that makes a running call check its deadline is advanced by
//! `deadline.rs` (only once some call is late); WASI capabilities (denied
//! unless granted) are built in `sandbox.rs`.

use std::time::Duration;

use wasmtime::{ResourceLimiter, Store, UpdateDeadline};

use super::config::{PluginConfig, PluginsConfig};

/// The resolution of call deadlines: once a call is past its deadline, how
/// often it is checked again (host-work credit can move the deadline).
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

/// Store data that carries a memory cap and the host-work credit of a call.
pub trait Limited: 'static {
    fn memory(&mut self) -> &mut MemoryCap;
    fn io(&mut self) -> &mut HostIo;
}

/// Puts a new store under the memory cap and the call deadline, and starts
/// the deadline of its first call (instantiation runs guest code). Arm the
/// thread's `deadline::CallTimer` for `call_timeout` around every call.
///
/// A call's deadline counts the CPU time of the plugin's thread during the
/// call (the guest's work and the host functions it calls), not the time on
/// the wall: a plugin that a busy machine keeps waiting for a core is not
/// stopped for that, one that loops is stopped after `call_timeout` of work.
pub fn enforce<T: Limited>(store: &mut Store<T>, call_timeout: Duration) {
    store.limiter(|s| s.memory());
    // The epoch moved (some call is late, maybe this one): go on until this
    // call's own deadline, extended by host time spent in state-store reads and sink writes; then trap.
    store.epoch_deadline_callback(move |mut cx| {
        Ok(match cx.data_mut().io().may_continue(thread_cpu(), call_timeout) {
            true => UpdateDeadline::Continue(1),
            false => UpdateDeadline::Interrupt,
        })
    });
    start_call(store);
}

/// Starts the next guest call's deadline, with no host-work credit yet.
/// Call it on the thread that makes the call.
pub fn start_call<T: Limited>(store: &mut Store<T>) {
    store.set_epoch_deadline(1);
    *store.data_mut().io() = HostIo {
        began: Some(thread_cpu()),
        ..HostIo::default()
    };
}

/// Time the calling thread has spent ready to run but waiting for a core
/// (the second field of Linux's `/proc/thread-self/schedstat`), so a slow
/// call can be told apart from a machine with too few cores for it. `None`
/// where the kernel does not keep it. The file stays open per thread: a
/// read from offset 0 is a fresh reading, a few microseconds.
#[cfg(unix)]
pub fn thread_run_delay() -> Option<Duration> {
    use std::cell::RefCell;
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    thread_local! {
        static SCHEDSTAT: RefCell<Option<File>> = RefCell::new(File::open("/proc/thread-self/schedstat").ok());
    }
    SCHEDSTAT.with(|f| {
        let f = f.borrow();
        let mut buf = [0u8; 96];
        let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(Duration::from_nanos(ns))
    })
}

#[cfg(not(unix))]
pub fn thread_run_delay() -> Option<Duration> {
    None
}

/// CPU time of the calling thread so far.
pub fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: a valid timespec for a clock every unix has.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
    #[cfg(not(unix))]
    {
        // No thread CPU clock: the time on the wall since the first call.
        static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        T0.get_or_init(std::time::Instant::now).elapsed()
    }
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
/// reads state or writes a sink in a loop still ends.
pub const HOST_IO_GRACE: Duration = Duration::from_secs(2);

/// The deadline of a call measures the guest's own work. A state-store read
/// that goes to the disk or a sink write can take longer than a whole call's
/// budget on a slow disk (state writes are committed behind the call:
/// `state::write_behind`), and that time is not the plugin running away, so it
/// is credited: when the deadline strikes, it is extended by the host time not
/// yet credited (up to [`HOST_IO_GRACE`] per call).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct HostIo {
    pub spent: Duration,
    pub credited: Duration,
    /// The thread's CPU time when the call began ([`thread_cpu`]): the call
    /// may run until the thread's CPU time reaches `began + call_timeout + credited`.
    pub began: Option<Duration>,
}

impl HostIo {
    /// Whether the call may go on with the thread's CPU time at `cpu`: its
    /// deadline is not reached, or host time not yet credited moves it.
    /// False interrupts the call.
    pub fn may_continue(&mut self, cpu: Duration, call_timeout: Duration) -> bool {
        let Some(began) = self.began else {
            return true; // not in a call
        };
        cpu < began + call_timeout + self.credited || self.extension().is_some()
    }

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

    /// Two threads spinning on one core: each waits for it about half the
    /// time, and the reading says so.
    #[cfg(target_os = "linux")]
    #[test]
    fn run_delay_counts_the_wait_for_a_shared_core() {
        let spin = || {
            // SAFETY: a zeroed cpu_set_t with CPU 0 set, for this thread (0).
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
            let before = thread_run_delay().expect("schedstat");
            let t0 = std::time::Instant::now();
            while t0.elapsed() < Duration::from_millis(400) {
                std::hint::spin_loop();
            }
            thread_run_delay().unwrap() - before
        };
        let other = std::thread::spawn(spin);
        let mine = std::thread::spawn(spin).join().unwrap();
        let theirs = other.join().unwrap();
        let most = mine.max(theirs);
        assert!(
            most > Duration::from_millis(100),
            "waited {mine:?} and {theirs:?} of 400 ms"
        );
    }

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
    fn a_call_goes_on_until_its_deadline_then_only_with_host_work_credit() {
        let ms = Duration::from_millis;
        let t0 = Duration::from_secs(7);
        let mut io = HostIo {
            began: Some(t0),
            ..HostIo::default()
        };
        assert!(io.may_continue(t0 + ms(99), ms(100)), "before the deadline");
        assert!(!io.may_continue(t0 + ms(100), ms(100)), "at the deadline, no host work");
        io.spent = ms(30);
        assert!(io.may_continue(t0 + ms(101), ms(100)), "30 ms of host work credited");
        assert!(io.may_continue(t0 + ms(125), ms(100)), "inside the moved deadline");
        assert!(
            !io.may_continue(t0 + ms(131), ms(100)),
            "past it, nothing more to credit"
        );
        assert!(HostIo::default().may_continue(t0 + ms(10_000), ms(1)), "not in a call");
    }
}
