//! The clock of plugin call deadlines: what advances the engine's epoch.
//!
//! wasmtime checks the engine's epoch at guest loop heads and function
//! entries; a store whose epoch deadline is reached calls back into the host
//! (`limits::enforce`), which compares the call's own wall-clock deadline with
//! the time and either lets it go on (one more epoch) or interrupts it. So the
//! epoch only has to move when some call may have run past its deadline.
//!
//! ```text
//!  plugin thread                          "sonde-deadline" thread (Linux)
//!  call begins: arm its timerfd for the   epoll_wait on every plugin thread's
//!    call timeout ──────────────────┐       timerfd, with no timeout: it sleeps
//!  guest runs                       └──►  a timer expired (a call is late):
//!  call ends: disarm the timerfd            increment the epoch; every store in a
//!                                           call checks its own deadline
//! ```
//!
//! - A call that ends in time costs two `timerfd_settime` calls on its own
//!   thread and wakes nobody: an idle host, or one whose plugins all answer
//!   in time, never wakes the deadline thread.
//! - The timer is set on the wall clock, but the deadline counts the thread's
//!   CPU time (`limits::enforce`), which is never ahead of it. Once a timer
//!   expired it fires again every [`EPOCH_TICK`] until the call ends, so a
//!   call kept waiting for a core, or a deadline moved by host-work credit
//!   (`limits::HostIo`), is checked again, and a late call is stopped within
//!   one tick of its deadline.
//! - Other plugins' calls see the epoch move too: their check finds their own
//!   deadline not reached and they go on (one comparison each).
//! - Elsewhere than Linux: a ticker thread advances the epoch every
//!   [`EPOCH_TICK`] while any call is armed, and sleeps otherwise.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use wasmtime::Engine;

pub use super::limits::EPOCH_TICK;
#[cfg(target_os = "linux")]
use linux as imp;
#[cfg(not(target_os = "linux"))]
use ticker as imp;

