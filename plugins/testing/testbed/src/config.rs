//! Which mode the testbed runs in, and the settings each mode reads.

use serde_json::{Map, Value};
use sonde_plugin_sdk::column;
use sonde_plugin_sdk::types::{ColumnDefault, ColumnType, EventKind, SampleRequest, TableDecl};

/// The event table echo declares (`Mode::tables`).
pub const ROWS_TABLE: &str = "testbed_rows";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Noop = 1,
    Sum,
    Echo,
    Spin,
    Membomb,
    Trap,
    Failstart,
    /// Re-emits every received point (OTLP in -> plugin -> OTLP out), for the pipeline benchmark.
    Passthrough,
}

const MODES: [Mode; 8] = [
    Mode::Noop,
    Mode::Sum,
    Mode::Echo,
    Mode::Spin,
    Mode::Membomb,
    Mode::Trap,
    Mode::Failstart,
    Mode::Passthrough,
];

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Noop => "noop",
            Mode::Sum => "sum",
            Mode::Echo => "echo",
            Mode::Spin => "spin",
            Mode::Membomb => "membomb",
            Mode::Trap => "trap",
            Mode::Failstart => "failstart",
            Mode::Passthrough => "passthrough",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        MODES.into_iter().find(|m| m.name() == name)
    }

    pub fn from_u8(v: u8) -> Option<Mode> {
        MODES.into_iter().find(|&m| m as u8 == v)
    }

    /// The mode for a plugin without a `mode` setting, from its name, so one
    /// file copied as `spin.wasm` or `trap-2.wasm` behaves accordingly: the
    /// text before the first '-' if that is a mode, else the whole name if
    /// that is one, else echo.
    pub fn from_plugin_name(name: &str) -> Mode {
        let head = name.split('-').next().unwrap_or(name);
        Mode::from_name(head)
            .or_else(|| Mode::from_name(name))
            .unwrap_or(Mode::Echo)
    }

    /// Samples each mode asks for in its manifest (`None` for noop).
    pub fn sample_request(self, settings: &Settings) -> Option<SampleRequest> {
        let default_deliver = match self {
            Mode::Noop | Mode::Failstart | Mode::Passthrough => return None,
            Mode::Echo => 200,
            _ => 100,
        };
        let deliver = settings
            .deliver_every_ms
            .unwrap_or(default_deliver)
            .max(settings.period_ms);
        Some(SampleRequest {
            period_ms: settings.period_ms,
            deliver_every_ms: deliver,
            metrics: Vec::new(),
        })
    }

    /// Event kinds each mode subscribes to: echo takes everything.
    pub fn event_kinds(self) -> Vec<EventKind> {
        match self {
            Mode::Echo => vec![
                EventKind::Progress,
                EventKind::Timings,
                EventKind::Heartbeats,
                EventKind::Points,
                EventKind::NodeEvents,
                EventKind::Custom,
            ],
            Mode::Passthrough => vec![EventKind::Points],
            _ => Vec::new(),
        }
    }

    /// Event tables each mode declares: echo, `testbed_rows` (`n` of the
    /// type the `rows_n_type` setting names, and a `label`), so the host's
    /// tests can send it rows, and make two echoes disagree on a table.
    pub fn tables(self, settings: &Settings) -> Vec<TableDecl> {
        match self {
            Mode::Echo => vec![TableDecl::new(
                ROWS_TABLE,
                "rows for the host's tests",
                vec![
                    column("n", settings.rows_n_type, ColumnDefault::Required),
                    column("label", ColumnType::String, ColumnDefault::Zero),
                ],
            )],
            _ => Vec::new(),
        }
    }
}

/// The testbed's settings. Unknown keys are kept (and shown by `GET /config`)
/// but otherwise ignored, so tests can tag an instance with their own keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `mode`: overrides the mode derived from the plugin's name.
    pub mode: Option<Mode>,
    /// `sink` (echo): file name of the tsv sink, default "testbed.tsv".
    pub sink: String,
    /// `timer_ms`: period of a repeating timer, 0 (default) for none.
    pub timer_ms: u64,
    /// `period_ms`: sampling period, default 100.
    pub period_ms: u32,
    /// `deliver_every_ms`: default 200 for echo, 100 for the other modes.
    pub deliver_every_ms: Option<u32>,
    /// `rows_n_type` (echo): "u64" (default) or "f64", the type of
    /// `testbed_rows.n`.
    pub rows_n_type: ColumnType,
    /// The settings JSON exactly as given.
    pub raw: String,
}

impl Settings {
    /// Parses settings JSON (an empty string counts as `{}`); invalid JSON or a
    /// known key with the wrong type is an error naming the key.
    pub fn parse(json: &str) -> Result<Settings, String> {
        let raw = if json.trim().is_empty() {
            "{}".to_string()
        } else {
            json.to_string()
        };
        let value: Value = serde_json::from_str(&raw).map_err(|e| format!("settings are not valid JSON: {e}"))?;
        let Value::Object(map) = value else {
            return Err(format!("settings must be a JSON object, got {value}"));
        };
        Ok(Settings {
            mode: match map.get("mode") {
                None => None,
                Some(Value::String(s)) => Some(Mode::from_name(s).ok_or_else(|| {
                    let known: Vec<_> = MODES.iter().map(|m| m.name()).collect();
                    format!("setting `mode`: unknown mode {s:?} (known: {})", known.join(", "))
                })?),
                Some(v) => return Err(format!("setting `mode` must be a string, got {v}")),
            },
            sink: match map.get("sink") {
                None => "testbed.tsv".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => return Err(format!("setting `sink` must be a file name (string), got {v}")),
            },
            timer_ms: uint(&map, "timer_ms")?.unwrap_or(0),
            period_ms: match uint(&map, "period_ms")? {
                None => 100,
                Some(ms) => u32::try_from(ms).map_err(|_| format!("setting `period_ms` is too large: {ms}"))?,
            },
            deliver_every_ms: match uint(&map, "deliver_every_ms")? {
                None => None,
                Some(ms) => {
                    Some(u32::try_from(ms).map_err(|_| format!("setting `deliver_every_ms` is too large: {ms}"))?)
                }
            },
            rows_n_type: match map.get("rows_n_type").and_then(Value::as_str) {
                None | Some("u64") => ColumnType::U64,
                Some("f64") => ColumnType::F64,
                Some(other) => return Err(format!("setting `rows_n_type`: {other:?} is not \"u64\" or \"f64\"")),
            },
            raw,
        })
    }
}

