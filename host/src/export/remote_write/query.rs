//! A small client of the Prometheus HTTP query API, as Prometheus,
//! VictoriaMetrics, Mimir and Thanos serve it: `/api/v1/series`,
//! `/api/v1/query_range` and `/api/v1/query`, parsed into plain Rust types.
//!
//! Requests are form-encoded POSTs (no URL length limit on long matchers).
//! Every call is bounded by the timeout and the answer by `max_response_bytes`
//! (a longer answer is an error, never a truncated result). Times are
//! milliseconds since the Unix epoch both ways.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderMap, HeaderValue};
use serde::Deserialize;

use super::config::RemoteQueryConfig;
use super::http;
use crate::config::check::Check;

/// Label name → value, `__name__` included.
pub type LabelSet = BTreeMap<String, String>;

/// One series of a range result: samples `(t ms, value)`, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeSeries {
    pub labels: LabelSet,
    pub samples: Vec<(i64, f64)>,
}

/// One series of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct InstantSample {
    pub labels: LabelSet,
    pub sample: (i64, f64),
}

/// What `/api/v1/query` answers, by `resultType`.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryResult {
    Vector(Vec<InstantSample>),
    /// From a range selector (`metric[5m]`): the raw samples as stored.
    Matrix(Vec<RangeSeries>),
    Scalar((i64, f64)),
    String((i64, String)),
}

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The engine answered with an error: bad PromQL, too many series, overloaded…
    #[error("{url}: HTTP {status}: {error_type}: {message}")]
    Engine {
        url: String,
        status: u16,
        error_type: String,
        message: String,
    },
    /// Not reachable, reset, or no complete answer.
    #[error("{url}: {message}")]
    Transport { url: String, message: String },
    #[error("{url}: no answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("{url}: answer longer than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// An answer that is not the API's JSON.
    #[error("{url}: unexpected answer: {message}")]
    BadAnswer { url: String, message: String },
    #[error("{0}")]
    BadArgument(String),
}

/// A client for one engine. Cheap to clone.
#[derive(Clone)]
pub struct PromQueryClient {
    client: http::Client,
    base: String,
    headers: HeaderMap,
    timeout: Duration,
    max_bytes: usize,
}

impl std::fmt::Debug for PromQueryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromQueryClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl PromQueryClient {
    /// A client for `cfg.url`, which must be set. Nothing connects yet.
    pub fn new(cfg: &RemoteQueryConfig) -> Result<Self, String> {
        Check::run("storage.query", |c| cfg.validate(c))?;
        let base = cfg
            .url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            .ok_or("query.url is not set")?
            .trim_end_matches('/')
            .to_string();
        let timeout = Duration::from_millis(cfg.timeout_ms);
        let mut headers = http::headers(
            &cfg.headers,
            cfg.basic_auth.as_ref(),
            cfg.bearer_token.as_deref(),
            "query",
        )?;
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let client = if base.starts_with("https://") {
            let tls = crate::tls::client_config(&cfg.tls, "storage.query.tls").map_err(|e| e.to_string())?;
            http::client_tls(timeout, tls)
        } else {
            http::client(timeout)
        };
        Ok(Self {
            client,
            base,
            headers,
            timeout,
            max_bytes: cfg.max_response_bytes,
        })
    }

    /// The label sets of the series that match any of `matchers`
    /// (`up`, `{job="sonde"}`, `{__name__=~"gpu_.*"}`) between `start_ms` and `end_ms`.
    pub async fn series(&self, matchers: &[&str], start_ms: i64, end_ms: i64) -> Result<Vec<LabelSet>, QueryError> {
        if matchers.is_empty() {
            return Err(QueryError::BadArgument("series: at least one matcher is needed".into()));
        }
        let mut form: Vec<(&str, String)> = matchers.iter().map(|m| ("match[]", m.to_string())).collect();
        form.push(("start", secs(start_ms)));
        form.push(("end", secs(end_ms)));
        let (url, data) = self.call("/api/v1/series", &form).await?;
        serde_json::from_value(data).map_err(|e| bad(&url, format!("series data: {e}")))
    }

    /// Evaluates `promql` at every `step_ms` from `start_ms` to `end_ms`.
    pub async fn query_range(
        &self,
        promql: &str,
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    ) -> Result<Vec<RangeSeries>, QueryError> {
        if step_ms <= 0 || end_ms < start_ms {
            return Err(QueryError::BadArgument(format!(
                "query_range: need start <= end and step > 0 (start {start_ms}, end {end_ms}, step {step_ms})"
            )));
        }
        let form = [
            ("query", promql.to_string()),
            ("start", secs(start_ms)),
            ("end", secs(end_ms)),
            ("step", secs(step_ms)),
        ];
        let (url, data) = self.call("/api/v1/query_range", &form).await?;
        match parse_result(&url, data)? {
            QueryResult::Matrix(m) => Ok(m),
            other => Err(bad(&url, format!("query_range answered {}", kind_of(&other)))),
        }
    }

