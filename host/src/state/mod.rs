//! state/: what plugins hand to the host to keep across traps and restarts
//! (a planner's shard queues, a checkpoint, runtime statistics).
//!
//! One embedded redb database per host (`<data_dir>/state.redb`), with every
//! plugin in its own namespace. Two shapes: a key/value map, and append-only
//! streams of records with ascending sequence numbers. Every write is one
//! durable transaction: when `state-put` returns, the value is on disk.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
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
    db: Arc<Database>,
}

impl StateStore {
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let db = Database::create(path).with_context(|| format!("opening the state store {}", path.display()))?;
        // Create the tables once so readers never see "table does not exist".
        let w = db.begin_write()?;
        w.open_table(KV)?;
        w.open_table(STREAMS)?;
        w.open_table(SEQ)?;
        w.commit()?;
        Ok(Self { db: Arc::new(db) })
    }

    /// A view limited to one plugin's namespace.
    pub fn namespace(&self, plugin: &str) -> PluginState {
        PluginState {
            store: self.clone(),
            plugin: plugin.to_string(),
        }
    }
}

/// One plugin's slice of the store.
#[derive(Clone)]
pub struct PluginState {
    store: StateStore,
    plugin: String,
}

impl PluginState {
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let r = self.store.db.begin_read()?;
        let t = r.open_table(KV)?;
        Ok(t.get((self.plugin.as_str(), key))?.map(|v| v.value().to_vec()))
    }

    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        check_size(value.len())?;
        let w = self.store.db.begin_write()?;
        w.open_table(KV)?.insert((self.plugin.as_str(), key), value)?;
        w.commit()?;
        Ok(())
    }

    pub fn delete(&self, key: &str) -> Result<()> {
        let w = self.store.db.begin_write()?;
        w.open_table(KV)?.remove((self.plugin.as_str(), key))?;
        w.commit()?;
        Ok(())
    }

    pub fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let r = self.store.db.begin_read()?;
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
    }

    /// Appends a record; sequence numbers start at 1 and only grow, even
    /// after trims.
    pub fn append(&self, stream: &str, record: &[u8]) -> Result<u64> {
        check_size(record.len())?;
        let w = self.store.db.begin_write()?;
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
    }

    pub fn read(&self, stream: &str, from: u64, max: u32) -> Result<Vec<(u64, Vec<u8>)>> {
        let r = self.store.db.begin_read()?;
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
    }

    pub fn trim(&self, stream: &str, before: u64) -> Result<()> {
        let w = self.store.db.begin_write()?;
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
    }
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
