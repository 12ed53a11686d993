//! The host's own resident memory (Linux; elsewhere these do nothing).
//!
//! Most of an idle host's RSS is clean file pages: the sonde binary's code
//! and the compiled plugins (`.cwasm` files in the compile cache) that are
//! mapped and run in place. Two things make far more of them resident than
//! the host ever uses after start-up:
//! - start-up runs code it never runs again (configuration, TLS, plugin
//!   loading, the API's set-up);
//! - every page fault on a file maps the cached pages in the 64 KB around it
//!   too (the kernel's fault-around), so one touched page keeps up to sixteen
//!   resident; read-ahead keeps those neighbours cached, and on recent kernels
//!   even `MADV_RANDOM` does not stop it (docs/benchmarks.md, "RSS, the code").
//!
//! [`drop_unused_code_pages`] therefore advises both kinds of mapping
//! `MADV_RANDOM` (less read-ahead) and then `MADV_PAGEOUT` (the resident
//! pages are dropped). What the host runs afterwards faults back in, so the
//! RSS settles at the stretches it really uses.
//! [`keep_dropping_unused_code_pages`] does it when start-up is over, again
//! [`SETTLED_AFTER`] later (the first plugin calls, API requests and
//! self-metrics round run once and not again), then every
//! [`AGAIN_EVERY`], so code run once in a while (a dashboard session, a
//! reconfiguration) does not stay resident for good, and a plugin loaded
//! later is advised too.
//!
//! What keeps the re-faulting cheap: a release build lays out the functions
//! a running host runs (every tick first) together at the start of the
//! binary's code (`host/hot-code.txt`, `host/build.rs`), so they come back in
//! a few dozen 64 KB stretches. The cost is those page faults after each pass (some read
//! from the disk: the pass also drops the pages from the page cache), and a
//! page read the first time a rare path runs, such as the first request to
//! an API route.
//!
//! The heap is the other part: glibc keeps what a burst freed unless it lies
//! at the top of an arena. [`keep_heap_trimmed`] hands it back once more
//! than [`FREE_HEAP_KEPT`] is free (checked every [`HEAP_CHECK_EVERY`]).
//!
//! Only the sonde binary runs these (`run::run`) and [`share_heap_arenas`]
//! (`main`): a host embedded in another program leaves that program's memory
//! alone.
//!
//! A page mapped by two processes (two sondes run from one binary file) is
//! not paged out: RSS counts it in both, and the saving shows only where one
//! sonde runs from its file, as on a node.

use std::time::Duration;

/// The second pass, after start-up's.
pub const SETTLED_AFTER: Duration = Duration::from_secs(10);
/// The passes after that.
pub const AGAIN_EVERY: Duration = Duration::from_secs(300);

/// Lets every thread allocate from at most two malloc arenas (glibc gives
/// each thread that allocates its own, up to eight per core). The host has a
/// dozen threads that allocate little, and each arena keeps its own free
/// pages, so two arenas keep less memory idle at no cost the host can see
/// (the figure: docs/benchmarks.md). Call before the first thread starts.
pub fn share_heap_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tuning; M_ARENA_MAX takes a count.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Hands freed heap pages back to the OS (`malloc_trim`): compiling or
/// unloading a plugin frees tens of MB that glibc would otherwise keep.
pub fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the OS.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How often [`keep_heap_trimmed`] looks at the heap's free space.
pub const HEAP_CHECK_EVERY: Duration = Duration::from_secs(10);
/// Free heap that [`keep_heap_trimmed`] leaves with malloc.
pub const FREE_HEAP_KEPT: usize = 4 << 20;

/// Free heap space in bytes, all arenas (glibc's `mallinfo2`; `None` elsewhere).
pub fn free_heap_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 only reads malloc's own bookkeeping.
    return Some(unsafe { libc::mallinfo2() }.fordblks);
    #[allow(unreachable_code)]
    None
}

/// Every [`HEAP_CHECK_EVERY`], hands freed heap back to the OS when more than
/// [`FREE_HEAP_KEPT`] of it is free; runs until dropped (abort the task).
///
/// Why: a burst (an OTLP load of a million points a second, a long plugin
/// route answer) grows the heap by tens of MB, and glibc returns only a free
/// stretch at the very top of an arena, so what a burst left behind would
/// stay resident however small the heap becomes (docs/benchmarks.md, the OTLP
/// pipeline). Under a steady load this gives back pages that fault in again,
/// a small price every [`HEAP_CHECK_EVERY`].
pub async fn keep_heap_trimmed() {
    loop {
        tokio::time::sleep(HEAP_CHECK_EVERY).await;
        if free_heap_bytes().is_some_and(|free| free > FREE_HEAP_KEPT) {
            let _ = tokio::task::spawn_blocking(release_freed_heap).await;
        }
    }
}

