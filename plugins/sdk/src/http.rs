//! Small helpers for `on-request`: building responses and reading the query.

use std::borrow::Cow;

use crate::types::{HttpRequest, HttpResponse};

impl HttpResponse {
    /// A response with a body and its content type.
    pub fn with_body(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        HttpResponse {
            status,
            headers: vec![("content-type".to_string(), content_type.to_string())],
            body: body.into(),
        }
    }

    /// `body` must already be JSON text.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::with_body(status, "application/json", body.into().into_bytes())
    }

    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self::with_body(status, "text/plain; charset=utf-8", body.into().into_bytes())
    }

    /// A status without a body (e.g. 204).
    pub fn empty(status: u16) -> Self {
        HttpResponse {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// `{"error": message}` with the message JSON-escaped.
    pub fn error(status: u16, message: &str) -> Self {
        Self::json(status, format!("{{\"error\":{}}}", json_string(message)))
    }
}

impl HttpRequest {
    /// The first value of a query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<Cow<'_, str>> {
        query_param(&self.query, name)
    }

    /// A request header, matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// `s` as a URL query value or path segment: everything but unreserved
/// characters `%XX`-escaped (a job name may hold any character).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The first value of `name` in a raw query string (`a=1&b=x%20y`),
/// percent-decoded, with `+` read as a space. A key without `=` has the
/// value "".
pub fn query_param<'q>(query: &'q str, name: &str) -> Option<Cow<'q, str>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> Cow<'_, str> {
    if !s.contains(['%', '+']) {
        return Cow::Borrowed(s);
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(|&b| hex(b)),
                bytes.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                // Not an escape: keep the '%' as written.
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `s` as a JSON string literal, quotes included.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_query_parameters() {
        assert_eq!(query_param("from=3&max=10", "from").as_deref(), Some("3"));
        assert_eq!(query_param("from=3&max=10", "max").as_deref(), Some("10"));
        assert_eq!(query_param("from=3", "to"), None);
        assert_eq!(query_param("", "from"), None);
        assert_eq!(query_param("flag&x=1", "flag").as_deref(), Some(""));
        assert_eq!(query_param("q=a%20b+c%2", "q").as_deref(), Some("a b c%2"));
        assert_eq!(query_param("a=1&a=2", "a").as_deref(), Some("1"));
    }

    #[test]
    fn builds_responses() {
        let r = HttpResponse::error(404, "no route \"x\"\n");
        assert_eq!(r.status, 404);
        assert_eq!(String::from_utf8(r.body).unwrap(), r#"{"error":"no route \"x\"\n"}"#);
        assert_eq!(r.headers[0].1, "application/json");
        assert!(HttpResponse::empty(204).body.is_empty());

        let req = HttpRequest {
            method: "GET".into(),
            path: "/".into(),
            query: "from=2".into(),
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: vec![],
        };
        assert_eq!(req.header("content-type"), Some("text/plain"));
        assert_eq!(req.query_param("from").as_deref(), Some("2"));
    }
}