    /// Evaluates `promql` at `time_ms`. A range selector (`metric[10m]`) gives
    /// the stored samples unchanged, with their own timestamps.
    pub async fn query(&self, promql: &str, time_ms: i64) -> Result<QueryResult, QueryError> {
        let form = [("query", promql.to_string()), ("time", secs(time_ms))];
        let (url, data) = self.call("/api/v1/query", &form).await?;
        parse_result(&url, data)
    }

    /// POSTs the form, checks the envelope, returns the URL and `data`.
    async fn call(&self, path: &str, form: &[(&str, String)]) -> Result<(String, serde_json::Value), QueryError> {
        let url = format!("{}{path}", self.base);
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| QueryError::BadArgument(format!("{url}: {e}")))?;
        let mut body = String::new();
        for (k, v) in form {
            if !body.is_empty() {
                body.push('&');
            }
            form_encode(k, &mut body);
            body.push('=');
            form_encode(v, &mut body);
        }
        let mut req = hyper::Request::post(uri)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| QueryError::BadArgument(format!("{url}: {e}")))?;
        *req.headers_mut() = self.headers.clone();
        let call = async {
            let resp = self.client.request(req).await.map_err(|e| QueryError::Transport {
                url: url.clone(),
                message: http::error_chain(&e),
            })?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), self.max_bytes)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        QueryError::TooLarge {
                            url: url.clone(),
                            limit: self.max_bytes,
                        }
                    } else {
                        QueryError::Transport {
                            url: url.clone(),
                            message: format!("reading the answer: {e}"),
                        }
                    }
                })?
                .to_bytes();
            Ok::<_, QueryError>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(QueryError::Timeout {
                    url,
                    timeout: self.timeout,
                });
            }
        };
        let env: Envelope = match serde_json::from_slice(&bytes) {
            Ok(e) => e,
            Err(e) => {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(256)])
                    .trim()
                    .to_string();
                return Err(if status.is_success() {
                    bad(&url, format!("{e}: {text}"))
                } else {
                    QueryError::Engine {
                        url,
                        status: status.as_u16(),
                        error_type: "http".into(),
                        message: text,
                    }
                });
            }
        };
        if env.status != "success" || !status.is_success() {
            return Err(QueryError::Engine {
                url,
                status: status.as_u16(),
                error_type: env.error_type.unwrap_or_else(|| "unknown".into()),
                message: env.error.unwrap_or_default(),
            });
        }
        for w in env.warnings.iter().flatten() {
            tracing::debug!("{url}: engine warning: {w}");
        }
        Ok((url, env.data.unwrap_or(serde_json::Value::Null)))
    }
}

