//! A certificate and key read from files that may change while sonde runs.
//!
//! Why: certificates are short-lived where they are managed (cert-manager
//! renews a Secret that the kubelet swaps under the pod; certbot and ACME
//! clients replace files in place), and restarting every agent and the master
//! to pick one up loses a master's receivers for the restart and an agent's
//! unspooled data. So the listeners (the OTLP receivers, the API) and the
//! senders with a client certificate (export, heartbeat) take their
//! certificate from a [`ReloadingCert`], which rustls asks at every handshake.
//!
//! How: at most once per [`CHECK_EVERY`], a handshake looks at both files'
//! size, modification time and inode (a `stat` each: cheap, and nothing runs
//! between handshakes). When either changed, both are read again; the new
//! pair is used only if it parses and the key belongs to the certificate.
//! Otherwise the last good pair stays in use and a warning says why, and the
//! next change (the second of two files written one after the other, or the
//! end of a write caught halfway) is tried again. Connections already open
//! keep the certificate they shook hands with.
//!
//! Not reloaded: a CA (`client_ca`, `ca`): trust anchors change rarely, and
//! a restart picks them up.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::pem::{TlsError, certified_key};

/// How often, at most, a handshake looks at the files.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What says a file changed: (length, modification time, inode); none when it cannot be read.
type Stamp = Option<(u64, SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?, m.ino()))
}

/// The certificate chain and key of `cert` and `key`, kept current (see the module docs).
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    /// Where the settings live (`ingest.tls`), for errors and logs.
    prefix: String,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    seen: (Stamp, Stamp),
    checked: Instant,
}

impl ReloadingCert {
    /// Reads both files now: a bad file fails here, naming its key, so that
    /// sonde refuses to start on it.
    pub fn load(cert: &Path, key: &Path, prefix: &str) -> Result<ReloadingCert, TlsError> {
        let seen = (stamp(cert), stamp(key));
        let current = Arc::new(certified_key(cert, key, prefix)?);
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            prefix: prefix.to_string(),
            state: Mutex::new(State {
                current,
                seen,
                checked: Instant::now(),
            }),
        })
    }

    /// The pair to present now, read again first if the files changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut st = self.state.lock();
        if st.checked.elapsed() < CHECK_EVERY {
            return st.current.clone();
        }
        st.checked = Instant::now();
        let now = (stamp(&self.cert), stamp(&self.key));
        if now == st.seen {
            return st.current.clone();
        }
        st.seen = now;
        match certified_key(&self.cert, &self.key, &self.prefix) {
            Ok(k) => {
                tracing::info!(
                    cert = %self.cert.display(),
                    "{}: the certificate files changed: new handshakes use the new certificate",
                    self.prefix
                );
                st.current = Arc::new(k);
            }
            Err(e) => {
                tracing::warn!("the certificate files changed but cannot be used, keeping the previous ones: {e}")
            }
        }
        st.current.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(&self, _root_hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
