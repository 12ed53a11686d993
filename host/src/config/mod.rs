//! The one configuration model, read from (lowest to highest precedence):
//! built-in defaults, a TOML file, the standard `OTEL_*` variables, `SONDE_*`
//! variables (`SONDE_SAMPLER__PERIOD_MS=50`: `__` separates levels), and
//! command-line flags. Every problem is reported with the key and the reason.
//!
//! Unknown names are treated by where they come from. A TOML file and `--set`
//! are written for sonde alone: an unknown key there stops it. The environment
//! is shared with whatever a launcher starts beside sonde (a job's own
//! `SONDE_*` settings): a `SONDE_*` variable that names no setting is logged
//! as a warning, listed in [`Config::ignored_env`], and otherwise ignored; a
//! known name with a bad value still stops sonde. `SONDE_CLIENT_*` is the
//! Python client's namespace and is never read here (no warning).
//!
//! config/: this file assembles [`Config`] from the sections and validates the
//! whole (one pass, so errors come in one list and a fixed order); each
//! section's struct lives beside the component it configures (Vector's habit),
//! as `<component>/config.rs`: `sample`, `plugin`, `export`, `api`, `sinks`,
//! `ingest`, `cluster`, `storage` (with `history` and `export/remote_write`).
//! Each checks its own keys in its `validate` (with `check.rs`), and each
//! key's doc comment says what it means, its unit and its range; only checks
//! that span sections are made here. Only `[host]` is defined here.
//! `otel_env.rs` maps the `OTEL_*` variables onto `[export]`. `reference.rs`
//! prints every key for `sonde config reference` (docs/configuration.md).
//! Section files are plain settings: they import nothing of their component,
//! so every module may read `Config` without a circle.

pub mod check;
mod otel_env;
pub mod reference;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

use self::check::Check;
pub use self::check::ConfigError;
use self::otel_env::otel_env_overlay;
use crate::api::config::ApiConfig;
use crate::export::config::ExportConfig;
use crate::ingest::config::IngestConfig;
use crate::plugin::config::{PluginConfig, PluginsConfig, check_plugin_name};
use crate::sample::config::SamplerConfig;
use crate::sinks::config::SinksConfig;

/// The whole configuration.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This sonde's name, its files and its shutdown.
    pub host: HostConfig,
    /// What the host samples of the machine itself, and how often.
    pub sampler: SamplerConfig,
    /// Settings shared by every plugin: where they are found and the
    /// sandbox's caps on each.
    pub plugins: PluginsConfig,
    /// One plugin's settings, keyed by its name (the file name without `.wasm`).
    pub plugin: BTreeMap<String, PluginConfig>,
    /// Where and how what the host exports is sent: the OTLP endpoint,
    /// batching, retries and the disk spool.
    pub export: ExportConfig,
    /// The HTTP API and the dashboard: where they listen, the token that
    /// guards changes, and the live store the dashboard draws from.
    pub api: ApiConfig,
    /// Where plugins' named files are written.
    pub sinks: SinksConfig,
    /// How jobs report: the OTLP receivers and the JSON ingest.
    pub ingest: IngestConfig,
    /// The role in a job that spans machines (see docs/cluster.md).
    pub cluster: crate::cluster::config::ClusterConfig,
    /// History beyond the live store: the embedded history, or a
    /// Prometheus-compatible engine.
    pub storage: crate::storage::config::StorageConfig,
    /// `SONDE_*` variables of the environment that name no setting and were
    /// ignored (see the top of this file). Not a setting itself.
    #[serde(skip)]
    pub ignored_env: Vec<String>,
}

/// The job clients' variables (`clients/python`): never configuration.
pub const CLIENT_ENV_PREFIX: &str = "SONDE_CLIENT_";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// The `host.name` resource attribute on what this sonde exports.
    /// Unset: the machine's hostname.
    pub name: Option<String>,
    /// Where state, the compiled-plugin cache, the bundled plugins
    /// (`plugins.dir` unset), the spool and the history live.
    pub data_dir: PathBuf,
    /// How long shutdown may take before the process exits anyway.
    /// Range: 1 ..= 600 000.
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

impl HostConfig {
    /// Checks what types alone cannot.
    pub fn validate(&self, c: &mut Check) {
        c.range("shutdown_timeout_ms", self.shutdown_timeout_ms, 1, 600_000);
    }
}

