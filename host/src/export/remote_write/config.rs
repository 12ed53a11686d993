//! `RemoteWriteConfig`: where and how the master writes to a Prometheus-compatible engine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::tls::config::ClientTls;

/// Prometheus remote-write to an existing engine (Prometheus, VictoriaMetrics,
/// Mimir, Thanos receive, Cortex). Off unless `url` is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteWriteConfig {
    /// The engine's remote-write endpoint, e.g. `http://127.0.0.1:9090/api/v1/write`
    /// (Prometheus with `--web.enable-remote-write-receiver`) or
    /// `http://127.0.0.1:8428/api/v1/write` (VictoriaMetrics), or `https://…`
    /// (checked with `tls`). None: remote-write off.
    pub url: Option<String>,
    /// Per-request timeout, connecting included.
    pub timeout_ms: u64,
    /// Largest number of samples in one request. Prometheus itself sends 2 000.
    pub batch_max_samples: usize,
    /// A request goes out when `batch_max_samples` are waiting or this long after
    /// the oldest waiting sample arrived, whichever comes first.
    pub flush_interval_ms: u64,
    /// Samples waiting to be sent (memory is bounded by this): when full, the
    /// oldest samples are dropped and counted in `dropped_samples`.
    pub queue_capacity: usize,
    /// Retry backoff for 5xx, 429 and connection errors: first delay, doubling up
    /// to the cap; a request still failing after `retry_max_elapsed_ms` is given up
    /// and its samples are counted in `failed_samples`. Other 4xx answers are not retried.
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub retry_max_elapsed_ms: u64,
    /// Extra request headers (tenant ids such as `X-Scope-OrgID`, API keys).
    pub headers: BTreeMap<String, String>,
    /// HTTP basic authentication; not together with `bearer_token`.
    pub basic_auth: Option<BasicAuth>,
    /// Sent as `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// Resource attributes that become labels on every series, besides `job`
    /// (from `service.namespace`/`service.name`) and `instance` (from
    /// `service.instance.id`), which always do. Names are translated like any
    /// attribute (`host.name` → `host_name`).
    pub promote_resource_attributes: Vec<String>,
    /// For an `https://` url: the CA the engine's certificate must be
    /// signed by (unset: the system's trust store), and a client certificate
    /// and key for engines that want mutual TLS. The same table as `export.tls`.
    pub tls: ClientTls,
}

/// Username and password for HTTP basic authentication.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    pub password: String,
}

impl Default for RemoteWriteConfig {
    fn default() -> Self {
        Self {
            url: None,
            timeout_ms: 10_000,
            batch_max_samples: 2_000,
            flush_interval_ms: 5_000,
            queue_capacity: 500_000,
            retry_initial_ms: 200,
            retry_max_ms: 10_000,
            retry_max_elapsed_ms: 60_000,
            headers: BTreeMap::new(),
            basic_auth: None,
            bearer_token: None,
            promote_resource_attributes: vec!["host.name".into()],
            tls: ClientTls::default(),
        }
    }
}

impl RemoteWriteConfig {
    /// Whether remote-write is on (`url` set and not blank).
    pub fn enabled(&self) -> bool {
        self.url.as_deref().is_some_and(|u| !u.trim().is_empty())
    }

    /// Checks what can be checked without a network; the messages name the key.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.url {
            check_http_url(url, "remote_write.url", true)?;
            // Loading the files here makes a bad path stop the host at startup.
            if url.starts_with("https://") {
                crate::tls::client_config(&self.tls, "storage.remote_write.tls").map_err(|e| e.to_string())?;
            }
        }
        if self.timeout_ms == 0 {
            return Err("remote_write.timeout_ms must be > 0".into());
        }
        if self.batch_max_samples == 0 {
            return Err("remote_write.batch_max_samples must be > 0".into());
        }
        if self.flush_interval_ms == 0 {
            return Err("remote_write.flush_interval_ms must be > 0".into());
        }
        if self.queue_capacity < self.batch_max_samples {
            return Err(format!(
                "remote_write.queue_capacity ({}) must be at least batch_max_samples ({})",
                self.queue_capacity, self.batch_max_samples
            ));
        }
        if self.retry_initial_ms == 0 || self.retry_max_ms < self.retry_initial_ms {
            return Err("remote_write.retry_initial_ms must be > 0 and <= retry_max_ms".into());
        }
        if self.basic_auth.is_some() && self.bearer_token.is_some() {
            return Err("remote_write: set basic_auth or bearer_token, not both".into());
        }
        for (k, v) in &self.headers {
            hyper::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| format!("remote_write.headers: {k:?} is not a valid header name: {e}"))?;
            hyper::header::HeaderValue::from_str(v)
                .map_err(|e| format!("remote_write.headers.{k}: not a valid header value: {e}"))?;
        }
        Ok(())
    }
}

