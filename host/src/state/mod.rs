//! state/: what plugins hand to the host to keep across traps and restarts
//! (a planner's shard queues, a checkpoint, runtime statistics), and what the
//! host keeps of its own in namespaces that start with `@` (findings, the
//! dedup windows, the job registry).
//!
//! One embedded redb database per host (`<data_dir>/state.redb`), with every
//! plugin in its own namespace. Two shapes: a key/value map, and append-only
//! streams of records with ascending sequence numbers. Every write is one
//! durable transaction: when `state-put` returns, the value is on disk.
//!
//! Memory: redb's page cache is capped at 16 MiB ([`CACHE_BYTES`]).
//!
//! A full disk: redb refuses every transaction after an I/O error until the
//! database is opened again, so an operation that meets one closes it, and
//! the next operation opens it again (which fails, and is retried by the one
//! after, while the disk stays full). Writes fail meanwhile; nothing written
//! before is lost.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use parking_lot::RwLock;
use redb::{Database, ReadableTable, TableDefinition};

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

struct Inner {
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

impl StateStore {
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let db = open_db(path)?;
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                db: RwLock::new(Some(Arc::new(db))),
                failing: AtomicBool::new(false),
            }),
        })
    }

    fn db(&self) -> Result<Arc<Database>> {
        if let Some(d) = self.inner.db.read().as_ref() {
            return Ok(d.clone());
        }
        let mut slot = self.inner.db.write();
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(open_db(&self.inner.path)?);
        if self.inner.failing.swap(false, Ordering::Relaxed) {
            tracing::info!(path = %self.inner.path.display(), "the state store is open again");
        }
        *slot = Some(d.clone());
        Ok(d)
    }

    /// Runs `f` on the database; after an I/O error closes it, to be opened
    /// again by the next operation.
    fn with<T>(&self, f: impl FnOnce(&Database) -> Result<T>) -> Result<T> {
        let db = self.db()?;
        let r = f(&db);
        if let Err(e) = &r {
            // redb's I/O errors (its own and "Previous I/O error occurred")
            // come wrapped in several error types; their text names them.
            let text = format!("{e:#}");
            if text.contains("I/O error") {
                drop(db);
                self.inner.db.write().take();
                if !self.inner.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(path = %self.inner.path.display(), "the state store met an I/O error ({text}): closed, opened again at its next use");
                }
            }
        }
        r
    }

    /// Puts and deletes in several namespaces, (namespace, change), in one
    /// durable transaction: all of them or none.
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
}

/// One change of a [`PluginState::write_all`].
#[derive(Clone, Copy, Debug)]
pub enum Write<'a> {
    Put(&'a str, &'a [u8]),
    Delete(&'a str),
    /// Every key that starts with it.
    DeletePrefix(&'a str),
}

/// One plugin's slice of the store.
#[derive(Clone)]
pub struct PluginState {
    store: StateStore,
    plugin: String,
}

impl PluginState {
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.store.with(|db| {
            let r = db.begin_read()?;
            let t = r.open_table(KV)?;
            Ok(t.get((self.plugin.as_str(), key))?.map(|v| v.value().to_vec()))
        })
    }

    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.store.with(|db| {
            check_size(value.len())?;
            let w = db.begin_write()?;
            w.open_table(KV)?.insert((self.plugin.as_str(), key), value)?;
            w.commit()?;
            Ok(())
        })
    }

    /// Several puts and deletes in one durable transaction: all of them or none.
    pub fn write_all(&self, writes: &[Write<'_>]) -> Result<()> {
        let all: Vec<(&str, Write<'_>)> = writes.iter().map(|w| (self.plugin.as_str(), *w)).collect();
        self.store.write_many(&all)
    }

    /// Every key starting with `prefix`, with its value, in key order.
    pub fn entries(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.store.with(|db| {
            let r = db.begin_read()?;
            let t = r.open_table(KV)?;
            let mut out = Vec::new();
            for item in t.range((self.plugin.as_str(), prefix)..)? {
                let (k, v) = item?;
                let (p, key) = k.value();
                if p != self.plugin || !key.starts_with(prefix) {
                    break;
                }
                out.push((key.to_string(), v.value().to_vec()));
            }
            Ok(out)
        })
    }

    pub fn delete(&self, key: &str) -> Result<()> {
        self.store.with(|db| {
            let w = db.begin_write()?;
            w.open_table(KV)?.remove((self.plugin.as_str(), key))?;
            w.commit()?;
            Ok(())
        })
    }

    pub fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        self.store.with(|db| {
            let r = db.begin_read()?;
            let t = r.open_table(KV)?;
            let mut out = Vec::new();
            for item in t.range((self.plugin.as_str(), prefix)..)? {
                let (k, _) = item?;
                let (p, key) = k.value();
                if p != self.plugin || !key.starts_with(prefix) {
                    break;
                }
                out.push(key.to_string());
            }
            Ok(out)
        })
    }

    /// Appends a record; sequence numbers start at 1 and only grow, even
    /// after trims.
    pub fn append(&self, stream: &str, record: &[u8]) -> Result<u64> {
        self.store.with(|db| {
            check_size(record.len())?;
            let w = db.begin_write()?;
            let seq;
            {
                let mut t = w.open_table(STREAMS)?;
                // The high-water mark lives in its own table so numbers never go
                // back, even after every record was trimmed.
                let mut seqs = w.open_table(SEQ)?;
                let last = seqs
                    .get((self.plugin.as_str(), stream))?
                    .map(|v| v.value())
                    .unwrap_or(0);
                seq = last + 1;
                t.insert((self.plugin.as_str(), stream, seq), record)?;
                seqs.insert((self.plugin.as_str(), stream), seq)?;
            }
            w.commit()?;
            Ok(seq)
        })
    }

    pub fn read(&self, stream: &str, from: u64, max: u32) -> Result<Vec<(u64, Vec<u8>)>> {
        self.store.with(|db| {
            let r = db.begin_read()?;
            let t = r.open_table(STREAMS)?;
            let mut out = Vec::new();
            for item in t.range((self.plugin.as_str(), stream, from)..=(self.plugin.as_str(), stream, u64::MAX))? {
                if out.len() >= max as usize {
                    break;
                }
                let (k, v) = item?;
                out.push((k.value().2, v.value().to_vec()));
            }
            Ok(out)
        })
    }

    pub fn trim(&self, stream: &str, before: u64) -> Result<()> {
        self.store.with(|db| {
            let w = db.begin_write()?;
            {
                let mut t = w.open_table(STREAMS)?;
                let doomed: Vec<u64> = t
                    .range((self.plugin.as_str(), stream, 0)..(self.plugin.as_str(), stream, before))?
                    .map(|i| i.map(|(k, _)| k.value().2))
                    .collect::<Result<_, _>>()?;
                for seq in doomed {
                    t.remove((self.plugin.as_str(), stream, seq))?;
                }
            }
            w.commit()?;
            Ok(())
        })
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
