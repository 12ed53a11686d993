//! Reading: under the lock, a query picks a tier and copies what it needs
//! (chunk places, the open head, open buckets) into a `Snapshot`; the files
//! are read and decoded from that after the lock is released.

use std::os::unix::fs::FileExt;

use super::{Agg, Inner, ReadChunk, Snapshot, ns_to_ms};
use crate::history::codec::decode;
use crate::history::{SeriesFilter, SeriesInfo};

impl Inner {
    /// The data of tier `k` of a series overlapping `[from, to]` (ns).
    pub(super) fn snapshot_tier(&self, sid: u32, k: usize, from: u64, to: u64, with_agg: bool) -> Option<Snapshot> {
        let s = self.series.get(&sid)?;
        let st = &s.tiers[k];
        let tier = &self.tiers[k];
        let start = st.chunks.partition_point(|c| c.t_last < from);
        let mut chunks = Vec::new();
        for r in st.chunks.range(start..) {
            if r.t_first > to {
                break;
            }
            if let Some(seg) = tier.seg(r.seg) {
                chunks.push(ReadChunk {
                    file: seg.file.clone(),
                    r: *r,
                });
            }
        }
        let head = (!st.head.is_empty() && st.head.t_last() >= from && st.head.t_first() <= to)
            .then(|| (st.head.bytes(), st.head.len()));
        let mut aggs: Vec<Agg> = Vec::new();
        if with_agg && k > 0 {
            // Finer tiers' open buckets have not reached this tier yet: add them.
            let step = self.specs[k].step_ns;
            for j in (1..=k).rev() {
                if let Some(mut a) = s.tiers[j].agg {
                    a.start = a.start / step * step;
                    match aggs.iter_mut().find(|x| x.start == a.start) {
                        Some(x) => x.merge(&a),
                        None => aggs.push(a),
                    }
                }
            }
            aggs.sort_unstable_by_key(|a| a.start);
            aggs.retain(|a| a.start >= from && a.start <= to && a.count > 0);
        }
        Some(Snapshot {
            tier: k,
            step_ns: self.specs[k].step_ns,
            cols: self.specs[k].cols,
            chunks,
            head,
            aggs,
        })
    }

    /// Which tier serves a query of a series (see `History::query`).
    pub(crate) fn pick_tier(&self, sid: u32, from_ns: u64, step_ms: u64) -> Option<usize> {
        let s = self.series.get(&sid)?;
        let firsts: Vec<Option<u64>> = s.tiers.iter().map(|t| t.first_t()).collect();
        // The earliest point kept: exact in raw, within one bucket in a rollup.
        let earliest = firsts
            .iter()
            .zip(&self.specs)
            .filter_map(|(f, sp)| f.map(|f| f.saturating_add(sp.step_ns.saturating_sub(1))))
            .min()?;
        let need = from_ns.max(earliest);
        // A tier covers the range when its data reaches back to `need`, give
        // or take one of its buckets (its first bucket may hold only NaN).
        let covers = |k: usize| firsts[k].is_some_and(|f| f <= need.saturating_add(self.specs[k].step_ns));
        let covering: Vec<usize> = (0..s.tiers.len()).filter(|&k| covers(k)).collect();
        if covering.is_empty() {
            // Nothing reaches back that far: the tier that reaches furthest.
            return (0..s.tiers.len())
                .filter(|&k| firsts[k].is_some())
                .min_by_key(|&k| firsts[k]);
        }
        let step_ns = step_ms.saturating_mul(1_000_000);
        // The coarsest covering tier that still has at least one bucket per
        // query bucket: the query's step says what resolution is wanted, and
        // it is read from the fewest points. Exact when its step divides the
        // query's; otherwise a tier bucket counts in the query bucket its
        // start falls in. A step finer than every tier reads raw points.
        let coarse = covering
            .iter()
            .rev()
            .find(|&&k| k > 0 && step_ns >= self.specs[k].step_ns);
        Some(coarse.copied().unwrap_or(covering[0]))
    }

