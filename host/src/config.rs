//! The one configuration model, read from (lowest to highest precedence):
//! built-in defaults, a TOML file, the standard `OTEL_*` variables, `SONDE_*`
//! variables (`SONDE_SAMPLER__PERIOD_MS=50`: `__` separates levels), and
//! command-line flags. Every problem is reported with the key and the reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

/// The whole configuration.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub host: HostConfig,
    pub sampler: SamplerConfig,
    /// Settings shared by every plugin.
    pub plugins: PluginsConfig,
    /// Per-plugin settings, keyed by plugin name (the file name without `.wasm`).
    pub plugin: BTreeMap<String, PluginConfig>,
    pub export: ExportConfig,
    pub api: ApiConfig,
    pub sinks: SinksConfig,
    /// How jobs report: the OTLP receiver and the JSON ingest.
    pub ingest: IngestConfig,
    /// The role in a job that spans machines: see `host/src/cluster/`.
    pub cluster: crate::cluster::ClusterConfig,
    /// History beyond the live hour: see `host/src/storage/`.
    pub storage: crate::storage::StorageConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// Overrides the `host.name` resource attribute (default: the machine's hostname).
    pub name: Option<String>,
    /// Where state and the compiled-plugin cache live.
    pub data_dir: PathBuf,
    /// How long shutdown may take before the process exits anyway.
    pub shutdown_timeout_ms: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            name: None,
            data_dir: PathBuf::from("sonde-data"),
            shutdown_timeout_ms: 3000,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SamplerConfig {
    /// The host's sampling period when no plugin asks for a faster one.
    pub period_ms: u32,
    /// Report the loopback interface too (off by default: it is not network traffic).
    pub include_loopback: bool,
    /// Only these network interfaces (empty: all).
    pub interfaces: Vec<String>,
    /// Only these block devices, e.g. "sda", "nvme0n1" (empty: all whole disks).
    pub disks: Vec<String>,
    /// One series per logical CPU as well as the total.
    pub per_core: bool,
    /// Try NVML for GPU metrics (a machine without a GPU is fine either way).
    pub gpu: bool,
    /// Run the sampling thread at real-time priority (SCHED_FIFO 1) when the
    /// system allows it, so busy cores do not delay samples; it only sleeps and
    /// reads counters. Falls back to a raised nice value when refused.
    pub realtime: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            period_ms: 100,
            include_loopback: false,
            interfaces: Vec::new(),
            disks: Vec::new(),
            per_core: true,
            gpu: true,
            realtime: true,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// The plugins directory: every `*.wasm` file in it is a plugin.
    pub dir: PathBuf,
    /// Load, reload and unload plugins as files appear, change and disappear.
    pub watch: bool,
    /// Linear-memory cap per plugin.
    pub memory_limit_mb: u32,
    /// Deadline for one hook call.
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
            dir: PathBuf::from("sonde-data/plugins"),
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

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Protocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// Collector base URL, e.g. "http://127.0.0.1:4317". None: export off.
    pub endpoint: Option<String>,
    pub protocol: Protocol,
    /// Full URLs per signal for http/protobuf (default: endpoint + /v1/metrics, /v1/logs).
    pub metrics_endpoint: Option<String>,
    pub logs_endpoint: Option<String>,
    /// Extra request headers (API keys).
    pub headers: BTreeMap<String, String>,
    /// Per-request timeout.
    pub timeout_ms: u64,
    /// Batching window: what was emitted during it goes out in one request.
    /// Each request costs ~0.7 ms of CPU (gRPC round trip) on a 2-core VM, so
    /// 5 s keeps export well under the cost of sampling; points keep their
    /// own 100 ms timestamps either way.
    pub interval_ms: u64,
    /// Largest number of points (or log records) per request.
    pub max_batch_points: usize,
    /// Encoded requests waiting to be sent; when full, the oldest is dropped and counted.
    pub queue_capacity: usize,
    /// Retry backoff: first delay, cap, and total time before giving up on a request.
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub retry_max_elapsed_ms: u64,
    /// `service.name` resource attribute.
    pub service_name: String,
    /// Extra resource attributes.
    pub resource: BTreeMap<String, String>,
    /// How often the host's own metrics (plugin calls, drops, ...) are exported;
    /// 0 = never (a gateway that should forward only what it receives).
    pub self_metrics_interval_ms: u64,
    /// Disk spool for the send queue, in bytes; 0 = off (the queue is in memory).
    /// On: every encoded or forwarded request is written and synced to disk
    /// before it counts as queued, removed only once the collector answered,
    /// and replayed after a restart; retryable failures are retried until
    /// delivered, and once the spool is full new requests are dropped and counted.
    pub spool_max_bytes: u64,
    /// Where the spool lives (default: `<host.data_dir>/spool`).
    pub spool_dir: Option<PathBuf>,
}

