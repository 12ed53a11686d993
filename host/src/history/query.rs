//! A query's read of one series: the chunks a snapshot names, bucketed at
//! the query's width, with the buckets of sealed chunks kept for the next
//! query of the same view.
//!
//! ```text
//!  snapshot (taken under the store's lock: chunk refs, open head, open buckets)
//!    │ for each sealed chunk, in time order
//!    ├─ wholly inside [from, to] ─► cache (tier, segment, offset, width)
//!    │                               ├─ hit ─► its partial buckets
//!    │                               └─ miss ► pread + decode + bucket ─► kept
//!    ├─ at an edge of the range ──► pread + decode + bucket, point by point
//!    ├─ the open head chunk ──────► decode + bucket (it still grows: never kept)
//!    └─ the open buckets
//!    ▼ partials merged where their starts meet (min, max, sum, count)
//!  Buckets
//! ```
//! A sealed chunk never changes and its place (segment id, offset) is never
//! reused, so its buckets at a given width stay right for as long as they are
//! kept; a chunk whose segment was evicted is simply never asked for again
//! and ages out. Query buckets start at multiples of the width, so the last
//! partial bucket of one chunk and the first of the next share a start and
//! merge exactly. A dashboard redrawing the last hour every few seconds then
//! decodes only the chunks at the range's two edges and the open head.
//!
//! Bounded: `history.query_cache_bytes` (default 32 MiB; 0 turns it off).
//! Past it, the least recently used quarter of the entries goes. An hour's
//! view of 320 series at 1 000 buckets keeps about 11 MB.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use super::Buckets;
use super::store::{Agg, Snapshot};

/// Where a sealed chunk is, and the width it was bucketed at.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    tier: usize,
    seg: u64,
    off: u64,
    width_ms: u64,
}

struct Entry {
    partials: Arc<[Agg]>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    bytes: usize,
    clock: u64,
    hits: u64,
    misses: u64,
    evicted: u64,
}

/// Counts of the cache, for `/api/status`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct QueryCacheStats {
    pub bytes: u64,
    pub budget_bytes: u64,
    pub entries: usize,
    /// Sealed chunks served from the cache, and decoded for it.
    pub hits: u64,
    pub misses: u64,
    /// Entries dropped for the budget.
    pub evicted: u64,
}

/// The buckets of sealed chunks, by chunk and width; see the module comment.
pub(crate) struct QueryCache {
    budget: usize,
    inner: Mutex<Inner>,
}

/// What one entry costs beyond its buckets (key, map slot, Arc header).
const ENTRY_OVERHEAD: usize = 96;

