//! The plugins the `sonde` binary carries, written out as files.
//!
//! Why files: everything else about a plugin (the directory watch, the compile
//! cache, uploads and removals through the API, `[plugin.<name>]`) works on a
//! plugins directory, so the carried set joins that path instead of growing a
//! second way in. The binary (`main.rs`) embeds the components that
//! `./dev plugins` built and hands them here; the library itself embeds none,
//! so test binaries and the in-process agent stay small.
//!
//! Two uses:
//! - [`install`]: with no plugins directory given, at every start, into
//!   `<host.data_dir>/plugins`. The directory stays the operator's: a ledger
//!   (`.bundled`) remembers what the binary last wrote there, so a newer
//!   binary replaces its own files, but a file the operator replaced (an
//!   upload, a copy) is kept, and one the operator removed stays removed.
//! - [`extract`]: `sonde plugins extract DIR` writes every one, overwriting.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// One carried plugin: its name (the file stem) and its component.
pub type Carried = (&'static str, &'static [u8]);

/// The ledger's file name in the plugins directory (a dot file: the
/// directory scan skips it).
pub const LEDGER: &str = ".bundled";

/// What [`install`] did, file by file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// Written: new to this directory, or the binary's own older copy.
    pub written: Vec<String>,
    /// Already what the binary carries.
    pub current: Vec<String>,
    /// The operator's own file under a carried name, left alone.
    pub kept: Vec<String>,
    /// Removed by the operator earlier, not written again.
    pub left_out: Vec<String>,
    /// The binary's own file of a plugin it no longer carries, removed.
    pub retired: Vec<String>,
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Streamed through a small buffer: reading whole components into the heap
/// at every start left megabytes freed but kept by malloc.
fn file_sha(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(hex::encode(hasher.finalize()))
}

/// Writes through a dot file then a rename: a watching host never loads half a file.
fn write_atomic(dir: &Path, file: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{file}.tmp"));
    let dst = dir.join(file);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &dst).with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))
}

/// The ledger: `<sha256> <name>` per line, what the binary last wrote.
fn read_ledger(dir: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join(LEDGER)).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(sha, name)| (name.to_string(), sha.to_string()))
        .collect()
}

fn write_ledger(dir: &Path, ledger: &BTreeMap<String, String>) -> Result<()> {
    let mut text = String::new();
    for (name, sha) in ledger {
        text.push_str(&format!("{sha} {name}\n"));
    }
    write_atomic(dir, LEDGER, text.as_bytes())
}

/// Brings `dir` up to the carried set without undoing the operator's changes
/// (see the module comment). Creates `dir` when missing.
pub fn install(dir: &Path, carried: &[Carried]) -> Result<Installed> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating the plugins directory {}", dir.display()))?;
    let before = read_ledger(dir);
    let mut ledger = BTreeMap::new();
    let mut done = Installed::default();
    for (name, bytes) in carried {
        let file = format!("{name}.wasm");
        let want = sha256(bytes);
        let ours = before.get(*name);
        match file_sha(&dir.join(&file)) {
            Some(have) if have == want => done.current.push(name.to_string()),
            // Absent and never written: a new plugin. Ours, unchanged since: an older copy.
            None if ours.is_none() => {
                write_atomic(dir, &file, bytes)?;
                done.written.push(name.to_string());
            }
            Some(have) if Some(&have) == ours => {
                write_atomic(dir, &file, bytes)?;
                done.written.push(name.to_string());
            }
            None => {
                // The operator removed it: remember that, so it stays removed.
                done.left_out.push(name.to_string());
                ledger.insert(name.to_string(), ours.cloned().unwrap_or_default());
                continue;
            }
            Some(_) => {
                done.kept.push(name.to_string());
                // Still ours to remember: should the operator's file go, ours stays out.
                ledger.insert(name.to_string(), ours.cloned().unwrap_or(want));
                continue;
            }
        }
        ledger.insert(name.to_string(), want);
    }
    for (name, sha) in &before {
        if carried.iter().any(|(n, _)| n == name) {
            continue;
        }
        let path = dir.join(format!("{name}.wasm"));
        if file_sha(&path).as_ref() == Some(sha) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            done.retired.push(name.clone());
        }
    }
    write_ledger(dir, &ledger)?;
    Ok(done)
}

