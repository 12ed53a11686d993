//! Certificates made fresh for a test: one CA, a server certificate for
//! `localhost` and `127.0.0.1` signed by it, a client certificate signed by
//! it, and a second, unrelated CA with a client certificate of its own (what
//! a stranger would present). Written as PEM files into a directory.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// The files of one test's PKI.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// Signed by another CA: a server that trusts `ca` refuses it.
    pub stranger_cert: PathBuf,
    pub stranger_key: PathBuf,
}

fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("no names to parse");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(p, KeyPair::generate().expect("a key")).expect("a CA certificate")
}

/// A leaf certificate for `names` (DNS names or IP addresses), and its key, as PEM.
fn leaf(issuer: &CertifiedIssuer<'static, KeyPair>, cn: &str, names: &[&str]) -> (String, String) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut p = CertificateParams::new(names).expect("valid names");
    p.distinguished_name.push(DnType::CommonName, cn);
    let key = KeyPair::generate().expect("a key");
    let cert = p.signed_by(&key, issuer).expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub fn make(dir: &Path) -> Pki {
        let write = |name: &str, pem: &str| {
            let p = dir.join(name);
            std::fs::write(&p, pem).unwrap();
            p
        };
        let ca = new_ca("sonde test CA");
        let (sc, sk) = leaf(&ca, "sonde master", &["localhost", "127.0.0.1"]);
        let (cc, ck) = leaf(&ca, "sonde agent", &["agent.local"]);
        let other = new_ca("some other CA");
        let (oc, ok) = leaf(&other, "stranger", &["stranger.local"]);
        Pki {
            ca: write("ca.pem", &ca.pem()),
            server_cert: write("server.pem", &sc),
            server_key: write("server-key.pem", &sk),
            client_cert: write("client.pem", &cc),
            client_key: write("client-key.pem", &ck),
            stranger_cert: write("stranger.pem", &oc),
            stranger_key: write("stranger-key.pem", &ok),
        }
    }
}