impl QueryCache {
    pub(crate) fn new(budget_bytes: u64) -> QueryCache {
        QueryCache {
            budget: usize::try_from(budget_bytes).unwrap_or(usize::MAX),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn get(&self, key: &Key) -> Option<Arc<[Agg]>> {
        let mut g = self.inner.lock();
        g.clock += 1;
        let now = g.clock;
        match g.entries.get_mut(key) {
            Some(e) => {
                e.last_used = now;
                let p = e.partials.clone();
                g.hits += 1;
                Some(p)
            }
            None => {
                g.misses += 1;
                None
            }
        }
    }

    fn put(&self, key: Key, partials: Arc<[Agg]>) {
        let bytes = partials.len() * std::mem::size_of::<Agg>() + ENTRY_OVERHEAD;
        if bytes > self.budget / 4 {
            return;
        }
        let mut g = self.inner.lock();
        g.clock += 1;
        let last_used = g.clock;
        if let Some(old) = g.entries.insert(
            key,
            Entry {
                partials,
                bytes,
                last_used,
            },
        ) {
            g.bytes -= old.bytes;
        }
        g.bytes += bytes;
        if g.bytes > self.budget {
            // The least recently used quarter goes at once: one sort per
            // eviction round, not one per insert.
            let mut by_age: Vec<(u64, Key)> = g.entries.iter().map(|(k, e)| (e.last_used, *k)).collect();
            by_age.sort_unstable_by_key(|(t, _)| *t);
            let drop_n = (by_age.len() / 4).max(1);
            for (_, k) in by_age.into_iter().take(drop_n) {
                if let Some(e) = g.entries.remove(&k) {
                    g.bytes -= e.bytes;
                    g.evicted += 1;
                }
            }
        }
    }

    pub(crate) fn stats(&self) -> QueryCacheStats {
        let g = self.inner.lock();
        QueryCacheStats {
            bytes: g.bytes as u64,
            budget_bytes: self.budget as u64,
            entries: g.entries.len(),
            hits: g.hits,
            misses: g.misses,
            evicted: g.evicted,
        }
    }
}

/// Buckets of one width from a time-ordered stream of points and partial
/// buckets: only a point or partial past the open bucket starts another (no
/// division per point once a bucket is open).
struct Bucketer {
    width_ms: u64,
    cur: Option<Agg>,
    out: Vec<Agg>,
}

impl Bucketer {
    fn new(width_ms: u64) -> Bucketer {
        Bucketer {
            width_ms: width_ms.max(1),
            cur: None,
            out: Vec::new(),
        }
    }

    /// A point (raw) or a tier bucket (rollup) at `ms`.
    fn add(&mut self, ms: u64, a: Agg) {
        match &mut self.cur {
            Some(c) if ms >= c.start && ms < c.start + self.width_ms => c.merge(&a),
            _ => {
                let mut n = a;
                n.start = ms / self.width_ms * self.width_ms;
                self.open(n);
            }
        }
    }

    /// A partial bucket whose start is already a multiple of the width.
    fn add_partial(&mut self, a: &Agg) {
        match &mut self.cur {
            Some(c) if c.start == a.start => c.merge(a),
            _ => self.open(*a),
        }
    }

    fn open(&mut self, a: Agg) {
        if let Some(c) = self.cur.replace(a)
            && c.count > 0
        {
            self.out.push(c);
        }
    }

    fn finish(mut self) -> Vec<Agg> {
        if let Some(c) = self.cur.take()
            && c.count > 0
        {
            self.out.push(c);
        }
        self.out
    }
}

/// A decoded value as an aggregate: a raw point (NaN is kept raw but never
/// bucketed), or a rollup bucket's min, max, mean and count.
fn agg_of(raw: bool, v: &[f64]) -> Option<Agg> {
    if raw {
        (!v[0].is_nan()).then(|| Agg::point(0, v[0]))
    } else {
        Some(Agg::from_values(0, v))
    }
}

impl Snapshot {
    /// min/max/mean/count per bucket of `width_ms` over `[from_ms, to_ms]`,
    /// sealed chunks wholly inside the range through `cache`. Unreadable
    /// chunks are skipped and counted in `corrupt` (and never cached).
    pub(crate) fn buckets(
        &self,
        id: u32,
        (from_ms, to_ms): (u64, u64),
        width_ms: u64,
        cache: &QueryCache,
        corrupt: &mut u64,
    ) -> Buckets {
        let raw = self.tier() == 0;
        let mut b = Bucketer::new(width_ms);
        let mut buf = Vec::new();
        for c in self.chunks() {
            let (first_ms, last_ms) = (c.r.t_first / 1_000_000, c.r.t_last / 1_000_000);
            let inside = first_ms >= from_ms && last_ms <= to_ms;
            if !inside || cache.budget == 0 {
                let ok = self.read_chunk(c, &mut buf, |t, v| {
                    let ms = t / 1_000_000;
                    if ms >= from_ms
                        && ms <= to_ms
                        && let Some(a) = agg_of(raw, v)
                    {
                        b.add(ms, a);
                    }
                });
                *corrupt += u64::from(!ok);
                continue;
            }
            let key = Key {
                tier: self.tier(),
                seg: c.r.seg,
                off: c.r.off,
                width_ms: b.width_ms,
            };
            let partials = match cache.get(&key) {
                Some(p) => p,
                None => {
                    let mut own = Bucketer::new(width_ms);
                    if !self.read_chunk(c, &mut buf, |t, v| {
                        if let Some(a) = agg_of(raw, v) {
                            own.add(t / 1_000_000, a);
                        }
                    }) {
                        *corrupt += 1;
                        continue;
                    }
                    let p: Arc<[Agg]> = own.finish().into();
                    cache.put(key, p.clone());
                    p
                }
            };
            for a in partials.iter() {
                b.add_partial(a);
            }
        }
        let ok = self.read_head(|t, v| {
            let ms = t / 1_000_000;
            if ms >= from_ms
                && ms <= to_ms
                && let Some(a) = agg_of(raw, v)
            {
                b.add(ms, a);
            }
        });
        *corrupt += u64::from(!ok);
        for a in self.open_buckets() {
            let ms = a.start / 1_000_000;
            if ms >= from_ms && ms <= to_ms {
                b.add(ms, *a);
            }
        }
        let mut out = Buckets {
            id,
            resolution_ms: self.step_ns() / 1_000_000,
            ..Default::default()
        };
        for a in b.finish() {
            out.t.push(a.start);
            out.min.push(a.min);
            out.max.push(a.max);
            out.mean.push(a.sum / a.count as f64);
            out.count.push(a.count);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(start: u64, v: f64) -> Agg {
        Agg::point(start, v)
    }

    #[test]
    fn partials_merge_where_their_starts_meet_and_points_fill_their_buckets() {
        let mut b = Bucketer::new(10);
        b.add(3, p(0, 1.0));
        b.add(9, p(0, 3.0));
        // A chunk's partials: the first shares bucket 0, the next starts at 10.
        b.add_partial(&Agg { start: 0, ..p(0, 5.0) });
        b.add_partial(&Agg { start: 10, ..p(0, 7.0) });
        b.add(25, p(0, -1.0));
        let out = b.finish();
        let got: Vec<(u64, f64, f64, f64, u64)> = out.iter().map(|a| (a.start, a.min, a.max, a.sum, a.count)).collect();
        assert_eq!(
            got,
            [(0, 1.0, 5.0, 9.0, 3), (10, 7.0, 7.0, 7.0, 1), (20, -1.0, -1.0, -1.0, 1)]
        );
    }

    #[test]
    fn the_cache_keeps_within_its_budget_dropping_the_least_recently_used() {
        let one: Arc<[Agg]> = vec![p(0, 1.0); 10].into();
        let entry = 10 * std::mem::size_of::<Agg>() + ENTRY_OVERHEAD;
        let cache = QueryCache::new((entry * 8) as u64);
        let key = |off| Key {
            tier: 1,
            seg: 1,
            off,
            width_ms: 10,
        };
        for off in 0..8 {
            cache.put(key(off), one.clone());
        }
        assert!(cache.get(&key(0)).is_some(), "used last: kept");
        cache.put(key(8), one.clone());
        let st = cache.stats();
        assert!(st.bytes <= st.budget_bytes, "{st:?}");
        assert_eq!((st.entries, st.evicted), (7, 2), "{st:?}");
        assert!(cache.get(&key(0)).is_some() && cache.get(&key(8)).is_some());
        assert!(cache.get(&key(1)).is_none() && cache.get(&key(2)).is_none());
        let off = QueryCache::new(0);
        off.put(key(0), one);
        assert_eq!(off.stats().entries, 0, "a zero budget keeps nothing");
    }
}
