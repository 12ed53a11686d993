//! Sending one encoded OTLP request: gRPC (tonic) or HTTP/protobuf (hyper).
//!
//! Requests travel as already-encoded protobuf bytes ([`Bytes`]): the pipeline
//! encodes once, keeps the compact encoding in its queue, and a retry resends
//! the same bytes without re-encoding or cloning a message tree. For gRPC this
//! means a tiny pass-through codec on tonic's generic client instead of the
//! generated `MetricsServiceClient`/`LogsServiceClient` (same path, same wire
//! format; the responses are decoded with prost as usual).
//!
//! `https://` endpoints go through one hyper-rustls connector built from
//! `export.tls` (`crate::tls`): the same rustls configuration for gRPC (ALPN
//! h2, handed to tonic as its connector) and HTTP/protobuf (ALPN http/1.1).
//! `http://` endpoints stay plain TCP. Configured headers go on every request
//! of both protocols (gRPC metadata is the request's HTTP/2 headers).
//!
//! Every send is bounded by the configured timeout. Errors are classified per
//! the OTLP spec ("Retryable Response Codes" / "Failures"): transport errors
//! (refused, reset, timeout), gRPC CANCELLED, DEADLINE_EXCEEDED,
//! RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS and HTTP
//! 429/502/503/504 are retryable; everything else (HTTP 400, INVALID_ARGUMENT,
//! UNAUTHENTICATED, ...) is not. HTTP `Retry-After` (seconds) is passed on.
//! A success with `partial_success` reports how many items the collector rejected.

use std::fmt;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::export::config::{ExportConfig, Protocol};
use crate::export::sequence::{PRODUCER_HEADER, RequestId, SEQ_HEADER};

/// Which OTLP service a request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Metrics,
    Logs,
    /// Only ever forwarded (gateway mode): sonde itself exports no spans.
    Traces,
}

/// A failed send, classified.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct SendError {
    /// Worth retrying with backoff (transient: unreachable, overloaded, timed out).
    pub retryable: bool,
    pub msg: String,
    /// The server asked to wait this long before retrying (HTTP `Retry-After`).
    pub retry_after: Option<Duration>,
    /// The server turned down sonde's credentials (gRPC UNAUTHENTICATED or
    /// PERMISSION_DENIED, HTTP 401 or 403). Not retryable by the OTLP rules,
    /// but a sender with a disk spool keeps the request: the fix is a
    /// config change, and what waits is still worth sending after it.
    pub refused: bool,
}

impl SendError {
    pub fn retryable(msg: impl Into<String>) -> Self {
        Self {
            retryable: true,
            msg: msg.into(),
            retry_after: None,
            refused: false,
        }
    }
    pub fn fatal(msg: impl Into<String>) -> Self {
        Self {
            retryable: false,
            msg: msg.into(),
            retry_after: None,
            refused: false,
        }
    }
}

/// A request the collector accepted; `rejected` items were refused (partial success).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    pub rejected: u64,
    pub message: String,
}

/// An OTLP client for one endpoint and protocol. Cheap to clone.
/// (Both variants boxed: the pipeline holds one behind an `Arc` anyway.)
#[derive(Clone)]
pub enum Client {
    Grpc(Box<GrpcClient>),
    Http(Box<HttpClient>),
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Client {
    /// Builds the client for `cfg` (which must have an endpoint). Nothing connects
    /// yet: gRPC connects lazily on the first send, HTTP per pooled connection.
    /// Call it inside a tokio runtime context: tonic's lazy channel spawns its worker.
    pub fn new(cfg: &ExportConfig) -> anyhow::Result<Client> {
        let endpoint = cfg
            .endpoint
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("export.endpoint is not set"))?;
        let timeout = Duration::from_millis(cfg.timeout_ms.max(1));
        let gzip = cfg.compression == Some(crate::export::config::Compression::Gzip);
        Ok(match cfg.protocol {
            Protocol::Grpc => {
                let tls = endpoint
                    .starts_with("https://")
                    .then(|| crate::tls::client_config(&cfg.tls, "export.tls"))
                    .transpose()?;
                Client::Grpc(Box::new(GrpcClient::new(endpoint, &cfg.headers, timeout, gzip, tls)?))
            }
            Protocol::HttpProtobuf => {
                let base = endpoint.trim_end_matches('/');
                let metrics = cfg
                    .metrics_endpoint
                    .clone()
                    .unwrap_or_else(|| format!("{base}/v1/metrics"));
                let logs = cfg.logs_endpoint.clone().unwrap_or_else(|| format!("{base}/v1/logs"));
                let tls = if [&metrics, &logs].iter().any(|u| u.starts_with("https://")) {
                    crate::tls::client_config(&cfg.tls, "export.tls")?
                } else {
                    crate::tls::unused_client_config()
                };
                Client::Http(Box::new(HttpClient::new(
                    &metrics,
                    &logs,
                    &cfg.headers,
                    timeout,
                    gzip,
                    tls,
                )?))
            }
        })
    }

