//! `RemoteWriteConfig`: where and how the master writes to a Prometheus-compatible engine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::check::Check;
use crate::tls::config::ClientTls;

/// Prometheus remote-write to an existing engine (Prometheus, VictoriaMetrics,
/// Mimir, Thanos receive, Cortex). Off unless `url` is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteWriteConfig {
    /// The engine's remote-write endpoint, e.g. `http://127.0.0.1:9090/api/v1/write`
    /// (Prometheus with `--web.enable-remote-write-receiver`) or
    /// `http://127.0.0.1:8428/api/v1/write` (VictoriaMetrics), or `https://…`
    /// (checked with `tls`). Unset: remote-write off.
    pub url: Option<String>,
    /// Per-request timeout, connecting included.
    /// Range: at least 1.
    pub timeout_ms: u64,
    /// Largest number of samples in one request. Prometheus itself sends 2 000.
    /// Range: at least 1.
    pub batch_max_samples: usize,
    /// A request goes out when `batch_max_samples` are waiting or this long after
    /// the oldest waiting sample arrived, whichever comes first.
    /// Range: at least 1.
    pub flush_interval_ms: u64,
    /// Samples waiting to be sent (memory is bounded by this): when full, the
    /// oldest samples are dropped and counted in `dropped_samples`.
    /// Range: at least `batch_max_samples`.
    pub queue_capacity: usize,
    /// The first wait before a request that failed with 5xx, 429 or a
    /// connection error is sent again; each further failure doubles it, up
    /// to `retry_max_ms`. Other 4xx answers are not retried.
    /// Range: at least 1.
    pub retry_initial_ms: u64,
    /// The longest wait between two tries of a request.
    /// Range: at least `retry_initial_ms`.
    pub retry_max_ms: u64,
    /// A request still failing after this long is given up, and its samples
    /// are counted in `failed_samples`.
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
    /// The user name.
    pub username: String,
    /// The password; a secret (`GET /api/config` shows it redacted).
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

    /// Checks what can be checked without a network, and loads the TLS
    /// files of an `https://` url (so that a bad path stops the host at startup).
    pub fn validate(&self, c: &mut Check) {
        if let Some(url) = &self.url {
            check_http_url(c, url, &self.tls);
        }
        c.at_least("timeout_ms", self.timeout_ms, 1);
        c.at_least("batch_max_samples", self.batch_max_samples, 1);
        c.at_least("flush_interval_ms", self.flush_interval_ms, 1);
        if self.queue_capacity < self.batch_max_samples {
            c.bad(
                "queue_capacity",
                format!(
                    "{} must be at least batch_max_samples ({})",
                    self.queue_capacity, self.batch_max_samples
                ),
            );
        }
        c.at_least("retry_initial_ms", self.retry_initial_ms, 1);
        if self.retry_max_ms < self.retry_initial_ms {
            c.bad(
                "retry_max_ms",
                format!("must be at least retry_initial_ms ({})", self.retry_initial_ms),
            );
        }
        check_auth(c, &self.basic_auth, &self.bearer_token);
        for (k, v) in &self.headers {
            if let Err(e) = hyper::header::HeaderName::from_bytes(k.as_bytes()) {
                c.bad("headers", format!("{k:?} is not a valid header name: {e}"));
            }
            if let Err(e) = hyper::header::HeaderValue::from_str(v) {
                c.bad(&format!("headers.{k}"), format!("not a valid header value: {e}"));
            }
        }
    }
}

/// Reading history back through an engine's Prometheus HTTP query API
/// (`/api/v1/query_range`, `/api/v1/query`, `/api/v1/series`). Off unless `url` is set.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RemoteQueryConfig {
    /// The engine's base URL, the part before `/api/v1/…`: `http://127.0.0.1:9090`
    /// for Prometheus, `http://127.0.0.1:8428` for VictoriaMetrics,
    /// `http://mimir:8080/prometheus` for Mimir, or `https://…`. Unset: off.
    pub url: Option<String>,
    /// Per-request timeout, connecting and reading the whole answer included.
    /// Range: at least 1.
    pub timeout_ms: u64,
    /// Largest answer read; a longer one is an error, never a partial result.
    /// Range: at least 1 KiB.
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

    /// Checks what can be checked without a network, and loads the TLS
    /// files of an `https://` url.
    pub fn validate(&self, c: &mut Check) {
        if let Some(url) = &self.url {
            check_http_url(c, url, &self.tls);
        }
        c.at_least("timeout_ms", self.timeout_ms, 1);
        c.at_least("max_response_bytes", self.max_response_bytes, 1024);
        check_auth(c, &self.basic_auth, &self.bearer_token);
    }
}

/// `url` is an `http://` or `https://` URL with a host; for `https://`,
/// `tls` loads.
fn check_http_url(c: &mut Check, url: &str, tls: &ClientTls) {
    let uri: hyper::Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => return c.bad("url", format!("{url:?}: {e}")),
    };
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return c.bad("url", format!("{url:?}: must start with http:// or https://"));
    }
    if uri.authority().is_none() {
        return c.bad("url", format!("{url:?}: no host"));
    }
    if uri.scheme_str() == Some("https")
        && let Err(e) = crate::tls::client_config(tls, &c.key("tls"))
    {
        c.bad_whole(e.key, e.reason);
    }
}

fn check_auth(c: &mut Check, basic_auth: &Option<BasicAuth>, bearer_token: &Option<String>) {
    if basic_auth.is_some() && bearer_token.is_some() {
        c.bad("bearer_token", "set basic_auth or bearer_token, not both");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(f: impl FnOnce(&mut Check<'_>)) -> Result<(), String> {
        Check::run("storage.remote_write", f)
    }

    #[test]
    fn remote_write_config_defaults_are_off_and_valid() {
        let c = RemoteWriteConfig::default();
        assert!(!c.enabled());
        problems(|ch| c.validate(ch)).unwrap();
    }

    #[test]
    fn remote_write_config_rejects_bad_values() {
        let ok = RemoteWriteConfig {
            url: Some("http://127.0.0.1:9090/api/v1/write".into()),
            ..Default::default()
        };
        problems(|ch| ok.validate(ch)).unwrap();
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
            assert!(problems(|ch| b.validate(ch)).is_err(), "{b:?}");
        }
    }

    #[test]
    fn remote_write_query_config_checks() {
        let mut q = RemoteQueryConfig::default();
        assert!(!q.enabled());
        problems(|ch| q.validate(ch)).unwrap();
        q.url = Some("http://127.0.0.1:8428".into());
        problems(|ch| q.validate(ch)).unwrap();
        q.url = Some("localhost:8428".into());
        assert!(problems(|ch| q.validate(ch)).is_err());
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
