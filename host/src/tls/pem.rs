//! PEM files → the rustls types they hold (certificate chains, private keys,
//! CA stores, a certificate with its key), with every failure naming the
//! config key it came from (`ingest.tls.key: /etc/sonde/key.pem: no such
//! file`), so a bad path or a bad file stops the host at startup with a
//! message a user can act on, never a panic halfway through.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS setting that cannot be used: which key, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct TlsError {
    pub key: String,
    pub reason: String,
}

impl TlsError {
    pub(super) fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        TlsError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// ring, named explicitly: the process never depends on which provider
/// another crate might have installed as the default.
pub(super) fn provider() -> Arc<CryptoProvider> {
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

/// The chain in `cert` with the key in `key`, checked to belong together;
/// `prefix` is where the settings live (`ingest.tls`).
pub(super) fn certified_key(cert: &Path, key: &Path, prefix: &str) -> Result<CertifiedKey, TlsError> {
    let chain = certs(cert, &format!("{prefix}.cert"))?;
    let k = private_key(key, &format!("{prefix}.key"))?;
    CertifiedKey::from_der(chain, k, &provider()).map_err(|e| {
        TlsError::new(
            format!("{prefix}.key"),
            format!("is not the private key of {prefix}.cert ({e})"),
        )
    })
}

pub(super) fn roots(path: &Path, key: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certs(path, key)? {
        roots
            .add(c)
            .map_err(|e| TlsError::new(key, format!("{}: not a usable CA certificate: {e}", path.display())))?;
    }
    Ok(roots)
}
