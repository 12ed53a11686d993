//! Group commit: what a request changed in the host's own kept state (the
//! dedup windows, the job registry) is on disk before the request is
//! answered, with one state-store transaction for every request waiting.
//!
//! ```text
//!  receiver: take(request) ─► windows and jobs changed in memory (marked dirty)
//!            commits.wait() ──────────────► wake ─┐
//!                                                 ▼
//!  flusher task:  flush n: every participant's changes ─► ONE transaction (state.redb)
//!                 (on a wake, or every FLUSH_EVERY)    ok: done = n, waiters answer OK
//!                                                      failed: changes kept for flush n+1,
//!                                                        waiters answer "retry" (503 /
//!                                                        UNAVAILABLE), unhealthy until a flush
//!                                                        succeeds: new requests are refused
//! ```
//!
//! Why one transaction: the window saying "request N of agent A was taken"
//! and the job steps request N carried must be durable together. Written
//! apart, a crash between the two either drops a re-sent request whose steps
//! were never written (lost) or takes one again whose steps were (counted
//! twice). With one transaction and the answer after it, a request the
//! master answered OK survives a `kill -9`, and one it did not answer is
//! taken again, once.
//!
//! Another store what a request brought goes to (the master's history of
//! its agents' points) joins as a [`Barrier`]: each flush first has it
//! write and sync what it was given, then writes the transaction; if it
//! fails the flush fails the same way (waiters retry, new requests are
//! refused), so an answered point is on disk in the history too, and a
//! store that cannot write makes its senders keep what they sent.
//!
//! Only requests that carry an identity (`export/sequence.rs`, from a sonde)
//! wait: the others have no exactly-once promise to keep, and an app's OTLP
//! SDK is answered as soon as its request is taken. Limits: an answer waits
//! for one fsync (shared by everything taken meanwhile); a flush that takes
//! longer than `WAIT_LIMIT` answers "retry".

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use tokio::sync::{Notify, watch};

use crate::state::{StateStore, Write};

/// How often the flusher writes without being woken (changes from requests
/// without an identity, and from the host's own reports).
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The longest a request waits for its flush before it is told to retry.
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// One change, in the participant's namespace.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Put(String, Vec<u8>),
    Delete(String),
    DeletePrefix(String),
}

impl Change {
    /// The same as a state-store write.
    pub fn as_write(&self) -> Write<'_> {
        match self {
            Change::Put(k, v) => Write::Put(k, v),
            Change::Delete(k) => Write::Delete(k),
            Change::DeletePrefix(k) => Write::DeletePrefix(k),
        }
    }
}

/// What a participant handed to a flush, and how to take it back if the
/// write fails.
pub struct Taken {
    pub changes: Vec<Change>,
    /// Given back to [`Durable::failed`] when the write fails.
    pub undo: Box<dyn Any + Send>,
}

/// Something whose changes are written by the flusher.
pub trait Durable: Send + Sync {
    /// Its namespace in the state store.
    fn namespace(&self) -> &'static str;
    /// What changed since the last call (None: nothing); from now on it is
    /// no longer marked changed.
    fn take_changes(&self) -> Option<Taken>;
    /// The write of what `take_changes` returned failed: mark it changed again.
    fn failed(&self, undo: Box<dyn Any + Send>);
}

/// Another store that must have written what requests brought before they
/// are answered (the history's write-ahead log).
pub trait Barrier: Send + Sync {
    /// Writes and syncs everything handed to it so far; Err (why) when it
    /// cannot, keeping what it could not write for the next call.
    fn sync(&self) -> Result<(), String>;
}

/// What `GET /api/ingest` shows under `durable`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DurableStats {
    /// A state store is attached (off: nothing is kept, nothing waits).
    pub enabled: bool,
    /// The last flush succeeded and no other store is failing (false:
    /// requests with an identity are refused).
    pub healthy: bool,
    /// Why another store holds requests back (the history cannot write).
    pub held: Option<String>,
    pub flushes: u64,
    pub flush_errors: u64,
    pub last_error: Option<String>,
    /// Requests refused because the store could not write.
    pub refused: u64,
}

