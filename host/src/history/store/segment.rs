//! Sealing: a head chunk written as one record to its tier's current
//! segment file (a new file when it is full or after a failed write) and
//! indexed in its series. Every path that writes chunks comes through here.
//! A write that fails (a full disk) keeps the head in memory, where queries
//! still read it and from where the next try writes it; its raw points stay
//! in the WAL meanwhile (`wal.rs` keeps the files a head needs).

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{CHUNK_HEAD, ChunkRef, Counters, Segment, SeriesTier, TierStore};
use crate::history::log::{self, KIND_CHUNK};

/// Writes a head chunk to its tier's segment log and indexes it.
#[allow(clippy::too_many_arguments)]
pub(super) fn seal(
    tier: &mut TierStore,
    sid: u32,
    st: &mut SeriesTier,
    c: &mut Counters,
    scratch: &mut Vec<u8>,
    to_sync: &mut Vec<Arc<File>>,
    seg_target: u64,
    shrink: bool,
) {
    if st.head.is_empty() {
        if shrink {
            st.head.reset(true);
        }
        return;
    }
    if tier.retry_at.is_some_and(|t| Instant::now() < t) {
        return;
    }
    let h = &st.head;
    let mut payload = Vec::with_capacity(CHUNK_HEAD + h.byte_len());
    payload.extend_from_slice(&sid.to_le_bytes());
    payload.extend_from_slice(&h.len().to_le_bytes());
    payload.extend_from_slice(&h.t_first().to_le_bytes());
    payload.extend_from_slice(&h.t_last().to_le_bytes());
    payload.push(h.cols() as u8);
    h.append_bytes_to(&mut payload);
    scratch.clear();
    log::frame(scratch, KIND_CHUNK, &payload);
    match write_record(tier, scratch, to_sync, seg_target) {
        Ok((seg_id, off)) => {
            let seg = tier.segs.back_mut().expect("written");
            seg.min_t = seg.min_t.min(h.t_first());
            seg.max_t = seg.max_t.max(h.t_last());
            seg.points += h.len() as u64;
            seg.chunks += 1;
            st.chunks.push_back(ChunkRef {
                seg: seg_id,
                off: off + (log::HEADER + CHUNK_HEAD) as u64,
                len: (payload.len() - CHUNK_HEAD) as u32,
                n: h.len(),
                t_first: h.t_first(),
                t_last: h.t_last(),
            });
        }
        Err(e) => {
            c.io_errors += 1;
            tier.retry_at = Some(Instant::now() + SEAL_RETRY);
            tracing::warn!(
                "history: writing a {} chunk: {e:#}; kept in memory, tried again in {} s",
                tier.spec.name,
                SEAL_RETRY.as_secs()
            );
            return;
        }
    }
    tier.retry_at = None;
    st.head.reset(shrink);
}

/// How long a tier waits after a failed write before it tries again.
const SEAL_RETRY: Duration = Duration::from_secs(1);

/// Appends a framed record to the tier's current segment (starting one when
/// needed); returns (segment id, record offset).
fn write_record(tier: &mut TierStore, rec: &[u8], to_sync: &mut Vec<Arc<File>>, seg_target: u64) -> Result<(u64, u64)> {
    let full = tier.writing && tier.segs.back().is_some_and(|s| s.bytes >= seg_target);
    if full {
        to_sync.push(tier.segs.back().expect("full").file.clone());
        tier.writing = false;
    }
    if !tier.writing {
        let id = tier.next_id;
        let path = log::numbered_path(&tier.dir, id, "seg");
        let f = log::create_append(&path)?;
        tier.next_id += 1;
        tier.segs.push_back(Segment {
            id,
            path,
            file: Arc::new(f),
            bytes: 0,
            min_t: u64::MAX,
            max_t: 0,
            points: 0,
            chunks: 0,
        });
        tier.writing = true;
    }
    let seg = tier.segs.back_mut().expect("writing");
    let off = seg.bytes;
    if let Err(e) = (&*seg.file).write_all(rec) {
        // Never append after a partial record: the next write starts a new segment.
        tier.writing = false;
        if off == 0 {
            // Nothing in it can be read: removed, so that a full disk's
            // retries leave no empty segments (each an open file) behind.
            let empty = tier.segs.pop_back().expect("writing");
            let _ = std::fs::remove_file(&empty.path);
        } else if let Ok(m) = seg.file.metadata() {
            seg.bytes = m.len();
        }
        return Err(e).context("appending to a history segment");
    }
    seg.bytes += rec.len() as u64;
    Ok((seg.id, off))
}
