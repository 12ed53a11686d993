//! Taking a re-sent OTLP request once: a window of the (producer, seq)
//! already taken, per producer (`export/sequence.rs` says where they come from).
//!
//! ```text
//!  request with sonde-producer P, sonde-seq N
//!     │  admit(P, N)
//!     ├─ N taken before (in P's window) ───────────► Repeat: answer OK, drop it, count `repeats`
//!     ├─ N being taken by another call right now ──► Busy: answer "retry" (UNAVAILABLE / 503)
//!     ├─ N below P's window (too old to tell) ─────► taken, counted in `beyond_window`
//!     └─ new ──► Ticket ──► hub + forward ok? ──► commit: N marked taken (dirty)
//!                               └─ refused ──► ticket dropped: N free again, the sender retries
//!  the windows that changed go to disk with the request's other changes, in
//!  one state-store transaction, before it is answered (`durable.rs`;
//!  namespace `@dedup`, key = producer); read back at start
//! ```
//!
//! Limits and what they mean:
//! - A window spans the `WINDOW` (1024) newest numbers of a producer. A sender
//!   keeps far fewer than that unanswered at once (`export.max_in_flight`),
//!   and a spool replays in order, so a repeat lands inside it. One older than
//!   the window cannot be told from a new request: it is taken (at least
//!   once) and counted.
//! - `MAX_PRODUCERS` producers are kept (every sender process is one); past
//!   it the one heard from longest ago is forgotten, with its persisted entry.
//! - The windows are written before the request is answered (`durable.rs`),
//!   in the same transaction as what the request changed in the job
//!   registry, so after a `kill -9` a request answered OK is known, and one
//!   that was not answered is taken again, once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use serde::Serialize;

use super::durable::{Change, Durable, Taken};
use crate::export::sequence::RequestId;
use crate::state::PluginState;

/// Numbers remembered per producer, newest back.
pub const WINDOW: u64 = 1024;
/// Producers remembered at most.
pub const MAX_PRODUCERS: usize = 4096;
/// The state store's namespace (not a plugin's name: those cannot start with `@`).
pub const NAMESPACE: &str = "@dedup";

const WORDS: usize = (WINDOW / 64) as usize;

/// One producer's taken numbers: `hi`, the highest taken, and a bitmap of
/// the `WINDOW` numbers up to it (bit `n % WINDOW` for number `n`).
#[derive(Clone, Debug, PartialEq)]
struct Window {
    hi: u64,
    bits: [u64; WORDS],
    /// Wall clock of the last request, ns: who is forgotten first.
    last_ns: u64,
}

impl Window {
    fn new() -> Self {
        Window {
            hi: 0,
            bits: [0; WORDS],
            last_ns: 0,
        }
    }

    fn bit(n: u64) -> (usize, u64) {
        let i = n % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Below the window: too old to tell.
    fn beyond(&self, n: u64) -> bool {
        self.hi >= WINDOW && n <= self.hi - WINDOW
    }

    fn has(&self, n: u64) -> bool {
        if n > self.hi || self.beyond(n) {
            return false;
        }
        let (w, b) = Self::bit(n);
        self.bits[w] & b != 0
    }

    fn mark(&mut self, n: u64) {
        if self.beyond(n) {
            return;
        }
        if n > self.hi {
            // Numbers between the old top and n were not taken (yet).
            if n - self.hi >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                for m in self.hi + 1..n {
                    let (w, b) = Self::bit(m);
                    self.bits[w] &= !b;
                }
            }
            self.hi = n;
        }
        let (w, b) = Self::bit(n);
        self.bits[w] |= b;
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16 + WORDS * 8);
        v.extend_from_slice(&self.hi.to_le_bytes());
        v.extend_from_slice(&self.last_ns.to_le_bytes());
        for w in self.bits {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    }

    fn decode(b: &[u8]) -> Option<Window> {
        if b.len() != 16 + WORDS * 8 {
            return None;
        }
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let mut bits = [0u64; WORDS];
        for (i, w) in bits.iter_mut().enumerate() {
            *w = u(16 + i * 8);
        }
        Some(Window {
            hi: u(0),
            last_ns: u(8),
            bits,
        })
    }
}

/// What `GET /api/ingest` shows under `dedup`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DedupStats {
    /// Requests with an identity that were taken.
    pub taken: u64,
    /// Repeats of a request already taken: answered OK and dropped.
    pub repeats: u64,
    /// Repeats that came while the first was still being taken: told to retry.
    pub busy: u64,
    /// Numbers older than their producer's window, taken without a check.
    pub beyond_window: u64,
    /// Producers remembered now, and forgotten for room.
    pub producers: usize,
    pub producers_forgotten: u64,
    /// Whether the windows are kept in the state store.
    pub persisted: bool,
}

#[derive(Default)]
struct Inner {
    windows: HashMap<Arc<str>, Window>,
    /// Numbers being taken now, per producer.
    busy: HashSet<(Arc<str>, u64)>,
    /// Producers changed since the last write, and those forgotten.
    dirty: HashSet<Arc<str>>,
    forgotten: HashSet<Arc<str>>,
}

