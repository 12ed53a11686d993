//! The plugin's settings: a JSON object, every key optional; unknown keys and
//! wrong types are refused naming the key.

use serde::Serialize;
use serde_json::Value;
use sonde_plugin_sdk::settings;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Only this job's samples; "" = every job.
    pub job: String,
    /// How often metrics are emitted (ms).
    pub emit_every_ms: u64,
    /// How often each changed job's folded-stack file is rewritten (ms).
    pub write_every_ms: u64,
    /// Write `mpi-<job>.folded` through the host's file sink.
    pub folded_file: bool,
    /// Bound on distinct (rank, thread, state, function, call site) bins per job;
    /// samples of new bins beyond it are dropped and counted.
    pub max_bins: usize,
    /// Jobs kept; the one seen longest ago is forgotten first.
    pub max_jobs: usize,
}

pub const KNOWN_KEYS: [&str; 6] = [
    "job",
    "emit_every_ms",
    "write_every_ms",
    "folded_file",
    "max_bins",
    "max_jobs",
];

impl Default for Settings {
    fn default() -> Self {
        Settings {
            job: String::new(),
            emit_every_ms: 1000,
            write_every_ms: 2000,
            folded_file: true,
            max_bins: 50_000,
            max_jobs: 32,
        }
    }
}

/// The plugin's name in settings errors.
const PLUGIN: &str = "mpi";

impl Settings {
    pub fn parse(json: &str) -> Result<Settings, String> {
        let o = settings::parse_object(PLUGIN, json, &KNOWN_KEYS)?;
        let d = Settings::default();
        let ms = |key: &str| o.u64_in(key, 100..=3_600_000, "an integer of milliseconds from 100 to 3600000");
        let count = |key: &str| {
            o.u64_in(key, 1..=10_000_000, "an integer from 1 to 10000000")
                .map(|n| n.map(|n| n as usize))
        };
        Ok(Settings {
            job: o
                .string("job", "a job name (string; \"\" = every job)")?
                .unwrap_or(d.job),
            emit_every_ms: ms("emit_every_ms")?.unwrap_or(d.emit_every_ms),
            write_every_ms: ms("write_every_ms")?.unwrap_or(d.write_every_ms),
            folded_file: o.bool("folded_file")?.unwrap_or(d.folded_file),
            max_bins: count("max_bins")?.unwrap_or(d.max_bins),
            max_jobs: count("max_jobs")?.unwrap_or(d.max_jobs),
        })
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("settings serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
        assert_eq!(Settings::parse("{}").unwrap(), Settings::default());
        let s = Settings::parse(r#"{"job":"a","emit_every_ms":200,"folded_file":false,"max_bins":10}"#).unwrap();
        assert_eq!(
            (s.job.as_str(), s.emit_every_ms, s.folded_file, s.max_bins),
            ("a", 200, false, 10)
        );
    }

    #[test]
    fn bad_settings_name_the_key() {
        for (json, want) in [
            (r#"{"emit_every":1}"#, "unknown setting `emit_every`"),
            (
                r#"{"emit_every_ms":5}"#,
                "`emit_every_ms` must be an integer of milliseconds",
            ),
            (r#"{"folded_file":"yes"}"#, "`folded_file` must be true or false"),
            (r#"{"max_bins":0}"#, "`max_bins` must be an integer from 1"),
            (r#"[1]"#, "must be a JSON object"),
            (r#"{"job":"#, "not valid JSON"),
        ] {
            let err = Settings::parse(json).unwrap_err();
            assert!(err.contains(want), "{json}: {err}");
        }
    }
}
