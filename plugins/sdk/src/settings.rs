//! Reading a plugin's settings (`start-info.settings` and `configure`): the
//! JSON object from `[plugin.<name>] settings = {...}` in sonde's config.
//!
//! Every error names the key, and an unknown key is an error, so a typo never
//! becomes a silent default. No error names the plugin: sonde shows a
//! refusal under the plugin's name (its status, the `plugin.<name>.settings`
//! key of a config change, its log lines), so the message does not say it
//! again. Two ways in:
//!
//! - [`parse_json`]: a serde struct with `#[serde(deny_unknown_fields, default)]`
//!   (serde's own messages name the key: "unknown field `x`, expected one of ...").
//! - [`parse_object`]: the object checked against the keys the plugin knows,
//!   then read key by key with [`SettingsMap`]'s typed getters, for settings whose
//!   checks depend on each other or whose messages should say what is wanted.
//!
//! An empty string counts as `{}`; `null` for a key counts as absent.

use std::ops::RangeInclusive;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Parses settings into a serde type. Missing keys take their `Default`, an
/// empty string gives `T::default()`. (`plugin`, the plugin's name, is not
/// part of the messages: see the module's notes.)
pub fn parse_json<T: DeserializeOwned + Default>(plugin: &str, json: &str) -> Result<T, String> {
    let _ = plugin;
    if json.trim().is_empty() {
        return Ok(T::default());
    }
    serde_json::from_str(json).map_err(|e| format!("invalid settings: {e}"))
}

/// Parses settings as a JSON object whose keys must all be in `known`.
pub fn parse_object(plugin: &str, json: &str, known: &[&str]) -> Result<SettingsMap, String> {
    let _ = plugin;
    let map = if json.trim().is_empty() {
        Map::new()
    } else {
        match serde_json::from_str(json) {
            Ok(Value::Object(map)) => map,
            Ok(other) => return Err(format!("settings must be a JSON object, got {other}")),
            Err(e) => return Err(format!("settings are not valid JSON: {e}")),
        }
    };
    if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown setting `{unknown}` (known: {})", known.join(", ")));
    }
    Ok(SettingsMap { map })
}

/// A settings object whose keys are known; read it key by key. Each getter
/// returns `Ok(None)` when the key is absent (or `null`), so the caller
/// writes `.unwrap_or(default)`.
#[derive(Debug, Clone)]
pub struct SettingsMap {
    map: Map<String, Value>,
}

