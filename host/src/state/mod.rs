//! state/: what plugins hand to the host to keep across traps and restarts
//! (a planner's shard queues, a checkpoint, runtime statistics), and what the
//! host keeps of its own in namespaces that start with `@` (findings, the
//! dedup windows, the job registry).
//!
//! One embedded redb database per host (`<data_dir>/state.redb`), with every
//! plugin in its own namespace. Two shapes: a key/value map, and append-only
//! streams of records with ascending sequence numbers.
//!
//! Two ways in:
//! - [`PluginState`], one namespace: its writes are committed behind the
//!   caller by one writer thread, many in one transaction
//!   ([`write_behind`]); its reads see them at once. A plugin's hook call
//!   never waits for the disk.
//! - [`StateStore::write_many`], the host's own: one durable transaction,
//!   on disk when it returns (the ingest acknowledges a request only then).
//!
//! Memory: redb's page cache is capped at 16 MiB ([`CACHE_BYTES`]); writes
//! not yet on disk at [`write_behind::MAX_PENDING_BYTES`].
//!
//! A full disk: redb refuses every transaction after an I/O error until the
//! database is opened again, so an operation that meets one closes it, and
//! the next operation opens it again (which fails, and is retried by the one
//! after, while the disk stays full). Writes fail meanwhile; nothing written
//! before is lost: the writer keeps what it could not commit and tries again.

pub mod write_behind;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use parking_lot::{Mutex, RwLock};
use redb::{Database, ReadableTable, TableDefinition};

use write_behind::{Backlog, Change, WriteBehind};

/// (plugin, key) -> value
const KV: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("kv");
/// (plugin, stream, seq) -> record
const STREAMS: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("streams");
/// (plugin, stream) -> last sequence number handed out
const SEQ: TableDefinition<(&str, &str), u64> = TableDefinition::new("stream_seq");

/// Largest value or record accepted, so one plugin cannot fill the disk in one call.
pub const MAX_VALUE_BYTES: usize = 16 << 20;

#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

/// Shared by every clone; the last one to go commits what is pending and
/// ends the writer thread.
struct Inner {
    db: Arc<Db>,
    behind: Arc<WriteBehind>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.behind.shut_down();
        if let Some(t) = self.writer.lock().take() {
            let _ = t.join();
        }
    }
}

/// The database, opened again after an I/O error.
pub(crate) struct Db {
    path: PathBuf,
    /// None after an I/O error: opened again by the next operation.
    db: RwLock<Option<Arc<Database>>>,
    /// An I/O error was logged and the store has not opened since.
    failing: AtomicBool,
}

/// redb's page cache. Its default (1 GiB) kept every page a start read back
/// or a flush wrote: a sonde with 60 000 steps in its job registry held
/// 103 MB before a `kill -9` and 120 MB after its restart, against 82 and
/// 87 MB with this cap, ready as fast (`./dev bench-restart-rss`). The
/// store is written far more than read, and read whole only at start.
const CACHE_BYTES: usize = 16 << 20;

fn open_db(path: &Path) -> Result<Database> {
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .with_context(|| format!("opening the state store {}", path.display()))?;
    // Create the tables once so readers never see "table does not exist".
    let w = db.begin_write()?;
    w.open_table(KV)?;
    w.open_table(STREAMS)?;
    w.open_table(SEQ)?;
    w.commit()?;
    Ok(db)
}

impl Db {
    fn get(&self) -> Result<Arc<Database>> {
        if let Some(d) = self.db.read().as_ref() {
            return Ok(d.clone());
        }
        let mut slot = self.db.write();
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(open_db(&self.path)?);
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(path = %self.path.display(), "the state store is open again");
        }
        *slot = Some(d.clone());
        Ok(d)
    }

    /// Runs `f` on the database; after an I/O error closes it, to be opened
    /// again by the next operation.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Database) -> Result<T>) -> Result<T> {
        let db = self.get()?;
        let r = f(&db);
        if let Err(e) = &r {
            // redb's I/O errors (its own and "Previous I/O error occurred")
            // come wrapped in several error types; their text names them.
            let text = format!("{e:#}");
            if text.contains("I/O error") {
                drop(db);
                self.db.write().take();
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(path = %self.path.display(), "the state store met an I/O error ({text}): closed, opened again at its next use");
                }
            }
        }
        r
    }
}

