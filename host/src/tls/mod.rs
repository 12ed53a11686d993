//! tls/: TLS for sonde's listeners and senders, with rustls and the ring
//! provider.
//!
//! ```text
//!  config.rs    ServerTls (ingest.tls, api.tls), ClientTls (export.tls): plain settings
//!  load.rs      PEM files → rustls ServerConfig / ClientConfig; errors name the config key
//!  listener.rs  TlsListener: TCP accept, handshakes in their own tasks, refusals counted
//! ```
//! Who uses it: the OTLP receivers and the API listener serve through
//! [`TlsListener`] when their `tls` table is set; the export client (and so
//! the cluster heartbeat, which shares it) connects with [`client_config`]
//! to `https://` endpoints. `crate::config` loads every configured file once
//! at startup, so a bad path or PEM stops the host before anything listens.
//!
//! Limits: certificates are read at startup (and when `export` is changed
//! through the API); a renewed certificate needs a restart. There is no
//! revocation checking (CRLs, OCSP). Depends on nothing else in the crate.

pub mod config;
pub mod listener;
pub mod load;

pub use config::{ClientTls, ServerTls};
pub use listener::TlsListener;
pub use load::{TlsError, client_config, server_config, unused_client_config};

#[cfg(test)]
mod tests;

/// An https server for tests of the senders that dial one (remote-write,
/// engine queries): `app` behind a certificate of a test CA made in `dir`.
/// Returns its port and the CA's files.
#[cfg(test)]
pub(crate) async fn test_https_server(dir: &std::path::Path, app: axum::Router) -> (u16, sonde_e2e::pki::Pki) {
    let p = sonde_e2e::pki::Pki::make(dir);
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