    pub(crate) fn snapshot_query(&self, sid: u32, from_ms: u64, to_ms: u64, step_ms: u64) -> Option<Snapshot> {
        let from_ns = from_ms.saturating_mul(1_000_000);
        let to_ns = to_ms.saturating_mul(1_000_000).saturating_add(999_999);
        let k = self.pick_tier(sid, from_ns, step_ms)?;
        self.snapshot_tier(sid, k, from_ns, to_ns, true)
    }

    pub(crate) fn snapshot_raw(&self, sid: u32, from_ns: u64, to_ns: u64) -> Option<Snapshot> {
        self.snapshot_tier(sid, 0, from_ns, to_ns, false)
    }

    pub(crate) fn series_list(&self, f: &SeriesFilter) -> Vec<SeriesInfo> {
        let mut out: Vec<SeriesInfo> = self
            .series
            .iter()
            .filter(|(_, s)| s.key.name().starts_with(f.name_prefix.as_str()))
            .filter(|(_, s)| f.attributes.iter().all(|(k, v)| s.key.attr(k) == Some(v.as_str())))
            .filter_map(|(id, s)| {
                let first = s.tiers.iter().filter_map(|t| t.first_t()).min()?;
                let (first_ms, last_ms) = (ns_to_ms(first), ns_to_ms(s.last_t));
                if f.from_ms.is_some_and(|from| last_ms < from) || f.to_ms.is_some_and(|to| first_ms > to) {
                    return None;
                }
                Some(SeriesInfo {
                    id: *id,
                    key: s.key.clone(),
                    first_ms,
                    last_ms,
                })
            })
            .collect();
        out.sort_unstable_by_key(|s| s.id);
        out
    }
}

impl Snapshot {
    pub(in crate::history) fn tier(&self) -> usize {
        self.tier
    }

    pub(in crate::history) fn step_ns(&self) -> u64 {
        self.step_ns
    }

    /// The sealed chunks, in time order.
    pub(in crate::history) fn chunks(&self) -> &[ReadChunk] {
        &self.chunks
    }

    /// The open buckets, after the head chunk's.
    pub(in crate::history) fn open_buckets(&self) -> &[Agg] {
        &self.aggs
    }

    /// Reads one sealed chunk (into `buf`) and calls `f(t_ns, values)` for
    /// each point or bucket; false when it could not be read or decoded.
    pub(in crate::history) fn read_chunk(&self, c: &ReadChunk, buf: &mut Vec<u8>, f: impl FnMut(u64, &[f64])) -> bool {
        buf.resize(c.r.len as usize, 0);
        if let Err(e) = c.file.read_exact_at(buf, c.r.off) {
            tracing::debug!("history: reading a chunk: {e}");
            return false;
        }
        decode(buf, c.r.n, self.cols, f).is_some()
    }

    /// Calls `f` for each point or bucket of the open head chunk; false when
    /// it did not decode.
    pub(in crate::history) fn read_head(&self, f: impl FnMut(u64, &[f64])) -> bool {
        match &self.head {
            Some((bytes, n)) => decode(bytes, *n, self.cols, f).is_some(),
            None => true,
        }
    }

    /// Calls `f(t_ns, values)` for every point (raw) or bucket (rollup) in
    /// time order: sealed chunks, the open chunk, then the open bucket.
    /// Unreadable chunks are skipped and counted in `corrupt`.
    pub(crate) fn for_each(&self, corrupt: &mut u64, mut f: impl FnMut(u64, &[f64])) {
        let mut buf = Vec::new();
        for c in &self.chunks {
            *corrupt += u64::from(!self.read_chunk(c, &mut buf, &mut f));
        }
        *corrupt += u64::from(!self.read_head(&mut f));
        for a in &self.aggs {
            f(a.start, &a.values());
        }
    }
}
