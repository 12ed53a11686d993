//! The export queue on disk (`export.spool_max_bytes > 0`): a write-ahead log
//! of encoded requests that outlives the process.
//!
//! ```text
//!  <spool_dir>/0000000000000007.seg   segments, oldest first; the newest is appended to
//!  <spool_dir>/cursor                 segment id + offset of the oldest unacknowledged record
//!
//!  record:  len u32 LE | crc32 u32 LE | signal u8 | items u32 LE | [id] | body
//!           (len and crc cover what follows the crc)
//!  id:      present when the signal byte has its top bit (0x80) set:
//!           seq u64 LE | producer length u8 | producer (ASCII)
//! ```
//!
//! The id is the request's identity (`export/sequence.rs`), kept so that a
//! replay, after a restart too, is sent with the number it was first sent
//! with and the receiver can tell it is a repeat. Records written before ids
//! existed (no top bit) still read, and go out without one.
//!
//! The pipeline appends a request and makes it durable (`fdatasync`, one per
//! flush or forwarded request, shared by concurrent callers) before it counts
//! as queued. The sender reads records back from disk in order, several ahead
//! of the oldest unanswered one when it sends several at once
//! (`export.max_in_flight`); answers may come back in any order, and the
//! cursor only ever moves past records answered in order (those answered
//! ahead of an older one wait in a small map until it is answered). A segment
//! is deleted once all of it is answered. Only per-segment tallies, the
//! reading position and the answers ahead of the cursor live in memory.
//!
//! A record that is cut short or fails its checksum (a crash mid-write, a
//! damaged disk) ends its segment: the rest of that segment is skipped with a
//! warning and counted in `corrupt_records` / `corrupt_bytes` (the reader
//! stops in front of it until everything before it is answered, then skips).
//! The cursor is rewritten in place after every answer that moves it, without
//! a sync: a SIGKILL loses nothing (the page cache survives it); after any
//! crash, records that were in flight or answered ahead of the cursor are sent
//! again, and a power cut can also send the last few answered requests again.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::export::client::Signal;
use crate::export::sequence::{MAX_PRODUCER_BYTES, RequestId};

/// len + crc.
const HEADER: u64 = 8;
/// signal + items, inside the checksummed part.
const META: usize = 5;
/// The signal byte's flag: an id follows the items.
const HAS_ID: u8 = 0x80;
const CURSOR: &str = "cursor";

fn sig_index(s: Signal) -> usize {
    match s {
        Signal::Metrics => 0,
        Signal::Logs => 1,
        Signal::Traces => 2,
    }
}

fn sig_from(b: u8) -> Option<Signal> {
    Some(match b {
        0 => Signal::Metrics,
        1 => Signal::Logs,
        2 => Signal::Traces,
        _ => return None,
    })
}

/// One spooled request, read back for sending.
pub(super) struct Record {
    pub signal: Signal,
    pub items: usize,
    pub body: Bytes,
    /// The identity it was queued with (None: a record from before ids).
    pub id: Option<RequestId>,
    seg: u64,
    /// Offset of this record in its segment.
    at: u64,
    /// Offset just past this record in its segment.
    next: u64,
}

/// What the spool holds now; items are indexed by signal (metrics, logs, traces).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SpoolStats {
    pub bytes: u64,
    pub requests: usize,
    pub items: [usize; 3],
    pub corrupt_records: u64,
    pub corrupt_bytes: u64,
}

#[derive(Debug)]
pub(super) enum AppendError {
    /// Appending would pass `spool_max_bytes`.
    Full,
    Io(io::Error),
}

struct Segment {
    id: u64,
    /// Bytes of valid records (the file's length, unless a bad tail was found).
    end: u64,
    /// Unanswered records in it, and their items per signal.
    requests: usize,
    items: [usize; 3],
}

