//! Plugins' state writes, committed behind the hook call that made them.
//!
//! ```text
//!  state-put / -delete / -append / -trim, in a hook call
//!        │  push one change under a mutex (microseconds); a full backlog
//!        │  or a store that cannot write refuses it, and nothing is kept
//!        ▼
//!  Pending { changes, bytes }     ≤ MAX_PENDING_BYTES not yet on disk
//!        │  the writer thread takes every pending change:
//!        │  one durable transaction for all of them (a group commit)
//!        ▼
//!  state.redb                     then the changes leave Pending;
//!                                 a failed commit keeps them, retried each second
//!
//!  state-get / -keys / -read: a read transaction of the database, taken
//!  together with the pending changes of the plugin's namespace, which are
//!  replayed over what it reads. A plugin reads its own writes at once.
//! ```
//!
//! Why: a durable commit waits for the disk's flush, and for whichever commit
//! holds redb's one writer (another plugin's, the job registry's, the ingest's
//! acknowledgements). On this project's VM that reached 73 ms inside one
//! 3 ms hook call. Here a hook call pushes its change and returns; the wait is
//! the writer thread's.
//!
//! What it costs: a host killed with -9 loses the changes not yet committed
//! (normally one commit's worth, a few milliseconds of writes). A trap loses
//! nothing (the host lives on), and a host that stops commits what is pending
//! before it exits ([`WriteBehind::shut_down`]). Where an answer must not
//! outlive a crash, the caller waits for the commit: a plugin route called
//! with any method but GET and HEAD answers only once its plugin's changes
//! are on disk (`flush_namespace`, from `plugin::manager`).
//!
//! Replaying is safe because every change is "the last one wins" for the keys
//! it touches: replaying changes the database already holds over it gives the
//! same result. So a read may take the database before or after a commit of
//! the changes it replays, as long as it never misses a change that was
//! committed after its read began and already left Pending: the read
//! transaction and the snapshot of Pending are taken under the same mutex the
//! writer takes to drop committed changes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use parking_lot::{Condvar, Mutex};
use redb::{Database, ReadTransaction, ReadableTable};

use super::{Db, KV, SEQ, STREAMS, Write, apply};

/// Most bytes of changes held in memory while the disk is behind: beyond it
/// a write is refused (the plugin sees the error) rather than held.
pub const MAX_PENDING_BYTES: usize = 64 << 20;

/// How long the writer waits after a failed commit before it tries again.
const RETRY: Duration = Duration::from_secs(1);

/// One change to a plugin's slice of the store.
#[derive(Debug)]
pub(crate) enum Change {
    Put(String, Vec<u8>),
    Delete(String),
    DeletePrefix(String),
    /// A record, its sequence number given out when it was pushed.
    Append(String, u64, Vec<u8>),
    /// Drop the stream's records numbered below this.
    Trim(String, u64),
}

#[derive(Debug)]
pub(crate) struct Pushed {
    ns: String,
    change: Change,
}

impl Pushed {
    fn bytes(&self) -> usize {
        let payload = match &self.change {
            Change::Put(k, v) | Change::Append(k, _, v) => k.len() + v.len(),
            Change::Delete(k) | Change::DeletePrefix(k) | Change::Trim(k, _) => k.len(),
        };
        payload + self.ns.len() + 32
    }
}

#[derive(Default)]
struct Pending {
    changes: VecDeque<Arc<Pushed>>,
    bytes: usize,
    /// Changes committed since the store opened (the first of `changes` is
    /// number `committed`).
    committed: u64,
    /// The last sequence number given out per (namespace, stream).
    seqs: HashMap<(String, String), u64>,
    /// Per namespace, the changes pushed up to its latest: it is on disk
    /// once `committed` reaches this.
    tickets: HashMap<String, u64>,
    /// The last commit failed with this; cleared by the next that succeeds.
    failing: Option<String>,
    /// Commits tried, successful or not.
    attempts: u64,
    commits: u64,
    longest_commit: Duration,
    stopping: bool,
}

