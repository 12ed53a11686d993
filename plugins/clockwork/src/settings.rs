//! The plugin's settings (`[plugin.clockwork] settings = {...}`): a JSON
//! object whose keys are all optional; unknown keys and wrong types are
//! refused naming the key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sonde_plugin_sdk::settings;

use crate::estimator::{Limits, Profile};
use crate::infer5::{Config, MS};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// INFER5's default SLO (its command line's `default_slo`), ms.
    pub default_slo_ms: u64,
    /// How far ahead the controller schedules (`schedule_ahead`), ms.
    pub schedule_ahead_ms: u64,
    /// Batch sizes whose estimate exceeds this are not used, ms (code: 250).
    pub max_exec_time_ms: u64,
    /// Largest batch size used (code: 8).
    pub max_batch_size: u32,
    /// Analysis window, s (the SLO experiments' 4 s).
    pub window_s: f64,
    /// How long a request waits for its action before it is analysed
    /// without it; windows close 2 × lag after their end. ms.
    pub lag_ms: u64,
    /// How often metrics are emitted, ms.
    pub emit_every_ms: u64,
    /// Write `clockwork_request_log.tsv` and `clockwork_action_log.tsv`.
    pub tsv: bool,
    /// Profiled measurements per model id (`model.measurements`), the
    /// estimator's seed: `{"30": {"weights_ns": 8000000, "exec_ns": {"1": 2900000, "2": 3600000}}}`.
    pub profiles: BTreeMap<u64, Profile>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            default_slo_ms: 100,
            schedule_ahead_ms: 10,
            max_exec_time_ms: 250,
            max_batch_size: 8,
            window_s: 4.0,
            lag_ms: 1000,
            emit_every_ms: 1000,
            tsv: true,
            profiles: BTreeMap::new(),
        }
    }
}

impl Settings {
    pub fn parse(json: &str) -> Result<Settings, String> {
        let s: Settings = settings::parse_json("clockwork", json)?;
        if !(s.window_s >= 0.1 && s.window_s <= 3600.0) {
            return Err(format!(
                "clockwork settings: window_s {} must be in 0.1..=3600",
                s.window_s
            ));
        }
        if s.default_slo_ms == 0 {
            return Err("clockwork settings: default_slo_ms must be > 0".into());
        }
        if s.max_batch_size == 0 {
            return Err("clockwork settings: max_batch_size must be >= 1".into());
        }
        if !(10..=3_600_000).contains(&s.emit_every_ms) {
            return Err(format!(
                "clockwork settings: emit_every_ms {} must be in 10..=3600000",
                s.emit_every_ms
            ));
        }
        Ok(s)
    }

    pub fn config(&self) -> Config {
        Config {
            default_slo: self.default_slo_ms * MS,
            schedule_ahead: self.schedule_ahead_ms * MS,
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_exec_time_ns: self.max_exec_time_ms * MS,
            max_batch_size: self.max_batch_size,
        }
    }

    pub fn window_ns(&self) -> u64 {
        (self.window_s * 1e9) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_infer5s_and_bad_keys_are_named() {
        let s = Settings::parse("{}").unwrap();
        assert_eq!(
            (
                s.default_slo_ms,
                s.schedule_ahead_ms,
                s.max_exec_time_ms,
                s.max_batch_size
            ),
            (100, 10, 250, 8)
        );
        let s = Settings::parse(r#"{"profiles":{"30":{"weights_ns":8000000,"exec_ns":{"1":2900000,"4":5000000}}}}"#)
            .unwrap();
        assert_eq!(s.profiles[&30].exec_ns[&4], 5_000_000);
        for (bad, want) in [
            (r#"{"window":4}"#, "unknown field `window`"),
            (r#"{"tsv":"yes"}"#, "invalid type"),
            (r#"{"window_s":0}"#, "window_s 0"),
            (r#"{"max_batch_size":0}"#, "max_batch_size"),
        ] {
            let e = Settings::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