    /// "grpc http://host:4317" / "http/protobuf http://host:4318/v1/metrics", for logs.
    pub fn describe(&self) -> String {
        match self {
            Client::Grpc(g) => format!("grpc {}", g.endpoint),
            Client::Http(h) => format!("http/protobuf {}", h.metrics_url),
        }
    }

    /// Sends one encoded `Export{Metrics,Logs}ServiceRequest`, bounded by the timeout.
    pub async fn send(&self, signal: Signal, body: Bytes) -> Result<Accepted, SendError> {
        self.send_with(signal, body, None).await
    }

    /// The same, carrying the request's identity (`sonde-producer`,
    /// `sonde-seq`; see `sequence.rs`) so that a receiver takes it once
    /// however often it is sent.
    pub async fn send_with(&self, signal: Signal, body: Bytes, id: Option<&RequestId>) -> Result<Accepted, SendError> {
        match self {
            Client::Grpc(g) => g.send(signal, body, id).await,
            Client::Http(h) => h.send(signal, body, id).await,
        }
    }
}

// ---------------------------------------------------------------- gRPC

/// gRPC over a lazily connected tonic [`Channel`].
#[derive(Clone)]
pub struct GrpcClient {
    grpc: tonic::client::Grpc<Channel>,
    metadata: MetadataMap,
    timeout: Duration,
    endpoint: String,
}

impl GrpcClient {
    pub fn new(
        endpoint: &str,
        headers: &std::collections::BTreeMap<String, String>,
        timeout: Duration,
        gzip: bool,
        tls: Option<rustls::ClientConfig>,
    ) -> anyhow::Result<Self> {
        let ep = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| anyhow::anyhow!("export.endpoint {endpoint:?}: {e}"))?
            .timeout(timeout)
            .connect_timeout(timeout)
            .tcp_nodelay(true);
        let channel = match tls {
            None => ep.connect_lazy(),
            // tonic's own TLS would need a second rustls setup; handing it the
            // same connector as HTTP keeps one trust configuration.
            Some(tls) => ep.connect_with_connector_lazy(
                HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_only()
                    .enable_http2()
                    .wrap_connector(tcp_connector(timeout)),
            ),
        };
        let mut metadata = MetadataMap::new();
        for (k, v) in headers {
            let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|e| anyhow::anyhow!("export.headers: {k:?} is not a valid gRPC metadata key: {e}"))?;
            let val = MetadataValue::try_from(v.as_str())
                .map_err(|e| anyhow::anyhow!("export.headers.{k}: not a valid header value: {e}"))?;
            metadata.insert(key, val);
        }
        let mut grpc = tonic::client::Grpc::new(channel);
        if gzip {
            grpc = grpc.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        Ok(Self {
            grpc,
            metadata,
            timeout,
            endpoint: endpoint.to_string(),
        })
    }

    async fn send(&self, signal: Signal, body: Bytes, id: Option<&RequestId>) -> Result<Accepted, SendError> {
        let mut req = tonic::Request::new(body);
        *req.metadata_mut() = self.metadata.clone();
        if let Some(id) = id {
            // A producer that is not a valid header value was refused when it was read.
            if let Ok(p) = MetadataValue::try_from(&*id.producer) {
                req.metadata_mut().insert(PRODUCER_HEADER, p);
                req.metadata_mut().insert(SEQ_HEADER, MetadataValue::from(id.seq));
            }
        }
        req.set_timeout(self.timeout);
        let mut grpc = self.grpc.clone();
        let call = async move {
            grpc.ready()
                .await
                .map_err(|e| SendError::retryable(format!("gRPC channel not ready: {e}")))?;
            match signal {
                Signal::Metrics => {
                    let path = http::uri::PathAndQuery::from_static(
                        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                    );
                    let resp = grpc
                        .unary(req, path, RawCodec::<ExportMetricsServiceResponse>::default())
                        .await
                        .map_err(classify_status)?;
                    Ok(match resp.into_inner().partial_success {
                        Some(p) => Accepted {
                            rejected: p.rejected_data_points.max(0) as u64,
                            message: p.error_message,
                        },
                        None => Accepted::default(),
                    })
                }
                Signal::Logs => {
                    let path = http::uri::PathAndQuery::from_static(
                        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                    );
                    let resp = grpc
                        .unary(req, path, RawCodec::<ExportLogsServiceResponse>::default())
                        .await
                        .map_err(classify_status)?;
                    Ok(match resp.into_inner().partial_success {
                        Some(p) => Accepted {
                            rejected: p.rejected_log_records.max(0) as u64,
                            message: p.error_message,
                        },
                        None => Accepted::default(),
                    })
                }
                Signal::Traces => {
                    let path = http::uri::PathAndQuery::from_static(
                        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                    );
                    let resp = grpc
                        .unary(req, path, RawCodec::<ExportTraceServiceResponse>::default())
                        .await
                        .map_err(classify_status)?;
                    Ok(match resp.into_inner().partial_success {
                        Some(p) => Accepted {
                            rejected: p.rejected_spans.max(0) as u64,
                            message: p.error_message,
                        },
                        None => Accepted::default(),
                    })
                }
            }
        };
        // The channel enforces the timeout too; this outer bound also covers `ready()`.
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(SendError::retryable(format!(
                "gRPC export timed out after {:?}",
                self.timeout
            ))),
        }
    }
}

