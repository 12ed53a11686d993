//! The plugin's settings (`start-info.settings` and `configure`): a JSON
//! object whose keys are all optional. Unknown keys and wrong types are
//! refused with a message naming the key.

use serde::Serialize;
use serde_json::Value;
use sonde_plugin_sdk::settings;

use crate::consistency::Model;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Only this job's events; "" = every job.
    pub job: String,
    /// A process whose last heartbeat is older than this is declared dead (the seed used 15 s).
    pub heartbeat_timeout_s: f64,
    /// How often the heartbeat deadlines are checked (a host timer), ms.
    pub check_every_ms: u64,
    /// "bsp", "ssp" or "asp".
    pub consistency: Model,
    /// SSP's staleness bound, in clocks (used when consistency = "ssp").
    pub staleness: u64,
    /// A worker this many clocks behind the fastest is a straggler; `None` = the model's default
    /// (see [`Settings::straggler_threshold`]).
    pub straggler_clocks: Option<u64>,
    /// The progress name that carries a clock (iteration).
    pub clock_name: String,
    /// Incidents kept per job (the oldest complete ones are dropped first).
    pub max_incidents: usize,
    /// Checkpoints kept per job.
    pub max_checkpoints: usize,
}

pub const KNOWN_KEYS: [&str; 9] = [
    "job",
    "heartbeat_timeout_s",
    "check_every_ms",
    "consistency",
    "staleness",
    "straggler_clocks",
    "clock_name",
    "max_incidents",
    "max_checkpoints",
];

impl Default for Settings {
    fn default() -> Self {
        Settings {
            job: String::new(),
            heartbeat_timeout_s: 15.0,
            check_every_ms: 500,
            consistency: Model::Bsp,
            staleness: 3,
            straggler_clocks: None,
            clock_name: "clock".into(),
            max_incidents: 100,
            max_checkpoints: 1000,
        }
    }
}

/// The plugin's name in settings errors.
const PLUGIN: &str = "paramserver";

impl Settings {
    /// Parses settings JSON; missing keys take their defaults, "" counts as `{}`.
    pub fn parse(json: &str) -> Result<Settings, String> {
        let o = settings::parse_object(PLUGIN, json, &KNOWN_KEYS)?;
        let d = Settings::default();
        let uint = |key: &str, min: u64| o.u64_in(key, min..=u64::MAX, &format!("an integer >= {min}"));
        let staleness = uint("staleness", 0)?.unwrap_or(d.staleness);
        let model = [("bsp", Model::Bsp), ("ssp", Model::Ssp(staleness)), ("asp", Model::Asp)];
        let consistency = o.read("consistency", "\"bsp\", \"ssp\" or \"asp\"", |v| {
            let name = v.as_str()?.to_ascii_lowercase();
            model.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
        })?;
        Ok(Settings {
            job: o
                .string("job", "a job name (string; \"\" = every job)")?
                .unwrap_or(d.job),
            heartbeat_timeout_s: o
                .f64_in("heartbeat_timeout_s", 0.01..=f64::MAX, "a number of seconds >= 0.01")?
                .unwrap_or(d.heartbeat_timeout_s),
            check_every_ms: uint("check_every_ms", 10)?.unwrap_or(d.check_every_ms),
            consistency: consistency.unwrap_or(d.consistency),
            staleness,
            straggler_clocks: uint("straggler_clocks", 1)?,
            clock_name: o
                .read("clock_name", "a non-empty progress name", |v| {
                    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
                })?
                .unwrap_or(d.clock_name),
            max_incidents: uint("max_incidents", 1)?.map_or(d.max_incidents, |n| n as usize),
            max_checkpoints: uint("max_checkpoints", 1)?.map_or(d.max_checkpoints, |n| n as usize),
        })
    }

    pub fn timeout_ns(&self) -> u64 {
        (self.heartbeat_timeout_s * 1e9) as u64
    }

    /// Clocks behind the fastest that make a straggler: the setting, else
    /// the bound + 1 under BSP and SSP (the staleness at which the fastest
    /// worker must wait for it) and 3 under ASP.
    pub fn straggler_threshold(&self) -> u64 {
        self.straggler_clocks.unwrap_or(match self.consistency.bound() {
            Some(s) => s + 1,
            None => 3,
        })
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "job": self.job,
            "heartbeat_timeout_s": self.heartbeat_timeout_s,
            "check_every_ms": self.check_every_ms,
            "consistency": self.consistency.name(),
            "staleness": self.staleness,
            "staleness_bound": self.consistency.bound(),
            "straggler_clocks": self.straggler_threshold(),
            "clock_name": self.clock_name,
            "max_incidents": self.max_incidents,
            "max_checkpoints": self.max_checkpoints,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let s = Settings::parse("").unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(s.timeout_ns(), 15_000_000_000);
        assert_eq!(s.straggler_threshold(), 1);
        let s = Settings::parse(r#"{"consistency":"SSP","staleness":2,"heartbeat_timeout_s":2}"#).unwrap();
        assert_eq!(s.consistency, Model::Ssp(2));
        assert_eq!(s.straggler_threshold(), 3);
        assert_eq!(s.timeout_ns(), 2_000_000_000);
        let s = Settings::parse(r#"{"consistency":"asp","straggler_clocks":5}"#).unwrap();
        assert_eq!((s.consistency, s.straggler_threshold()), (Model::Asp, 5));
    }

    #[test]
    fn refusals_name_the_key() {
        for (json, needle) in [
            (r#"{"timeout":1}"#, "unknown setting `timeout`"),
            (r#"{"consistency":"eventual"}"#, "`consistency`"),
            (r#"{"heartbeat_timeout_s":0}"#, "`heartbeat_timeout_s`"),
            (r#"{"check_every_ms":1}"#, "`check_every_ms`"),
            (r#"{"staleness":-1}"#, "`staleness`"),
            (r#"{"straggler_clocks":0}"#, "`straggler_clocks`"),
            (r#"{"clock_name":""}"#, "`clock_name`"),
            ("[]", "JSON object"),
            ("{", "not valid JSON"),
        ] {
            let e = Settings::parse(json).unwrap_err();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }
}