impl Pending {
    /// Notes that `ns`'s latest change is the last pushed.
    fn ticket(&mut self, ns: &str) {
        let pushed = self.committed + self.changes.len() as u64;
        match self.tickets.get_mut(ns) {
            Some(t) => *t = pushed,
            None => {
                self.tickets.insert(ns.to_string(), pushed);
            }
        }
    }
}

/// What `/api/status` shows of the writer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Backlog {
    /// Changes pushed and not yet on disk.
    pub changes: usize,
    pub bytes: usize,
    /// Group commits so far, and the longest one.
    pub commits: u64,
    pub longest_commit_ms: f64,
    /// Why the last commit failed, while it is failing.
    pub last_error: Option<String>,
}

/// The pending changes and the writer thread's signals.
#[derive(Default)]
pub(crate) struct WriteBehind {
    pending: Mutex<Pending>,
    /// Wakes the writer: there is work, or the store is closing.
    work: Condvar,
    /// Wakes those waiting in [`Self::flush`]: a commit ended.
    done: Condvar,
    /// Tests hold it to keep changes pending.
    #[cfg(test)]
    pub(crate) hold: Mutex<()>,
}

/// What a read sees: the database as of one instant, and the changes of one
/// namespace not yet committed at that instant, oldest first.
pub(crate) struct View {
    pub txn: ReadTransaction,
    pub changes: Vec<Arc<Pushed>>,
}

impl WriteBehind {
    /// Pushes changes of one namespace, all or none. Err (nothing kept) when
    /// the store cannot write or is too far behind.
    pub fn push(&self, ns: &str, changes: Vec<Change>) -> Result<()> {
        let mut p = self.pending.lock();
        self.admit(&p)?;
        for change in changes {
            let pushed = Arc::new(Pushed {
                ns: ns.to_string(),
                change,
            });
            p.bytes += pushed.bytes();
            p.changes.push_back(pushed);
        }
        p.ticket(ns);
        drop(p);
        self.work.notify_one();
        Ok(())
    }

    /// Pushes one record; its sequence number is the stream's last plus one,
    /// the last read from the database on the stream's first append.
    pub fn append(&self, db: &Database, ns: &str, stream: &str, record: Vec<u8>) -> Result<u64> {
        let mut p = self.pending.lock();
        self.admit(&p)?;
        let key = (ns.to_string(), stream.to_string());
        let last = match p.seqs.get(&key) {
            Some(s) => *s,
            None => {
                let r = db.begin_read()?;
                let t = r.open_table(SEQ)?;
                t.get((ns, stream))?.map(|v| v.value()).unwrap_or(0)
            }
        };
        let seq = last + 1;
        p.seqs.insert(key, seq);
        let pushed = Arc::new(Pushed {
            ns: ns.to_string(),
            change: Change::Append(stream.to_string(), seq, record),
        });
        p.bytes += pushed.bytes();
        p.changes.push_back(pushed);
        p.ticket(ns);
        drop(p);
        self.work.notify_one();
        Ok(seq)
    }

    fn admit(&self, p: &Pending) -> Result<()> {
        if let Some(e) = &p.failing {
            anyhow::bail!(
                "the state store cannot write ({e}); {} earlier changes wait to be written",
                p.changes.len()
            );
        }
        if p.bytes > MAX_PENDING_BYTES {
            anyhow::bail!(
                "the state store is {} MiB behind the disk (limit {} MiB); try again later",
                p.bytes >> 20,
                MAX_PENDING_BYTES >> 20
            );
        }
        Ok(())
    }

    /// A read transaction and the namespace's pending changes, taken together.
    pub fn view(&self, db: &Database, ns: &str) -> Result<View> {
        let p = self.pending.lock();
        let txn = db.begin_read()?;
        let changes = p.changes.iter().filter(|c| c.ns == ns).cloned().collect();
        Ok(View { txn, changes })
    }

    pub fn backlog(&self) -> Backlog {
        let p = self.pending.lock();
        Backlog {
            changes: p.changes.len(),
            bytes: p.bytes,
            commits: p.commits,
            longest_commit_ms: p.longest_commit.as_secs_f64() * 1000.0,
            last_error: p.failing.clone(),
        }
    }