struct State {
    dir: PathBuf,
    /// Oldest first. The writer appends to the back one while `writer` is open.
    segs: VecDeque<Segment>,
    writer: Option<Arc<File>>,
    /// Offset of the oldest unanswered record in `segs.front()`.
    head: u64,
    /// Where the sender reads next: (segment id, offset); None = at `head`.
    send: Option<(u64, u64)>,
    /// Records answered while an older one was not: (segment id, offset) →
    /// offset past it. The cursor moves over them once it reaches them.
    answered: BTreeMap<(u64, u64), u64>,
    reader: Option<(u64, Arc<File>)>,
    cursor: File,
    next_id: u64,
    /// Bytes written so far (monotonic), for the shared sync.
    written: u64,
    /// Sum of the segments' `end`: the disk the spool takes.
    bytes: u64,
    requests: usize,
    items: [usize; 3],
}

pub(super) struct Spool {
    st: Mutex<State>,
    /// `written` as of the last completed sync; held while syncing.
    synced: Mutex<u64>,
    max_bytes: u64,
    segment_bytes: u64,
    corrupt_records: AtomicU64,
    corrupt_bytes: AtomicU64,
}

fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016x}.seg"))
}

/// Reads one record's header and checks it against what is left of the segment.
/// None: cut short or not a record.
fn parse_len(header: &[u8; HEADER as usize], left: u64) -> Option<(usize, u32)> {
    let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().unwrap());
    (len >= META && (len as u64) <= left.saturating_sub(HEADER)).then_some((len, crc))
}

/// A record's payload, checked and taken apart.
struct Payload {
    signal: Signal,
    items: usize,
    id: Option<RequestId>,
    /// Where the body starts in the payload.
    body_at: usize,
}

/// Checks a record's payload and reads its header fields.
fn parse_payload(payload: &[u8], crc: u32) -> Option<Payload> {
    if crc32fast::hash(payload) != crc {
        return None;
    }
    let signal = sig_from(payload[0] & !HAS_ID)?;
    let items = u32::from_le_bytes(payload[1..META].try_into().unwrap()) as usize;
    if payload[0] & HAS_ID == 0 {
        return Some(Payload {
            signal,
            items,
            id: None,
            body_at: META,
        });
    }
    let seq = u64::from_le_bytes(payload.get(META..META + 8)?.try_into().ok()?);
    let plen = *payload.get(META + 8)? as usize;
    let at = META + 9;
    let producer = std::str::from_utf8(payload.get(at..at + plen)?).ok()?;
    Some(Payload {
        signal,
        items,
        id: Some(RequestId {
            producer: producer.into(),
            seq,
        }),
        body_at: at + plen,
    })
}

