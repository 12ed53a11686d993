//! Changing the configuration while sonde runs: `PUT /api/config` (the whole
//! document) and `PATCH /api/config` (a JSON merge patch, RFC 7396).
//!
//! A change is checked first, then applied, then swapped in:
//! 1. parse (400 when the body is not JSON), build the candidate and check it
//!    with the same rules as at startup (422 naming each key: unknown fields,
//!    wrong types, values out of range);
//! 2. keys that only take effect at startup must be unchanged (409, "needs a
//!    restart", naming the key): `host.*`, `sampler.*` but `period_ms`,
//!    `plugins.*`, `api.listen`, `sinks.dir`, `export.service_name`,
//!    `export.resource`, `export.self_metrics_interval_ms`,
//!    `export.spool_max_bytes`, `export.spool_dir`;
//! 3. apply what can refuse, in order, undoing the earlier steps if a later
//!    one refuses (422 naming the key and the plugin's or exporter's reason):
//!    each running plugin whose `settings` changed gets its `configure` hook,
//!    then the exporter is reconfigured (`export.*`);
//! 4. apply what cannot refuse: the sampling period (`sampler.period_ms`),
//!    `api.token`, `api.web_dir`; swap the running config;
//! 5. plugins whose `enabled`, `memory_limit_mb`, `call_timeout_ms` or
//!    `grants` changed are reloaded with the new config. Their outcome (a
//!    plugin may fail to start) is reported in the answer and in
//!    `/api/plugins`; it does not undo the change.
//!
//! Secrets read back as `"<redacted>"`; sending `"<redacted>"` back keeps the
//! running value, so a GET-edit-PUT round trip never erases a token.
//! Changes are applied one at a time.

// Handlers return an axum `Response` as their error: the idiom, and never on a hot path.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use crate::config::{Config, ConfigError};
use crate::plugin::RunState;
use crate::plugin::config::PluginConfig;

pub const REDACTED: &str = "<redacted>";

/// The running config with secrets replaced by [`REDACTED`].
pub fn redacted(cfg: &Config) -> Value {
    let mut doc = serde_json::to_value(cfg).unwrap_or_default();
    for p in SECRET_VALUES {
        if let Some(v) = doc.pointer_mut(p)
            && v.is_string()
        {
            *v = REDACTED.into();
        }
    }
    for p in SECRET_MAPS {
        if let Some(Value::Object(m)) = doc.pointer_mut(p) {
            for v in m.values_mut() {
                *v = REDACTED.into();
            }
        }
    }
    doc
}

/// Secret strings, as JSON pointers into the config.
const SECRET_VALUES: &[&str] = &[
    "/api/token",
    "/cluster/token",
    "/storage/remote_write/bearer_token",
    "/storage/remote_write/basic_auth/password",
    "/storage/query/bearer_token",
    "/storage/query/basic_auth/password",
];
/// Header tables, whose every value may carry a credential (API keys, tenants).
const SECRET_MAPS: &[&str] = &[
    "/export/headers",
    "/storage/remote_write/headers",
    "/storage/query/headers",
];

pub async fn get_config(State(st): State<AppState>) -> Json<Value> {
    Json(redacted(&st.config.lock()))
}

