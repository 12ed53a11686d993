//! `[plugins]` (shared by every plugin) and `[plugin.<name>]` (one plugin's
//! settings and grants), beside the runtime that enforces them; `crate::config`
//! assembles the sections. The caps themselves are applied in
//! `plugin/limits.rs`, the grants in `plugin/sandbox.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::check::Check;

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
    /// Linear-memory cap per plugin: past it the plugin's memory does not grow.
    /// Range: 1 ..= 4 096.
    pub memory_limit_mb: u32,
    /// Deadline for one hook call: CPU time of the plugin's thread in the
    /// call (a call kept waiting for a core is not stopped for the wait).
    /// A call past it is stopped and counts as a trap.
    /// Range: 1 ..= 60 000.
    pub call_timeout_ms: u32,
    /// Traps within `trap_window_s` that put a plugin in quarantine (it
    /// stays stopped until reloaded: `POST /api/admin/plugins/{name}/reload`).
    /// Range: 1 ..= 1 000.
    pub max_traps: u32,
    /// The window in which `max_traps` are counted.
    /// Range: 1 ..= 86 400.
    pub trap_window_s: u32,
    /// The first wait before a trapped plugin is started again; each further
    /// trap doubles it, up to `backoff_max_ms`.
    /// Range: 1 ..= 600 000.
    pub backoff_initial_ms: u32,
    /// The longest wait before a trapped plugin is started again; at least
    /// `backoff_initial_ms`.
    /// Range: 1 ..= 3 600 000.
    pub backoff_max_ms: u32,
    /// Work items (sample batches, event batches, timers, requests) queued per
    /// plugin; beyond it new items are dropped and counted, so a slow plugin
    /// never holds the host's memory.
    /// Range: 1 ..= 1 000 000.
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

impl PluginsConfig {
    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        c.range("memory_limit_mb", self.memory_limit_mb, 1, 4096);
        c.range("call_timeout_ms", self.call_timeout_ms, 1, 60_000);
        c.range("max_traps", self.max_traps, 1, 1000);
        c.range("trap_window_s", self.trap_window_s, 1, 86_400);
        c.range("backoff_initial_ms", self.backoff_initial_ms, 1, 600_000);
        c.range("backoff_max_ms", self.backoff_max_ms, 1, 3_600_000);
        c.range("queue_capacity", self.queue_capacity, 1, 1_000_000);
        if self.backoff_max_ms < self.backoff_initial_ms {
            let key = c.key("backoff_initial_ms");
            c.bad("backoff_max_ms", format!("must be >= {key}"));
        }
    }
}

/// One plugin's settings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginConfig {
    /// Whether the plugin runs (`false`: its file stays, unloaded). The
    /// admin API's `/enable` and `/disable` set it.
    pub enabled: bool,
    /// The plugin's own settings, a table handed to it as JSON in
    /// `start-info.settings` and, when changed live, in its `configure`
    /// hook; what it may hold is the plugin's README's to say.
    pub settings: serde_json::Value,
    /// This plugin's linear-memory cap, instead of `plugins.memory_limit_mb`.
    /// Range: 1 ..= 4 096.
    pub memory_limit_mb: Option<u32>,
    /// This plugin's hook-call deadline, instead of `plugins.call_timeout_ms`.
    /// Range: 1 ..= 60 000.
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

impl PluginConfig {
    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        if let Some(m) = self.memory_limit_mb {
            c.range("memory_limit_mb", m, 1, 4096);
        }
        if let Some(t) = self.call_timeout_ms {
            c.range("call_timeout_ms", t, 1, 60_000);
        }
        if !self.settings.is_object() {
            c.bad("settings", "must be a table");
        }
        for (i, d) in self.grants.dirs.iter().enumerate() {
            let mut c = c.within(&format!("grants.dirs[{i}]"));
            if !d.host.is_dir() {
                c.bad("host", format!("{} is not a directory", d.host.display()));
            }
            if !d.guest.starts_with('/') {
                c.bad("guest", "must be an absolute path");
            }
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Grants {
    /// Environment variables of sonde's own that the plugin may read, by name.
    pub env: Vec<String>,
    /// Host directories the plugin may open (`[[plugin.<name>.grants.dirs]]`).
    pub dirs: Vec<DirGrant>,
    /// TCP/UDP sockets and name lookup.
    pub network: bool,
}

/// One directory a plugin may open.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The directory on this machine; it must exist.
    pub host: PathBuf,
    /// Where the plugin sees it: an absolute path.
    pub guest: String,
    /// The plugin may read it, not write to it.
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