pub struct Commits {
    participants: RwLock<Vec<Arc<dyn Durable>>>,
    barriers: RwLock<Vec<Arc<dyn Barrier>>>,
    store: Mutex<Option<StateStore>>,
    /// Flushes started; the next one to start is `started + 1`.
    started: AtomicU64,
    /// (last flush done, whether it succeeded).
    done: watch::Sender<(u64, bool)>,
    wake: Notify,
    healthy: AtomicBool,
    flushes: AtomicU64,
    errors: AtomicU64,
    refused: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Serialises flushes (the task's and the one at shutdown).
    flushing: Mutex<()>,
    /// Another store the answers depend on cannot write (the history on a
    /// full disk): why. Set and cleared by its watcher.
    held: Mutex<Option<String>>,
}

impl Default for Commits {
    fn default() -> Self {
        Commits {
            participants: RwLock::default(),
            barriers: RwLock::default(),
            store: Mutex::default(),
            started: AtomicU64::new(0),
            done: watch::channel((0, true)).0,
            wake: Notify::new(),
            healthy: AtomicBool::new(true),
            flushes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            last_error: Mutex::default(),
            flushing: Mutex::default(),
            held: Mutex::default(),
        }
    }
}

impl Commits {
    /// Writes go to `store` from now on.
    pub fn attach(&self, store: StateStore) {
        *self.store.lock() = Some(store);
    }

    pub fn add(&self, p: Arc<dyn Durable>) {
        self.participants.write().push(p);
    }

    /// Each flush has `b` write and sync first (see the module's notes).
    pub fn add_barrier(&self, b: Arc<dyn Barrier>) {
        self.barriers.write().push(b);
    }

    pub fn enabled(&self) -> bool {
        self.store.lock().is_some()
    }

    /// The last flush succeeded. While false, a receiver refuses requests
    /// with an identity (counted here) instead of taking what it cannot keep.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Relaxed) && self.held.lock().is_none()
    }

    /// Another store that what is taken goes to cannot write (Some: why),
    /// or can again (None): requests with an identity are refused meanwhile.
    pub fn hold(&self, why: Option<String>) {
        let mut h = self.held.lock();
        match (&*h, &why) {
            (None, Some(w)) => tracing::warn!("{w}: refusing requests from sondes until it writes again"),
            (Some(_), None) => tracing::info!("taking requests from sondes again"),
            _ => {}
        }
        *h = why;
    }

    /// Counts a request refused because the store cannot write.
    pub fn refuse(&self) -> String {
        self.refused.fetch_add(1, Relaxed);
        if let Some(w) = self.held.lock().clone() {
            return format!("{w}: retry later");
        }
        let why = self.last_error.lock().clone().unwrap_or_default();
        format!("{why}: retry later")
    }

    pub fn stats(&self) -> DurableStats {
        DurableStats {
            enabled: self.enabled(),
            healthy: self.healthy(),
            held: self.held.lock().clone(),
            flushes: self.flushes.load(Relaxed),
            flush_errors: self.errors.load(Relaxed),
            last_error: self.last_error.lock().clone(),
            refused: self.refused.load(Relaxed),
        }
    }