/// gRPC status → classified error (OTLP/gRPC retryable codes).
pub fn classify_status(s: Status) -> SendError {
    let retryable = match s.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => true,
        // A status tonic made up from a local transport failure (reset, broken
        // pipe) carries its source; one the server sent does not.
        Code::Unknown | Code::Internal => std::error::Error::source(&s).is_some(),
        _ => false,
    };
    let mut msg = format!("gRPC {:?}: {}", s.code(), s.message());
    if let Some(src) = std::error::Error::source(&s) {
        msg.push_str(&format!(" ({src})"));
    }
    SendError {
        retryable,
        msg,
        retry_after: None,
        refused: matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied),
    }
}

/// Sends pre-encoded protobuf bytes as they are; decodes the reply with prost.
struct RawCodec<R>(std::marker::PhantomData<fn() -> R>);

impl<R> Default for RawCodec<R> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

struct RawEncoder;
struct ProstDecoder<R>(std::marker::PhantomData<fn() -> R>);

impl<R: Message + Default + Send + 'static> Codec for RawCodec<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = RawEncoder;
    type Decoder = ProstDecoder<R>;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ProstDecoder<R> {
        ProstDecoder(std::marker::PhantomData)
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl<R: Message + Default> Decoder for ProstDecoder<R> {
    type Item = R;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<R>, Status> {
        let n = src.remaining();
        let r = R::decode(src.copy_to_bytes(n)).map_err(|e| Status::internal(format!("bad response: {e}")))?;
        Ok(Some(r))
    }
}

// ---------------------------------------------------------------- HTTP

/// A body gzip-compressed (fast level: it is sent once and read once).
fn gzip(body: &[u8]) -> Bytes {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = e.write_all(body);
    Bytes::from(e.finish().unwrap_or_default())
}

/// Plain TCP with Nagle off and a bounded connect; TLS, when used, wraps it.
fn tcp_connector(timeout: Duration) -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(timeout));
    // Let `https://` URIs through: the TLS connector around it handles them.
    connector.enforce_http(false);
    connector
}

/// HTTP/1.1 POSTs of `application/x-protobuf` with hyper's pooled client.
#[derive(Clone)]
pub struct HttpClient {
    client: HyperClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
    metrics_url: http::Uri,
    logs_url: http::Uri,
    /// Beside the logs URL (`…/v1/logs` → `…/v1/traces`): only forwarded spans use it.
    traces_url: http::Uri,
    headers: http::HeaderMap,
    timeout: Duration,
    /// Send bodies gzip-compressed (`Content-Encoding: gzip`).
    gzip: bool,
}