    /// Waits until every change pushed before this call is on disk, or a
    /// commit after it failed, or `wait` passed.
    pub fn flush(&self, wait: Duration) -> Result<()> {
        let target = {
            let p = self.pending.lock();
            p.committed + p.changes.len() as u64
        };
        self.flush_through(target, wait)
    }

    /// [`Self::flush`] for the changes of one namespace only (and those
    /// pushed before them): at once when none of its changes wait.
    pub fn flush_namespace(&self, ns: &str, wait: Duration) -> Result<()> {
        let target = self.pending.lock().tickets.get(ns).copied().unwrap_or(0);
        self.flush_through(target, wait)
    }

    fn flush_through(&self, target: u64, wait: Duration) -> Result<()> {
        let until = Instant::now() + wait;
        let mut p = self.pending.lock();
        let attempts = p.attempts;
        loop {
            if p.committed >= target {
                return Ok(());
            }
            if p.attempts > attempts
                && let Some(e) = &p.failing
            {
                anyhow::bail!("{} changes of plugin state are not on disk: {e}", p.changes.len());
            }
            if self.done.wait_until(&mut p, until).timed_out() {
                anyhow::bail!(
                    "{} changes of plugin state are not on disk after {wait:?}",
                    p.changes.len()
                );
            }
        }
    }

    /// Asks the writer to commit what is pending and end.
    pub fn shut_down(&self) {
        self.pending.lock().stopping = true;
        self.work.notify_all();
    }

    /// The writer thread: one durable commit of everything pending, again
    /// and again, until [`Self::shut_down`] and nothing is left (or a commit
    /// after it failed: what it held is logged as lost).
    pub fn run(&self, db: &Db) {
        loop {
            let batch: Vec<Arc<Pushed>> = {
                let mut p = self.pending.lock();
                while p.changes.is_empty() && !p.stopping {
                    self.work.wait(&mut p);
                }
                if p.changes.is_empty() {
                    return;
                }
                p.changes.iter().cloned().collect()
            };
            #[cfg(test)]
            let held = self.hold.lock();
            let began = Instant::now();
            let result = db.with(|d| commit(d, &batch));
            #[cfg(test)]
            drop(held);
            let took = began.elapsed();
            let mut p = self.pending.lock();
            p.attempts += 1;
            match result {
                Ok(()) => {
                    for _ in 0..batch.len() {
                        if let Some(c) = p.changes.pop_front() {
                            p.bytes -= c.bytes();
                        }
                    }
                    p.committed += batch.len() as u64;
                    p.commits += 1;
                    p.longest_commit = p.longest_commit.max(took);
                    if p.failing.take().is_some() {
                        tracing::info!("plugin state is written again");
                    }
                    self.done.notify_all();
                }
                Err(e) => {
                    let text = format!("{e:#}");
                    if p.failing.is_none() {
                        tracing::warn!(
                            "writing plugin state failed ({text}); {} changes kept in memory, tried again each second",
                            p.changes.len()
                        );
                    }
                    p.failing = Some(text);
                    self.done.notify_all();
                    if p.stopping {
                        tracing::error!(
                            "{} changes of plugin state were not written before the host stopped",
                            p.changes.len()
                        );
                        return;
                    }
                    let _ = self.work.wait_for(&mut p, RETRY);
                }
            }
        }
    }
}

/// One durable transaction with every change of `batch`, in order.
fn commit(db: &Database, batch: &[Arc<Pushed>]) -> Result<()> {
    let w = db.begin_write()?;
    {
        let mut kv = w.open_table(KV)?;
        let mut streams = w.open_table(STREAMS)?;
        let mut seqs = w.open_table(SEQ)?;
        for c in batch {
            let ns = c.ns.as_str();
            match &c.change {
                Change::Put(k, v) => apply(&mut kv, ns, Write::Put(k, v))?,
                Change::Delete(k) => apply(&mut kv, ns, Write::Delete(k))?,
                Change::DeletePrefix(p) => apply(&mut kv, ns, Write::DeletePrefix(p))?,
                Change::Append(stream, seq, record) => {
                    streams.insert((ns, stream.as_str(), *seq), record.as_slice())?;
                    // The high-water mark lives in its own table so numbers
                    // never go back, even after every record was trimmed.
                    let last = seqs.get((ns, stream.as_str()))?.map(|v| v.value()).unwrap_or(0);
                    if *seq > last {
                        seqs.insert((ns, stream.as_str()), *seq)?;
                    }
                }
                Change::Trim(stream, before) => {
                    let doomed: Vec<u64> = streams
                        .range((ns, stream.as_str(), 0)..(ns, stream.as_str(), *before))?
                        .map(|i| i.map(|(k, _)| k.value().2))
                        .collect::<Result<_, _>>()?;
                    for seq in doomed {
                        streams.remove((ns, stream.as_str(), seq))?;
                    }
                }
            }
        }
    }
    w.commit()?;
    Ok(())
}

