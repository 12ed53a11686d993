//! A procfs (or sysfs) file kept open for the life of the sampler and re-read
//! from offset 0 into a reused buffer, plus byte-level parsing helpers.
//!
//! Why: opening a file costs a path walk and an allocation of a `File`, and
//! `read_to_string` allocates and validates UTF-8. The kernel regenerates a
//! procfs file's text on every read at offset 0, so one `pread(fd, buf, 0)`
//! is all a tick needs (a second only when the text outgrows a page).

use std::fs::File;
use std::path::{Path, PathBuf};

/// Initial buffer size; it doubles (rarely, and only until the file fits).
const INITIAL_BUF: usize = 4096;

/// One procfs file, open, with the buffer its last read went into.
#[derive(Debug)]
pub(crate) struct ProcFile {
    path: PathBuf,
    file: Option<File>,
    buf: Vec<u8>,
    /// Set once the first read error has been logged (no error spam).
    warned: bool,
}

impl ProcFile {
    /// Opens `path`; a file that cannot be opened gives a `ProcFile` whose
    /// `read` returns `None` (the caller logs once and skips that part).
    pub(crate) fn open(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let file = File::open(&path).ok();
        Self {
            path,
            file,
            buf: Vec::new(),
            warned: false,
        }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.file.is_some()
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the whole file from offset 0. Steady state: one `pread` and no
    /// allocation (the buffer only grows while the file outgrows it).
    pub(crate) fn read(&mut self) -> Option<&[u8]> {
        let file = self.file.as_ref()?;
        if self.buf.is_empty() {
            self.buf.resize(INITIAL_BUF, 0);
        }
        let mut len = 0usize;
        loop {
            if len == self.buf.len() {
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
            let room = self.buf.len() - len;
            match read_at(file, &mut self.buf[len..], len as u64) {
                Ok(0) => break,
                Ok(n) => {
                    len += n;
                    // A seq_file read stops at EOF, at the end of our buffer, or
                    // when its own page-sized buffer cannot take the next record.
                    // So a read shorter than our room and than a page less the
                    // longest record is the end: skip the pread that returns 0.
                    if n < room && n < SEQ_PAGE - MAX_RECORD {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if !self.warned {
                        self.warned = true;
                        tracing::warn!(path = %self.path.display(), error = %e, "sampler: read failed; its series are NaN until it recovers");
                    }
                    return None;
                }
            }
        }
        Some(&self.buf[..len])
    }
}

/// The kernel's seq_file buffer starts at one page.
const SEQ_PAGE: usize = 4096;
/// Longer than any one line of /proc/net/dev or /proc/diskstats
/// (20 numbers of at most 20 digits plus a name).
const MAX_RECORD: usize = 512;

#[cfg(unix)]
fn read_at(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    f.read_at(buf, off)
}

#[cfg(not(unix))]
fn read_at(mut f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    use std::io::{Read, Seek, SeekFrom};
    f.seek(SeekFrom::Start(off))?;
    f.read(buf)
}

/// Non-empty lines.
pub(crate) fn lines(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    buf.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

/// Whitespace-separated fields.
pub(crate) fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ' || b == b'\t').filter(|f| !f.is_empty())
}

/// A decimal unsigned integer; `None` for anything else (or overflow).
pub(crate) fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// `0x1003` or `1003` as hexadecimal (sysfs `flags` files).
pub(crate) fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = trim(s);
    let s = s.strip_prefix(b"0x").or_else(|| s.strip_prefix(b"0X")).unwrap_or(s);
    if s.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        let d = (b as char).to_digit(16)?;
        v = v.checked_mul(16)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Strips ASCII whitespace at both ends.
pub(crate) fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// Names we have seen in a procfs listing (interfaces, disks, CPUs), and
/// whether each one got series. A name seen once is never classified again,
/// so the per-tick cost is a byte comparison; the line index is tried first
/// because the kernel lists entries in a stable order.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    entries: Vec<(Box<[u8]>, Option<u32>)>,
    included: usize,
    cap_logged: bool,
}

/// How many entities of one kind get series at most (veth churn on a
/// container host must not grow the series list without bound).
pub(crate) const MAX_TRACKED: usize = 256;
/// How many excluded names are remembered before the list is trimmed.
const MAX_EXCLUDED: usize = 4096;

impl Tracker {
    /// The first series id of `name`, `Some(None)` when it is known and
    /// excluded, `None` when it was never seen.
    #[inline]
    pub(crate) fn get(&self, pos: usize, name: &[u8]) -> Option<Option<u32>> {
        if let Some((n, id)) = self.entries.get(pos)
            && **n == *name
        {
            return Some(*id);
        }
        self.entries.iter().find(|(n, _)| **n == *name).map(|(_, id)| *id)
    }

    /// Records a newly seen name. `make` creates its series (returns the first
    /// id) and is only called when `include` is true and the cap allows it.
    pub(crate) fn insert(&mut self, what: &str, name: &[u8], include: bool, make: impl FnOnce() -> u32) -> Option<u32> {
        let id = if include && self.included < MAX_TRACKED {
            self.included += 1;
            Some(make())
        } else {
            if include && !self.cap_logged {
                self.cap_logged = true;
                tracing::warn!(
                    "sampler: more than {MAX_TRACKED} {what}s; {} and later ones get no series",
                    String::from_utf8_lossy(name)
                );
            }
            None
        };
        if id.is_none() && self.entries.len() >= MAX_EXCLUDED {
            self.entries.retain(|(_, id)| id.is_some());
        }
        self.entries.push((name.into(), id));
        id
    }

    /// How many names got series.
    pub(crate) fn included_count(&self) -> usize {
        self.included
    }

    /// Names that got series, in the order they got them.
    #[cfg(test)]
    pub(crate) fn included(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, id)| id.is_some())
            .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_hex(b"0x1003\n"), Some(0x1003));
        assert_eq!(parse_hex(b"9"), Some(9));
        assert_eq!(parse_hex(b"0x"), None);
    }

    #[test]
    fn fields_and_lines() {
        let f: Vec<&[u8]> = fields(b"  a\tbb  c ").collect();
        assert_eq!(f, vec![&b"a"[..], b"bb", b"c"]);
        let l: Vec<&[u8]> = lines(b"x\n\ny\n").collect();
        assert_eq!(l, vec![&b"x"[..], b"y"]);
    }

    #[test]
    fn rereads_from_the_start_and_grows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let big = "0123456789".repeat(1000); // > INITIAL_BUF
        std::fs::write(&p, &big).unwrap();
        let mut f = ProcFile::open(&p);
        assert!(f.is_open());
        assert_eq!(f.read().unwrap(), big.as_bytes());
        // Rewritten in place: the same open file sees the new text.
        let mut w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        w.write_all(b"ABC").unwrap();
        assert_eq!(&f.read().unwrap()[..4], b"ABC3");
        let mut missing = ProcFile::open(dir.path().join("nope"));
        assert!(!missing.is_open());
        assert!(missing.read().is_none());
    }

    #[test]
    fn real_proc_stat_reads() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let mut f = ProcFile::open("/proc/stat");
        let a = f.read().unwrap().to_vec();
        assert!(a.starts_with(b"cpu "));
        let b = f.read().unwrap();
        assert!(b.starts_with(b"cpu "));
    }

    #[test]
    fn tracker_remembers_and_caps() {
        let mut t = Tracker::default();
        assert_eq!(t.get(0, b"eth0"), None);
        assert_eq!(t.insert("interface", b"eth0", true, || 7), Some(7));
        assert_eq!(t.insert("interface", b"lo", false, || unreachable!()), None);
        assert_eq!(t.get(0, b"eth0"), Some(Some(7)));
        assert_eq!(t.get(0, b"lo"), Some(None)); // wrong hint, still found
        assert_eq!(t.get(1, b"lo"), Some(None));
        for i in 0..MAX_TRACKED + 3 {
            t.insert("interface", format!("v{i}").as_bytes(), true, || 1);
        }
        assert_eq!(t.included().len(), MAX_TRACKED);
    }
}
