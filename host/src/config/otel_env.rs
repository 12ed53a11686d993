//! The standard OpenTelemetry environment (`OTEL_EXPORTER_OTLP_*`,
//! `OTEL_SERVICE_NAME`, ...) as a layer of the config: it only ever sets keys
//! of `[export]`, between the TOML file and the `SONDE_*` variables.

use std::collections::BTreeMap;

use super::{ConfigError, ConfigErrors};

/// The standard OpenTelemetry exporter variables, as a partial config.
/// Spec: OTEL_EXPORTER_OTLP_{ENDPOINT,PROTOCOL,HEADERS,TIMEOUT,COMPRESSION},
/// OTEL_EXPORTER_OTLP_{CERTIFICATE,CLIENT_CERTIFICATE,CLIENT_KEY} (onto
/// `export.tls`), the per-signal
/// `_METRICS_`/`_LOGS_` forms, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
/// OTEL_METRIC_EXPORT_INTERVAL and OTEL_SDK_DISABLED.
pub(super) fn otel_env_overlay(env: &BTreeMap<String, String>) -> Result<toml::Table, ConfigErrors> {
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
    if let Some(v) = get("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION").or_else(|| get("OTEL_EXPORTER_OTLP_COMPRESSION")) {
        match v.as_str() {
            "gzip" | "none" => {
                export.insert("compression".into(), v.into());
            }
            other => errs.push(ConfigError::new(
                "OTEL_EXPORTER_OTLP_COMPRESSION",
                format!("{other:?} is not supported (use gzip or none)"),
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
    // TLS files for `https://` endpoints; the per-signal form wins, as for the other keys.
    let mut tls = toml::Table::new();
    for (var, key) in [
        ("CERTIFICATE", "ca"),
        ("CLIENT_CERTIFICATE", "cert"),
        ("CLIENT_KEY", "key"),
    ] {
        if let Some(v) =
            get(&format!("OTEL_EXPORTER_OTLP_METRICS_{var}")).or_else(|| get(&format!("OTEL_EXPORTER_OTLP_{var}")))
        {
            tls.insert(key.into(), v.into());
        }
    }
    if !tls.is_empty() {
        export.insert("tls".into(), tls.into());
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