pub async fn put_config(State(st): State<AppState>, body: Bytes) -> Response {
    let doc = match parse_json(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    change(&st, |_| Ok(doc)).await
}

pub async fn patch_config(State(st): State<AppState>, body: Bytes) -> Response {
    let patch = match parse_json(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !patch.is_object() {
        return errors(
            StatusCode::UNPROCESSABLE_ENTITY,
            "a merge patch must be a JSON object",
            vec![ConfigError::new("<root>", "expected a JSON object")],
        );
    }
    change(&st, move |current| {
        let mut doc = current;
        merge_patch(&mut doc, &patch);
        Ok(doc)
    })
    .await
}

/// Applies a change built from the running config (unredacted, as JSON).
/// Used by PUT/PATCH and by the plugin enable/disable endpoints.
pub async fn change(st: &AppState, build: impl FnOnce(Value) -> Result<Value, Response>) -> Response {
    static APPLYING: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    let _one_at_a_time = APPLYING.get_or_init(Default::default).lock().await;
    let old = st.config.lock().clone();
    let mut doc = match build(serde_json::to_value(&old).unwrap_or_default()) {
        Ok(d) => d,
        Err(r) => return r,
    };
    unredact(&mut doc, &old);
    let new = match candidate(doc) {
        Ok(c) => c,
        Err(errs) => return errors(StatusCode::UNPROCESSABLE_ENTITY, "invalid configuration", errs),
    };
    let restart = needs_restart(&old, &new);
    if !restart.is_empty() {
        return errors(
            StatusCode::CONFLICT,
            "this change needs a restart: edit the config file or flags and restart sonde",
            restart,
        );
    }
    match apply(st, &old, &new).await {
        Ok(applied) => {
            *st.config.lock() = new.clone();
            st.plugins.set_plugin_configs(&new.plugin);
            let reloaded = reload_changed(st, &old, &new).await;
            (
                StatusCode::OK,
                Json(json!({"config": redacted(&new), "applied": applied, "reloaded": reloaded})),
            )
                .into_response()
        }
        Err(e) => errors(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the change was refused; the running configuration is unchanged",
            vec![e],
        ),
    }
}

fn parse_json(body: &[u8]) -> Result<Value, Response> {
    serde_json::from_slice(body).map_err(|e| {
        errors(
            StatusCode::BAD_REQUEST,
            "the body is not valid JSON",
            vec![ConfigError::new("<body>", e.to_string())],
        )
    })
}

pub fn errors(code: StatusCode, summary: &str, errs: Vec<ConfigError>) -> Response {
    let first = errs.first().cloned();
    (
        code,
        Json(json!({
            "error": summary,
            "key": first.as_ref().map(|e| e.key.clone()),
            "reason": first.map(|e| e.reason),
            "errors": errs.iter().map(|e| json!({"key": e.key, "reason": e.reason})).collect::<Vec<_>>(),
        })),
    )
        .into_response()
}

/// RFC 7396: objects merge recursively, `null` removes a key, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Puts the running secrets back where the document says `<redacted>`.
fn unredact(doc: &mut Value, old: &Config) {
    let before = serde_json::to_value(old).unwrap_or_default();
    for p in SECRET_VALUES {
        if let Some(v) = doc.pointer_mut(p)
            && v == REDACTED
        {
            *v = before.pointer(p).cloned().unwrap_or(Value::Null);
        }
    }
    for p in SECRET_MAPS {
        if let Some(Value::Object(m)) = doc.pointer_mut(p) {
            for (k, v) in m.iter_mut() {
                if v == REDACTED
                    && let Some(real) = before.pointer(p).and_then(|o| o.get(k))
                {
                    *v = real.clone();
                }
            }
        }
    }
}

/// Deserialises and validates a candidate config, naming every bad key.
pub fn candidate(doc: Value) -> Result<Config, Vec<ConfigError>> {
    let mut cfg: Config = serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let reason = e.inner().to_string();
        // The path names the offending key (an unknown field included).
        let key = if path == "." { "<root>".to_string() } else { path };
        vec![ConfigError::new(key, reason)]
    })?;
    cfg.load_token_files()?;
    cfg.validate()?;
    Ok(cfg)
}

/// Keys that differ between `old` and `new` but only take effect at startup.
pub fn needs_restart(old: &Config, new: &Config) -> Vec<ConfigError> {
    let mut out = Vec::new();
    let mut check = |key: &str, differs: bool| {
        if differs {
            out.push(ConfigError::new(
                key,
                "needs a restart: it is read only at startup (change it in the config file or flags)",
            ));
        }
    };
    check("host", old.host != new.host);
    let mut s = new.sampler.clone();
    s.period_ms = old.sampler.period_ms;
    check("sampler", s != old.sampler);
    check("plugins", old.plugins != new.plugins);
    check("api.listen", old.api.listen != new.api.listen);
    check("api.tls", old.api.tls != new.api.tls);
    check("ingest", old.ingest != new.ingest);
    // The writer, the reader and the embedded history are started once.
    check("storage", old.storage != new.storage);
    check("sinks.dir", old.sinks != new.sinks);
    check(
        "export.service_name",
        old.export.service_name != new.export.service_name,
    );
    check("export.resource", old.export.resource != new.export.resource);
    check(
        "export.self_metrics_interval_ms",
        old.export.self_metrics_interval_ms != new.export.self_metrics_interval_ms,
    );
    check(
        "export.spool_max_bytes",
        old.export.spool_max_bytes != new.export.spool_max_bytes,
    );
    check("export.spool_dir", old.export.spool_dir != new.export.spool_dir);
    out
}

/// A plugin config with the live-applied part (settings) left out: what a reload is needed for.
fn lifecycle(p: &PluginConfig) -> PluginConfig {
    PluginConfig {
        settings: Value::Null,
        ..p.clone()
    }
}

/// Runs the steps that can refuse, undoing the earlier ones when a later one refuses.
async fn apply(st: &AppState, old: &Config, new: &Config) -> Result<Vec<String>, ConfigError> {
    let mut applied = Vec::new();
    let mut configured: Vec<(String, Value)> = Vec::new();
    let names: std::collections::BTreeSet<&String> = old.plugin.keys().chain(new.plugin.keys()).collect();
    for name in names {
        let (o, n) = (old.plugin(name), new.plugin(name));
        if o.settings == n.settings || lifecycle(&o) != lifecycle(&n) {
            continue; // unchanged, or the plugin is reloaded with its new config anyway
        }
        let live = st
            .plugins
            .status(name)
            .is_some_and(|s| matches!(s.state, RunState::Running | RunState::Backoff));
        if !live {
            applied.push(format!("plugin.{name}.settings: kept for the plugin's next start"));
            continue;
        }
        if let Err(reason) = st.plugins.configure(name, &n.settings).await {
            undo_settings(st, &configured).await;
            return Err(ConfigError::new(format!("plugin.{name}.settings"), reason));
        }
        configured.push((name.clone(), o.settings.clone()));
        applied.push(format!("plugin.{name}.settings: accepted by the plugin"));
    }
    if old.export != new.export {
        if let Err(e) = st.pipeline.reconfigure(&new.export) {
            undo_settings(st, &configured).await;
            return Err(ConfigError::new("export", format!("{e:#}")));
        }
        applied.push(match &new.export.endpoint {
            Some(e) => format!("export: now to {e}"),
            None => "export: off".to_string(),
        });
    }
    if old.sampler.period_ms != new.sampler.period_ms {
        let effective = st.plugins.sample_plan().set_base(new.sampler.period_ms);
        applied.push(format!(
            "sampler.period_ms: {} -> {} (sampling every {effective} ms)",
            old.sampler.period_ms, new.sampler.period_ms
        ));
    }
    if old.api.token != new.api.token || old.api.token_file != new.api.token_file {
        applied.push("api.token: changed".into());
    }
    if old.api.web_dir != new.api.web_dir {
        applied.push("api.web_dir: changed".into());
    }
    Ok(applied)
}