impl Spool {
    /// Opens (creating) the spool in `dir` and takes stock of what an earlier
    /// run left there: returns the spool and what it holds.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let cursor = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(CURSOR))?;
        let (cur_seg, cur_off) = read_cursor(&cursor);
        let mut ids: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let stem = name.to_str()?.strip_suffix(".seg")?;
                u64::from_str_radix(stem, 16).ok()
            })
            .collect();
        ids.sort_unstable();
        let spool = Spool {
            st: Mutex::new(State {
                dir: dir.to_path_buf(),
                segs: VecDeque::new(),
                writer: None,
                head: 0,
                send: None,
                answered: BTreeMap::new(),
                reader: None,
                cursor,
                // Never reuse an id at or below the cursor's: a restart would take it as answered.
                next_id: ids.last().map_or(0, |m| m + 1).max(cur_seg + 1),
                written: 0,
                bytes: 0,
                requests: 0,
                items: [0; 3],
            }),
            synced: Mutex::new(0),
            max_bytes,
            // Small enough that answered data is freed in steps of 1/8 of the spool.
            segment_bytes: (max_bytes / 8).clamp(64 << 10, 64 << 20),
            corrupt_records: AtomicU64::new(0),
            corrupt_bytes: AtomicU64::new(0),
        };
        let mut st = spool.st.lock();
        for id in ids {
            let path = seg_path(dir, id);
            if id < cur_seg {
                let _ = std::fs::remove_file(&path); // answered before the restart
                continue;
            }
            let skip_to = if id == cur_seg { cur_off } else { 0 };
            let seg = spool.scan(&path, id, skip_to)?;
            if seg.requests == 0 {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if st.segs.is_empty() {
                st.head = if id == cur_seg {
                    first_unanswered(&path, cur_off)?
                } else {
                    0
                };
            }
            st.bytes += seg.end;
            st.requests += seg.requests;
            for (total, n) in st.items.iter_mut().zip(seg.items) {
                *total += n;
            }
            st.segs.push_back(seg);
        }
        drop(st);
        Ok(spool)
    }

    /// Tallies a segment's valid records at or past `skip_to`; truncates a bad tail.
    fn scan(&self, path: &Path, id: u64, skip_to: u64) -> io::Result<Segment> {
        let f = File::open(path)?;
        let size = f.metadata()?.len();
        let mut r = BufReader::with_capacity(256 << 10, f);
        let mut seg = Segment {
            id,
            end: 0,
            requests: 0,
            items: [0; 3],
        };
        let mut payload = Vec::new();
        while seg.end < size {
            let mut h = [0u8; HEADER as usize];
            let ok = r.read_exact(&mut h).is_ok()
                && parse_len(&h, size - seg.end).is_some_and(|(len, crc)| {
                    payload.resize(len, 0);
                    r.read_exact(&mut payload).is_ok()
                        && parse_payload(&payload, crc).is_some_and(|p| {
                            if seg.end >= skip_to {
                                seg.requests += 1;
                                seg.items[sig_index(p.signal)] += p.items;
                            }
                            true
                        })
                });
            if !ok {
                self.corrupt(path, seg.end, size - seg.end);
                // Later appends go to new segments; cut the bad tail so a rescan agrees.
                if let Err(e) = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| f.set_len(seg.end))
                {
                    tracing::warn!(path = %path.display(), "could not truncate a damaged spool segment: {e}");
                }
                break;
            }
            seg.end += HEADER + payload.len() as u64;
        }
        Ok(seg)
    }

    fn corrupt(&self, path: &Path, offset: u64, bytes: u64) {
        tracing::warn!(
            path = %path.display(),
            offset,
            bytes,
            "spool segment damaged (cut short or checksum mismatch): skipping the rest of it"
        );
        self.corrupt_records.fetch_add(1, Ordering::Relaxed);
        self.corrupt_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn stats(&self) -> SpoolStats {
        let st = self.st.lock();
        SpoolStats {
            bytes: st.bytes,
            requests: st.requests,
            items: st.items,
            corrupt_records: self.corrupt_records.load(Ordering::Relaxed),
            corrupt_bytes: self.corrupt_bytes.load(Ordering::Relaxed),
        }
    }

    /// Appends one request (not yet synced). Returns a ticket for [`sync`](Self::sync).
    /// `id` is kept with it (a producer longer than `MAX_PRODUCER_BYTES`
    /// cannot be, and was refused where it came in).
    pub fn append(
        &self,
        signal: Signal,
        items: usize,
        id: Option<&RequestId>,
        body: &[u8],
    ) -> Result<u64, AppendError> {
        let items = items.min(u32::MAX as usize);
        let id = id.filter(|id| id.producer.len() <= MAX_PRODUCER_BYTES);
        let id_len = id.map_or(0, |id| 9 + id.producer.len());
        let len = META + id_len + body.len();
        let total = HEADER + len as u64;
        let mut rec = Vec::with_capacity(total as usize);
        rec.extend_from_slice(&(len as u32).to_le_bytes());
        rec.extend_from_slice(&[0; 4]);
        rec.push(sig_index(signal) as u8 | if id.is_some() { HAS_ID } else { 0 });
        rec.extend_from_slice(&(items as u32).to_le_bytes());
        if let Some(id) = id {
            rec.extend_from_slice(&id.seq.to_le_bytes());
            rec.push(id.producer.len() as u8);
            rec.extend_from_slice(id.producer.as_bytes());
        }
        rec.extend_from_slice(body);
        let crc = crc32fast::hash(&rec[HEADER as usize..]);
        rec[4..8].copy_from_slice(&crc.to_le_bytes());

        let mut st = self.st.lock();
        st.collect();
        if st.bytes + total > self.max_bytes {
            return Err(AppendError::Full);
        }
        let roll = st.writer.is_none() || st.segs.back().is_some_and(|s| s.end >= self.segment_bytes);
        if roll {
            self.roll(&mut st).map_err(AppendError::Io)?;
        }
        let file = st.writer.clone().expect("a segment is open after roll");
        let seg = st.segs.back_mut().expect("a segment is open after roll");
        if let Err(e) = file.write_all_at(&rec, seg.end) {
            // Whatever part was written is past `end`: overwritten by the next append.
            return Err(AppendError::Io(e));
        }
        seg.end += total;
        seg.requests += 1;
        seg.items[sig_index(signal)] += items;
        st.bytes += total;
        st.requests += 1;
        st.items[sig_index(signal)] += items;
        st.written += total;
        Ok(st.written)
    }

    /// Closes the segment being written (synced) and opens the next one.
    fn roll(&self, st: &mut State) -> io::Result<()> {
        if let Some(w) = st.writer.take() {
            w.sync_data()?;
        }
        let id = st.next_id;
        let path = seg_path(&st.dir, id);
        let f = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        // The new name must survive a power cut too.
        File::open(&st.dir)?.sync_all()?;
        st.next_id += 1;
        if st.segs.is_empty() {
            st.head = 0;
        }
        st.segs.push_back(Segment {
            id,
            end: 0,
            requests: 0,
            items: [0; 3],
        });
        st.writer = Some(Arc::new(f));
        st.collect();
        Ok(())
    }

    /// Makes everything appended up to `ticket` durable; one `fdatasync` serves
    /// every caller waiting at the time.
    pub fn sync(&self, ticket: u64) -> io::Result<()> {
        let mut synced = self.synced.lock();
        if *synced >= ticket {
            return Ok(());
        }
        // Earlier segments were synced when they were closed.
        let (file, upto) = {
            let st = self.st.lock();
            (st.writer.clone(), st.written)
        };
        if let Some(f) = file {
            f.sync_data()?;
        }
        *synced = upto;
        Ok(())
    }

    /// The next record to send, read from disk in order (the oldest
    /// unanswered one first, then the ones after it, skipping those already
    /// answered), and the items (per signal) lost to a damaged record found
    /// at the oldest unanswered place (to be counted as failed). None: nothing
    /// more to send now, or a damaged record lies ahead of records still in
    /// flight (it is dealt with once they are answered).
    pub fn next_unsent(&self) -> (Option<Record>, [usize; 3]) {
        let mut lost = [0usize; 3];
        loop {
            let (id, at, end, file) = {
                let mut guard = self.st.lock();
                let st = &mut *guard;
                st.collect();
                let Some(front) = st.segs.front() else {
                    return (None, lost);
                };
                let (mut id, mut at) = match st.send {
                    Some((id, at)) if st.segs.iter().any(|s| s.id == id) && (id, at) >= (front.id, st.head) => (id, at),
                    _ => (front.id, st.head),
                };
                // Past the end of a segment: on to the next one; answered records: over them.
                loop {
                    let Some(pos) = st.segs.iter().position(|s| s.id == id) else {
                        return (None, lost);
                    };
                    if at >= st.segs[pos].end {
                        match st.segs.get(pos + 1) {
                            Some(next) => (id, at) = (next.id, 0),
                            None => {
                                st.send = Some((id, at));
                                return (None, lost); // the writer's segment, all handed out
                            }
                        }
                    } else if let Some(&next) = st.answered.get(&(id, at)) {
                        at = next;
                    } else {
                        break;
                    }
                }
                let end = st.segs.iter().find(|s| s.id == id).map_or(0, |s| s.end);
                let file = match &st.reader {
                    Some((rid, f)) if *rid == id => f.clone(),
                    _ => match File::open(seg_path(&st.dir, id)) {
                        Ok(f) => {
                            let f = Arc::new(f);
                            st.reader = Some((id, f.clone()));
                            f
                        }
                        Err(e) if id == st.segs[0].id => {
                            tracing::warn!("spool segment {id:016x} cannot be opened: {e}");
                            Self::drop_front(st, &mut lost);
                            continue;
                        }
                        Err(_) => return (None, lost), // dealt with once it is the oldest
                    },
                };
                (id, at, end, file)
            };
            let mut h = [0u8; HEADER as usize];
            let rec = file
                .read_exact_at(&mut h, at)
                .ok()
                .and_then(|_| parse_len(&h, end - at))
                .and_then(|(len, crc)| {
                    let mut payload = vec![0u8; len];
                    file.read_exact_at(&mut payload, at + HEADER).ok()?;
                    let p = parse_payload(&payload, crc)?;
                    Some(Record {
                        signal: p.signal,
                        items: p.items,
                        id: p.id,
                        body: Bytes::from(payload).slice(p.body_at..),
                        seg: id,
                        at,
                        next: at + HEADER + len as u64,
                    })
                });
            let mut st = self.st.lock();
            if let Some(rec) = rec {
                st.send = Some((id, rec.next));
                return (Some(rec), lost);
            }
            if st.segs.front().is_none_or(|f| f.id != id) || st.head != at {
                // Records before it are still in flight: wait for their answers.
                st.send = Some((id, at));
                return (None, lost);
            }
            let path = seg_path(&st.dir, id);
            self.corrupt(&path, at, end - at);
            Self::drop_front(&mut st, &mut lost);
        }
    }

    /// Reads again from the oldest unanswered record (skipping those answered):
    /// the sender's flights came back unsent (export switched off).
    pub fn rewind(&self) {
        self.st.lock().send = None;
    }

    /// Gives up the front segment (damaged or gone): its unanswered items go to `lost`.
    fn drop_front(st: &mut State, lost: &mut [usize; 3]) {
        let Some(seg) = st.segs.pop_front() else {
            return;
        };
        if st.segs.is_empty() {
            st.writer = None; // it was the writer's: the next append opens a new one
        }
        for ((l, total), n) in lost.iter_mut().zip(st.items.iter_mut()).zip(seg.items) {
            *l += n;
            *total -= n;
        }
        st.requests -= seg.requests;
        st.bytes -= seg.end;
        st.head = 0;
        st.reader = None;
        st.send = None;
        st.answered.retain(|&(id, _), _| id != seg.id);
        let _ = std::fs::remove_file(seg_path(&st.dir, seg.id));
    }

    /// The collector answered `rec` (accepted, or failed for good): forget it.
    /// The cursor moves only when `rec` is the oldest unanswered record (then
    /// over every record answered before it, too).
    pub fn ack(&self, rec: &Record) {
        let mut guard = self.st.lock();
        let st = &mut *guard;
        let Some(seg) = st.segs.iter_mut().find(|s| s.id == rec.seg) else {
            return; // dropped meanwhile
        };
        seg.requests -= 1;
        seg.items[sig_index(rec.signal)] -= rec.items;
        st.requests -= 1;
        st.items[sig_index(rec.signal)] -= rec.items;
        if st.segs.front().is_none_or(|f| f.id != rec.seg) || st.head != rec.at {
            st.answered.insert((rec.seg, rec.at), rec.next);
            return;
        }
        st.head = rec.next;
        loop {
            let front = st.segs[0].id;
            if let Some(next) = st.answered.remove(&(front, st.head)) {
                st.head = next;
                continue;
            }
            // Past a segment's end the next one starts at 0 (once collected).
            let was = front;
            st.collect();
            match st.segs.front() {
                Some(f) if f.id != was => continue,
                _ => break,
            }
        }
        let cursor = match st.segs.front() {
            Some(f) => (f.id, st.head),
            None => (rec.seg, rec.next),
        };
        let mut buf = [0u8; 20];
        buf[..8].copy_from_slice(&cursor.0.to_le_bytes());
        buf[8..16].copy_from_slice(&cursor.1.to_le_bytes());
        let crc = crc32fast::hash(&buf[..16]);
        buf[16..].copy_from_slice(&crc.to_le_bytes());
        if let Err(e) = st.cursor.write_all_at(&buf, 0) {
            tracing::warn!("spool cursor not written ({e}): answered requests may be sent again after a restart");
        }
    }

    /// At shutdown: the cursor on disk as well.
    pub fn close(&self) {
        let _ = self.st.lock().cursor.sync_data();
    }
}