/// A PromQL series selector that matches exactly `labels` (`__name__`
/// included, as a matcher like any other): `{__name__="up",job="a\"b"}`.
/// Values are escaped as PromQL double-quoted strings.
pub fn exact_selector<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::from("{");
    for (k, v) in labels {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
    out
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ResultData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawRange {
    #[serde(default)]
    metric: LabelSet,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

#[derive(Deserialize)]
struct RawInstant {
    #[serde(default)]
    metric: LabelSet,
    value: (f64, String),
}

fn parse_result(url: &str, data: serde_json::Value) -> Result<QueryResult, QueryError> {
    let d: ResultData = serde_json::from_value(data).map_err(|e| bad(url, format!("result: {e}")))?;
    let err = |e: serde_json::Error| bad(url, format!("{} result: {e}", d.result_type));
    Ok(match d.result_type.as_str() {
        "matrix" => {
            let raw: Vec<RawRange> = serde_json::from_value(d.result.clone()).map_err(err)?;
            let mut out = Vec::with_capacity(raw.len());
            for r in raw {
                let samples = r
                    .values
                    .iter()
                    .map(|(t, v)| Ok((ms(*t), value(v).ok_or_else(|| bad(url, format!("value {v:?}")))?)))
                    .collect::<Result<Vec<_>, QueryError>>()?;
                out.push(RangeSeries {
                    labels: r.metric,
                    samples,
                });
            }
            QueryResult::Matrix(out)
        }
        "vector" => {
            let raw: Vec<RawInstant> = serde_json::from_value(d.result.clone()).map_err(err)?;
            let mut out = Vec::with_capacity(raw.len());
            for r in raw {
                let v = value(&r.value.1).ok_or_else(|| bad(url, format!("value {:?}", r.value.1)))?;
                out.push(InstantSample {
                    labels: r.metric,
                    sample: (ms(r.value.0), v),
                });
            }
            QueryResult::Vector(out)
        }
        "scalar" => {
            let (t, v): (f64, String) = serde_json::from_value(d.result.clone()).map_err(err)?;
            QueryResult::Scalar((ms(t), value(&v).ok_or_else(|| bad(url, format!("value {v:?}")))?))
        }
        "string" => {
            let (t, v): (f64, String) = serde_json::from_value(d.result.clone()).map_err(err)?;
            QueryResult::String((ms(t), v))
        }
        other => return Err(bad(url, format!("unknown resultType {other:?}"))),
    })
}

fn kind_of(r: &QueryResult) -> &'static str {
    match r {
        QueryResult::Vector(_) => "a vector",
        QueryResult::Matrix(_) => "a matrix",
        QueryResult::Scalar(_) => "a scalar",
        QueryResult::String(_) => "a string",
    }
}

fn bad(url: &str, message: String) -> QueryError {
    QueryError::BadAnswer {
        url: url.to_string(),
        message,
    }
}

/// Unix seconds (with a fraction) → ms, rounded: the API writes `1700000000.123`.
fn ms(secs: f64) -> i64 {
    (secs * 1000.0).round() as i64
}

/// ms → the API's seconds, exactly (no float on the way).
fn secs(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let a = ms.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

/// A sample value as the API writes it: a decimal string, `NaN`, `+Inf`, `-Inf`.
fn value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// `application/x-www-form-urlencoded`: unreserved bytes as they are, the rest as `%XX`.
fn form_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_query_times_and_values_convert_exactly() {
        assert_eq!(secs(1_700_000_000_123), "1700000000.123");
        assert_eq!(secs(5), "0.005");
        assert_eq!(secs(-1500), "-1.500");
        assert_eq!(ms(1_700_000_000.123), 1_700_000_000_123);
        assert_eq!(ms(1_764_043_200.001), 1_764_043_200_001);
        assert_eq!(value("1.5"), Some(1.5));
        assert_eq!(value("+Inf"), Some(f64::INFINITY));
        assert_eq!(value("-Inf"), Some(f64::NEG_INFINITY));
        assert!(value("NaN").unwrap().is_nan());
        assert_eq!(value("1e-7"), Some(1e-7));
        assert_eq!(value("x"), None);
        let mut s = String::new();
        form_encode("{job=\"a b\",x=~\"é.*\"}", &mut s);
        assert_eq!(s, "%7Bjob%3D%22a%20b%22%2Cx%3D~%22%C3%A9.%2A%22%7D");
    }

    #[test]
    fn remote_write_query_selectors_escape_values() {
        let s = exact_selector([("__name__", "up"), ("job", "a\"b\\c\nd")]);
        assert_eq!(s, r#"{__name__="up",job="a\"b\\c\nd"}"#);
        assert_eq!(exact_selector([]), "{}");
    }

    #[test]
    fn remote_write_query_parses_every_result_type() {
        let url = "http://x/api/v1/query";
        let m = serde_json::json!({"resultType": "matrix", "result": [
            {"metric": {"__name__": "up", "job": "a"}, "values": [[1700000000.1, "1"], [1700000000.2, "NaN"]]}
        ]});
        let QueryResult::Matrix(m) = parse_result(url, m).unwrap() else {
            panic!()
        };
        assert_eq!(m[0].labels["job"], "a");
        assert_eq!(m[0].samples[0], (1_700_000_000_100, 1.0));
        assert!(m[0].samples[1].1.is_nan());
        let v = serde_json::json!({"resultType": "vector", "result": [
            {"metric": {}, "value": [1700000000, "-Inf"]}
        ]});
        let QueryResult::Vector(v) = parse_result(url, v).unwrap() else {
            panic!()
        };
        assert_eq!(v[0].sample, (1_700_000_000_000, f64::NEG_INFINITY));
        let s = serde_json::json!({"resultType": "scalar", "result": [1.5, "2"]});
        assert_eq!(parse_result(url, s).unwrap(), QueryResult::Scalar((1500, 2.0)));
        let bad_v = serde_json::json!({"resultType": "vector", "result": [{"metric": {}, "value": [1, "zz"]}]});
        assert!(parse_result(url, bad_v).is_err());
        assert!(parse_result(url, serde_json::json!({"resultType": "histogram", "result": []})).is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn remote_write_query_reads_over_https_from_an_engine_with_a_certificate_of_the_test_ca() {
        let answer =
            serde_json::json!({"status": "success", "data": {"resultType": "scalar", "result": [1700000000, "4"]}});
        let app = axum::Router::new().route(
            "/api/v1/query",
            axum::routing::post(move || async move { axum::Json(answer) }),
        );
        let dir = tempfile::tempdir().unwrap();
        let (port, p) = crate::tls::test_https_server(dir.path(), app).await;

        let mut cfg = RemoteQueryConfig {
            url: Some(format!("https://localhost:{port}")),
            ..Default::default()
        };
        // Without the test CA the engine's certificate is not trusted.
        let untrusted = PromQueryClient::new(&cfg).unwrap();
        assert!(untrusted.query("4", 1_700_000_000_000).await.is_err());
        cfg.tls.ca = Some(p.ca.clone());
        let c = PromQueryClient::new(&cfg).unwrap();
        assert_eq!(
            c.query("4", 1_700_000_000_000).await.unwrap(),
            QueryResult::Scalar((1_700_000_000_000, 4.0))
        );
        cfg.tls.ca = Some("/nonexistent/ca.pem".into());
        let e = PromQueryClient::new(&cfg).unwrap_err();
        assert!(e.starts_with("storage.query.tls.ca"), "{e}");
    }
}
