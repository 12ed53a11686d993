//! `[history]`: the master's embedded history (see `history/mod.rs`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::check::Check;

/// The embedded history's settings. Every field has a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Where the history's files live. Unset: `<data_dir>/history`.
    pub directory: Option<PathBuf>,
    /// Most bytes the history may keep on disk (segments of every tier, the
    /// write-ahead log and the series list). When it is reached the oldest data
    /// goes first, taken from the tier that holds the largest part of its own
    /// retention, so that every tier keeps about the same fraction of it.
    /// What goes is counted in the stats. Default 1 GiB.
    /// Range: at least 64 KiB.
    pub disk_budget_bytes: u64,
    /// Most bytes the history may hold in memory (open chunks, the chunk index,
    /// the series list). Past it, open chunks are written out early; if that is
    /// not enough, the oldest data is evicted and counted. Default 128 MiB.
    /// Range: at least 1 MiB.
    pub memory_budget_bytes: u64,
    /// How long points are kept at full resolution (as they came), in seconds.
    /// Default 900 (15 minutes).
    /// Range: at least 1.
    pub raw_window_s: u64,
    /// Downsampled tiers, finest first: each keeps min, max, mean and count per
    /// bucket of `step_s` for `keep_s`. Each step must be a larger multiple of
    /// the one before. Default: 1 s kept 24 h, 60 s kept 30 days.
    /// Range: at most 6 tiers.
    pub tiers: Vec<TierConfig>,
    /// Most series kept. A new series past this is refused and counted; a
    /// series whose data has all aged out frees its place. Default 65 536.
    /// Range: 1 ..= 10 000 000.
    pub max_series: usize,
    /// How often appended points are written to disk, in milliseconds: what a
    /// crash (SIGKILL) may lose. Default 1000.
    /// Range: 10 ..= 60 000.
    pub flush_interval_ms: u64,
    /// Most bytes of memory kept of what queries decoded: the buckets of
    /// sealed chunks at the widths asked for, so that a view asked for again
    /// (a dashboard redrawing the last hour) decodes only what changed. Past
    /// it the least recently used go. 0 turns it off. Default 32 MiB (an
    /// hour's view of 320 series at 1 000 buckets keeps about 11 MB).
    pub query_cache_bytes: u64,
}

/// One downsampled tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// Bucket width in seconds: a larger multiple of the tier before's.
    /// Range: at least 1.
    pub step_s: u64,
    /// How long buckets are kept, in seconds.
    /// Range: at least `step_s`.
    pub keep_s: u64,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            directory: None,
            disk_budget_bytes: 1 << 30,
            memory_budget_bytes: 128 << 20,
            raw_window_s: 900,
            tiers: vec![
                TierConfig {
                    step_s: 1,
                    keep_s: 24 * 3600,
                },
                TierConfig {
                    step_s: 60,
                    keep_s: 30 * 24 * 3600,
                },
            ],
            max_series: 65_536,
            flush_interval_ms: 1000,
            query_cache_bytes: 32 << 20,
        }
    }
}

/// Smallest budgets accepted.
pub const MIN_DISK_BUDGET: u64 = 64 << 10;
pub const MIN_MEMORY_BUDGET: u64 = 1 << 20;
/// Most downsampled tiers.
pub const MAX_TIERS: usize = 6;

impl HistoryConfig {
    /// The directory, `<data_dir>/history` unless set.
    pub fn dir(&self, data_dir: &Path) -> PathBuf {
        self.directory.clone().unwrap_or_else(|| data_dir.join("history"))
    }

    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        c.at_least("disk_budget_bytes", self.disk_budget_bytes, MIN_DISK_BUDGET);
        c.at_least("memory_budget_bytes", self.memory_budget_bytes, MIN_MEMORY_BUDGET);
        c.at_least("raw_window_s", self.raw_window_s, 1);
        c.range("max_series", self.max_series, 1, 10_000_000);
        c.range("flush_interval_ms", self.flush_interval_ms, 10, 60_000);
        if self.tiers.len() > MAX_TIERS {
            c.bad("tiers", format!("at most {MAX_TIERS} tiers"));
        }
        let mut prev_step = 0u64;
        for (i, t) in self.tiers.iter().enumerate() {
            let mut c = c.within(&format!("tiers[{i}]"));
            if t.step_s == 0 {
                c.at_least("step_s", t.step_s, 1);
            } else if prev_step > 0 && (t.step_s <= prev_step || t.step_s % prev_step != 0) {
                c.bad(
                    "step_s",
                    format!("must be a larger multiple of the tier before ({prev_step} s)"),
                );
            }
            if t.keep_s < t.step_s {
                c.bad("keep_s", "must be at least step_s");
            }
            prev_step = t.step_s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_errors_name_their_key() {
        let problems = |c: &HistoryConfig| {
            let mut errs = Vec::new();
            c.validate(&mut Check::new("history", &mut errs));
            errs.into_iter().map(|e| e.key).collect::<Vec<_>>()
        };
        assert!(problems(&HistoryConfig::default()).is_empty());
        let c: HistoryConfig = toml::from_str(
            "disk_budget_bytes = 10\ntiers = [{step_s = 60, keep_s = 600}, {step_s = 90, keep_s = 6000}]",
        )
        .unwrap();
        assert_eq!(problems(&c), ["history.disk_budget_bytes", "history.tiers[1].step_s"]);
        assert!(
            toml::from_str::<HistoryConfig>("disk_budget = 5").is_err(),
            "unknown keys are refused"
        );
        assert_eq!(c.raw_window_s, 900, "unset fields take their default");
    }
}