impl State {
    /// Deletes fully answered segments the writer is done with.
    fn collect(&mut self) {
        while self.segs.len() > 1 || (self.writer.is_none() && !self.segs.is_empty()) {
            let front = &self.segs[0];
            if self.head < front.end {
                break;
            }
            let id = front.id;
            self.bytes -= front.end;
            self.segs.pop_front();
            self.head = 0;
            self.answered.retain(|&(seg, _), _| seg != id);
            if self.reader.as_ref().is_some_and(|(rid, _)| *rid == id) {
                self.reader = None;
            }
            let _ = std::fs::remove_file(seg_path(&self.dir, id));
        }
    }
}

/// The cursor file's (segment, offset); (0, 0) when missing or damaged.
fn read_cursor(f: &File) -> (u64, u64) {
    let mut buf = [0u8; 20];
    if f.read_exact_at(&mut buf, 0).is_err() {
        return (0, 0);
    }
    let crc = u32::from_le_bytes(buf[16..].try_into().unwrap());
    if crc32fast::hash(&buf[..16]) != crc {
        tracing::warn!("spool cursor damaged: sending the whole spool again");
        return (0, 0);
    }
    (
        u64::from_le_bytes(buf[..8].try_into().unwrap()),
        u64::from_le_bytes(buf[8..16].try_into().unwrap()),
    )
}