impl View {
    /// The value of `key`: the last pending change that touches it, else the database's.
    pub fn get(&self, ns: &str, key: &str) -> Result<Option<Vec<u8>>> {
        for c in self.changes.iter().rev() {
            match &c.change {
                Change::Put(k, v) if k == key => return Ok(Some(v.clone())),
                Change::Delete(k) if k == key => return Ok(None),
                Change::DeletePrefix(p) if key.starts_with(p.as_str()) => return Ok(None),
                _ => {}
            }
        }
        let t = self.txn.open_table(KV)?;
        Ok(t.get((ns, key))?.map(|v| v.value().to_vec()))
    }

    /// Every key starting with `prefix`, with its value, in key order.
    pub fn entries(&self, ns: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(self.scan(ns, prefix, |v| v.to_vec())?.into_iter().collect())
    }

    /// Every key starting with `prefix`, in order, no value read.
    pub fn keys(&self, ns: &str, prefix: &str) -> Result<Vec<String>> {
        Ok(self.scan(ns, prefix, |_| ())?.into_keys().collect())
    }

    /// The keys under `prefix` with `keep(value)` of each: the database's,
    /// then the pending changes replayed over them.
    fn scan<T>(&self, ns: &str, prefix: &str, keep: impl Fn(&[u8]) -> T) -> Result<BTreeMap<String, T>> {
        let t = self.txn.open_table(KV)?;
        let mut out: BTreeMap<String, T> = BTreeMap::new();
        for item in t.range((ns, prefix)..)? {
            let (k, v) = item?;
            let (p, key) = k.value();
            if p != ns || !key.starts_with(prefix) {
                break;
            }
            out.insert(key.to_string(), keep(v.value()));
        }
        for c in &self.changes {
            match &c.change {
                Change::Put(k, v) if k.starts_with(prefix) => {
                    out.insert(k.clone(), keep(v));
                }
                Change::Delete(k) => {
                    out.remove(k);
                }
                Change::DeletePrefix(p) => out.retain(|k, _| !k.starts_with(p.as_str())),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Up to `max` records of `stream` numbered `from` or more.
    pub fn read(&self, ns: &str, stream: &str, from: u64, max: u32) -> Result<Vec<(u64, Vec<u8>)>> {
        let mine = |s: &String| s == stream;
        // Every pending trim drops the database's records below it: a record
        // there that no pending change writes again is older than all of them.
        let trimmed = self
            .changes
            .iter()
            .filter_map(|c| match &c.change {
                Change::Trim(s, before) if mine(s) => Some(*before),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let t = self.txn.open_table(STREAMS)?;
        let mut out: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for item in t.range((ns, stream, from.max(trimmed))..=(ns, stream, u64::MAX))? {
            if out.len() >= max as usize {
                break;
            }
            let (k, v) = item?;
            out.insert(k.value().2, v.value().to_vec());
        }
        // Pending appends and trims in order: a trim drops what came before it.
        for c in &self.changes {
            match &c.change {
                Change::Append(s, seq, record) if mine(s) && *seq >= from => {
                    out.insert(*seq, record.clone());
                }
                Change::Trim(s, before) if mine(s) => out.retain(|seq, _| *seq >= *before),
                _ => {}
            }
        }
        Ok(out.into_iter().take(max as usize).collect())
    }
}
