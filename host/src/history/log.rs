//! Record framing for every history file (tier segments, the write-ahead log,
//! the series log), and reading a file back.
//!
//! A record is `magic (4) | kind (1) | len (4, LE) | crc32 (4, LE) | payload (len)`,
//! the CRC taken over kind, len and payload. A reader takes records in order
//! and skips what does not check out: a record whose CRC fails but whose
//! length fits is skipped and reading goes on; a bad magic or a length past
//! the end of the file (a torn last write) ends the file. Either way the
//! skipped records are counted, never fatal.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const MAGIC: [u8; 4] = *b"SNDH";
pub(crate) const HEADER: usize = 13;
/// Largest payload a reader accepts.
pub(crate) const MAX_PAYLOAD: usize = 64 << 20;

/// A sealed chunk in a tier segment.
pub(crate) const KIND_CHUNK: u8 = 1;
/// Raw points since the last flush, in the write-ahead log.
pub(crate) const KIND_WAL: u8 = 2;
/// A series definition, in the series log.
pub(crate) const KIND_SERIES: u8 = 3;

fn crc(kind: u8, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[kind]);
    h.update(&(payload.len() as u32).to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Appends one framed record to `out`.
pub(crate) fn frame(out: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    out.extend_from_slice(&MAGIC);
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc(kind, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// What reading a file found.
#[derive(Default, Debug)]
pub(crate) struct ReadOutcome {
    /// Records skipped (bad CRC, torn tail).
    pub corrupt: u64,
}

/// Calls `f(kind, offset_of_record, payload)` for each good record of `data`.
pub(crate) fn read_records(data: &[u8], mut f: impl FnMut(u8, usize, &[u8])) -> ReadOutcome {
    let mut out = ReadOutcome::default();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = &data[pos..];
        if rest.len() < HEADER || rest[..4] != MAGIC {
            out.corrupt += 1;
            break;
        }
        let kind = rest[4];
        let len = u32::from_le_bytes(rest[5..9].try_into().expect("4 bytes")) as usize;
        let sum = u32::from_le_bytes(rest[9..13].try_into().expect("4 bytes"));
        if len > MAX_PAYLOAD || rest.len() < HEADER + len {
            out.corrupt += 1;
            break;
        }
        let payload = &rest[HEADER..HEADER + len];
        if crc(kind, payload) == sum {
            f(kind, pos, payload);
        } else {
            out.corrupt += 1;
        }
        pos += HEADER + len;
    }
    out
}

/// Numbered files `<n>.<ext>` in `dir`, in number order. Other names are ignored.
pub(crate) fn numbered_files(dir: &Path, ext: &str) -> Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.extension().and_then(|x| x.to_str()) != Some(ext) {
            continue;
        }
        if let Some(n) = p
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
        {
            v.push((n, p));
        }
    }
    v.sort();
    Ok(v)
}

pub(crate) fn numbered_path(dir: &Path, n: u64, ext: &str) -> PathBuf {
    dir.join(format!("{n:012}.{ext}"))
}

/// Creates a new file for appending (fails if it exists).
pub(crate) fn create_append(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .append(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

/// Writes `data` to `path` atomically (a temporary file, fsync, rename).
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(data)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", tmp.display()))?;
    Ok(())
}

/// Little-endian cursor over a payload.
pub(crate) struct Cur<'a> {
    pub b: &'a [u8],
}

impl<'a> Cur<'a> {
    pub(crate) fn u8(&mut self) -> Option<u8> {
        let (&x, rest) = self.b.split_first()?;
        self.b = rest;
        Some(x)
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        let (x, rest) = self.b.split_first_chunk::<4>()?;
        self.b = rest;
        Some(u32::from_le_bytes(*x))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let (x, rest) = self.b.split_first_chunk::<8>()?;
        self.b = rest;
        Some(u64::from_le_bytes(*x))
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (x, rest) = self.b.split_at(n);
        self.b = rest;
        Some(x)
    }
    pub(crate) fn str(&mut self) -> Option<&'a str> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.bytes(n)?).ok()
    }
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_and_damage_is_counted() {
        let mut buf = Vec::new();
        frame(&mut buf, KIND_CHUNK, b"one");
        let second = buf.len();
        frame(&mut buf, KIND_WAL, b"two two");
        frame(&mut buf, KIND_SERIES, b"three");
        let mut seen = Vec::new();
        let r = read_records(&buf, |k, _, p| seen.push((k, p.to_vec())));
        assert_eq!(r.corrupt, 0);
        assert_eq!(seen.len(), 3);
        // A flipped payload bit: that record is skipped, the next still read.
        let mut bad = buf.clone();
        bad[second + HEADER + 2] ^= 0x10;
        let mut kinds = Vec::new();
        let r = read_records(&bad, |k, _, _| kinds.push(k));
        assert_eq!((r.corrupt, kinds), (1, vec![KIND_CHUNK, KIND_SERIES]));
        // A torn tail: the last record is cut short.
        let torn = &buf[..buf.len() - 2];
        let mut n = 0;
        let r = read_records(torn, |_, _, _| n += 1);
        assert_eq!((r.corrupt, n), (1, 2));
    }
}