/// The windows of every producer a receiver has heard from.
#[derive(Default)]
pub struct Dedup {
    inner: Mutex<Inner>,
    /// The windows are written by the flusher (`durable.rs`).
    persisted: AtomicBool,
    taken: AtomicU64,
    repeats: AtomicU64,
    busy: AtomicU64,
    beyond: AtomicU64,
    forgotten: AtomicU64,
}

/// What to do with a request.
pub enum Admit<'a> {
    /// No identity: take it, nothing to remember.
    Untracked,
    /// New: take it, then [`Ticket::commit`].
    New(Ticket<'a>),
    /// Taken before: answer OK and drop it.
    Repeat,
    /// Being taken right now by another call: answer "retry".
    Busy,
}

/// A request being taken. Dropped without `commit` (it was refused), its
/// number is free again.
pub struct Ticket<'a> {
    dedup: &'a Dedup,
    id: RequestId,
    done: bool,
}

impl Ticket<'_> {
    /// The request was taken: remember its number.
    pub fn commit(mut self) {
        self.done = true;
        let mut g = self.dedup.inner.lock();
        let inner = &mut *g;
        inner.busy.remove(&(self.id.producer.clone(), self.id.seq));
        let w = inner
            .windows
            .entry(self.id.producer.clone())
            .or_insert_with(Window::new);
        w.mark(self.id.seq);
        w.last_ns = crate::model::now_ns();
        inner.forgotten.remove(&self.id.producer);
        inner.dirty.insert(self.id.producer.clone());
        self.dedup.taken.fetch_add(1, Relaxed);
        if inner.windows.len() > MAX_PRODUCERS {
            self.dedup.forget_oldest(inner);
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.dedup
                .inner
                .lock()
                .busy
                .remove(&(self.id.producer.clone(), self.id.seq));
        }
    }
}

impl Dedup {
    /// Decides what to do with a request carrying `id` (None: untracked).
    pub fn admit(&self, id: Option<RequestId>) -> Admit<'_> {
        let Some(id) = id else {
            return Admit::Untracked;
        };
        let mut inner = self.inner.lock();
        if let Some(w) = inner.windows.get(&id.producer) {
            if w.has(id.seq) {
                self.repeats.fetch_add(1, Relaxed);
                return Admit::Repeat;
            }
            if w.beyond(id.seq) {
                self.beyond.fetch_add(1, Relaxed);
            }
        }
        if !inner.busy.insert((id.producer.clone(), id.seq)) {
            self.busy.fetch_add(1, Relaxed);
            return Admit::Busy;
        }
        Admit::New(Ticket {
            dedup: self,
            id,
            done: false,
        })
    }

    fn forget_oldest(&self, inner: &mut Inner) {
        while inner.windows.len() > MAX_PRODUCERS {
            let Some(oldest) = inner
                .windows
                .iter()
                .min_by_key(|(_, w)| w.last_ns)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            inner.windows.remove(&oldest);
            inner.dirty.remove(&oldest);
            inner.forgotten.insert(oldest);
            self.forgotten.fetch_add(1, Relaxed);
        }
    }

    pub fn stats(&self) -> DedupStats {
        DedupStats {
            taken: self.taken.load(Relaxed),
            repeats: self.repeats.load(Relaxed),
            busy: self.busy.load(Relaxed),
            beyond_window: self.beyond.load(Relaxed),
            producers: self.inner.lock().windows.len(),
            producers_forgotten: self.forgotten.load(Relaxed),
            persisted: self.persisted.load(Relaxed),
        }
    }

    /// Reads back the windows an earlier run wrote, and from now on hands
    /// its changes to the flusher (register it with `Commits::add`).
    /// Returns how many producers it read back.
    pub fn restore_from(&self, store: &PluginState) -> usize {
        let mut read = 0;
        match store.entries("") {
            Ok(entries) => {
                let mut inner = self.inner.lock();
                for (k, v) in entries {
                    match Window::decode(&v) {
                        Some(w) => {
                            inner.windows.insert(Arc::from(k.as_str()), w);
                            read += 1;
                        }
                        None => tracing::warn!(producer = %k, "a persisted dedup window is damaged: forgotten"),
                    }
                }
                self.forget_oldest(&mut inner);
            }
            Err(e) => tracing::warn!("reading the dedup windows: {e}: starting without them"),
        }
        self.persisted.store(true, Relaxed);
        read
    }
}

/// What a flush took: producers changed and forgotten.
type Undo = (Vec<Arc<str>>, Vec<Arc<str>>);