impl StateStore {
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let db = Arc::new(Db {
            path: path.to_path_buf(),
            db: RwLock::new(Some(Arc::new(open_db(path)?))),
            failing: AtomicBool::new(false),
        });
        let behind = Arc::new(WriteBehind::default());
        let writer = {
            let (db, behind) = (db.clone(), behind.clone());
            std::thread::Builder::new()
                .name("sonde-state".into())
                .spawn(move || behind.run(&db))
                .context("starting the state store's writer")?
        };
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                behind,
                writer: Mutex::new(Some(writer)),
            }),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&Database) -> Result<T>) -> Result<T> {
        self.inner.db.with(f)
    }

    /// Puts and deletes in several namespaces, (namespace, change), in one
    /// durable transaction: all of them or none, on disk when it returns.
    pub fn write_many(&self, writes: &[(&str, Write<'_>)]) -> Result<()> {
        for (_, w) in writes {
            if let Write::Put(_, v) = w {
                check_size(v.len())?;
            }
        }
        self.with(|db| {
            let w = db.begin_write()?;
            {
                let mut t = w.open_table(KV)?;
                for (ns, op) in writes {
                    apply(&mut t, ns, *op)?;
                }
            }
            w.commit()?;
            Ok(())
        })
    }

    /// A view limited to one plugin's namespace.
    pub fn namespace(&self, plugin: &str) -> PluginState {
        PluginState {
            store: self.clone(),
            plugin: plugin.to_string(),
        }
    }

    /// Waits until every namespace write made before this call is on disk
    /// (at most `wait`): a host that stops calls it last.
    pub fn flush(&self, wait: Duration) -> Result<()> {
        self.inner.behind.flush(wait)
    }

    /// Waits until `ns`'s writes made before this call are on disk (at most
    /// `wait`): a plugin's route answers only then.
    pub fn flush_namespace(&self, ns: &str, wait: Duration) -> Result<()> {
        self.inner.behind.flush_namespace(ns, wait)
    }

    /// Namespace writes not yet on disk, and how the commits went.
    pub fn backlog(&self) -> Backlog {
        self.inner.behind.backlog()
    }
}

/// One change of a [`PluginState::write_all`].
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    Put(&'a str, &'a [u8]),
    Delete(&'a str),
    /// Every key that starts with it.
    DeletePrefix(&'a str),
}

/// One plugin's slice of the store. Writes return once the change is
/// pushed to the writer ([`write_behind`]); reads see them at once.
#[derive(Clone)]
pub struct PluginState {
    store: StateStore,
    plugin: String,
}

impl PluginState {
    fn view(&self) -> Result<write_behind::View> {
        self.store.with(|db| self.store.inner.behind.view(db, &self.plugin))
    }

    fn push(&self, changes: Vec<Change>) -> Result<()> {
        self.store.inner.behind.push(&self.plugin, changes)
    }

    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.view()?.get(&self.plugin, key)
    }

    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        check_size(value.len())?;
        self.push(vec![Change::Put(key.to_string(), value.to_vec())])
    }

    /// Several puts and deletes, committed in one transaction: all of them or none.
    pub fn write_all(&self, writes: &[Write<'_>]) -> Result<()> {
        let mut changes = Vec::with_capacity(writes.len());
        for w in writes {
            changes.push(match *w {
                Write::Put(k, v) => {
                    check_size(v.len())?;
                    Change::Put(k.to_string(), v.to_vec())
                }
                Write::Delete(k) => Change::Delete(k.to_string()),
                Write::DeletePrefix(p) => Change::DeletePrefix(p.to_string()),
            });
        }
        self.push(changes)
    }

    /// Every key starting with `prefix`, with its value, in key order.
    pub fn entries(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.view()?.entries(&self.plugin, prefix)
    }

    pub fn delete(&self, key: &str) -> Result<()> {
        self.push(vec![Change::Delete(key.to_string())])
    }

    pub fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        self.view()?.keys(&self.plugin, prefix)
    }

    /// Appends a record; sequence numbers start at 1 and only grow, even
    /// after trims.
    pub fn append(&self, stream: &str, record: &[u8]) -> Result<u64> {
        check_size(record.len())?;
        let db = self.store.inner.db.get()?;
        self.store
            .inner
            .behind
            .append(&db, &self.plugin, stream, record.to_vec())
    }

    pub fn read(&self, stream: &str, from: u64, max: u32) -> Result<Vec<(u64, Vec<u8>)>> {
        self.view()?.read(&self.plugin, stream, from, max)
    }

    pub fn trim(&self, stream: &str, before: u64) -> Result<()> {
        self.push(vec![Change::Trim(stream.to_string(), before)])
    }
}