/// Drops the code pages now ([`drop_unused_code_pages`]), after
/// [`SETTLED_AFTER`], then every [`AGAIN_EVERY`]; runs until dropped (abort
/// the task). Each pass runs on the blocking pool: reclaiming takes a few ms.
pub async fn keep_dropping_unused_code_pages() {
    let pass = || async {
        let advised = tokio::task::spawn_blocking(drop_unused_code_pages).await.unwrap_or(0);
        tracing::debug!(
            bytes = advised,
            "code pages of the binary and the compiled plugins dropped"
        );
    };
    pass().await;
    tokio::time::sleep(SETTLED_AFTER).await;
    loop {
        pass().await;
        tokio::time::sleep(AGAIN_EVERY).await;
    }
}

/// Advises the running executable's and the compiled plugins' file mappings
/// as the module doc says; returns how many bytes of mappings were advised
/// (0 elsewhere than Linux, or where the kernel refuses: `MADV_PAGEOUT`
/// needs Linux 5.4).
///
/// A debug build does nothing: its hosts are the test suite's, hundreds of
/// short runs started beside cargo's builds, where every first touch of a
/// dropped page of a binary of several hundred MB would be a read from the
/// disk on the sampler's thread. The figure this is for is a release one.
pub fn drop_unused_code_pages() -> usize {
    if cfg!(debug_assertions) {
        return 0;
    }
    advise_code_pages()
}

fn advise_code_pages() -> usize {
    #[cfg(target_os = "linux")]
    {
        let (Ok(exe), Ok(maps)) = (
            std::fs::read_link("/proc/self/exe"),
            std::fs::read_to_string("/proc/self/maps"),
        ) else {
            return 0;
        };
        code_mappings(&maps, &exe)
            .filter(|&(start, len)| {
                let at = start as *mut libc::c_void;
                // SAFETY: advice on ranges this process has mapped (read from its
                // own maps just now). Neither advice changes what the memory
                // holds: MADV_RANDOM only stops read-ahead, and MADV_PAGEOUT
                // reclaims clean file pages, which fault back in when touched.
                unsafe {
                    libc::madvise(at, len, libc::MADV_RANDOM);
                    libc::madvise(at, len, libc::MADV_PAGEOUT) == 0
                }
            })
            .map(|(_, len)| len)
            .sum()
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// (start, length) of each mapping in `maps` (the format of
/// `/proc/self/maps`) of the file `exe` or of a compiled plugin.
fn code_mappings<'a>(maps: &'a str, exe: &'a std::path::Path) -> impl Iterator<Item = (usize, usize)> + 'a {
    maps.lines().filter_map(move |line| {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let path = fields.nth(4)?;
        if !(std::path::Path::new(path) == exe || path.ends_with(".cwasm")) {
            return None;
        }
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
        Some((lo, hi.checked_sub(lo)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_executable_and_compiled_plugins_are_picked() {
        let maps = "\
55d0c0000000-55d0c0400000 r--p 00000000 fd:01 123 /opt/sonde/bin/sonde
55d0c0400000-55d0c1000000 r-xp 00400000 fd:01 123 /opt/sonde/bin/sonde
7f0000000000-7f0000100000 r-xp 00000000 fd:01 456 /data/cache/ab12-9251.cwasm
7f0000200000-7f0000300000 r-xp 00000000 fd:01 789 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";
        let picked: Vec<_> = code_mappings(maps, std::path::Path::new("/opt/sonde/bin/sonde")).collect();
        assert_eq!(
            picked,
            vec![
                (0x55d0c0000000, 0x400000),
                (0x55d0c0400000, 0xc00000),
                (0x7f0000000000, 0x100000)
            ]
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn dropping_the_pages_lowers_the_resident_file_pages_and_code_still_runs() {
        let rss_file_kb = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("RssFile:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap()
        };
        let before = rss_file_kb();
        assert!(advise_code_pages() > 0, "the test binary's own mappings were advised");
        let after = rss_file_kb();
        assert!(after < before, "resident file pages {before} kB -> {after} kB");
        // Code faults back in as it runs.
        let v: Vec<String> = (0..100).map(|i| format!("{i:03}")).collect();
        assert_eq!(v.concat().len(), 300);
        release_freed_heap();
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_heap_counts_as_free() {
        // Small allocations come from this thread's arena, not from mmap; the
        // last one stays, so the freed space is not at the arena's top.
        let many: Vec<Vec<u8>> = (0..100_000).map(|i| vec![i as u8; 200]).collect();
        let pin = Box::new([1u8; 200]);
        let before = free_heap_bytes().unwrap();
        drop(many);
        let freed = free_heap_bytes().unwrap();
        assert!(freed >= before + 10_000_000, "free heap {before} -> {freed} bytes");
        assert_eq!(pin[0], 1);
    }
}