impl Durable for Dedup {
    fn namespace(&self) -> &'static str {
        NAMESPACE
    }

    fn take_changes(&self) -> Option<Taken> {
        let mut inner = self.inner.lock();
        if inner.dirty.is_empty() && inner.forgotten.is_empty() {
            return None;
        }
        let dirty: Vec<Arc<str>> = std::mem::take(&mut inner.dirty).into_iter().collect();
        let forgotten: Vec<Arc<str>> = std::mem::take(&mut inner.forgotten).into_iter().collect();
        let changes = dirty
            .iter()
            .filter_map(|p| inner.windows.get(p).map(|w| Change::Put(p.to_string(), w.encode())))
            .chain(forgotten.iter().map(|p| Change::Delete(p.to_string())))
            .collect();
        Some(Taken {
            changes,
            undo: Box::new((dirty, forgotten) as Undo),
        })
    }

    fn failed(&self, undo: Box<dyn std::any::Any + Send>) {
        if let Ok(u) = undo.downcast::<Undo>() {
            let (dirty, forgotten) = *u;
            let mut inner = self.inner.lock();
            // A producer forgotten meanwhile stays forgotten.
            let dirty: Vec<Arc<str>> = dirty.into_iter().filter(|p| inner.windows.contains_key(p)).collect();
            inner.dirty.extend(dirty);
            inner.forgotten.extend(forgotten);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(p: &str, n: u64) -> Option<RequestId> {
        Some(RequestId {
            producer: Arc::from(p),
            seq: n,
        })
    }

    fn take(d: &Dedup, p: &str, n: u64) -> &'static str {
        match d.admit(id(p, n)) {
            Admit::New(t) => {
                t.commit();
                "new"
            }
            Admit::Repeat => "repeat",
            Admit::Busy => "busy",
            Admit::Untracked => "untracked",
        }
    }

    #[test]
    fn a_repeat_is_recognised_in_any_order_and_per_producer() {
        let d = Dedup::default();
        for n in [1, 2, 4, 3] {
            assert_eq!(take(&d, "a", n), "new", "{n}");
        }
        for n in [1, 2, 3, 4] {
            assert_eq!(take(&d, "a", n), "repeat", "{n}");
        }
        assert_eq!(take(&d, "b", 1), "new", "another producer's 1");
        assert_eq!(take(&d, "a", 6), "new");
        assert_eq!(take(&d, "a", 5), "new", "a gap is filled later");
        assert!(matches!(d.admit(None), Admit::Untracked));
        let s = d.stats();
        assert_eq!((s.taken, s.repeats, s.producers), (7, 4, 2));
    }

    #[test]
    fn a_refused_request_is_free_again_and_a_concurrent_repeat_is_busy() {
        let d = Dedup::default();
        let Admit::New(t) = d.admit(id("a", 9)) else { panic!() };
        assert!(matches!(d.admit(id("a", 9)), Admit::Busy));
        drop(t); // refused: the hub was full
        assert_eq!(take(&d, "a", 9), "new");
        assert_eq!(take(&d, "a", 9), "repeat");
    }

    #[test]
    fn the_window_slides_and_what_falls_out_is_taken_and_counted() {
        let d = Dedup::default();
        assert_eq!(take(&d, "a", 1), "new");
        assert_eq!(take(&d, "a", 1 + WINDOW), "new");
        assert_eq!(take(&d, "a", 1), "new", "beyond the window: cannot tell");
        assert_eq!(d.stats().beyond_window, 1);
        assert_eq!(take(&d, "a", 2), "new", "cleared when the window moved past it");
        assert_eq!(take(&d, "a", 2 + WINDOW), "new");
        assert_eq!(take(&d, "a", 3 * WINDOW), "new", "a jump clears everything");
        assert_eq!(take(&d, "a", 3 * WINDOW - 1), "new");
        assert_eq!(take(&d, "a", 3 * WINDOW - 1), "repeat");
    }

    #[test]
    fn windows_survive_a_restart_through_the_state_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let flush = |store: &crate::state::StateStore, d: &Dedup| {
            let t = d.take_changes().unwrap();
            let writes: Vec<_> = t.changes.iter().map(|c| (NAMESPACE, c.as_write())).collect();
            store.write_many(&writes).unwrap();
        };
        {
            let store = crate::state::StateStore::open(&path).unwrap();
            let d = Dedup::default();
            assert_eq!(d.restore_from(&store.namespace(NAMESPACE)), 0);
            for n in 1..=5 {
                take(&d, "agent-1", n);
            }
            flush(&store, &d);
            assert!(d.take_changes().is_none(), "nothing changed since");
            take(&d, "agent-1", 6);
            let t = d.take_changes().unwrap();
            d.failed(t.undo);
            assert!(d.take_changes().is_some(), "a failed write is marked changed again");
        }
        let store = crate::state::StateStore::open(&path).unwrap();
        let d = Dedup::default();
        assert_eq!(d.restore_from(&store.namespace(NAMESPACE)), 1);
        assert_eq!(take(&d, "agent-1", 3), "repeat", "remembered across the restart");
        assert_eq!(take(&d, "agent-1", 6), "new", "6 was never written");
        assert!(d.stats().persisted);
    }
}
