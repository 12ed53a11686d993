//! tls/: TLS for sonde's listeners and senders, with rustls and the ring
//! provider.
//!
//! ```text
//!  config.rs    ServerTls (ingest.tls, api.tls), ClientTls (export.tls): plain settings
//!  pem.rs       PEM files → certificates, keys, CA stores; errors name the config key
//!  reload.rs    ReloadingCert: a certificate and key read again when their files change
//!  load.rs      the settings → rustls ServerConfig / ClientConfig (through the two above)
//!  listener.rs  TlsListener: TCP accept, handshakes in their own tasks, refusals counted
//! ```
//! Who uses it: the OTLP receivers and the API listener serve through
//! [`TlsListener`] when their `tls` table is set; the export client (and so
//! the cluster heartbeat, which shares it) connects with [`client_config`]
//! to `https://` endpoints. `crate::config` loads every configured file once
//! at startup, so a bad path or PEM stops the host before anything listens.
//!
//! Certificates and keys (of the listeners, and a sender's client
//! certificate) are read again when their files change, so a renewed
//! certificate needs no restart (`reload.rs`). Limits: a CA file (`client_ca`,
//! `ca`) is read at startup (and when `export` is changed through the API)
//! only; there is no revocation checking (CRLs, OCSP). Depends on nothing
//! else in the crate.

pub mod config;
pub mod listener;
pub mod load;
pub mod pem;
pub mod reload;

pub use config::{ClientTls, ServerTls};
pub use listener::TlsListener;
pub use load::{client_config, server_config, unused_client_config};
pub use pem::TlsError;

#[cfg(test)]
mod tests;

/// An https server for tests of the senders that dial one (remote-write,
/// engine queries): `app` behind a certificate of a test CA made in `dir`.
/// Returns its port and the CA's files.
#[cfg(test)]
pub(crate) async fn test_https_server(dir: &std::path::Path, app: axum::Router) -> (u16, sonde_test_support::pki::Pki) {
    let p = sonde_test_support::pki::Pki::make(dir);
    let server = ServerTls {
        cert: p.server_cert.clone(),
        key: p.server_key.clone(),
        client_ca: None,
    };
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let listener = TlsListener::new(tcp, server_config(&server, "test").unwrap(), refused, "test engine").unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, p)
}