/// One change in the KV table of namespace `ns`.
fn apply(t: &mut redb::Table<'_, (&'static str, &'static str), &'static [u8]>, ns: &str, op: Write<'_>) -> Result<()> {
    match op {
        Write::Put(k, v) => {
            t.insert((ns, k), v)?;
        }
        Write::Delete(k) => {
            t.remove((ns, k))?;
        }
        Write::DeletePrefix(prefix) => {
            let mut doomed: Vec<String> = Vec::new();
            for item in t.range((ns, prefix)..)? {
                let (k, _) = item?;
                let (p, key) = k.value();
                if p != ns || !key.starts_with(prefix) {
                    break;
                }
                doomed.push(key.to_string());
            }
            for k in doomed {
                t.remove((ns, k.as_str()))?;
            }
        }
    }
    Ok(())
}

fn check_size(n: usize) -> Result<()> {
    if n > MAX_VALUE_BYTES {
        anyhow::bail!("value of {n} bytes is larger than the {MAX_VALUE_BYTES}-byte limit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_is_namespaced_and_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        {
            let s = StateStore::open(&path).unwrap();
            let a = s.namespace("a");
            let b = s.namespace("b");
            a.put("k1", b"one").unwrap();
            a.put("k2", b"two").unwrap();
            a.put("z", b"zed").unwrap();
            b.put("k1", b"other").unwrap();
            assert_eq!(a.get("k1").unwrap().as_deref(), Some(&b"one"[..]));
            assert_eq!(b.get("k1").unwrap().as_deref(), Some(&b"other"[..]));
            assert_eq!(a.keys("k").unwrap(), vec!["k1", "k2"]);
            a.delete("k1").unwrap();
            a.delete("absent").unwrap();
            assert_eq!(a.get("k1").unwrap(), None);
        }
        // Reopen: what was committed is still there.
        let s = StateStore::open(&path).unwrap();
        assert_eq!(s.namespace("a").get("k2").unwrap().as_deref(), Some(&b"two"[..]));
        assert_eq!(s.namespace("b").keys("").unwrap(), vec!["k1"]);
    }

    #[test]
    fn streams_append_read_trim() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(&dir.path().join("s.redb")).unwrap();
        let p = s.namespace("p");
        for i in 1..=5u64 {
            assert_eq!(p.append("stats", format!("r{i}").as_bytes()).unwrap(), i);
        }
        assert_eq!(p.append("other", b"x").unwrap(), 1, "streams number independently");
        let got = p.read("stats", 2, 2).unwrap();
        assert_eq!(got, vec![(2, b"r2".to_vec()), (3, b"r3".to_vec())]);
        p.trim("stats", 6).unwrap();
        assert!(p.read("stats", 0, 10).unwrap().is_empty());
        assert_eq!(
            p.append("stats", b"r6").unwrap(),
            6,
            "numbers never go back after a trim"
        );
        assert_eq!(s.namespace("q").read("stats", 0, 10).unwrap(), vec![]);
    }

    #[test]
    fn write_all_is_one_transaction_with_prefix_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(&dir.path().join("s.redb")).unwrap();
        let p = s.namespace("@p");
        p.write_all(&[
            Write::Put("j/a", b"1"),
            Write::Put("s/a/1", b"x"),
            Write::Put("s/a/2", b"y"),
            Write::Put("s/b/1", b"z"),
        ])
        .unwrap();
        p.write_all(&[
            Write::DeletePrefix("s/a/"),
            Write::Delete("j/a"),
            Write::Put("j/b", b"2"),
        ])
        .unwrap();
        let keys: Vec<String> = p.entries("").unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec!["j/b", "s/b/1"]);
        assert_eq!(p.entries("s/").unwrap(), vec![("s/b/1".to_string(), b"z".to_vec())]);
        let big = vec![0u8; MAX_VALUE_BYTES + 1];
        assert!(p.write_all(&[Write::Put("j/c", b"ok"), Write::Put("k", &big)]).is_err());
        assert_eq!(p.get("j/c").unwrap(), None, "all or none");
    }

    #[test]
    fn oversized_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(&dir.path().join("s.redb")).unwrap();
        let big = vec![0u8; MAX_VALUE_BYTES + 1];
        assert!(
            s.namespace("p")
                .put("k", &big)
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
    }
}

