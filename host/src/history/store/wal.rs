//! The periodic flush: the series list and the write-ahead log written out,
//! idle series closed and sealed, the WAL rolled to a new file (and the
//! files no open head needs any more handed back for deletion).

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use super::segment::seal;
use super::{After, IDLE_SEAL, Inner, WAL_RECORD_MAX, WAL_ROLL, WAL_ROLL_BYTES};
use crate::history::log::{self, KIND_WAL};

impl Inner {
    /// The periodic work: series list and WAL out, idle series sealed, WAL
    /// rolled, budgets enforced. File syncs and deletions are handed back.
    pub(crate) fn flush(&mut self, force_roll: bool) -> After {
        let mut after = After::default();
        if !self.slog.pending.is_empty() {
            match self.slog.file.write_all(&self.slog.pending) {
                Ok(()) => self.slog.bytes += self.slog.pending.len() as u64,
                Err(e) => {
                    self.c.io_errors += 1;
                    tracing::warn!("history: writing the series list: {e}");
                }
            }
            self.slog.pending.clear();
        }
        self.write_wal();

        // Idle series: close and seal, so their tail is durable in every tier.
        let now_s = self.idle_clock_s();
        let mut idle = Vec::new();
        for (id, s) in self.series.iter_mut() {
            if !s.idle_sealed && now_s.saturating_sub(s.last_append_s) as u64 >= IDLE_SEAL.as_secs() {
                s.idle_sealed = true;
                idle.push(*id);
            }
        }
        for id in idle {
            self.close_series(id);
        }

        let wal_file_bytes = self
            .wal
            .files
            .back()
            .filter(|_| self.wal.file.is_some())
            .map_or(0, |f| f.2);
        let by_data = self.max_t >= self.wal.started_t.saturating_add(WAL_ROLL.as_nanos() as u64);
        if force_roll || by_data || self.wal.started.elapsed() >= WAL_ROLL || wal_file_bytes >= WAL_ROLL_BYTES {
            self.roll_wal(&mut after);
        }
        self.enforce(&mut after);
        after.sync.append(&mut self.to_sync);
        after
    }

    fn write_wal(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let mut payload = Vec::new();
        let mut records = Vec::new();
        for sid in std::mem::take(&mut self.dirty) {
            let Some(s) = self.series.get_mut(&sid) else { continue };
            if s.wal.is_empty() {
                continue;
            }
            payload.extend_from_slice(&sid.to_le_bytes());
            payload.extend_from_slice(&s.wal.len().to_le_bytes());
            payload.extend_from_slice(&(s.wal.byte_len() as u32).to_le_bytes());
            s.wal.append_bytes_to(&mut payload);
            // Keep a small buffer for the next second's points; give a big one back.
            s.wal.reset(s.wal.heap_bytes() > 1024);
            if payload.len() >= WAL_RECORD_MAX {
                log::frame(&mut records, KIND_WAL, &payload);
                payload.clear();
            }
        }
        if !payload.is_empty() {
            log::frame(&mut records, KIND_WAL, &payload);
        }
        if records.is_empty() {
            return;
        }
        if self.wal.file.is_none() {
            let path = log::numbered_path(&self.wal.dir, self.wal.gen_, "wal");
            match log::create_append(&path) {
                Ok(f) => {
                    self.wal.file = Some(f);
                    self.wal.files.push_back((self.wal.gen_, path, 0));
                }
                Err(e) => {
                    self.c.io_errors += 1;
                    tracing::warn!("history: {e:#}");
                    return;
                }
            }
        }
        let f = self.wal.file.as_mut().expect("just made");
        match f.write_all(&records) {
            Ok(()) => {
                if let Some(last) = self.wal.files.back_mut() {
                    last.2 += records.len() as u64;
                }
            }
            Err(e) => {
                self.c.io_errors += 1;
                tracing::warn!("history: writing the write-ahead log: {e}");
                // Start a fresh file: never append after a partial record.
                self.wal.file = None;
                self.wal.gen_ += 1;
            }
        }
    }

    /// Seals raw heads that started before the current WAL file, starts a new
    /// file, and hands back the files no head depends on any more.
    pub(super) fn roll_wal(&mut self, after: &mut After) {
        let cur = self.wal.gen_;
        let Inner {
            series,
            tiers,
            c,
            scratch,
            to_sync,
            seg_target,
            ..
        } = self;
        for (sid, s) in series.iter_mut() {
            let raw = &mut s.tiers[0];
            if !raw.head.is_empty() && raw.head_gen < cur {
                seal(&mut tiers[0], *sid, raw, c, scratch, to_sync, *seg_target, false);
            }
        }
        // The raw chunks must be on disk before the WAL that covered them goes.
        if let Some(seg) = self.tiers[0].segs.back()
            && self.tiers[0].writing
        {
            after.sync.push(seg.file.clone());
        }
        if let Some(f) = self.wal.file.take() {
            after.sync.push(Arc::new(f));
        }
        while let Some((g, _, _)) = self.wal.files.front()
            && *g < cur
        {
            let (_, p, _) = self.wal.files.pop_front().expect("front");
            after.delete.push(p);
        }
        self.wal.gen_ = cur + 1;
        self.wal.started = Instant::now();
        self.wal.started_t = self.max_t;
    }
}