impl ExportConfig {
    /// This config with `spool_dir` resolved against the data directory.
    pub fn with_spool_dir(&self, data_dir: &Path) -> ExportConfig {
        let mut c = self.clone();
        c.spool_dir.get_or_insert_with(|| data_dir.join("spool"));
        c
    }
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: Protocol::Grpc,
            metrics_endpoint: None,
            logs_endpoint: None,
            headers: BTreeMap::new(),
            timeout_ms: 10_000,
            interval_ms: 5_000,
            max_batch_points: 8_192,
            queue_capacity: 64,
            retry_initial_ms: 200,
            retry_max_ms: 5_000,
            retry_max_elapsed_ms: 30_000,
            service_name: "sonde".into(),
            resource: BTreeMap::new(),
            self_metrics_interval_ms: 10_000,
            spool_max_bytes: 0,
            spool_dir: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where the HTTP API and the dashboard listen.
    pub listen: String,
    /// Bearer token for state-changing requests; required when `listen` is not loopback.
    pub token: Option<String>,
    /// Serve the dashboard from this directory instead of the built-in page.
    pub web_dir: Option<PathBuf>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7878".into(),
            token: None,
            web_dir: None,
        }
    }
}

/// What jobs report to sonde: see `host/src/ingest/`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// OTLP/gRPC receiver address, or "off". The default is the port every
    /// OpenTelemetry SDK sends to, so a job needs no exporter settings.
    pub otlp_grpc_listen: String,
    /// OTLP/HTTP (protobuf) receiver address (`/v1/metrics`, `/v1/traces`, `/v1/logs`), or "off".
    pub otlp_http_listen: String,
    /// Gateway mode: forward every OTLP request received, unchanged, to the
    /// export endpoint as well (a sonde in front of another sonde or a collector).
    pub forward: bool,
    /// Largest request body accepted (OTLP and JSON ingest); larger ones get 413.
    pub max_body_bytes: usize,
    /// How often what was received is handed to the plugins, in one batch.
    pub flush_ms: u64,
    /// Records waiting for the next hand-over at most; beyond it a request is
    /// refused (429 / RESOURCE_EXHAUSTED) and counted, never queued unboundedly.
    pub queue_capacity: usize,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            otlp_grpc_listen: "127.0.0.1:4317".into(),
            otlp_http_listen: "127.0.0.1:4318".into(),
            forward: false,
            max_body_bytes: 8 * 1024 * 1024,
            flush_ms: 50,
            queue_capacity: 200_000,
        }
    }
}

impl IngestConfig {
    /// The receiver address, or None when switched off ("off" or empty).
    pub fn address(listen: &str) -> Option<&str> {
        let l = listen.trim();
        (!l.is_empty() && !l.eq_ignore_ascii_case("off")).then_some(l)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SinksConfig {
    /// Directory for plugins' named file sinks. It must exist (sonde does not
    /// create it, so a typo never scatters files); when it does not, or is not
    /// writable, sinks fail with that reason and no file is written.
    pub dir: PathBuf,
    /// Per-plugin sink directories (`[sinks.plugins.<name>]`), instead of
    /// `dir`: taken from an environment variable when it is set and not
    /// blank, else from the entry's `dir`. Built in: `clockwork` follows
    /// Clockwork's `CLOCKWORK_LOG_DIR`, default `/local` (see `crate::sinks`).
    pub plugins: BTreeMap<String, crate::sinks::PluginSinkDir>,
}

impl Default for SinksConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("sonde-data/sinks"),
            plugins: BTreeMap::from([("clockwork".to_string(), crate::sinks::PluginSinkDir::clockwork())]),
        }
    }
}

