//! PEM files → rustls configurations, with every failure naming the config
//! key it came from (`ingest.tls.key: /etc/sonde/key.pem: no such file`), so a
//! bad path or a bad file stops the host at startup with a message a user can
//! act on, never a panic halfway through.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::config::{ClientTls, ServerTls};

/// A TLS setting that cannot be used: which key, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsError {
    pub key: String,
    pub reason: String,
}

impl TlsError {
    fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        TlsError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// ring, named explicitly: the process never depends on which provider
/// another crate might have installed as the default.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::new(key, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError::new(
            key,
            format!(
                "{}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
                path.display()
            ),
        ));
    }
    Ok(certs)
}

fn private_key(path: &Path, key: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::new(key, format!("{}: {e}", path.display())))
}

fn roots(path: &Path, key: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certs(path, key)? {
        roots
            .add(c)
            .map_err(|e| TlsError::new(key, format!("{}: not a usable CA certificate: {e}", path.display())))?;
    }
    Ok(roots)
}

/// A listener's configuration. `prefix` is where the settings live
/// (`ingest.tls`). Offers HTTP/2 and HTTP/1.1 by ALPN: gRPC needs the first,
/// the HTTP receiver and the API speak either.
pub fn server_config(t: &ServerTls, prefix: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certs(&t.cert, &format!("{prefix}.cert"))?;
    let key = private_key(&t.key, &format!("{prefix}.key"))?;
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
    let mut cfg = builder.with_single_cert(chain, key).map_err(|e| {
        TlsError::new(
            format!("{prefix}.key"),
            format!("is not the private key of {prefix}.cert ({e})"),
        )
    })?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A sender's configuration (`prefix`: `export.tls`). Without `ca` the
/// system's trust store is used; ALPN is left to the connector (HTTP/2 for
/// gRPC, HTTP/1.1 for HTTP/protobuf).
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
            let chain = certs(cert, &format!("{prefix}.cert"))?;
            let k = private_key(key, &format!("{prefix}.key"))?;
            builder.with_client_auth_cert(chain, k).map_err(|e| {
                TlsError::new(
                    format!("{prefix}.key"),
                    format!("is not the private key of {prefix}.cert ({e})"),
                )
            })
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
