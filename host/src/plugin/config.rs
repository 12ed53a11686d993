//! `[plugins]` (shared by every plugin) and `[plugin.<name>]` (one plugin's
//! settings and grants), beside the runtime that enforces them; `crate::config`
//! assembles and validates the sections. The caps themselves are applied in
//! `plugin/limits.rs`, the grants in `plugin/sandbox.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// The plugins directory: every `*.wasm` file in it is a plugin. Left
    /// out: `<host.data_dir>/plugins`, where the `sonde` binary writes the
    /// plugins it carries at every start (`plugin/bundled.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Load, reload and unload plugins as files appear, change and disappear.
    pub watch: bool,
    /// Linear-memory cap per plugin.
    pub memory_limit_mb: u32,
    /// Deadline for one hook call: CPU time of the plugin's thread in the
    /// call (a call kept waiting for a core is not stopped for the wait).
    pub call_timeout_ms: u32,
    /// Traps within `trap_window_s` that put a plugin in quarantine.
    pub max_traps: u32,
    pub trap_window_s: u32,
    /// Re-instantiation backoff after a trap: initial, doubling up to max.
    pub backoff_initial_ms: u32,
    pub backoff_max_ms: u32,
    /// Work items (sample batches, event batches, timers, requests) queued per
    /// plugin; beyond it new items are dropped and counted.
    pub queue_capacity: u32,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        Self {
            dir: None,
            watch: true,
            memory_limit_mb: 64,
            call_timeout_ms: 100,
            max_traps: 5,
            trap_window_s: 60,
            backoff_initial_ms: 100,
            backoff_max_ms: 10_000,
            queue_capacity: 256,
        }
    }
}

/// One plugin's settings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginConfig {
    pub enabled: bool,
    /// Handed to the plugin as JSON in `start-info.settings` and `configure`.
    pub settings: serde_json::Value,
    pub memory_limit_mb: Option<u32>,
    pub call_timeout_ms: Option<u32>,
    /// WASI capabilities; everything is denied unless granted here.
    pub grants: Grants,
}

impl Default for PluginConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            settings: serde_json::Value::Object(Default::default()),
            memory_limit_mb: None,
            call_timeout_ms: None,
            grants: Grants::default(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Grants {
    /// Environment variables passed through by name.
    pub env: Vec<String>,
    /// Host directories the plugin may open.
    pub dirs: Vec<DirGrant>,
    /// TCP/UDP sockets and name lookup.
    pub network: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    pub host: PathBuf,
    pub guest: String,
    #[serde(default = "yes")]
    pub read_only: bool,
}

fn yes() -> bool {
    true
}

/// Plugin names are file stems: lowercase letters, digits, '-' and '_', at most 64.
pub fn check_plugin_name(name: &str) -> Result<(), String> {
    let ok_first = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ok_rest = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if name.is_empty() || name.len() > 64 || !ok_first || !ok_rest {
        return Err(format!(
            "plugin name {name:?} is invalid: use 1-64 of [a-z0-9_-], starting with a letter or digit"
        ));
    }
    Ok(())
}