/// A configuration problem: which key, and why.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Errors from loading: all of them, so a user fixes a file in one go.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n  "))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl Config {
    /// Reads defaults, then `file` (if any), then the environment, then `overrides`
    /// (dotted keys with TOML values, as from `--set sampler.period_ms=50`).
    pub fn load(
        file: Option<&Path>,
        env: &BTreeMap<String, String>,
        overrides: &[(String, toml::Value)],
    ) -> Result<Config, ConfigErrors> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigErrors(vec![ConfigError::new(
                    "--config",
                    format!("file {} does not exist", path.display()),
                )]));
            }
            fig = fig.merge(Toml::file(path));
        }
        fig = fig.merge(Serialized::defaults(otel_env_overlay(env)?));
        // SONDE_* from the given map (not the process env) so tests are hermetic.
        let sonde_env: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| k.starts_with("SONDE_"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in &sonde_env {
            let key = k.trim_start_matches("SONDE_").to_ascii_lowercase().replace("__", ".");
            let val = parse_scalar(v);
            fig = fig.merge(Serialized::default(&key, val));
        }
        for (key, val) in overrides {
            fig = fig.merge(Serialized::default(key, val.clone()));
        }
        let mut cfg: Config = fig.extract().map_err(|e| ConfigErrors(figment_errors(e)))?;
        cfg.apply_role();
        cfg.validate().map_err(ConfigErrors)?;
        Ok(cfg)
    }

    /// Parses a whole TOML document (used by the API and tests) and validates it.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigErrors> {
        let fig = Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(s));
        let mut cfg: Config = fig.extract().map_err(|e| ConfigErrors(figment_errors(e)))?;
        cfg.apply_role();
        cfg.validate().map_err(ConfigErrors)?;
        Ok(cfg)
    }

    /// Checks values that types alone cannot.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errs = Vec::new();
        let mut range = |key: &str, v: u64, lo: u64, hi: u64| {
            if v < lo || v > hi {
                errs.push(ConfigError::new(key, format!("{v} is out of range {lo}..={hi}")));
            }
        };
        range("sampler.period_ms", self.sampler.period_ms as u64, 10, 60_000);
        range("plugins.memory_limit_mb", self.plugins.memory_limit_mb as u64, 1, 4096);
        range(
            "plugins.call_timeout_ms",
            self.plugins.call_timeout_ms as u64,
            1,
            60_000,
        );
        range("plugins.max_traps", self.plugins.max_traps as u64, 1, 1000);
        range("plugins.trap_window_s", self.plugins.trap_window_s as u64, 1, 86_400);
        range(
            "plugins.backoff_initial_ms",
            self.plugins.backoff_initial_ms as u64,
            1,
            600_000,
        );
        range(
            "plugins.backoff_max_ms",
            self.plugins.backoff_max_ms as u64,
            1,
            3_600_000,
        );
        range(
            "plugins.queue_capacity",
            self.plugins.queue_capacity as u64,
            1,
            1_000_000,
        );
        range("export.timeout_ms", self.export.timeout_ms, 1, 600_000);
        range("export.interval_ms", self.export.interval_ms, 10, 3_600_000);
        range(
            "export.max_batch_points",
            self.export.max_batch_points as u64,
            1,
            10_000_000,
        );
        range("export.queue_capacity", self.export.queue_capacity as u64, 1, 1_000_000);
        range("export.retry_initial_ms", self.export.retry_initial_ms, 1, 600_000);
        range("export.retry_max_ms", self.export.retry_max_ms, 1, 3_600_000);
        if self.export.self_metrics_interval_ms != 0 {
            range(
                "export.self_metrics_interval_ms",
                self.export.self_metrics_interval_ms,
                100,
                3_600_000,
            );
        }
        if self.export.spool_max_bytes != 0 {
            // One segment (1/8 of it) must hold a full request or two.
            range("export.spool_max_bytes", self.export.spool_max_bytes, 1 << 20, 1 << 40);
        }
        range("host.shutdown_timeout_ms", self.host.shutdown_timeout_ms, 1, 600_000);
        range(
            "ingest.max_body_bytes",
            self.ingest.max_body_bytes as u64,
            1024,
            1 << 30,
        );
        range("ingest.flush_ms", self.ingest.flush_ms, 1, 60_000);
        range(
            "ingest.queue_capacity",
            self.ingest.queue_capacity as u64,
            1,
            100_000_000,
        );
        if self.export.spool_dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            errs.push(ConfigError::new(
                "export.spool_dir",
                "must not be empty (leave it out for <host.data_dir>/spool)",
            ));
        }
        if self.plugins.backoff_max_ms < self.plugins.backoff_initial_ms {
            errs.push(ConfigError::new(
                "plugins.backoff_max_ms",
                "must be >= plugins.backoff_initial_ms",
            ));
        }
        for (key, url) in [
            ("export.endpoint", &self.export.endpoint),
            ("export.metrics_endpoint", &self.export.metrics_endpoint),
            ("export.logs_endpoint", &self.export.logs_endpoint),
        ] {
            if let Some(u) = url
                && let Err(reason) = check_url(u)
            {
                errs.push(ConfigError::new(key, reason));
            }
        }
        if self.export.service_name.trim().is_empty() {
            errs.push(ConfigError::new("export.service_name", "must not be empty"));
        }
        match self.api.listen.parse::<SocketAddr>() {
            Err(e) => errs.push(ConfigError::new("api.listen", format!("not an address:port ({e})"))),
            Ok(addr) if !addr.ip().is_loopback() && self.api.token.as_deref().unwrap_or("").is_empty() => {
                errs.push(ConfigError::new(
                    "api.token",
                    "required when api.listen is not a loopback address (state-changing requests need it)",
                ))
            }
            Ok(_) => {}
        }
        for (key, listen) in [
            ("ingest.otlp_grpc_listen", &self.ingest.otlp_grpc_listen),
            ("ingest.otlp_http_listen", &self.ingest.otlp_http_listen),
        ] {
            let Some(l) = IngestConfig::address(listen) else {
                continue;
            };
            match l.parse::<SocketAddr>() {
                Err(e) => errs.push(ConfigError::new(key, format!("not an address:port or \"off\" ({e})"))),
                Ok(addr) if !addr.ip().is_loopback() && self.api.token.as_deref().unwrap_or("").is_empty() => errs
                    .push(ConfigError::new(
                        "api.token",
                        format!("required when {key} is not a loopback address (receivers then check it)"),
                    )),
                Ok(_) => {}
            }
        }
        if self.ingest.forward && self.export.endpoint.is_none() {
            errs.push(ConfigError::new(
                "ingest.forward",
                "needs export.endpoint: forwarding sends what was received on to it",
            ));
        }
        for (name, pc) in &self.plugin {
            if let Err(reason) = check_plugin_name(name) {
                errs.push(ConfigError::new(format!("plugin.{name}"), reason));
            }
            if let Some(m) = pc.memory_limit_mb
                && !(1..=4096).contains(&m)
            {
                errs.push(ConfigError::new(
                    format!("plugin.{name}.memory_limit_mb"),
                    format!("{m} is out of range 1..=4096"),
                ));
            }
            if let Some(t) = pc.call_timeout_ms
                && !(1..=60_000).contains(&t)
            {
                errs.push(ConfigError::new(
                    format!("plugin.{name}.call_timeout_ms"),
                    format!("{t} is out of range 1..=60000"),
                ));
            }
            if !pc.settings.is_object() {
                errs.push(ConfigError::new(format!("plugin.{name}.settings"), "must be a table"));
            }
            for (i, d) in pc.grants.dirs.iter().enumerate() {
                if !d.host.is_dir() {
                    errs.push(ConfigError::new(
                        format!("plugin.{name}.grants.dirs[{i}].host"),
                        format!("{} is not a directory", d.host.display()),
                    ));
                }
                if !d.guest.starts_with('/') {
                    errs.push(ConfigError::new(
                        format!("plugin.{name}.grants.dirs[{i}].guest"),
                        "must be an absolute path",
                    ));
                }
            }
        }
        for (key, reason) in self.cluster.problems() {
            errs.push(ConfigError::new(key, reason));
        }
        for (key, reason) in self.storage.problems() {
            errs.push(ConfigError::new(key, reason));
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    /// An agent sends to its master unless `export.endpoint` says otherwise.
    fn apply_role(&mut self) {
        if self.cluster.role == crate::cluster::Role::Agent && self.export.endpoint.is_none() {
            self.export.endpoint.clone_from(&self.cluster.master);
            self.export.protocol = Protocol::Grpc;
        }
    }

    /// Settings for one plugin (defaults when the config does not name it).
    pub fn plugin(&self, name: &str) -> PluginConfig {
        self.plugin.get(name).cloned().unwrap_or_default()
    }
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

fn check_url(u: &str) -> Result<(), String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| format!("{u:?} must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{u:?} has no host"));
    }
    if u.starts_with("https://") {
        return Err("https is not supported by this build yet; use a local collector over http".into());
    }
    Ok(())
}

