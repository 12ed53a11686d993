//! `[history]`: the master's embedded history (see `history/mod.rs`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    pub disk_budget_bytes: u64,
    /// Most bytes the history may hold in memory (open chunks, the chunk index,
    /// the series list). Past it, open chunks are written out early; if that is
    /// not enough, the oldest data is evicted and counted. Default 128 MiB.
    pub memory_budget_bytes: u64,
    /// How long points are kept at full resolution (as they came), in seconds.
    /// Default 900 (15 minutes).
    pub raw_window_s: u64,
    /// Downsampled tiers, finest first: each keeps min, max, mean and count per
    /// bucket of `step_s` for `keep_s`. Each step must be a multiple of the one
    /// before. Default: 1 s kept 24 h, 60 s kept 30 days.
    pub tiers: Vec<TierConfig>,
    /// Most series kept. A new series past this is refused and counted; a
    /// series whose data has all aged out frees its place. Default 65 536.
    pub max_series: usize,
    /// How often appended points are written to disk, in milliseconds: what a
    /// crash (SIGKILL) may lose. Default 1000.
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
    /// Bucket width in seconds.
    pub step_s: u64,
    /// How long buckets are kept, in seconds.
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

    /// Every problem, as (key path, reason); empty when the config is usable.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut errs = Vec::new();
        let mut bad = |k: &str, r: String| errs.push((format!("history.{k}"), r));
        if self.disk_budget_bytes < MIN_DISK_BUDGET {
            bad("disk_budget_bytes", format!("must be at least {MIN_DISK_BUDGET}"));
        }
        if self.memory_budget_bytes < MIN_MEMORY_BUDGET {
            bad("memory_budget_bytes", format!("must be at least {MIN_MEMORY_BUDGET}"));
        }
        if self.raw_window_s == 0 {
            bad("raw_window_s", "must be at least 1".into());
        }
        if self.max_series == 0 || self.max_series > 10_000_000 {
            bad("max_series", "must be between 1 and 10000000".into());
        }
        if !(10..=60_000).contains(&self.flush_interval_ms) {
            bad("flush_interval_ms", "must be between 10 and 60000".into());
        }
        if self.tiers.len() > MAX_TIERS {
            bad("tiers", format!("at most {MAX_TIERS} tiers"));
        }
        let mut prev_step = 0u64;
        for (i, t) in self.tiers.iter().enumerate() {
            if t.step_s == 0 {
                bad(&format!("tiers[{i}].step_s"), "must be at least 1".into());
            } else if prev_step > 0 && (t.step_s <= prev_step || t.step_s % prev_step != 0) {
                bad(
                    &format!("tiers[{i}].step_s"),
                    format!("must be a larger multiple of the tier before ({prev_step} s)"),
                );
            }
            if t.keep_s < t.step_s {
                bad(&format!("tiers[{i}].keep_s"), "must be at least step_s".into());
            }
            prev_step = t.step_s;
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_errors_name_their_key() {
        assert!(HistoryConfig::default().validate().is_empty());
        let c: HistoryConfig = toml::from_str(
            "disk_budget_bytes = 10\ntiers = [{step_s = 60, keep_s = 600}, {step_s = 90, keep_s = 6000}]",
        )
        .unwrap();
        let keys: Vec<_> = c.validate().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["history.disk_budget_bytes", "history.tiers[1].step_s"]);
        assert!(
            toml::from_str::<HistoryConfig>("disk_budget = 5").is_err(),
            "unknown keys are refused"
        );
        assert_eq!(c.raw_window_s, 900, "unset fields take their default");
    }
}