/// The first record boundary at or past `off` in a scanned (valid) segment.
fn first_unanswered(path: &Path, off: u64) -> io::Result<u64> {
    let f = File::open(path)?;
    let size = f.metadata()?.len();
    let mut pos = 0u64;
    while pos < off && pos + HEADER <= size {
        let mut h = [0u8; HEADER as usize];
        f.read_exact_at(&mut h, pos)?;
        pos += HEADER + u32::from_le_bytes(h[..4].try_into().unwrap()) as u64;
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_byte_mid_segment_is_caught_at_read_and_the_rest_counted_lost() {
        let tmp = tempfile::tempdir().unwrap();
        let sp = Spool::open(tmp.path(), 1 << 20).unwrap();
        for i in 0..3u8 {
            let t = sp.append(Signal::Metrics, 10 + i as usize, None, &[i; 100]).unwrap();
            sp.sync(t).unwrap();
        }
        let (first, lost) = sp.next_unsent();
        let first = first.unwrap();
        assert_eq!((first.items, &first.body[..], lost), (10, &[0u8; 100][..], [0; 3]));
        sp.ack(&first);
        // Damage the second record's body on disk.
        let seg = seg_path(tmp.path(), 1);
        let f = OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&[0xff], first.next + HEADER + 50).unwrap();
        let (rec, lost) = sp.next_unsent();
        assert!(rec.is_none());
        assert_eq!(lost, [11 + 12, 0, 0], "the rest of the segment, counted");
        let st = sp.stats();
        assert_eq!((st.requests, st.items, st.corrupt_records), (0, [0; 3], 1));
        // Appending goes on in a new segment.
        let t = sp.append(Signal::Logs, 4, None, b"x").unwrap();
        sp.sync(t).unwrap();
        let (rec, _) = sp.next_unsent();
        assert_eq!(rec.map(|r| (r.signal, r.items)), Some((Signal::Logs, 4)));
    }

    #[test]
    fn answers_out_of_order_move_the_cursor_only_past_the_oldest_unanswered() {
        let tmp = tempfile::tempdir().unwrap();
        let items = |recs: &[Record]| recs.iter().map(|r| r.items).collect::<Vec<_>>();
        {
            let sp = Spool::open(tmp.path(), 1 << 20).unwrap();
            for i in 1..=4u8 {
                sp.sync(sp.append(Signal::Metrics, i as usize, None, &[i; 10]).unwrap())
                    .unwrap();
            }
            let recs: Vec<Record> = (0..3).map(|_| sp.next_unsent().0.unwrap()).collect();
            assert_eq!(items(&recs), [1, 2, 3], "read ahead in order");
            sp.ack(&recs[2]);
            sp.ack(&recs[1]);
            assert_eq!((sp.stats().requests, sp.stats().items[0]), (2, 1 + 4));
            // Export paused: reading again starts at the oldest unanswered and skips the answered.
            sp.rewind();
            assert_eq!(sp.next_unsent().0.map(|r| r.items), Some(1));
            assert_eq!(sp.next_unsent().0.map(|r| r.items), Some(4));
            assert!(sp.next_unsent().0.is_none());
            sp.close();
        }
        {
            // A crash: the cursor is still at the first, so all four come back (at least once).
            let sp = Spool::open(tmp.path(), 1 << 20).unwrap();
            assert_eq!(sp.stats().items, [1 + 2 + 3 + 4, 0, 0]);
            let recs: Vec<Record> = (0..4).map(|_| sp.next_unsent().0.unwrap()).collect();
            sp.ack(&recs[1]);
            sp.ack(&recs[2]);
            sp.ack(&recs[0]); // the oldest: the cursor moves past 1, 2 and 3
            assert_eq!(sp.stats().items, [4, 0, 0]);
            sp.close();
        }
        let sp = Spool::open(tmp.path(), 1 << 20).unwrap();
        assert_eq!(sp.stats().items, [4, 0, 0], "only the unanswered fourth is left");
        let last = sp.next_unsent().0.unwrap();
        sp.ack(&last);
        assert_eq!(sp.stats().requests, 0);
    }

    #[test]
    fn reading_ahead_stops_at_a_damaged_record_until_the_ones_before_it_are_answered() {
        let tmp = tempfile::tempdir().unwrap();
        let sp = Spool::open(tmp.path(), 1 << 20).unwrap();
        for i in 1..=3u8 {
            sp.sync(sp.append(Signal::Metrics, i as usize, None, &[i; 100]).unwrap())
                .unwrap();
        }
        let first = sp.next_unsent().0.unwrap();
        // Damage the second record's body on disk.
        let f = OpenOptions::new().write(true).open(seg_path(tmp.path(), 1)).unwrap();
        f.write_all_at(&[0xff], first.next + HEADER + 50).unwrap();
        assert!(sp.next_unsent().0.is_none(), "the first is still in flight: wait");
        assert_eq!(sp.stats().corrupt_records, 0);
        sp.ack(&first);
        let (rec, lost) = sp.next_unsent();
        assert!(rec.is_none());
        assert_eq!(
            (lost, sp.stats().corrupt_records),
            ([2 + 3, 0, 0], 1),
            "the rest of the segment, counted"
        );
    }

    #[test]
    fn a_damaged_cursor_means_sending_again_never_losing() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let sp = Spool::open(tmp.path(), 1 << 20).unwrap();
            for i in 0..2 {
                sp.sync(sp.append(Signal::Traces, i + 1, None, b"span").unwrap())
                    .unwrap();
            }
            let (rec, _) = sp.next_unsent();
            sp.ack(&rec.unwrap());
            sp.close();
        }
        assert_eq!(Spool::open(tmp.path(), 1 << 20).unwrap().stats().items, [0, 0, 2]);
        std::fs::write(tmp.path().join(CURSOR), b"garbage, not a cursor").unwrap();
        assert_eq!(Spool::open(tmp.path(), 1 << 20).unwrap().stats().items, [0, 0, 3]);
    }
}