async fn undo_settings(st: &AppState, done: &[(String, Value)]) {
    for (name, settings) in done.iter().rev() {
        if let Err(e) = st.plugins.configure(name, settings).await {
            tracing::warn!(plugin = %name, "could not restore the previous settings: {e}");
        }
    }
}

/// Reloads plugins whose lifecycle settings changed; reports each outcome.
async fn reload_changed(st: &AppState, old: &Config, new: &Config) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let names: std::collections::BTreeSet<&String> = old.plugin.keys().chain(new.plugin.keys()).collect();
    for name in names {
        if lifecycle(&old.plugin(name)) == lifecycle(&new.plugin(name)) {
            continue;
        }
        let p = st.plugins.clone();
        let n = name.clone();
        let r = tokio::task::spawn_blocking(move || p.reload(&n))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        let v = match r {
            Ok(()) => match st.plugins.status(name) {
                Some(s) => json!({"state": s.state, "reason": s.reason}),
                None => json!({"state": "absent"}),
            },
            // No file yet: the config applies when one appears.
            Err(reason) => json!({"state": "absent", "reason": reason}),
        };
        out.insert(name.clone(), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc7396() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge_patch(&mut t, &json!({"a": [3], "n": {"x": 1}}));
        assert_eq!(t, json!({"a": [3], "n": {"x": 1}}));
    }

    #[test]
    fn unknown_fields_and_bad_values_name_the_key() {
        let mut doc = serde_json::to_value(Config::default()).unwrap();
        doc["sampler"]["period_msec"] = json!(5);
        let e = candidate(doc).unwrap_err();
        assert_eq!(e[0].key, "sampler.period_msec", "{e:?}");
        let mut doc = serde_json::to_value(Config::default()).unwrap();
        doc["sampler"]["period_ms"] = json!("fast");
        assert_eq!(candidate(doc).unwrap_err()[0].key, "sampler.period_ms");
        let mut doc = serde_json::to_value(Config::default()).unwrap();
        doc["sampler"]["period_ms"] = json!(1);
        assert_eq!(candidate(doc).unwrap_err()[0].key, "sampler.period_ms");
        let e = candidate(json!({"bogus": 1})).unwrap_err();
        assert_eq!(e[0].key, "bogus");
    }

    #[test]
    fn startup_only_keys_need_a_restart() {
        let old = Config::default();
        let mut new = old.clone();
        new.sampler.period_ms = 50;
        new.export.endpoint = Some("http://127.0.0.1:4317".into());
        assert!(needs_restart(&old, &new).is_empty());
        new.api.listen = "127.0.0.1:1".into();
        new.sampler.per_core = false;
        new.export.spool_max_bytes = 1 << 30;
        new.storage.query.url = Some("http://127.0.0.1:9090".into());
        let keys: Vec<_> = needs_restart(&old, &new).into_iter().map(|e| e.key).collect();
        assert_eq!(keys, vec!["sampler", "api.listen", "storage", "export.spool_max_bytes"]);
    }

    #[test]
    fn redacted_secrets_round_trip() {
        let mut old = Config::default();
        old.api.token = Some("s3cret".into());
        old.export.headers.insert("api-key".into(), "k".into());
        old.storage.query.url = Some("http://127.0.0.1:9090".into());
        old.storage.query.bearer_token = Some("q-token".into());
        old.storage
            .query
            .headers
            .insert("X-Scope-OrgID".into(), "tenant".into());
        old.storage.remote_write.basic_auth = Some(crate::export::remote_write::BasicAuth {
            username: "u".into(),
            password: "rw-pass".into(),
        });
        let mut doc = redacted(&old);
        assert_eq!(doc["api"]["token"], REDACTED);
        let text = doc.to_string();
        for secret in ["s3cret", "q-token", "tenant", "rw-pass"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(doc["storage"]["remote_write"]["basic_auth"]["username"], "u");
        unredact(&mut doc, &old);
        let c = candidate(doc).unwrap();
        assert_eq!(c, old);
    }
}