    /// Returns once a flush that started after this call is done: Ok when
    /// it wrote, Err (why) when the store could not write or it took longer
    /// than [`WAIT_LIMIT`]. At once without a store.
    pub async fn wait(&self) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        let mut rx = self.done.subscribe();
        let target = self.started.load(Relaxed) + 1;
        self.wake.notify_one();
        match tokio::time::timeout(WAIT_LIMIT, rx.wait_for(|(n, _)| *n >= target)).await {
            Ok(Ok(v)) if v.1 => Ok(()),
            Ok(Ok(_)) => Err(self.refuse()),
            Ok(Err(_)) => Err("the host is stopping: retry later".into()),
            Err(_) => Err(format!(
                "the state store did not write within {} s: retry later",
                WAIT_LIMIT.as_secs()
            )),
        }
    }

    /// Writes every participant's changes in one transaction (blocking).
    /// Returns whether it succeeded (nothing to write succeeds).
    pub fn flush(&self) -> bool {
        let _one = self.flushing.lock();
        let Some(store) = self.store.lock().clone() else {
            return true;
        };
        let parts = self.participants.read().clone();
        let taken: Vec<(Arc<dyn Durable>, Taken)> = parts
            .iter()
            .filter_map(|p| p.take_changes().map(|t| (p.clone(), t)))
            .collect();
        // What the requests brought first: a window saying "taken" must
        // never be on disk without the points it took.
        let barriers = self.barriers.read().clone();
        if let Err(why) = barriers.iter().try_for_each(|b| b.sync()) {
            self.flushes.fetch_add(1, Relaxed);
            self.failed(why, taken);
            return false;
        }
        if taken.is_empty() && self.healthy() {
            return true;
        }
        let writes: Vec<(&str, Write<'_>)> = taken
            .iter()
            .flat_map(|(p, t)| {
                let ns = p.namespace();
                t.changes.iter().map(move |c| (ns, c.as_write()))
            })
            .collect();
        // A probe write when there is nothing else, so that a store that
        // could not write finds out it can again.
        let probe = [("@host", Write::Put("alive", b"1"))];
        let r = store.write_many(if writes.is_empty() { &probe[..] } else { &writes[..] });
        self.flushes.fetch_add(1, Relaxed);
        match r {
            Ok(()) => {
                if !self.healthy.swap(true, Relaxed) {
                    tracing::info!("the state store writes again");
                }
                true
            }
            Err(e) => {
                self.failed(format!("the state store cannot write: {e:#}"), taken);
                false
            }
        }
    }

    /// A flush failed: its changes marked changed again, requests refused
    /// until one succeeds.
    fn failed(&self, msg: String, taken: Vec<(Arc<dyn Durable>, Taken)>) {
        self.errors.fetch_add(1, Relaxed);
        if self.healthy.swap(false, Relaxed) {
            tracing::warn!("{msg}; refusing requests from sondes until it can");
        }
        *self.last_error.lock() = Some(msg);
        for (p, t) in taken {
            p.failed(t.undo);
        }
    }

    /// Flushes on every wake and every [`FLUSH_EVERY`] until `stop`, then once more.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tick.tick() => {}
                r = stop.changed() => if r.is_err() || *stop.borrow() { break },
            }
            let n = self.started.fetch_add(1, Relaxed) + 1;
            let me = self.clone();
            let ok = tokio::task::spawn_blocking(move || me.flush()).await.unwrap_or(false);
            self.done.send_replace((n, ok));
        }
        let me = self.clone();
        let _ = tokio::task::spawn_blocking(move || me.flush()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A participant with a queue of keys to put.
    #[derive(Default)]
    struct Keys(Mutex<Vec<String>>);

    impl Durable for Keys {
        fn namespace(&self) -> &'static str {
            "@test"
        }
        fn take_changes(&self) -> Option<Taken> {
            let keys = std::mem::take(&mut *self.0.lock());
            (!keys.is_empty()).then(|| Taken {
                changes: keys.iter().map(|k| Change::Put(k.clone(), b"v".to_vec())).collect(),
                undo: Box::new(keys),
            })
        }
        fn failed(&self, undo: Box<dyn Any + Send>) {
            if let Ok(keys) = undo.downcast::<Vec<String>>() {
                self.0.lock().extend(*keys);
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_returns_once_its_change_is_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("s.redb")).unwrap();
        let c = Arc::new(Commits::default());
        assert_eq!(c.wait().await, Ok(()), "no store: nothing to wait for");
        c.attach(store.clone());
        let keys = Arc::new(Keys::default());
        c.add(keys.clone());
        let (_stop_tx, stop) = watch::channel(false);
        tokio::spawn(c.clone().run(stop));
        keys.0.lock().push("a".into());
        assert_eq!(c.wait().await, Ok(()));
        assert_eq!(store.namespace("@test").get("a").unwrap().as_deref(), Some(&b"v"[..]));
        assert!(c.stats().flushes >= 1 && c.healthy());
    }
}
