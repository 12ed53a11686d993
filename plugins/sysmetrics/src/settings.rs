//! The plugin's settings (`start-info.settings` and `configure`), validated
//! key by key so an error names the key that is wrong.

use serde::Serialize;
use sonde_plugin_sdk::settings;
use sonde_plugin_sdk::types::SampleRequest;

/// `{"period_ms":100,"deliver_every_ms":1000,"metrics":["system.","hw."]}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// Sampling period asked of the host.
    pub period_ms: u32,
    /// How often the host calls `on-samples`.
    pub deliver_every_ms: u32,
    /// Metric-name prefixes to export; empty exports everything sampled.
    pub metrics: Vec<String>,
}

const KNOWN_KEYS: [&str; 3] = ["period_ms", "deliver_every_ms", "metrics"];
const DEFAULT_PERIOD_MS: u32 = 100;
const DEFAULT_DELIVER_EVERY_MS: u32 = 1000;
/// The contract's floor for `sample-request.period-ms`.
const MIN_PERIOD_MS: u32 = 10;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            period_ms: DEFAULT_PERIOD_MS,
            deliver_every_ms: DEFAULT_DELIVER_EVERY_MS,
            metrics: Vec::new(),
        }
    }
}

impl Settings {
    /// Parses settings JSON; missing keys take their defaults and an empty
    /// string counts as `{}`.
    pub fn parse(json: &str) -> Result<Settings, String> {
        // Rejecting unknown keys turns a typo into an error instead of a silent default.
        let o = settings::parse_object("sysmetrics", json, &KNOWN_KEYS)?;
        let period_ms = o
            .u32_in(
                "period_ms",
                MIN_PERIOD_MS..=u32::MAX,
                &format!("an integer >= {MIN_PERIOD_MS} (milliseconds)"),
            )?
            .unwrap_or(DEFAULT_PERIOD_MS);
        let deliver_every_ms = o
            .u32_in(
                "deliver_every_ms",
                period_ms..=u32::MAX,
                &format!("an integer >= period_ms ({period_ms})"),
            )?
            // A long period alone should not be an error: deliver at least once per period.
            .unwrap_or(DEFAULT_DELIVER_EVERY_MS.max(period_ms));
        let metrics = o
            .strings("metrics", "a list of metric-name prefixes (strings)")?
            .unwrap_or_default();
        Ok(Settings {
            period_ms,
            deliver_every_ms,
            metrics,
        })
    }

    /// What to ask the host for, in the manifest or with `request-samples`.
    pub fn sample_request(&self) -> SampleRequest {
        SampleRequest {
            period_ms: self.period_ms,
            deliver_every_ms: self.deliver_every_ms,
            metrics: self.metrics.clone(),
        }
    }

    /// The settings as JSON, with defaults filled in.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("settings serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        for json in ["", "{}", "  "] {
            assert_eq!(Settings::parse(json).unwrap(), Settings::default(), "{json:?}");
        }
        let d = Settings::default();
        assert_eq!((d.period_ms, d.deliver_every_ms), (100, 1000));
        assert!(d.metrics.is_empty());
    }

    #[test]
    fn reads_every_key() {
        let s = Settings::parse(r#"{"period_ms":50,"deliver_every_ms":500,"metrics":["system.","hw."]}"#).unwrap();
        assert_eq!(s.period_ms, 50);
        assert_eq!(s.deliver_every_ms, 500);
        assert_eq!(s.metrics, vec!["system.", "hw."]);
        assert_eq!(
            s.sample_request(),
            SampleRequest {
                period_ms: 50,
                deliver_every_ms: 500,
                metrics: vec!["system.".into(), "hw.".into()]
            }
        );
        assert_eq!(Settings::parse(&s.to_json()).unwrap(), s, "to_json round-trips");
    }

    #[test]
    fn long_period_raises_the_default_delivery() {
        let s = Settings::parse(r#"{"period_ms":5000}"#).unwrap();
        assert_eq!(s.deliver_every_ms, 5000);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"period_ms":5}"#, "`period_ms`"),
            (r#"{"period_ms":"100"}"#, "`period_ms`"),
            (r#"{"period_ms":-1}"#, "`period_ms`"),
            (r#"{"period_ms":1.5}"#, "`period_ms`"),
            (r#"{"period_ms":99999999999}"#, "`period_ms`"),
            (r#"{"period_ms":200,"deliver_every_ms":100}"#, "`deliver_every_ms`"),
            (r#"{"metrics":"system."}"#, "`metrics`"),
            (r#"{"metrics":["system.",3]}"#, "`metrics`"),
            (r#"{"perod_ms":100}"#, "unknown setting `perod_ms`"),
            (r#"[1,2]"#, "must be a JSON object"),
            (r#"{"period_ms":"#, "not valid JSON"),
        ];
        for (json, needle) in cases {
            let err = Settings::parse(json).unwrap_err();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }
}