/// Errors from loading: all of them, so a user fixes a file in one go.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n  "))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl Config {
    /// The plugins directory: `plugins.dir`, or `<host.data_dir>/plugins`
    /// when it is left out (where the binary writes the plugins it carries).
    pub fn plugins_dir(&self) -> PathBuf {
        self.plugins
            .dir
            .clone()
            .unwrap_or_else(|| self.host.data_dir.join("plugins"))
    }

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
        let mut ignored_env = Vec::new();
        for (k, v) in env.iter().filter(|(k, _)| k.starts_with("SONDE_")) {
            if k.starts_with(CLIENT_ENV_PREFIX) {
                continue;
            }
            let key = k.trim_start_matches("SONDE_").to_ascii_lowercase().replace("__", ".");
            let val = parse_scalar(v);
            if names_no_setting(&key, &val) {
                ignored_env.push(k.clone());
                continue;
            }
            fig = fig.merge(Serialized::default(&key, val));
        }
        if !ignored_env.is_empty() {
            tracing::warn!(
                variables = ?ignored_env,
                "ignoring SONDE_* environment variables that name no setting (a TOML file or --set would refuse them)"
            );
        }
        for (key, val) in overrides {
            fig = fig.merge(Serialized::default(key, val.clone()));
        }
        let mut cfg: Config = fig.extract().map_err(|e| ConfigErrors(figment_errors(e)))?;
        cfg.ignored_env = ignored_env;
        cfg.load_token_files().map_err(ConfigErrors)?;
        cfg.apply_role();
        cfg.validate().map_err(ConfigErrors)?;
        Ok(cfg)
    }

    /// Parses a whole TOML document (used by the API and tests) and validates it.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigErrors> {
        let fig = Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(s));
        let mut cfg: Config = fig.extract().map_err(|e| ConfigErrors(figment_errors(e)))?;
        cfg.load_token_files().map_err(ConfigErrors)?;
        cfg.apply_role();
        cfg.validate().map_err(ConfigErrors)?;
        Ok(cfg)
    }

    /// Checks values that types alone cannot: each section checks its own
    /// keys (its `validate`, beside its keys' doc comments), and this adds
    /// what spans sections. Every problem comes back, in section order.
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut errs = Vec::new();
        self.host.validate(&mut Check::new("host", &mut errs));
        self.sampler.validate(&mut Check::new("sampler", &mut errs));
        self.plugins.validate(&mut Check::new("plugins", &mut errs));
        for (name, pc) in &self.plugin {
            let mut c = Check::new(format!("plugin.{name}"), &mut errs);
            if let Err(reason) = check_plugin_name(name) {
                c.bad("", reason);
            }
            pc.validate(&mut c);
        }
        self.export.validate(&mut Check::new("export", &mut errs));
        self.api.validate(&mut Check::new("api", &mut errs));
        self.ingest.validate(&mut Check::new("ingest", &mut errs));
        self.cluster.validate(&mut Check::new("cluster", &mut errs));
        self.storage.validate(&mut Check::new("storage", &mut errs));
        // Across sections.
        for (key, addr) in self.ingest.receivers() {
            if !addr.ip().is_loopback() && !self.api.has_token() {
                errs.push(ConfigError::new(
                    "api.token",
                    format!("required when ingest.{key} is not a loopback address (receivers then check it)"),
                ));
            }
        }
        if self.ingest.forward && self.export.endpoint.is_none() {
            errs.push(ConfigError::new(
                "ingest.forward",
                "needs export.endpoint: forwarding sends what was received on to it",
            ));
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    /// Reads the token files (`api.token_file`, `cluster.token_file`): the
    /// settings that name a file hold what it holds from here on.
    pub fn load_token_files(&mut self) -> Result<(), Vec<ConfigError>> {
        let errs: Vec<ConfigError> = [self.api.load_token_file(), self.cluster.load_token_file()]
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    /// An agent sends to its master unless `export.endpoint` says otherwise,
    /// proves itself with `cluster.token` when one is set, and (unless told
    /// otherwise) compresses with gzip and sends one request at a time.
    fn apply_role(&mut self) {
        if self.cluster.role != crate::cluster::config::Role::Agent {
            return;
        }
        if let Some(token) = self.cluster.token().map(str::to_string)
            && !self
                .export
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            self.export
                .headers
                .insert("authorization".into(), format!("Bearer {}", token.trim()));
        }
        if self.export.endpoint.is_none() {
            self.export.endpoint.clone_from(&self.cluster.master);
            self.export.protocol = crate::export::config::Protocol::Grpc;
        }
        self.export
            .compression
            .get_or_insert(crate::export::config::Compression::Gzip);
        // The master's history keeps each series in time order (export/config.rs).
        self.export.max_in_flight.get_or_insert(1);
    }

    /// Settings for one plugin (defaults when the config does not name it).
    pub fn plugin(&self, name: &str) -> PluginConfig {
        self.plugin.get(name).cloned().unwrap_or_default()
    }
}

