//! The periodic flush: the series list and the write-ahead log written out,
//! idle series closed and sealed, the WAL rolled to a new file (and the
//! files no open head needs any more handed back for deletion).

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use super::segment::seal;
use super::{After, IDLE_SEAL, Inner, UNWRITTEN_MAX, WAL_RECORD_MAX, WAL_ROLL, WAL_ROLL_BYTES};
use crate::history::log::{self, KIND_WAL};

impl Inner {
    /// The periodic work: series list and WAL out, idle series sealed, WAL
    /// rolled, budgets enforced. File syncs and deletions are handed back.
    pub(crate) fn flush(&mut self, force_roll: bool) -> After {
        let mut after = After::default();
        // A failure is counted and what failed kept for the next flush.
        let _ = self.write_series_list().and_then(|()| self.write_wal());

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

    /// New series' records out to the series list. On failure they are kept
    /// and the file cut back to its last whole record, so the next try
    /// appends after a whole record, never after a torn one.
    fn write_series_list(&mut self) -> Result<(), String> {
        if self.slog.pending.is_empty() {
            return Ok(());
        }
        match self.slog.file.write_all(&self.slog.pending) {
            Ok(()) => {
                self.slog.bytes += self.slog.pending.len() as u64;
                self.slog.pending.clear();
                self.slog.unsynced = true;
                Ok(())
            }
            Err(e) => {
                self.c.io_errors += 1;
                tracing::warn!("history: writing the series list: {e}");
                let _ = self.slog.file.set_len(self.slog.bytes);
                Err(format!("the history cannot write its series list: {e}"))
            }
        }
    }

    /// The raw points appended since the last write, out to the WAL with one
    /// `write()`, after what an earlier failed write left. On failure
    /// (ENOSPC) the records are kept in memory for the next try, which starts
    /// a new file (never appending after a partial record); past
    /// `UNWRITTEN_MAX` bytes they are given up, counted in
    /// `points_lost_to_io` (the raw heads still hold them until sealed). While it fails, requests from sondes are refused
    /// (`ingest/durable.rs`), so what is kept here is what was taken before.
    fn write_wal(&mut self) -> Result<(), String> {
        let mut records = std::mem::take(&mut self.wal.unwritten);
        let mut points = std::mem::take(&mut self.wal.unwritten_points);
        let mut payload = Vec::new();
        for sid in std::mem::take(&mut self.dirty) {
            let Some(s) = self.series.get_mut(&sid) else { continue };
            if s.wal.is_empty() {
                continue;
            }
            points += s.wal.len() as u64;
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
            return Ok(());
        }
        let written = match &self.wal.file {
            Some(f) => (&**f).write_all(&records).map_err(anyhow::Error::from),
            None => {
                let path = log::numbered_path(&self.wal.dir, self.wal.gen_, "wal");
                log::create_append(&path).and_then(|f| {
                    let f = Arc::new(f);
                    self.wal.file = Some(f.clone());
                    self.wal.files.push_back((self.wal.gen_, path, 0));
                    (&*f).write_all(&records).map_err(anyhow::Error::from)
                })
            }
        };
        match written {
            Ok(()) => {
                if let Some(last) = self.wal.files.back_mut() {
                    last.2 += records.len() as u64;
                }
                Ok(())
            }
            Err(e) => {
                self.c.io_errors += 1;
                tracing::warn!("history: writing the write-ahead log: {e:#}");
                // Start a fresh file: never append after a partial record.
                self.wal.file = None;
                self.wal.gen_ += 1;
                if records.len() > UNWRITTEN_MAX {
                    // Memory is bounded: past this the records go (the heads keep the points).
                    tracing::warn!("history: {points} points that could not be written are given up");
                    self.c.points_lost_to_io += points;
                } else {
                    self.wal.unwritten = records;
                    self.wal.unwritten_points = points;
                }
                Err(format!("the history cannot write its write-ahead log: {e:#}"))
            }
        }
    }

    /// What a group commit needs before it answers (`ingest/durable.rs`):
    /// every point appended so far written to the WAL (and new series to the
    /// series list). Err when that failed: nothing is lost, the caller
    /// refuses. Returns the files to `sync_data` after the lock is released,
    /// for what survives a machine crash too.
    pub(crate) fn write_for_sync(&mut self) -> Result<Vec<Arc<File>>, String> {
        self.write_series_list()?;
        self.write_wal()?;
        if std::mem::take(&mut self.slog.unsynced) {
            self.slog.file.sync_data().map_err(|e| {
                self.slog.unsynced = true;
                format!("the history cannot sync its series list: {e}")
            })?;
        }
        Ok(self.wal.file.iter().chain(self.wal.rolled.iter()).cloned().collect())
    }

    /// Seals raw heads that started before the current WAL file, starts a new
    /// file, and hands back the files no head depends on any more. A head
    /// that could not be sealed (a full disk) keeps the files from its own
    /// on, so that its points are still in the WAL after a crash.
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
        let mut keep_from = cur;
        for (sid, s) in series.iter_mut() {
            let raw = &mut s.tiers[0];
            if !raw.head.is_empty() && raw.head_gen < cur {
                seal(&mut tiers[0], *sid, raw, c, scratch, to_sync, *seg_target, false);
                if !raw.head.is_empty() {
                    keep_from = keep_from.min(raw.head_gen);
                }
            }
        }
        // The raw chunks must be on disk before the WAL that covered them goes.
        if let Some(seg) = self.tiers[0].segs.back()
            && self.tiers[0].writing
        {
            after.sync.push(seg.file.clone());
        }
        self.wal.rolled = self.wal.file.take();
        if let Some(f) = &self.wal.rolled {
            after.sync.push(f.clone());
        }
        while let Some((g, _, _)) = self.wal.files.front()
            && *g < keep_from
        {
            let (_, p, _) = self.wal.files.pop_front().expect("front");
            after.delete.push(p);
        }
        self.wal.gen_ = cur + 1;
        self.wal.started = Instant::now();
        self.wal.started_t = self.max_t;
    }
}