#[cfg(test)]
mod write_behind_tests {
    use super::*;
    use std::collections::BTreeMap;

    /// What the database itself holds for (ns, key), pending changes aside.
    fn on_disk(s: &StateStore, ns: &str, key: &str) -> Option<Vec<u8>> {
        let db = s.inner.db.get().unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(KV).unwrap();
        t.get((ns, key)).unwrap().map(|v| v.value().to_vec())
    }

    #[test]
    fn writes_are_read_back_at_once_and_reach_the_disk_behind_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let s = StateStore::open(&path).unwrap();
        let p = s.namespace("p");
        p.put("old", b"1").unwrap();
        p.append("log", b"r1").unwrap();
        s.flush(Duration::from_secs(10)).unwrap();
        assert_eq!(on_disk(&s, "p", "old").as_deref(), Some(&b"1"[..]));

        let held = s.inner.behind.hold.lock();
        p.put("a", b"x").unwrap();
        p.write_all(&[Write::Put("b", b"y"), Write::Delete("old")]).unwrap();
        assert_eq!(p.append("log", b"r2").unwrap(), 2);
        p.trim("log", 2).unwrap();
        // The plugin sees its writes; the disk does not have them yet.
        assert_eq!(p.get("a").unwrap().as_deref(), Some(&b"x"[..]));
        assert_eq!(p.get("old").unwrap(), None);
        assert_eq!(p.keys("").unwrap(), vec!["a", "b"]);
        assert_eq!(p.read("log", 0, 10).unwrap(), vec![(2, b"r2".to_vec())]);
        assert_eq!(on_disk(&s, "p", "a"), None);
        assert_eq!(on_disk(&s, "p", "old").as_deref(), Some(&b"1"[..]));
        assert!(s.backlog().changes >= 4, "{:?}", s.backlog());
        assert_eq!(s.namespace("q").get("a").unwrap(), None, "namespaces stay apart");
        drop(held);