/// Whether `key` (dotted) names no setting: set alone on the defaults, it
/// fails as an unknown field. A known key with a bad value is not this (its
/// error is reported by the full load).
fn names_no_setting(key: &str, val: &toml::Value) -> bool {
    let probe = Figment::from(Serialized::defaults(Config::default())).merge(Serialized::default(key, val.clone()));
    match probe.extract::<Config>() {
        Ok(_) => false,
        Err(e) => e
            .into_iter()
            .any(|err| matches!(err.kind, figment::error::Kind::UnknownField(..))),
    }
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
    use crate::export::config::Protocol;

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
    fn unknown_sonde_env_names_are_ignored_and_listed_but_set_and_files_stay_strict() {
        let e = env(&[
            ("SONDE_CHECKOUT", "/src/job"),
            ("SONDE_SAMPLER__PERIOD_MSEC", "5"),
            ("SONDE_CLIENT_JOB", "mnist"),
            ("SONDE_SAMPLER__PERIOD_MS", "50"),
        ]);
        let c = Config::load(None, &e, &[]).unwrap();
        assert_eq!(c.sampler.period_ms, 50, "known names still apply");
        assert_eq!(c.ignored_env, vec!["SONDE_CHECKOUT", "SONDE_SAMPLER__PERIOD_MSEC"]);
        // A known name with a bad value still stops sonde.
        let bad = Config::load(None, &env(&[("SONDE_SAMPLER__PERIOD_MS", "fast")]), &[]).unwrap_err();
        assert_eq!(bad.0[0].key, "sampler.period_ms", "{bad}");
        // --set and the file refuse unknown keys.
        let o = vec![parse_override("checkout=1").unwrap()];
        let err = Config::load(None, &env(&[]), &o).unwrap_err();
        assert!(err.to_string().contains("checkout"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        std::fs::write(&f, "checkout = 1\n").unwrap();
        assert!(Config::load(Some(&f), &env(&[]), &[]).is_err());
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
    fn token_files_are_read_and_not_beside_an_inline_token() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "abc\n").unwrap();
        let cfg = Config::from_toml_str(&format!(
            "[api]\nlisten = \"0.0.0.0:7878\"\ntoken_file = {f:?}\n[cluster]\ntoken_file = {f:?}\n"
        ))
        .unwrap();
        assert_eq!(cfg.api.token().as_deref(), Some("abc"));
        assert_eq!(cfg.cluster.token(), Some("abc"));
        let both = Config::from_toml_str(&format!("[api]\ntoken = \"x\"\ntoken_file = {f:?}\n")).unwrap_err();
        assert_eq!(both.0[0].key, "api.token_file");
        let missing = Config::from_toml_str("[cluster]\ntoken_file = \"/nonexistent/token\"\n").unwrap_err();
        assert_eq!(missing.0[0].key, "cluster.token_file");
        assert!(missing.0[0].reason.contains("cannot read"), "{}", missing.0[0].reason);
        std::fs::write(&f, " \n").unwrap();
        let empty = Config::from_toml_str(&format!("[api]\ntoken_file = {f:?}\n")).unwrap_err();
        assert!(empty.0[0].reason.contains("is empty"), "{}", empty.0[0].reason);
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
        let readme = include_str!("../../../README.md");
        let start = readme.find("```toml\n").expect("the README has a TOML example") + 8;
        let end = start + readme[start..].find("```").unwrap();
        let c = Config::from_toml_str(&readme[start..end]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.export.interval_ms, 5000);
        // The example tunes one bundled plugin; the host itself names none.
        assert!(
            c.plugin.values().any(|p| p.settings["deliver_every_ms"] == 1000),
            "{:?}",
            c.plugin
        );
    }

    #[test]
    fn plugin_settings_table_round_trips() {
        let c = Config::from_toml_str("[plugin.sampler]\nsettings = { prefix = \"x\", n = 3 }\n").unwrap();
        assert_eq!(c.plugin("sampler").settings["n"], 3);
        assert!(c.plugin("absent").enabled);
    }
}
