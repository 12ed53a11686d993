//! `[api]`: where the HTTP API and the dashboard listen, and the token that
//! guards state changes (the OTLP receivers check it too when bound wide).
//! `crate::config` assembles and validates the sections.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::tls::config::ServerTls;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// Where the HTTP API and the dashboard listen.
    pub listen: String,
    /// Bearer token for state-changing requests; required when `listen` is not loopback.
    pub token: Option<String>,
    /// Serve the dashboard from this directory instead of the built-in page.
    pub web_dir: Option<PathBuf>,
    /// TLS on the API listener, which also carries the dashboard and
    /// `POST /api/ingest` (`[api.tls]`: `cert`, `key`, optional `client_ca`).
    /// Unset: plain HTTP.
    pub tls: Option<ServerTls>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7878".into(),
            token: None,
            web_dir: None,
            tls: None,
        }
    }
}