        s.flush(Duration::from_secs(10)).unwrap();
        assert_eq!(s.backlog().changes, 0);
        assert_eq!(on_disk(&s, "p", "a").as_deref(), Some(&b"x"[..]));
        assert_eq!(on_disk(&s, "p", "old"), None);
        // Closing commits what is still pending.
        p.put("last", b"z").unwrap();
        drop((p, s));
        let s = StateStore::open(&path).unwrap();
        let p = s.namespace("p");
        assert_eq!(p.keys("").unwrap(), vec!["a", "b", "last"]);
        assert_eq!(p.read("log", 0, 10).unwrap(), vec![(2, b"r2".to_vec())]);
        assert_eq!(p.append("log", b"r3").unwrap(), 3, "numbers go on after a restart");
    }

    #[test]
    fn a_namespace_flush_waits_for_its_own_writes_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateStore::open(&dir.path().join("s.redb")).unwrap();
        let short = Duration::from_millis(50);
        s.namespace("quiet").put("k", b"v").unwrap();
        s.flush(Duration::from_secs(10)).unwrap();
        let held = s.inner.behind.hold.lock();
        s.namespace("busy").put("k", b"v").unwrap();
        assert!(s.flush_namespace("quiet", short).is_ok(), "nothing of it waits");
        assert!(s.flush_namespace("never-wrote", short).is_ok());
        let e = s.flush_namespace("busy", short).unwrap_err().to_string();
        assert!(e.contains("not on disk"), "{e}");
        drop(held);
        s.flush_namespace("busy", Duration::from_secs(10)).unwrap();
        assert_eq!(on_disk(&s, "busy", "k").as_deref(), Some(&b"v"[..]));
    }

    /// A model of one namespace: its keys and its stream.
    #[derive(Default, Clone, PartialEq, Debug)]
    struct Model {
        kv: BTreeMap<String, Vec<u8>>,
        log: BTreeMap<u64, Vec<u8>>,
        last_seq: u64,
    }

    /// Random changes and reads, with commits held back and let go at random
    /// points (and one reopen): every read equals the model's.
    #[test]
    fn reads_always_equal_a_model_whatever_is_still_pending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut model = Model::default();
        let mut s = StateStore::open(&path).unwrap();
        let mut held = None;
        for step in 0..3000u32 {
            if step == 1500 {
                held = None;
                drop(s);
                s = StateStore::open(&path).unwrap();
            }
            let p = s.namespace("p");
            let key = format!("k{}/{}", next(3), next(4));
            match next(10) {
                0..=2 => {
                    let v = format!("v{step}").into_bytes();
                    p.put(&key, &v).unwrap();
                    model.kv.insert(key.clone(), v);
                }
                3 => {
                    p.delete(&key).unwrap();
                    model.kv.remove(&key);
                }
                4 => {
                    let prefix = format!("k{}/", next(3));
                    p.write_all(&[Write::DeletePrefix(&prefix), Write::Put(&key, b"w")])
                        .unwrap();
                    model.kv.retain(|k, _| !k.starts_with(&prefix));
                    model.kv.insert(key.clone(), b"w".to_vec());
                }
                5 | 6 => {
                    let r = format!("r{step}").into_bytes();
                    let seq = p.append("log", &r).unwrap();
                    model.last_seq += 1;
                    assert_eq!(seq, model.last_seq);
                    model.log.insert(seq, r);
                }
                7 => {
                    let before = model.last_seq.saturating_sub(next(6));
                    p.trim("log", before).unwrap();
                    model.log.retain(|seq, _| *seq >= before);
                }
                8 => {
                    held = if held.is_some() {
                        None
                    } else {
                        Some(s.inner.behind.hold.lock())
                    }
                }
                _ => {
                    if held.is_none() && next(4) == 0 {
                        s.flush(Duration::from_secs(10)).unwrap();
                    }
                }
            }
            let prefix = format!("k{}", next(3));
            let want: Vec<(String, Vec<u8>)> = model
                .kv
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(p.entries(&prefix).unwrap(), want, "step {step}");
            let keys: Vec<String> = want.iter().map(|(k, _)| k.clone()).collect();
            assert_eq!(p.keys(&prefix).unwrap(), keys, "step {step}");
            assert_eq!(p.get(&key).unwrap(), model.kv.get(&key).cloned(), "step {step}");
            let from = model.last_seq.saturating_sub(next(8));
            let max = 1 + next(4) as u32;
            let want: Vec<(u64, Vec<u8>)> = model
                .log
                .range(from..)
                .take(max as usize)
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            assert_eq!(p.read("log", from, max).unwrap(), want, "step {step}");
        }
        drop(held);
        drop(s);
        let s = StateStore::open(&path).unwrap();
        let p = s.namespace("p");
        assert_eq!(p.entries("").unwrap(), model.kv.into_iter().collect::<Vec<_>>());
        assert_eq!(
            p.read("log", 0, 10_000).unwrap(),
            model.log.into_iter().collect::<Vec<_>>()
        );
    }
}