/// Writes every carried plugin into `dir` (created when missing), replacing
/// files of the same name; returns the paths written.
pub fn extract(dir: &Path, carried: &[Carried]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = Vec::new();
    for (name, bytes) in carried {
        let file = format!("{name}.wasm");
        write_atomic(dir, &file, bytes)?;
        out.push(dir.join(file));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_fresh_directory_gets_every_carried_plugin() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("plugins");
        let done = install(&dir, &[("a", b"A1"), ("b", b"B1")]).unwrap();
        assert_eq!(done.written, ["a", "b"]);
        assert_eq!(names(&dir), ["a.wasm", "b.wasm"]);
        assert_eq!(std::fs::read(dir.join("a.wasm")).unwrap(), b"A1");
        // A second start with the same binary writes nothing.
        let again = install(&dir, &[("a", b"A1"), ("b", b"B1")]).unwrap();
        assert!(again.written.is_empty());
        assert_eq!(again.current, ["a", "b"]);
    }

    #[test]
    fn a_newer_binary_replaces_its_own_copies_and_retires_what_it_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        install(dir, &[("a", b"A1"), ("old", b"O1")]).unwrap();
        let done = install(dir, &[("a", b"A2"), ("new", b"N1")]).unwrap();
        assert_eq!(done.written, ["a", "new"]);
        assert_eq!(done.retired, ["old"]);
        assert_eq!(names(dir), ["a.wasm", "new.wasm"]);
        assert_eq!(std::fs::read(dir.join("a.wasm")).unwrap(), b"A2");
    }

    #[test]
    fn what_the_operator_replaced_or_removed_stays_so() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        install(dir, &[("a", b"A1"), ("b", b"B1"), ("c", b"C1")]).unwrap();
        std::fs::write(dir.join("a.wasm"), b"mine").unwrap();
        std::fs::remove_file(dir.join("b.wasm")).unwrap();
        std::fs::write(dir.join("upload.wasm"), b"U").unwrap();
        let done = install(dir, &[("a", b"A2"), ("b", b"B2"), ("c", b"C1")]).unwrap();
        assert_eq!(done.kept, ["a"]);
        assert_eq!(done.left_out, ["b"]);
        assert_eq!(done.current, ["c"]);
        assert_eq!(std::fs::read(dir.join("a.wasm")).unwrap(), b"mine");
        assert_eq!(names(dir), ["a.wasm", "c.wasm", "upload.wasm"]);
        // Still so at the start after: the ledger remembered both.
        let later = install(dir, &[("a", b"A3"), ("b", b"B3"), ("c", b"C1")]).unwrap();
        assert_eq!(
            (later.kept, later.left_out),
            (vec!["a".to_string()], vec!["b".to_string()])
        );
        // The operator's file that happens to be the carried one is current.
        std::fs::write(dir.join("a.wasm"), b"A3").unwrap();
        assert_eq!(install(dir, &[("a", b"A3")]).unwrap().current, ["a"]);
    }

    #[test]
    fn a_file_there_before_any_ledger_is_the_operators() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a.wasm"), b"copied by hand").unwrap();
        let done = install(tmp.path(), &[("a", b"A1")]).unwrap();
        assert_eq!(done.kept, ["a"]);
        assert_eq!(std::fs::read(tmp.path().join("a.wasm")).unwrap(), b"copied by hand");
    }

    #[test]
    fn extract_overwrites_and_lists_every_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.wasm"), b"old").unwrap();
        let written = extract(&dir, &[("a", b"A1"), ("b", b"B1")]).unwrap();
        assert_eq!(written, [dir.join("a.wasm"), dir.join("b.wasm")]);
        assert_eq!(std::fs::read(dir.join("a.wasm")).unwrap(), b"A1");
        assert_eq!(names(&dir), ["a.wasm", "b.wasm"]);
    }
}