/// The deadline clock of one engine; dropping it ends its thread.
pub struct Deadlines {
    inner: Arc<imp::Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Deadlines {
    /// Starts the clock's thread for `engine`.
    pub fn start(engine: Engine) -> Result<Deadlines> {
        let (inner, thread) = imp::Inner::start(engine)?;
        Ok(Deadlines {
            inner,
            thread: Some(thread),
        })
    }

    /// A timer for the calls of one thread (one plugin's). Calls on one timer
    /// must not overlap; a plugin's calls never do.
    pub fn timer(&self) -> Result<CallTimer> {
        imp::Inner::timer(&self.inner).map(|t| CallTimer { inner: t })
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        self.inner.stop();
        // It only waits for timers, and the stop wakes it at once.
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Arms the deadline of one call at a time.
pub struct CallTimer {
    inner: imp::Timer,
}

impl CallTimer {
    /// Arms the timer to go off `timeout` from now; the returned guard disarms
    /// it when the call ends (dropped).
    pub fn arm(&self, timeout: Duration) -> Armed<'_> {
        self.inner.arm(timeout);
        Armed { timer: self }
    }
}

/// A call in flight; disarms its timer when dropped.
pub struct Armed<'a> {
    timer: &'a CallTimer,
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.timer.inner.disarm();
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use anyhow::{Context, Result};
    use parking_lot::Mutex;
    use wasmtime::Engine;

    use super::EPOCH_TICK;

    /// The epoll set of every timer, the stop event, and the timers by key.
    pub struct Inner {
        epoll: OwnedFd,
        stop: OwnedFd,
        timers: Mutex<HashMap<u64, RawFd>>,
        next_key: AtomicU64,
    }

    /// The key of the stop event in the epoll set.
    const STOP_KEY: u64 = 0;

    fn check(r: libc::c_int, what: &str) -> Result<libc::c_int> {
        if r < 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("plugin call deadlines: {what}"));
        }
        Ok(r)
    }

    fn add(epoll: &OwnedFd, fd: RawFd, key: u64) -> Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: both descriptors are open; `ev` is a valid epoll_event.
        check(
            unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) },
            "epoll_ctl",
        )
        .map(drop)
    }

    impl Inner {
        pub fn start(engine: Engine) -> Result<(Arc<Inner>, std::thread::JoinHandle<()>)> {
            // SAFETY: plain syscalls; each returned descriptor is owned from here on.
            let epoll =
                unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC), "epoll_create1")?) };
            let stop = unsafe {
                OwnedFd::from_raw_fd(check(
                    libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK),
                    "eventfd",
                )?)
            };
            add(&epoll, stop.as_raw_fd(), STOP_KEY)?;
            let inner = Arc::new(Inner {
                epoll,
                stop,
                timers: Mutex::new(HashMap::new()),
                next_key: AtomicU64::new(STOP_KEY + 1),
            });
            let me = inner.clone();
            let thread = std::thread::Builder::new()
                .name("sonde-deadline".into())
                .spawn(move || me.run(engine))
                .context("spawning the plugin call deadline thread")?;
            Ok((inner, thread))
        }

        /// Sleeps until a timer expires, then advances the epoch; returns on stop.
        fn run(&self, engine: Engine) {
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
            loop {
                // SAFETY: `events` is valid for its length; -1 waits without a timeout.
                let n =
                    unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, -1) };
                if n < 0 {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    tracing::error!(
                        "plugin call deadlines: epoll_wait failed ({}); late calls are no longer stopped",
                        std::io::Error::last_os_error()
                    );
                    return;
                }
                let mut late = false;
                for ev in &events[..n as usize] {
                    if ev.u64 == STOP_KEY {
                        return;
                    }
                    // Under the lock: a timer being dropped is closed only after it left the map.
                    if let Some(&fd) = self.timers.lock().get(&{ ev.u64 }) {
                        let mut count = 0u64;
                        // SAFETY: reads 8 bytes into `count` from an open, non-blocking timerfd.
                        unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
                        late = true;
                    }
                }
                if late {
                    engine.increment_epoch();
                }
            }
        }

        pub fn stop(&self) {
            let one = 1u64;
            // SAFETY: writes 8 bytes to an open eventfd.
            unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }

        pub fn timer(me: &Arc<Inner>) -> Result<Timer> {
            // SAFETY: plain syscall; the descriptor is owned from here on.
            let fd = unsafe {
                OwnedFd::from_raw_fd(check(
                    libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK),
                    "timerfd_create",
                )?)
            };
            let key = me.next_key.fetch_add(1, Ordering::Relaxed);
            me.timers.lock().insert(key, fd.as_raw_fd());
            if let Err(e) = add(&me.epoll, fd.as_raw_fd(), key) {
                me.timers.lock().remove(&key);
                return Err(e);
            }
            Ok(Timer {
                fd,
                key,
                clock: me.clone(),
            })
        }
    }

    pub struct Timer {
        fd: OwnedFd,
        key: u64,
        clock: Arc<Inner>,
    }

    fn timespec(d: Duration) -> libc::timespec {
        libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        }
    }

    impl Timer {
        fn set(&self, value: Duration, interval: Duration) {
            let spec = libc::itimerspec {
                it_interval: timespec(interval),
                it_value: timespec(value),
            };
            // SAFETY: an open timerfd and a valid itimerspec; the old value is not wanted.
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        }

        pub fn arm(&self, timeout: Duration) {
            // A zero it_value would disarm: a call always gets at least a nanosecond.
            self.set(timeout.max(Duration::from_nanos(1)), EPOCH_TICK);
        }

        pub fn disarm(&self) {
            self.set(Duration::ZERO, Duration::ZERO);
        }
    }

    impl Drop for Timer {
        fn drop(&mut self) {
            let mut timers = self.clock.timers.lock();
            timers.remove(&self.key);
            // SAFETY: removes an open descriptor from the epoll set (closing it would too,
            // but only once no other process shares it).
            unsafe {
                libc::epoll_ctl(
                    self.clock.epoll.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                )
            };
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod ticker {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    use anyhow::{Context, Result};
    use parking_lot::{Condvar, Mutex};
    use wasmtime::Engine;

    use super::EPOCH_TICK;

    /// Calls armed now; the ticker runs while there is one.
    pub struct Inner {
        in_flight: AtomicUsize,
        stopped: AtomicBool,
        lock: Mutex<()>,
        wake: Condvar,
    }

    impl Inner {
        pub fn start(engine: Engine) -> Result<(Arc<Inner>, std::thread::JoinHandle<()>)> {
            let inner = Arc::new(Inner {
                in_flight: AtomicUsize::new(0),
                stopped: AtomicBool::new(false),
                lock: Mutex::new(()),
                wake: Condvar::new(),
            });
            let me = inner.clone();
            let thread = std::thread::Builder::new()
                .name("sonde-deadline".into())
                .spawn(move || {
                    loop {
                        {
                            let mut g = me.lock.lock();
                            while me.in_flight.load(Ordering::Acquire) == 0 {
                                if me.stopped.load(Ordering::Acquire) {
                                    return;
                                }
                                me.wake.wait(&mut g);
                            }
                        }
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .context("spawning the plugin call deadline thread")?;
            Ok((inner, thread))
        }

        pub fn stop(&self) {
            self.stopped.store(true, Ordering::Release);
            let _g = self.lock.lock();
            self.wake.notify_one();
        }

        pub fn timer(me: &Arc<Inner>) -> Result<Timer> {
            Ok(Timer { clock: me.clone() })
        }
    }

    pub struct Timer {
        clock: Arc<Inner>,
    }

    impl Timer {
        pub fn arm(&self, _timeout: Duration) {
            if self.clock.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
                // Notify under the lock so the ticker cannot miss it between its check and its wait.
                let _g = self.clock.lock.lock();
                self.clock.wake.notify_one();
            }
        }

        pub fn disarm(&self) {
            self.clock.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn engine() -> Engine {
        let mut cfg = wasmtime::Config::new();
        cfg.epoch_interruption(true);
        Engine::new(&cfg).unwrap()
    }

    /// The epoch as a store sees it: a store whose deadline is one epoch
    /// ahead counts how often the callback ran.
    fn epochs_within(clock: &Deadlines, e: &Engine, arm_for: Option<Duration>, wait: Duration) -> u64 {
        let mut store = wasmtime::Store::new(e, 0u64);
        store.set_epoch_deadline(1);
        let timer = clock.timer().unwrap();
        let _armed = arm_for.map(|t| timer.arm(t));
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let s = seen.clone();
        store.epoch_deadline_callback(move |_| {
            s.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(wasmtime::UpdateDeadline::Continue(1))
        });
        // A guest loop would poll the epoch; here the test polls it through a
        // tiny module that only returns, called again and again:
        // (module (func (export "f"))), encoded.
        const MODULE: &[u8] = &[
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // header
            0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
            0x03, 0x02, 0x01, 0x00, // func 0 of type 0
            0x07, 0x05, 0x01, 0x01, b'f', 0x00, 0x00, // export "f"
            0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // its empty body
        ];
        let module = wasmtime::Module::new(e, MODULE).unwrap();
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let f = instance.get_typed_func::<(), ()>(&mut store, "f").unwrap();
        let end = Instant::now() + wait;
        while Instant::now() < end {
            f.call(&mut store, ()).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        seen.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_epoch_moves_only_after_an_armed_deadline() {
        let e = engine();
        let clock = Deadlines::start(e.clone()).unwrap();
        assert_eq!(
            epochs_within(&clock, &e, None, Duration::from_millis(60)),
            0,
            "nothing armed: the epoch stays"
        );
        assert_eq!(
            epochs_within(&clock, &e, Some(Duration::from_secs(5)), Duration::from_millis(60)),
            0,
            "armed, deadline not reached: the epoch stays"
        );
        let late = epochs_within(&clock, &e, Some(Duration::from_millis(20)), Duration::from_millis(120));
        assert!(late >= 1, "deadline passed: the epoch moved ({late} times)");
    }

    #[test]
    fn disarmed_timers_stay_quiet_and_dropping_the_clock_ends_its_thread() {
        // (Dropping joins the thread: a clock that did not end would hang here.)
        let e = engine();
        let clock = Deadlines::start(e.clone()).unwrap();
        let timer = clock.timer().unwrap();
        for _ in 0..100 {
            drop(timer.arm(Duration::from_millis(1)));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(epochs_within(&clock, &e, None, Duration::from_millis(20)), 0);
        drop(clock);
        // The timer outlives its clock harmlessly.
        drop(timer.arm(Duration::from_millis(1)));
    }
}
