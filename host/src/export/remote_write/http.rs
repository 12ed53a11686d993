//! What the writer and the query client share: one pooled hyper client setup
//! and the configured headers (extras plus credentials).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::config::BasicAuth;

pub(super) type Client = HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// HTTP/1.1 over plain TCP, connect bounded by `timeout`, one idle connection kept.
pub(super) fn client(timeout: Duration) -> Client {
    client_tls(timeout, crate::tls::unused_client_config())
}

/// The same, with `tls` for `https://` URLs (`http://` ones stay plain).
pub(super) fn client_tls(timeout: Duration, tls: rustls::ClientConfig) -> Client {
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(timeout));
    tcp.enforce_http(false);
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    HyperClient::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(1)
        .build(connector)
}

/// The extra headers plus `Authorization` (basic or bearer) and `User-Agent`;
/// `key` names the config section in errors.
pub(super) fn headers(
    extra: &BTreeMap<String, String>,
    basic: Option<&BasicAuth>,
    bearer: Option<&str>,
    key: &str,
) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (k, v) in extra {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("{key}.headers: {k:?}: {e}"))?;
        let val = HeaderValue::from_str(v).map_err(|e| format!("{key}.headers.{k}: {e}"))?;
        map.insert(name, val);
    }
    let auth = match (basic, bearer) {
        (Some(b), _) => Some(format!(
            "Basic {}",
            base64(format!("{}:{}", b.username, b.password).as_bytes())
        )),
        (None, Some(t)) => Some(format!("Bearer {t}")),
        (None, None) => None,
    };
    if let Some(a) = auth {
        let mut v = HeaderValue::from_str(&a).map_err(|e| format!("{key}: credentials are not a valid header: {e}"))?;
        v.set_sensitive(true);
        map.insert(header::AUTHORIZATION, v);
    }
    map.insert(
        header::USER_AGENT,
        HeaderValue::from_static(concat!("sonde/", env!("CARGO_PKG_VERSION"))),
    );
    Ok(map)
}

/// A hyper client error with its chain of causes, on one line.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// Standard base64 with padding (for `Authorization: Basic`).
fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("user:pass", "dXNlcjpwYXNz"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn remote_write_headers_carry_credentials() {
        let b = BasicAuth {
            username: "user".into(),
            password: "pass".into(),
        };
        let h = headers(&BTreeMap::new(), Some(&b), None, "x").unwrap();
        assert_eq!(h[header::AUTHORIZATION], "Basic dXNlcjpwYXNz");
        let h = headers(&[("X-Scope-OrgID".into(), "t1".into())].into(), None, Some("tok"), "x").unwrap();
        assert_eq!(h[header::AUTHORIZATION], "Bearer tok");
        assert_eq!(h["x-scope-orgid"], "t1");
        assert!(headers(&[("bad name".into(), "v".into())].into(), None, None, "x").is_err());
    }
}
