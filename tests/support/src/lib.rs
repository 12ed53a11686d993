//! What the host's tests and the end-to-end tests share, in a crate that
//! does not depend on sonde (so that sonde can dev-depend on it without a
//! cycle): test certificates (`pki`), the Prometheus-compatible engines
//! (`engines`), a free port and a minimal HTTP client.

pub mod engines;
pub mod pki;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A minimal HTTP/1.1 client: one request per connection.
pub fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    http_with(addr, method, path, &[], body)
}

/// The same, with extra request headers.
pub fn http_with(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).and_then(|_| s.write_all(body)).is_err() {
        return (0, String::new());
    }
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, dechunk(&body))
}

fn dechunk(body: &str) -> String {
    // axum answers small bodies with Content-Length; large ones may be chunked.
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if n == 0 {
            return out;
        }
        if after.len() < n {
            return body.to_string();
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
}