/// A `SONDE_*` or `--set` value: TOML scalar when it parses as one, else a string.
pub fn parse_scalar(s: &str) -> toml::Value {
    match format!("v = {s}").parse::<toml::Table>() {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(s.into())),
        Err(_) => toml::Value::String(s.into()),
    }
}

/// Parses `key=value` as given to `--set`.
pub fn parse_override(s: &str) -> Result<(String, toml::Value), ConfigError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| ConfigError::new("--set", format!("{s:?} is not key=value")))?;
    let k = k.trim();
    if k.is_empty() {
        return Err(ConfigError::new("--set", format!("{s:?} has an empty key")));
    }
    Ok((k.to_string(), parse_scalar(v.trim())))
}

/// The standard OpenTelemetry exporter variables, as a partial config.
/// Spec: OTEL_EXPORTER_OTLP_{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT}, the per-signal
/// `_METRICS_`/`_LOGS_` forms, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
/// OTEL_METRIC_EXPORT_INTERVAL and OTEL_SDK_DISABLED.
fn otel_env_overlay(env: &BTreeMap<String, String>) -> Result<toml::Table, ConfigErrors> {
    let mut export = toml::Table::new();
    let mut errs = Vec::new();
    let get = |k: &str| env.get(k).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    if let Some(v) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
        export.insert("endpoint".into(), v.into());
    }
    if let Some(v) = get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") {
        export.insert("metrics_endpoint".into(), v.clone().into());
        if !export.contains_key("endpoint") {
            export.insert("endpoint".into(), v.into());
        }
    }
    if let Some(v) = get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") {
        export.insert("logs_endpoint".into(), v.into());
    }
    if let Some(v) = get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL").or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL")) {
        match v.as_str() {
            "grpc" | "http/protobuf" => {
                export.insert("protocol".into(), v.into());
            }
            other => errs.push(ConfigError::new(
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                format!("{other:?} is not supported (use grpc or http/protobuf)"),
            )),
        }
    }
    if let Some(v) = get("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT").or_else(|| get("OTEL_EXPORTER_OTLP_TIMEOUT")) {
        match v.parse::<i64>() {
            Ok(ms) => {
                export.insert("timeout_ms".into(), ms.into());
            }
            Err(_) => errs.push(ConfigError::new(
                "OTEL_EXPORTER_OTLP_TIMEOUT",
                format!("{v:?} is not milliseconds"),
            )),
        }
    }
    if let Some(v) = get("OTEL_METRIC_EXPORT_INTERVAL") {
        match v.parse::<i64>() {
            Ok(ms) => {
                export.insert("interval_ms".into(), ms.into());
            }
            Err(_) => errs.push(ConfigError::new(
                "OTEL_METRIC_EXPORT_INTERVAL",
                format!("{v:?} is not milliseconds"),
            )),
        }
    }
    for var in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"] {
        if let Some(v) = get(var) {
            match parse_kv_list(&v) {
                Ok(kv) => {
                    let t: toml::Table = kv.into_iter().map(|(k, v)| (k, toml::Value::String(v))).collect();
                    export.insert("headers".into(), t.into());
                }
                Err(reason) => errs.push(ConfigError::new(var, reason)),
            }
        }
    }
    if let Some(v) = get("OTEL_SERVICE_NAME") {
        export.insert("service_name".into(), v.into());
    }
    if let Some(v) = get("OTEL_RESOURCE_ATTRIBUTES") {
        match parse_kv_list(&v) {
            Ok(kv) => {
                if let Some(name) = kv.iter().find(|(k, _)| k == "service.name").map(|(_, v)| v.clone())
                    && get("OTEL_SERVICE_NAME").is_none()
                {
                    export.insert("service_name".into(), name.into());
                }
                let t: toml::Table = kv
                    .into_iter()
                    .filter(|(k, _)| k != "service.name")
                    .map(|(k, v)| (k, toml::Value::String(v)))
                    .collect();
                export.insert("resource".into(), t.into());
            }
            Err(reason) => errs.push(ConfigError::new("OTEL_RESOURCE_ATTRIBUTES", reason)),
        }
    }
    if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        export.remove("endpoint");
        export.remove("metrics_endpoint");
        export.remove("logs_endpoint");
    }
    if !errs.is_empty() {
        return Err(ConfigErrors(errs));
    }
    let mut root = toml::Table::new();
    if !export.is_empty() {
        root.insert("export".into(), export.into());
    }
    Ok(root)
}

