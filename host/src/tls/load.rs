//! rustls configurations for sonde's listeners and senders, from the `tls`
//! settings: the ALPN each side speaks, client authentication, the trust
//! store. The files themselves are read by `pem.rs`; the certificate and key
//! through `reload.rs`, which reads them again when they change.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::config::{ClientTls, ServerTls};
use super::pem::{TlsError, provider, roots};
use super::reload::ReloadingCert;

/// A listener's configuration. `prefix` is where the settings live
/// (`ingest.tls`). Offers HTTP/2 and HTTP/1.1 by ALPN: gRPC needs the first,
/// the HTTP receiver and the API speak either. The certificate and key are
/// read again when their files change (`reload.rs`).
pub fn server_config(t: &ServerTls, prefix: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let cert = Arc::new(ReloadingCert::load(&t.cert, &t.key, prefix)?);
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(prefix, e.to_string()))?;
    let builder = match &t.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let k = format!("{prefix}.client_ca");
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca, &k)?), provider())
                .build()
                .map_err(|e| TlsError::new(&k, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_cert_resolver(cert);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A sender's configuration (`prefix`: `export.tls`). Without `ca` the
/// system's trust store is used; ALPN is left to the connector (HTTP/2 for
/// gRPC, HTTP/1.1 for HTTP/protobuf). A client certificate is read again
/// when its files change (`reload.rs`).
pub fn client_config(t: &ClientTls, prefix: &str) -> Result<ClientConfig, TlsError> {
    let roots = match &t.ca {
        Some(ca) => roots(ca, &format!("{prefix}.ca"))?,
        None => system_roots(prefix)?,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::new(prefix, e.to_string()))?
        .with_root_certificates(roots);
    match (&t.cert, &t.key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let cert = ReloadingCert::load(cert, key, prefix)?;
            Ok(builder.with_client_cert_resolver(Arc::new(cert)))
        }
        (Some(_), None) => Err(TlsError::new(
            format!("{prefix}.key"),
            format!("{prefix}.cert is set: its private key is needed too"),
        )),
        (None, Some(_)) => Err(TlsError::new(
            format!("{prefix}.cert"),
            format!("{prefix}.key is set: the certificate it belongs to is needed too"),
        )),
    }
}

/// The platform's CA certificates. Ones that fail to parse are skipped (a
/// trust store often holds a few rustls cannot use); none at all is an error,
/// since every `https://` connection would then fail.
fn system_roots(prefix: &str) -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(TlsError::new(
            format!("{prefix}.ca"),
            "not set, and the system has no usable CA certificates: name the CA file of the server's certificate",
        ));
    }
    Ok(roots)
}

/// A client configuration that trusts nothing: for senders whose endpoints
/// are all `http://`, so the TLS side of their connector is never used and
/// no trust store has to be read.
pub fn unused_client_config() -> ClientConfig {
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth()
}