impl SettingsMap {
    /// The raw value of `key`; `None` when absent or `null`.
    pub fn value(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The error for `key`: "setting `KEY` must be WANT, got VALUE".
    pub fn bad(&self, key: &str, want: &str, got: &Value) -> String {
        format!("setting `{key}` must be {want}, got {got}")
    }

    /// An error about the settings as a whole (two keys that disagree).
    pub fn error(&self, message: &str) -> String {
        format!("settings: {message}")
    }

    /// Reads `key` with `read`; a value `read` refuses is an error saying `want`.
    pub fn read<T>(&self, key: &str, want: &str, read: impl FnOnce(&Value) -> Option<T>) -> Result<Option<T>, String> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| self.bad(key, want, v)),
        }
    }

    /// `true` or `false`.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, String> {
        self.read(key, "true or false", Value::as_bool)
    }

    /// Any string; `want` says what it names (e.g. "a job name").
    pub fn string(&self, key: &str, want: &str) -> Result<Option<String>, String> {
        self.read(key, want, |v| v.as_str().map(str::to_string))
    }

    /// A non-negative integer within `range`; `want` describes it.
    pub fn u64_in(&self, key: &str, range: RangeInclusive<u64>, want: &str) -> Result<Option<u64>, String> {
        self.read(key, want, |v| v.as_u64().filter(|n| range.contains(n)))
    }

    /// An integer within `range` that fits a `u32` (periods in ms, counts).
    pub fn u32_in(&self, key: &str, range: RangeInclusive<u32>, want: &str) -> Result<Option<u32>, String> {
        self.read(key, want, |v| {
            let n = u32::try_from(v.as_u64()?).ok()?;
            range.contains(&n).then_some(n)
        })
    }

    /// A finite number within `range`; `want` describes it.
    pub fn f64_in(&self, key: &str, range: RangeInclusive<f64>, want: &str) -> Result<Option<f64>, String> {
        self.read(key, want, |v| v.as_f64().filter(|x| x.is_finite() && range.contains(x)))
    }

    /// One of the named `choices` (case-sensitive); the error lists them.
    pub fn choice<T: Copy>(&self, key: &str, choices: &[(&str, T)]) -> Result<Option<T>, String> {
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("\"{n}\"")).collect();
        let want = format!("one of {}", names.join(", "));
        self.read(key, &want, |v| {
            let s = v.as_str()?;
            choices.iter().find(|(n, _)| *n == s).map(|(_, t)| *t)
        })
    }

    /// A list of strings.
    pub fn strings(&self, key: &str, want: &str) -> Result<Option<Vec<String>>, String> {
        self.read(key, want, |v| {
            v.as_array()?
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: [&str; 5] = ["on", "name", "every_ms", "ratio", "mode"];

    #[test]
    fn reads_each_kind_and_defaults_absent_keys() {
        let s = parse_object(
            "demo",
            r#"{"on":false,"name":"a","every_ms":200,"ratio":null,"mode":"fast"}"#,
            &KNOWN,
        )
        .unwrap();
        assert_eq!(s.bool("on"), Ok(Some(false)));
        assert_eq!(s.string("name", "a name"), Ok(Some("a".into())));
        assert_eq!(s.u64_in("every_ms", 10..=1000, "ms"), Ok(Some(200)));
        assert_eq!(s.u32_in("every_ms", 10..=1000, "ms"), Ok(Some(200)));
        assert!(s.u32_in("every_ms", 300..=u32::MAX, "ms").is_err());
        assert_eq!(s.f64_in("ratio", 0.0..=1.0, "a ratio"), Ok(None), "null is absent");
        assert_eq!(s.choice("mode", &[("slow", 1), ("fast", 2)]), Ok(Some(2)));
        let empty = parse_object("demo", " ", &KNOWN).unwrap();
        assert_eq!(empty.bool("on"), Ok(None));
    }

    #[test]
    fn errors_name_the_key_and_leave_the_plugin_to_the_host() {
        for (json, want) in [
            (r#"{"onn":true}"#, "unknown setting `onn` (known: on, name,"),
            ("[1]", "settings must be a JSON object, got [1]"),
            ("{", "settings are not valid JSON"),
        ] {
            let e = parse_object("demo", json, &KNOWN).unwrap_err();
            assert!(e.starts_with(want), "{json}: {e}");
            assert!(!e.contains("demo"), "{json}: {e}");
        }
        let s = parse_object("demo", r#"{"every_ms":5,"mode":"warp","name":3}"#, &KNOWN).unwrap();
        assert_eq!(
            s.u64_in("every_ms", 10..=1000, "an integer of ms from 10 to 1000"),
            Err("setting `every_ms` must be an integer of ms from 10 to 1000, got 5".into())
        );
        assert!(
            s.choice("mode", &[("slow", 1)])
                .unwrap_err()
                .contains("one of \"slow\", got \"warp\"")
        );
        assert!(
            s.string("name", "a name")
                .unwrap_err()
                .contains("`name` must be a name, got 3")
        );
    }

    #[test]
    fn serde_settings_name_the_key() {
        #[derive(serde::Deserialize, Default, Debug, PartialEq)]
        #[serde(deny_unknown_fields, default)]
        struct S {
            window_s: f64,
        }
        assert_eq!(parse_json::<S>("demo", ""), Ok(S::default()));
        assert_eq!(parse_json::<S>("demo", r#"{"window_s":2}"#), Ok(S { window_s: 2.0 }));
        let e = parse_json::<S>("demo", r#"{"window":2}"#).unwrap_err();
        assert!(e.starts_with("invalid settings: unknown field `window`"), "{e}");
    }
}