impl HttpClient {
    pub fn new(
        metrics_url: &str,
        logs_url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        timeout: Duration,
        gzip: bool,
        tls: rustls::ClientConfig,
    ) -> anyhow::Result<Self> {
        let parse = |u: &str, key: &str| -> anyhow::Result<http::Uri> {
            let uri: http::Uri = u.parse().map_err(|e| anyhow::anyhow!("{key} {u:?}: {e}"))?;
            match uri.scheme_str() {
                Some("http" | "https") => Ok(uri),
                _ => anyhow::bail!("{key} {u:?}: must start with http:// or https://"),
            }
        };
        let metrics_url = parse(metrics_url, "export.metrics_endpoint")?;
        let logs_url = parse(logs_url, "export.logs_endpoint")?;
        let scheme = logs_url.scheme_str().unwrap_or("http");
        let authority = logs_url.authority().map_or("", |a| a.as_str());
        let traces = match logs_url.path().strip_suffix("/v1/logs") {
            Some(base) => format!("{scheme}://{authority}{base}/v1/traces"),
            None => format!("{scheme}://{authority}/v1/traces"),
        };
        let traces_url = parse(&traces, "export.logs_endpoint")?;
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| anyhow::anyhow!("export.headers: {k:?} is not a valid header name: {e}"))?;
            let val = http::HeaderValue::from_str(v)
                .map_err(|e| anyhow::anyhow!("export.headers.{k}: not a valid header value: {e}"))?;
            map.insert(name, val);
        }
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp_connector(timeout));
        let client = HyperClient::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(2)
            .build(connector);
        Ok(Self {
            client,
            metrics_url,
            logs_url,
            traces_url,
            headers: map,
            timeout,
            gzip,
        })
    }

    async fn send(&self, signal: Signal, body: Bytes, id: Option<&RequestId>) -> Result<Accepted, SendError> {
        let uri = match signal {
            Signal::Metrics => self.metrics_url.clone(),
            Signal::Logs => self.logs_url.clone(),
            Signal::Traces => self.traces_url.clone(),
        };
        let body = if self.gzip { gzip(&body) } else { body };
        let mut req = http::Request::builder()
            .method(http::Method::POST)
            .uri(uri.clone())
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .header(http::header::USER_AGENT, concat!("sonde/", env!("CARGO_PKG_VERSION")))
            .body(Full::new(body))
            .map_err(|e| SendError::fatal(format!("building request for {uri}: {e}")))?;
        req.headers_mut().extend(self.headers.clone());
        if let Some(id) = id
            && let Ok(p) = http::HeaderValue::from_str(&id.producer)
        {
            req.headers_mut().insert(PRODUCER_HEADER, p);
            req.headers_mut().insert(SEQ_HEADER, http::HeaderValue::from(id.seq));
        }
        if self.gzip {
            req.headers_mut()
                .insert(http::header::CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
        }
        let call = async {
            let resp = self.client.request(req).await.map_err(|e| {
                // Connect failures, resets, closed connections: all transient.
                let mut msg = format!("POST {uri}: {e}");
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(&format!(": {s}"));
                    src = s.source();
                }
                SendError::retryable(msg)
            })?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = Limited::new(resp.into_body(), 1 << 20)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| SendError::retryable(format!("POST {uri}: reading response: {e}")))?;
            if status.is_success() {
                let (rejected, message) = match signal {
                    Signal::Metrics => ExportMetricsServiceResponse::decode(body)
                        .ok()
                        .and_then(|r| r.partial_success)
                        .map(|p| (p.rejected_data_points.max(0) as u64, p.error_message)),
                    Signal::Logs => ExportLogsServiceResponse::decode(body)
                        .ok()
                        .and_then(|r| r.partial_success)
                        .map(|p| (p.rejected_log_records.max(0) as u64, p.error_message)),
                    Signal::Traces => ExportTraceServiceResponse::decode(body)
                        .ok()
                        .and_then(|r| r.partial_success)
                        .map(|p| (p.rejected_spans.max(0) as u64, p.error_message)),
                }
                .unwrap_or_default();
                return Ok(Accepted { rejected, message });
            }
            let retryable = matches!(status.as_u16(), 429 | 502 | 503 | 504);
            let detail = String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned();
            Err(SendError {
                retryable,
                msg: format!("POST {uri}: HTTP {status}: {detail}"),
                retry_after,
                refused: matches!(status.as_u16(), 401 | 403),
            })
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(SendError::retryable(format!(
                "POST {uri}: timed out after {:?}",
                self.timeout
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_grpc_codes_are_classified() {
        for c in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::Cancelled,
        ] {
            assert!(classify_status(Status::new(c, "x")).retryable, "{c:?}");
        }
        for c in [
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::Unimplemented,
            Code::Unknown,
        ] {
            assert!(!classify_status(Status::new(c, "x")).retryable, "{c:?}");
        }
    }

    #[test]
    fn export_client_rejects_bad_config() {
        let mut cfg = ExportConfig::default();
        assert!(Client::new(&cfg).is_err(), "no endpoint");
        cfg.endpoint = Some("http://127.0.0.1:4318".into());
        cfg.protocol = Protocol::HttpProtobuf;
        cfg.headers.insert("bad header".into(), "v".into());
        assert!(Client::new(&cfg).is_err());
    }
}