/// Reading history back through an engine's Prometheus HTTP query API
/// (`/api/v1/query_range`, `/api/v1/query`, `/api/v1/series`). Off unless `url` is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteQueryConfig {
    /// The engine's base URL, the part before `/api/v1/…`: `http://127.0.0.1:9090`
    /// for Prometheus, `http://127.0.0.1:8428` for VictoriaMetrics,
    /// `http://mimir:8080/prometheus` for Mimir, or `https://…`. None: off.
    pub url: Option<String>,
    /// Per-request timeout, connecting and reading the whole answer included.
    pub timeout_ms: u64,
    /// Largest answer read; a longer one is an error, never a partial result.
    pub max_response_bytes: usize,
    /// Extra request headers (tenant ids such as `X-Scope-OrgID`, API keys).
    pub headers: BTreeMap<String, String>,
    /// HTTP basic authentication; not together with `bearer_token`.
    pub basic_auth: Option<BasicAuth>,
    /// Sent as `Authorization: Bearer <token>`.
    pub bearer_token: Option<String>,
    /// For an `https://` url: the CA, and a client certificate and key, as
    /// `remote_write.tls` (the same table as `export.tls`).
    pub tls: ClientTls,
}

impl Default for RemoteQueryConfig {
    fn default() -> Self {
        Self {
            url: None,
            timeout_ms: 10_000,
            max_response_bytes: 32 << 20,
            headers: BTreeMap::new(),
            basic_auth: None,
            bearer_token: None,
            tls: ClientTls::default(),
        }
    }
}

impl RemoteQueryConfig {
    /// Whether reading through an engine is on (`url` set and not blank).
    pub fn enabled(&self) -> bool {
        self.url.as_deref().is_some_and(|u| !u.trim().is_empty())
    }

    /// Checks what can be checked without a network; the messages name the key.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.url {
            check_http_url(url, "query.url", true)?;
            if url.starts_with("https://") {
                crate::tls::client_config(&self.tls, "storage.query.tls").map_err(|e| e.to_string())?;
            }
        }
        if self.timeout_ms == 0 {
            return Err("query.timeout_ms must be > 0".into());
        }
        if self.max_response_bytes < 1024 {
            return Err("query.max_response_bytes must be at least 1024".into());
        }
        if self.basic_auth.is_some() && self.bearer_token.is_some() {
            return Err("query: set basic_auth or bearer_token, not both".into());
        }
        Ok(())
    }
}

fn check_http_url(url: &str, key: &str, https: bool) -> Result<(), String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{key} {url:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") if https => {}
        Some("https") => {
            return Err(format!(
                "{key} {url:?}: https is not supported yet (no TLS in this client)"
            ));
        }
        _ => return Err(format!("{key} {url:?}: must start with http://")),
    }
    if uri.authority().is_none() {
        return Err(format!("{key} {url:?}: no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_config_defaults_are_off_and_valid() {
        let c = RemoteWriteConfig::default();
        assert!(!c.enabled());
        c.validate().unwrap();
    }

    #[test]
    fn remote_write_config_rejects_bad_values() {
        let ok = RemoteWriteConfig {
            url: Some("http://127.0.0.1:9090/api/v1/write".into()),
            ..Default::default()
        };
        ok.validate().unwrap();
        assert!(ok.enabled());
        let bad = [
            // https is fine, a CA file that is not there is not.
            RemoteWriteConfig {
                url: Some("https://x/api/v1/write".into()),
                tls: ClientTls {
                    ca: Some("/nonexistent/ca.pem".into()),
                    ..ClientTls::default()
                },
                ..ok.clone()
            },
            RemoteWriteConfig {
                url: Some("ftp://x/".into()),
                ..ok.clone()
            },
            RemoteWriteConfig {
                queue_capacity: 10,
                ..ok.clone()
            },
            RemoteWriteConfig {
                bearer_token: Some("t".into()),
                basic_auth: Some(BasicAuth {
                    username: "u".into(),
                    password: "p".into(),
                }),
                ..ok.clone()
            },
            RemoteWriteConfig {
                headers: [("bad header".to_string(), "v".to_string())].into(),
                ..ok.clone()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
    }

    #[test]
    fn remote_write_query_config_checks() {
        let mut q = RemoteQueryConfig::default();
        assert!(!q.enabled());
        q.validate().unwrap();
        q.url = Some("http://127.0.0.1:8428".into());
        q.validate().unwrap();
        q.url = Some("localhost:8428".into());
        assert!(q.validate().is_err());
    }

    #[test]
    fn remote_write_config_refuses_unknown_keys() {
        let r: Result<RemoteWriteConfig, _> = toml::from_str("url = 'http://x/'\nbatch_size = 3\n");
        assert!(r.is_err());
        let c: RemoteWriteConfig = toml::from_str("url = 'http://x/api/v1/write'\ntimeout_ms = 5\n").unwrap();
        assert_eq!(c.timeout_ms, 5);
        assert_eq!(c.batch_max_samples, 2_000);
    }
}
