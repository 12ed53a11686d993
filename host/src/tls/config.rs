//! The TLS settings a component embeds: [`ServerTls`] for a listener
//! (`ingest.tls`, `api.tls`) and [`ClientTls`] for a sender (`export.tls`).
//! Plain data like every settings file; `tls/load.rs` turns them into rustls
//! configurations and `crate::config` checks them at startup.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A listener's TLS: its certificate and key, and optionally the CA its
/// clients' certificates must be signed by (then every client must present
/// one: mutual TLS). All files are PEM.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// The server's certificate chain, leaf first. Its names (DNS or IP)
    /// must match the address clients connect to.
    pub cert: PathBuf,
    /// The private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Set: clients must present a certificate signed by one of these CAs,
    /// or the handshake is refused and counted (`tls_refused` in
    /// `GET /api/ingest`). Unset: any client may connect (a token may still be required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
}

/// A sender's TLS, used only for `https://` endpoints (`http://` stays
/// plain). All files are PEM.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTls {
    /// The CA certificate(s) the server's certificate must be signed by
    /// (for `export.tls`, also `OTEL_EXPORTER_OTLP_CERTIFICATE`). Unset: the
    /// system's trust store.
    pub ca: Option<PathBuf>,
    /// A client certificate chain to present, for mutual TLS (for
    /// `export.tls`, also `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`). Needs `key`.
    pub cert: Option<PathBuf>,
    /// The private key of `cert` (for `export.tls`, also
    /// `OTEL_EXPORTER_OTLP_CLIENT_KEY`).
    pub key: Option<PathBuf>,
}

impl ClientTls {
    /// Nothing set: an `https://` endpoint is checked against the system's trust store.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }
}
