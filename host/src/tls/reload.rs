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
//!
//! The same watch ([`FileWatch`]) keeps a bearer token read from a file
//! current ([`ReloadingSecret`], `api.token_file`): a Kubernetes Secret
//! mounted as a volume is swapped by the kubelet the same way a certificate
//! is, and a rotated token should not need a restart either.

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

/// Whether some files changed, looked at no more than once per
/// [`CHECK_EVERY`]: what each reloading holder asks before reading again.
#[derive(Debug)]
pub struct FileWatch {
    paths: Vec<PathBuf>,
    seen: Vec<Stamp>,
    checked: Instant,
}

impl FileWatch {
    /// Watches `paths` from their state now.
    pub fn new(paths: &[&Path]) -> FileWatch {
        FileWatch {
            paths: paths.iter().map(|p| p.to_path_buf()).collect(),
            seen: paths.iter().map(|p| stamp(p)).collect(),
            checked: Instant::now(),
        }
    }

    /// True when a file changed since the last time this said so (or since
    /// `new`); false without looking when it looked less than
    /// [`CHECK_EVERY`] ago.
    pub fn changed(&mut self) -> bool {
        if self.checked.elapsed() < CHECK_EVERY {
            return false;
        }
        self.checked = Instant::now();
        let now: Vec<Stamp> = self.paths.iter().map(|p| stamp(p)).collect();
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }
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
    watch: FileWatch,
}

impl ReloadingCert {
    /// Reads both files now: a bad file fails here, naming its key, so that
    /// sonde refuses to start on it.
    pub fn load(cert: &Path, key: &Path, prefix: &str) -> Result<ReloadingCert, TlsError> {
        let watch = FileWatch::new(&[cert, key]);
        let current = Arc::new(certified_key(cert, key, prefix)?);
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            prefix: prefix.to_string(),
            state: Mutex::new(State { current, watch }),
        })
    }

    /// The pair to present now, read again first if the files changed.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut st = self.state.lock();
        if !st.watch.changed() {
            return st.current.clone();
        }
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

/// A secret (a bearer token) read from a file, kept current the same way:
/// the file's content with surrounding whitespace (a trailing newline)
/// trimmed. A file that changes to something unreadable or empty leaves the
/// last good secret in use, with a warning.
pub struct ReloadingSecret {
    path: PathBuf,
    /// The setting it comes from (`api.token_file`), for logs.
    key: String,
    state: Mutex<(Arc<str>, FileWatch)>,
}

impl ReloadingSecret {
    /// Reads the file now: one that cannot be read or is empty fails here,
    /// in words that name it.
    pub fn load(path: &Path, key: &str) -> Result<ReloadingSecret, String> {
        let watch = FileWatch::new(&[path]);
        let secret = read_secret(path)?;
        Ok(ReloadingSecret {
            path: path.to_path_buf(),
            key: key.to_string(),
            state: Mutex::new((secret, watch)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The secret now, read again first if the file changed.
    pub fn current(&self) -> Arc<str> {
        let mut st = self.state.lock();
        if st.1.changed() {
            match read_secret(&self.path) {
                Ok(s) if s != st.0 => {
                    tracing::info!(
                        "{}: {} changed: requests need the new token",
                        self.key,
                        self.path.display()
                    );
                    st.0 = s;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("{}: {e}; keeping the previous token", self.key),
            }
        }
        st.0.clone()
    }
}

fn read_secret(path: &Path) -> Result<Arc<str>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(Arc::from(secret))
}

/// Two are the same setting when they read the same file (the secret is
/// the file's business).
impl PartialEq for ReloadingSecret {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

/// Names the file, never the secret.
impl std::fmt::Debug for ReloadingSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingSecret").field("path", &self.path).finish()
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