/// `k1=v1,k2=v2` with percent-decoding of values, as the OTel spec defines.
fn parse_kv_list(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not key=value"))?;
        out.push((k.trim().to_string(), percent_decode(v.trim())));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Turns figment's errors into key + reason pairs.
fn figment_errors(e: figment::Error) -> Vec<ConfigError> {
    e.into_iter()
        .map(|err| {
            let key = if err.path.is_empty() {
                "<root>".to_string()
            } else {
                err.path.join(".")
            };
            let mut reason = err.kind.to_string();
            if let Some(md) = &err.metadata {
                reason.push_str(&format!(" (from {})", md.name));
                if let Some(src) = &md.source {
                    reason.push_str(&format!(" {src}"));
                }
            }
            ConfigError { key, reason }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_are_valid() {
        let c = Config::load(None, &env(&[]), &[]).unwrap();
        assert_eq!(c.sampler.period_ms, 100);
        assert_eq!(c.export.endpoint, None);
        assert_eq!(c.api.listen, "127.0.0.1:7878");
    }

    #[test]
    fn file_env_and_overrides_layer_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        std::fs::write(&f, "[sampler]\nperiod_ms = 200\ninclude_loopback = true\n").unwrap();
        let e = env(&[
            ("SONDE_SAMPLER__PERIOD_MS", "50"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
        ]);
        let c = Config::load(Some(&f), &e, &[]).unwrap();
        assert_eq!(c.sampler.period_ms, 50, "SONDE_ env beats the file");
        assert!(c.sampler.include_loopback, "file beats defaults");
        assert_eq!(c.export.endpoint.as_deref(), Some("http://127.0.0.1:4317"));
        let o = vec![parse_override("sampler.period_ms=25").unwrap()];
        let c = Config::load(Some(&f), &e, &o).unwrap();
        assert_eq!(c.sampler.period_ms, 25, "--set beats env");
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::from_toml_str("[sampler]\nperiod_msec = 5\n").unwrap_err();
        assert!(err.0[0].key.contains("sampler"), "{err}");
        assert!(err.to_string().contains("period_msec"), "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let err = Config::from_toml_str("[sampler]\nperiod_ms = \"fast\"\n").unwrap_err();
        assert_eq!(err.0[0].key, "sampler.period_ms", "{err}");
    }

    #[test]
    fn out_of_range_values_are_all_reported() {
        let err = Config::from_toml_str("[sampler]\nperiod_ms = 1\n[plugins]\ncall_timeout_ms = 0\n").unwrap_err();
        let keys: Vec<_> = err.0.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, vec!["sampler.period_ms", "plugins.call_timeout_ms"]);
    }

    #[test]
    fn self_metrics_are_off_at_zero_and_otherwise_in_range() {
        assert!(Config::from_toml_str("[export]\nself_metrics_interval_ms = 0\n").is_ok());
        assert!(Config::from_toml_str("[export]\nspool_max_bytes = 67108864\n").is_ok());
        let err = Config::from_toml_str("[export]\nspool_max_bytes = 4096\n").unwrap_err();
        assert_eq!(err.0[0].key, "export.spool_max_bytes");
        let err = Config::from_toml_str("[export]\nspool_dir = \"\"\n").unwrap_err();
        assert_eq!(err.0[0].key, "export.spool_dir");
        let err = Config::from_toml_str("[export]\nself_metrics_interval_ms = 50\n").unwrap_err();
        assert_eq!(err.0[0].key, "export.self_metrics_interval_ms");
    }

    #[test]
    fn wide_listen_needs_a_token() {
        let err = Config::from_toml_str("[api]\nlisten = \"0.0.0.0:7878\"\n").unwrap_err();
        assert_eq!(err.0[0].key, "api.token");
        Config::from_toml_str("[api]\nlisten = \"0.0.0.0:7878\"\ntoken = \"s3cret\"\n").unwrap();
    }

    #[test]
    fn bad_plugin_name_and_url() {
        let err = Config::from_toml_str("[plugin.\"../evil\"]\n[export]\nendpoint = \"ftp://x\"\n").unwrap_err();
        let keys: Vec<_> = err.0.iter().map(|e| e.key.clone()).collect();
        assert!(keys.contains(&"export.endpoint".to_string()), "{keys:?}");
        assert!(keys.contains(&"plugin.../evil".to_string()), "{keys:?}");
    }

    #[test]
    fn otel_variables_are_honoured() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%20def,x=1"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=trainer,k8s.pod.name=p-1"),
        ]);
        let c = Config::load(None, &e, &[]).unwrap();
        assert_eq!(c.export.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.export.headers.get("api-key").map(String::as_str), Some("abc def"));
        assert_eq!(c.export.timeout_ms, 2500);
        assert_eq!(c.export.service_name, "trainer");
        assert_eq!(c.export.resource.get("k8s.pod.name").map(String::as_str), Some("p-1"));
        let bad = Config::load(None, &env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]), &[]).unwrap_err();
        assert_eq!(bad.0[0].key, "OTEL_EXPORTER_OTLP_PROTOCOL");
        let off = Config::load(
            None,
            &env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
                ("OTEL_SDK_DISABLED", "true"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(off.export.endpoint, None);
    }

    #[test]
    fn the_readme_example_is_a_valid_config() {
        let readme = include_str!("../../README.md");
        let start = readme.find("```toml\n").expect("the README has a TOML example") + 8;
        let end = start + readme[start..].find("```").unwrap();
        let c = Config::from_toml_str(&readme[start..end]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.export.interval_ms, 5000);
        assert_eq!(c.plugin("sysmetrics").settings["deliver_every_ms"], 1000);
    }

    #[test]
    fn plugin_settings_table_round_trips() {
        let c = Config::from_toml_str("[plugin.sysmetrics]\nsettings = { prefix = \"x\", n = 3 }\n").unwrap();
        assert_eq!(c.plugin("sysmetrics").settings["n"], 3);
        assert!(c.plugin("absent").enabled);
    }
}