fn uint(map: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("setting `{key}` must be a non-negative integer (milliseconds), got {v}")),
    }
}

/// The mode to run: the `mode` setting if given, else from the plugin name.
pub fn resolve_mode(settings: &Settings, plugin_name: &str) -> Mode {
    settings.mode.unwrap_or_else(|| Mode::from_plugin_name(plugin_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_from_plugin_name() {
        let table = [
            ("noop", Mode::Noop),
            ("sum", Mode::Sum),
            ("spin", Mode::Spin),
            ("spin-2", Mode::Spin),
            ("trap-a-b", Mode::Trap),
            ("membomb", Mode::Membomb),
            ("failstart-x", Mode::Failstart),
            ("echo-1", Mode::Echo),
            ("testbed", Mode::Echo),
            ("my-plugin", Mode::Echo),
            ("", Mode::Echo),
            ("Noop", Mode::Echo),
        ];
        for (name, want) in table {
            assert_eq!(Mode::from_plugin_name(name), want, "{name:?}");
        }
    }

    #[test]
    fn mode_setting_wins_over_the_name() {
        let s = Settings::parse(r#"{"mode":"sum"}"#).unwrap();
        assert_eq!(resolve_mode(&s, "spin-1"), Mode::Sum);
        let s = Settings::parse("{}").unwrap();
        assert_eq!(resolve_mode(&s, "spin-1"), Mode::Spin);
    }

    #[test]
    fn modes_round_trip_through_u8() {
        for m in MODES {
            assert_eq!(Mode::from_u8(m as u8), Some(m));
            assert_eq!(Mode::from_name(m.name()), Some(m));
        }
        assert_eq!(Mode::from_u8(0), None);
    }

    #[test]
    fn defaults_and_values() {
        let d = Settings::parse("").unwrap();
        assert_eq!(
            (d.mode, d.sink.as_str(), d.timer_ms, d.period_ms, d.deliver_every_ms),
            (None, "testbed.tsv", 0, 100, None)
        );
        assert_eq!(d.raw, "{}");

        let json = r#"{"mode":"echo","sink":"a.tsv","timer_ms":50,"deliver_every_ms":300,"tag":"kept"}"#;
        let s = Settings::parse(json).unwrap();
        assert_eq!(
            (s.mode, s.sink.as_str(), s.timer_ms, s.deliver_every_ms),
            (Some(Mode::Echo), "a.tsv", 50, Some(300))
        );
        assert_eq!(s.raw, json);
    }

    #[test]
    fn manifests_per_mode() {
        let d = Settings::parse("{}").unwrap();
        assert_eq!(Mode::Noop.sample_request(&d), None);
        assert!(Mode::Noop.event_kinds().is_empty());
        let echo = Mode::Echo.sample_request(&d).unwrap();
        assert_eq!((echo.period_ms, echo.deliver_every_ms), (100, 200));
        assert!(echo.metrics.is_empty());
        assert_eq!(Mode::Echo.event_kinds().len(), 6);
        assert_eq!(Mode::Echo.tables(&d)[0].columns[0].type_, ColumnType::U64);
        let f = Settings::parse(r#"{"rows_n_type":"f64"}"#).unwrap();
        assert_eq!(Mode::Echo.tables(&f)[0].columns[0].type_, ColumnType::F64);
        assert!(Settings::parse(r#"{"rows_n_type":"u8"}"#).is_err());
        assert!(Mode::Noop.tables(&d).is_empty());
        // passthrough takes points only and asks for no samples.
        assert_eq!(Mode::Passthrough.sample_request(&d), None);
        assert_eq!(Mode::Passthrough.event_kinds(), vec![EventKind::Points]);
        for m in [Mode::Sum, Mode::Spin, Mode::Membomb, Mode::Trap] {
            let r = m.sample_request(&d).unwrap();
            assert_eq!((r.period_ms, r.deliver_every_ms), (100, 100), "{m:?}");
        }
        let s = Settings::parse(r#"{"deliver_every_ms":1000}"#).unwrap();
        assert_eq!(Mode::Echo.sample_request(&s).unwrap().deliver_every_ms, 1000);
        // Delivery is never asked faster than the period.
        let s = Settings::parse(r#"{"period_ms":500}"#).unwrap();
        assert_eq!(Mode::Sum.sample_request(&s).unwrap().deliver_every_ms, 500);
    }

    #[test]
    fn bad_settings_name_the_key() {
        let cases = [
            ("{", "not valid JSON"),
            ("[]", "JSON object"),
            (r#"{"mode":"fast"}"#, "`mode`"),
            (r#"{"mode":1}"#, "`mode`"),
            (r#"{"sink":5}"#, "`sink`"),
            (r#"{"timer_ms":-5}"#, "`timer_ms`"),
            (r#"{"deliver_every_ms":"x"}"#, "`deliver_every_ms`"),
            (r#"{"period_ms":99999999999}"#, "`period_ms`"),
        ];
        for (json, needle) in cases {
            let err = Settings::parse(json).unwrap_err();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }
}
