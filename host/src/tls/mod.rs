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
