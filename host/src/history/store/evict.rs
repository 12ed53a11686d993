//! Eviction: a tier's oldest segment deleted whole, by age, then by the
//! disk budget, then by the memory budget (after writing the largest open
//! chunks out early). Each evicted point is counted per tier and reason.

use super::segment::seal;
use super::{After, Inner, Reason};

impl Inner {
    pub(super) fn enforce(&mut self, after: &mut After) {
        let now = (self.now)();
        // Age.
        for k in 0..self.tiers.len() {
            let cutoff = now.saturating_sub(self.tiers[k].spec.keep_ns);
            while let Some(front) = self.tiers[k].segs.front()
                && front.max_t < cutoff
            {
                self.evict_oldest(k, Reason::Age, after);
            }
        }
        // Disk: first the WAL (two rolls seal every raw head and free every WAL file), then segments.
        if self.disk_bytes() > self.disk_budget && self.wal.bytes() > 0 {
            self.roll_wal(after);
            self.roll_wal(after);
        }
        while self.disk_bytes() > self.disk_budget {
            let Some(k) = self.eviction_tier(now) else { break };
            self.evict_oldest(k, Reason::Disk, after);
        }
        // Memory: write the largest open chunks out early, then evict.
        let mut mem = self.memory_bytes();
        if mem > self.memory_budget {
            let target = self.memory_budget / 4 * 3;
            let mut heads: Vec<(usize, u32, usize)> = Vec::new();
            for (id, s) in &self.series {
                for (k, st) in s.tiers.iter().enumerate() {
                    if !st.head.is_empty() || st.head.heap_bytes() > 0 {
                        heads.push((st.head.heap_bytes(), *id, k));
                    }
                }
            }
            heads.sort_unstable_by(|a, b| b.cmp(a));
            let Inner {
                series,
                tiers,
                c,
                scratch,
                to_sync,
                seg_target,
                ..
            } = self;
            for (bytes, id, k) in heads {
                if mem <= target {
                    break;
                }
                let st = &mut series.get_mut(&id).expect("listed").tiers[k];
                seal(&mut tiers[k], id, st, c, scratch, to_sync, *seg_target, true);
                c.early_seals += 1;
                mem = mem.saturating_sub(bytes as u64);
            }
            while self.memory_bytes() > self.memory_budget {
                let Some(k) = self.eviction_tier(now) else { break };
                self.evict_oldest(k, Reason::Memory, after);
            }
        }
        // Series with nothing left give their place back.
        if after.delete.iter().any(|p| p.extension().is_some_and(|e| e == "seg")) {
            let gone: Vec<u32> = self
                .series
                .iter()
                .filter(|(_, s)| !s.has_data())
                .map(|(id, _)| *id)
                .collect();
            for id in gone {
                if let Some(s) = self.series.remove(&id) {
                    self.by_key.remove(&s.key);
                }
            }
            let live: u64 = self.series.values().map(|s| 32 + s.key_bytes() as u64).sum();
            if self.slog.bytes > 4 * live + (1 << 20)
                && let Err(e) = self.compact_series_log()
            {
                self.c.io_errors += 1;
                tracing::warn!("history: rewriting the series list: {e:#}");
            }
        }
    }

    /// The tier to evict from under a budget: the one whose oldest data is the
    /// oldest relative to its own retention.
    fn eviction_tier(&self, now: u64) -> Option<usize> {
        let mut best: Option<(f64, usize)> = None;
        for (k, t) in self.tiers.iter().enumerate() {
            let Some(front) = t.segs.front() else { continue };
            if front.bytes == 0 && t.segs.len() == 1 {
                continue;
            }
            let age = now.saturating_sub(front.min_t.min(now)) as f64 / t.spec.keep_ns.max(1) as f64;
            if best.is_none_or(|(a, _)| age > a) {
                best = Some((age, k));
            }
        }
        best.map(|b| b.1)
    }

    fn evict_oldest(&mut self, k: usize, why: Reason, after: &mut After) {
        let t = &mut self.tiers[k];
        if t.segs.len() == 1 && t.writing {
            t.writing = false;
        }
        let Some(seg) = t.segs.pop_front() else { return };
        t.evicted[why as usize] += seg.points;
        after.delete.push(seg.path.clone());
        let Inner {
            series,
            tiers,
            specs,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        for (sid, s) in series.iter_mut() {
            let ch = &mut s.tiers[k].chunks;
            while ch.front().is_some_and(|r| r.seg == seg.id) {
                ch.pop_front();
            }
            // The next tier's open chunk is rebuilt from this one after a
            // restart; what it can no longer be rebuilt from, write out now.
            if k + 1 < specs.len() {
                let next = &mut s.tiers[k + 1];
                if !next.head.is_empty() && next.head.t_first() <= seg.max_t {
                    seal(&mut tiers[k + 1], *sid, next, c, scratch, to_sync, *seg_target, false);
                }
            }
        }
    }
}
