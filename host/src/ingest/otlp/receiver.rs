//! The OTLP receivers themselves: gRPC (tonic, metrics kept as bytes) and
//! HTTP with protobuf or JSON bodies (axum), plain or over TLS
//! (`ingest.tls`, served through `crate::tls::TlsListener`), the bearer-token
//! check, refusals when the hub is full or (gateway) the export queue cannot
//! keep a request, dropping a re-sent request already taken (`dedup.rs`),
//! and gateway forwarding. What a
//! request becomes is the business of
//! the other files in `otlp/` (see the table in `otlp/mod.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;
use tonic::codec::CompressionEncoding;

use super::compression::BodyError;
use super::{events, wire};
use crate::export::client::Signal;
use crate::export::sequence::{PRODUCER_HEADER, RequestId, SEQ_HEADER};
use crate::ingest::dedup::Admit;
use crate::ingest::limits::Limits;
use crate::ingest::{Full, IngestHub, Report};
use crate::pipeline::{PipelineHandle, Refused};

/// What both receivers share.
#[derive(Clone)]
pub struct Receiver {
    pub hub: Arc<IngestHub>,
    /// Some in gateway mode.
    pub forward: Option<PipelineHandle>,
    /// Bearer tokens accepted; empty: no token needed. Holds `api.token` for
    /// receivers bound beyond loopback and `cluster.token` on a master.
    pub tokens: Vec<String>,
    /// Largest body taken, after decompression (`ingest.max_body_bytes`).
    pub max_body: usize,
    /// Names and attributes past these are cut and counted, not refused
    /// (why: `ingest/limits.rs`).
    pub limits: Limits,
}

/// Why a request was not taken.
enum Refusal {
    Unauthorized,
    Full(Full),
    /// The same request (producer, seq) is being taken by another call.
    Busy,
    /// Gateway mode: the export queue or spool could not keep it.
    Forward(Refused),
    /// The state store cannot write what a sonde's request would change.
    Store(String),
    /// A tap could not keep it (an agent's forwarder with a full queue).
    Room(String),
}

impl Receiver {
    fn authorized(&self, header: Option<&str>) -> bool {
        if self.tokens.is_empty() {
            return true;
        }
        header
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|g| self.tokens.iter().any(|t| g.trim() == t))
    }

    /// Forwards the request (gateway mode) and hands the reports to the hub
    /// (all of them or none), once per request identity: a repeat of one
    /// already taken is answered OK and dropped (`dedup.rs`).
    ///
    /// Forwarding comes first: once the export queue has it, it is kept. If
    /// the hub is then full the sender is told to retry and the retry is
    /// forwarded again, with the same identity, which the next sonde drops.
    ///
    /// Returns whether the request has an identity: then the caller answers
    /// only once what it changed is on disk ([`Receiver::settle`]).
    fn take(
        &self,
        auth: Option<&str>,
        id: Option<RequestId>,
        mut reports: Vec<Report>,
        skipped: usize,
        forward: Option<(Signal, Bytes, usize)>,
    ) -> Result<bool, Refusal> {
        let c = &self.hub.otlp;
        c.requests.fetch_add(1, Relaxed);
        if !self.authorized(auth) {
            c.rejected.fetch_add(1, Relaxed);
            c.unauthorized.fetch_add(1, Relaxed);
            return Err(Refusal::Unauthorized);
        }
        let tracked = id.is_some();
        if tracked && !self.hub.commits.healthy() {
            // What it would change could not be kept: its sender keeps it instead.
            return Err(Refusal::Store(self.hub.commits.refuse()));
        }
        // An agent that could not forward it refuses it now: the sender keeps it.
        self.hub.room().map_err(Refusal::Room)?;
        let ticket = match self.hub.dedup.admit(id.clone()) {
            // Answered once the first one's changes are on disk, like the first.
            Admit::Repeat => return Ok(true),
            Admit::Busy => return Err(Refusal::Busy),
            Admit::Untracked => None,
            Admit::New(t) => Some(t),
        };
        if let (Some(p), Some((signal, body, items))) = (&self.forward, forward) {
            p.forward(signal, body, items, id.clone()).map_err(Refusal::Forward)?;
        }
        let cut: u64 = reports.iter_mut().map(|r| self.limits.clip(r)).sum();
        // Rows of event tables are typed here; what does not fit is skipped, never refused.
        let refused = self.hub.type_tables(&mut reports, self.limits.attribute_value);
        for e in refused.iter().take(10) {
            tracing::debug!("OTLP row of an event table skipped: {e}");
        }
        let skipped = skipped + refused.len();
        match self.hub.submit_request(&reports, id.as_ref()) {
            Ok(n) => {
                c.truncated.fetch_add(cut, Relaxed);
                c.rows.fetch_add(n as u64, Relaxed)
            }
            Err(full) => {
                let rows: usize = reports.iter().map(Report::rows).sum();
                c.refused_rows.fetch_add(rows as u64, Relaxed);
                return Err(Refusal::Full(full));
            }
        };
        c.skipped_rows.fetch_add(skipped as u64, Relaxed);
        if let Some(t) = ticket {
            t.commit();
        }
        Ok(tracked)
    }

    /// Waits, for a request with an identity, until what it changed is on
    /// disk (`ingest/durable.rs`); a store that cannot write makes it a
    /// refusal the sender retries.
    async fn settle(&self, taken: Result<bool, Rejected>) -> Result<(), Rejected> {
        if taken? {
            self.hub
                .commits
                .wait()
                .await
                .map_err(|e| Rejected::Refused(Refusal::Store(e)))?;
        }
        Ok(())
    }
}

fn grpc_status(r: Refusal) -> tonic::Status {
    match r {
        Refusal::Unauthorized => {
            tonic::Status::unauthenticated("send authorization: Bearer <cluster.token or api.token>")
        }
        Refusal::Full(f) => tonic::Status::resource_exhausted(f.to_string()),
        Refusal::Busy => tonic::Status::unavailable(BUSY),
        Refusal::Forward(r) => tonic::Status::unavailable(format!("not kept, retry later: {r}")),
        Refusal::Store(why) | Refusal::Room(why) => tonic::Status::unavailable(why),
    }
}

fn grpc_rejected(r: Rejected) -> tonic::Status {
    match r {
        Rejected::Invalid(msg) => tonic::Status::invalid_argument(msg),
        Rejected::Refused(r) => grpc_status(r),
    }
}

const BUSY: &str = "this request (sonde-producer, sonde-seq) is being taken by another call: retry";

fn grpc_auth<T>(req: &tonic::Request<T>) -> Option<String> {
    req.metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The request's identity from its gRPC metadata; malformed: INVALID_ARGUMENT.
fn grpc_id<T>(req: &tonic::Request<T>) -> Result<Option<RequestId>, tonic::Status> {
    let m = req.metadata();
    RequestId::from_headers(
        m.get(PRODUCER_HEADER).map(|v| v.as_bytes()),
        m.get(SEQ_HEADER).map(|v| v.as_bytes()),
    )
    .map_err(tonic::Status::invalid_argument)
}

fn forward_body<M: Message>(r: &Receiver, signal: Signal, m: &M, items: usize) -> Option<(Signal, Bytes, usize)> {
    r.forward
        .as_ref()
        .map(|_| (signal, Bytes::from(m.encode_to_vec()), items))
}

impl Receiver {
    fn invalid(&self, e: impl std::fmt::Display) -> Rejected {
        self.hub.otlp.requests.fetch_add(1, Relaxed);
        self.hub.otlp.rejected.fetch_add(1, Relaxed);
        Rejected::Invalid(format!("not a valid OTLP protobuf request: {e}"))
    }

    /// A metrics request as received (gRPC or HTTP): read in place, taken,
    /// and forwarded as the same bytes.
    fn take_metrics(&self, auth: Option<&str>, id: Option<RequestId>, body: Bytes) -> Result<bool, Rejected> {
        let d = wire::metrics_reports(&body).map_err(|e| self.invalid(e))?;
        let fwd = self.forward.as_ref().map(|_| (Signal::Metrics, body, d.points));
        self.take(auth, id, d.reports, d.skipped, fwd)
            .map_err(Rejected::Refused)
    }

    /// A traces or logs request received over HTTP: decoded with prost,
    /// converted, taken, and forwarded as the same bytes.
    fn take_decoded<M: Message + Default>(
        &self,
        auth: Option<&str>,
        id: Option<RequestId>,
        body: Bytes,
        signal: Signal,
        convert: impl FnOnce(&M) -> (Vec<Report>, usize),
    ) -> Result<bool, Rejected> {
        let m = M::decode(body.clone()).map_err(|e| self.invalid(e))?;
        let (reports, items) = convert(&m);
        let fwd = self.forward.as_ref().map(|_| (signal, body, items));
        self.take(auth, id, reports, 0, fwd).map_err(Rejected::Refused)
    }
}

/// Why a request was not taken: it is not OTLP, or it was refused.
enum Rejected {
    Invalid(String),
    Refused(Refusal),
}

/// gRPC metrics export with the body kept as bytes (tonic's generated service
/// would decode it into a prost tree first).
#[derive(Clone)]
struct RawMetricsExport {
    receiver: Receiver,
    max_body: usize,
}

impl tonic::server::UnaryService<Bytes> for RawMetricsExport {
    type Response = ExportMetricsServiceResponse;
    type Future = tonic::codegen::BoxFuture<tonic::Response<Self::Response>, tonic::Status>;

    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let receiver = self.receiver.clone();
        Box::pin(async move {
            let auth = grpc_auth(&req);
            let id = grpc_id(&req).inspect_err(|_| {
                let _ = receiver.invalid("");
            })?;
            let taken = receiver.take_metrics(auth.as_deref(), id, req.into_inner());
            match receiver.settle(taken).await {
                Ok(()) => Ok(tonic::Response::new(ExportMetricsServiceResponse::default())),
                Err(Rejected::Invalid(msg)) => Err(tonic::Status::invalid_argument(msg)),
                Err(Rejected::Refused(r)) => Err(grpc_status(r)),
            }
        })
    }
}

impl tonic::codegen::Service<tonic::codegen::http::Request<axum::body::Body>> for RawMetricsExport {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::codegen::http::Request<axum::body::Body>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(RawRequestCodec)
                .max_decoding_message_size(svc.max_body)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd);
            Ok(grpc.unary(svc, req).await)
        })
    }
}

/// Server side of a unary call: the request stays bytes, the response is prost.
#[derive(Clone, Copy, Default)]
struct RawRequestCodec;
struct BytesDecoder;
struct ResponseEncoder;

impl tonic::codec::Codec for RawRequestCodec {
    type Encode = ExportMetricsServiceResponse;
    type Decode = Bytes;
    type Encoder = ResponseEncoder;
    type Decoder = BytesDecoder;
    fn encoder(&mut self) -> ResponseEncoder {
        ResponseEncoder
    }
    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

impl tonic::codec::Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

impl tonic::codec::Encoder for ResponseEncoder {
    type Item = ExportMetricsServiceResponse;
    type Error = tonic::Status;
    fn encode(&mut self, item: Self::Item, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(format!("encoding the response: {e}")))
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let auth = grpc_auth(&req);
        let id = grpc_id(&req).inspect_err(|_| {
            let _ = self.invalid("");
        })?;
        let m = req.into_inner();
        let reports = events::trace_reports(&m);
        let spans = reports
            .iter()
            .map(|r| r.timings.len() + r.tables.iter().map(|t| t.rows.len()).sum::<usize>())
            .sum();
        let fwd = forward_body(self, Signal::Traces, &m, spans);
        let taken = self
            .take(auth.as_deref(), id, reports, 0, fwd)
            .map_err(Rejected::Refused);
        self.settle(taken).await.map_err(grpc_rejected)?;
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Receiver {
    async fn export(
        &self,
        req: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let auth = grpc_auth(&req);
        let id = grpc_id(&req).inspect_err(|_| {
            let _ = self.invalid("");
        })?;
        let m = req.into_inner();
        let reports = events::log_reports(&m);
        let fwd = forward_body(self, Signal::Logs, &m, crate::export::otlp::log_record_count(&m));
        let taken = self
            .take(auth.as_deref(), id, reports, 0, fwd)
            .map_err(Rejected::Refused);
        self.settle(taken).await.map_err(grpc_rejected)?;
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

/// The gRPC receiver's routes (served over HTTP/2 by axum).
pub fn grpc_router(r: Receiver, max_body: usize) -> axum::Router {
    axum::Router::new()
        .route_service(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            RawMetricsExport {
                receiver: r.clone(),
                max_body,
            },
        )
        .route_service(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            TraceServiceServer::new(r.clone())
                .max_decoding_message_size(max_body)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd),
        )
        .route_service(
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            LogsServiceServer::new(r)
                .max_decoding_message_size(max_body)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd),
        )
}

/// The HTTP/protobuf receiver's routes.
pub fn http_router(r: Receiver, max_body: usize) -> axum::Router {
    axum::Router::new()
        .route("/v1/metrics", post(http_metrics))
        .route("/v1/traces", post(http_traces))
        .route("/v1/logs", post(http_logs))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(r)
}

/// The two encodings of OTLP over HTTP; an answer uses the request's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// An OTLP/HTTP failure: a `google.rpc.Status` (code, message) in the
/// request's encoding, as the OTLP spec asks, so SDKs can log the message.
fn http_error(encoding: Encoding, status: StatusCode, msg: impl std::fmt::Display) -> Response {
    let msg = msg.to_string();
    // The gRPC code that means the same as the HTTP status.
    let code: i32 = match status {
        StatusCode::UNAUTHORIZED => 16,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => 8,
        StatusCode::SERVICE_UNAVAILABLE => 14,
        _ => 3,
    };
    let body = match encoding {
        Encoding::Json => serde_json::json!({ "code": code, "message": msg })
            .to_string()
            .into_bytes(),
        Encoding::Protobuf => {
            let mut b = Vec::with_capacity(msg.len() + 8);
            prost::encoding::int32::encode(1, &code, &mut b);
            prost::encoding::string::encode(2, &msg, &mut b);
            b
        }
    };
    (status, [(header::CONTENT_TYPE, encoding.content_type())], body).into_response()
}

type BodyResult = Result<Bytes, axum::extract::rejection::BytesRejection>;

/// Checks the content type and body (OTLP/JSON is rewritten as protobuf
/// here), hands it to `take`; answers the OTLP way, in the request's
/// encoding, once what a sonde's request changed is on disk.
async fn http_export<Resp: Message + Default>(
    r: &Receiver,
    signal: Signal,
    headers: &HeaderMap,
    body: BodyResult,
    take: impl FnOnce(Option<&str>, Option<RequestId>, Bytes) -> Result<bool, Rejected>,
) -> Response {
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let encoding = if ctype.starts_with("application/json") {
        Encoding::Json
    } else {
        Encoding::Protobuf
    };
    let bad = |status: StatusCode, msg: String| {
        r.hub.otlp.requests.fetch_add(1, Relaxed);
        r.hub.otlp.rejected.fetch_add(1, Relaxed);
        http_error(encoding, status, msg)
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return bad(e.status(), format!("request body: {}", e.body_text())),
    };
    if encoding == Encoding::Protobuf && !ctype.starts_with("application/x-protobuf") {
        return bad(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-type {ctype:?}: send application/x-protobuf or application/json"),
        );
    }
    let compressed = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
    let body = match super::compression::decode(compressed, body, r.max_body) {
        Ok(b) => b,
        Err(BodyError::TooLarge { limit }) => {
            return bad(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body decompresses past ingest.max_body_bytes ({limit} bytes)"),
            );
        }
        Err(BodyError::Unsupported(m)) => return bad(StatusCode::UNSUPPORTED_MEDIA_TYPE, m),
        Err(BodyError::Corrupt(m)) => return bad(StatusCode::BAD_REQUEST, format!("compressed body: {m}")),
    };
    let body = match encoding {
        Encoding::Protobuf => body,
        Encoding::Json => match super::json::to_protobuf(signal, &body) {
            Ok(b) => Bytes::from(b),
            Err(m) => return bad(StatusCode::BAD_REQUEST, m),
        },
    };
    let id = match RequestId::from_headers(
        headers.get(PRODUCER_HEADER).map(|v| v.as_bytes()),
        headers.get(SEQ_HEADER).map(|v| v.as_bytes()),
    ) {
        Ok(id) => id,
        Err(m) => return bad(StatusCode::BAD_REQUEST, m),
    };
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let retry_later = |msg: String| {
        let mut resp = http_error(encoding, StatusCode::SERVICE_UNAVAILABLE, msg);
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        resp
    };
    let taken = take(auth, id, body);
    match r.settle(taken).await {
        Ok(()) => {
            let ok = match encoding {
                // An empty response: no partial success to report.
                Encoding::Json => b"{}".to_vec(),
                Encoding::Protobuf => Resp::default().encode_to_vec(),
            };
            (StatusCode::OK, [(header::CONTENT_TYPE, encoding.content_type())], ok).into_response()
        }
        Err(Rejected::Invalid(msg)) => http_error(encoding, StatusCode::BAD_REQUEST, msg),
        Err(Rejected::Refused(Refusal::Unauthorized)) => http_error(
            encoding,
            StatusCode::UNAUTHORIZED,
            "send Authorization: Bearer <cluster.token or api.token>",
        ),
        Err(Rejected::Refused(Refusal::Busy)) => retry_later(BUSY.to_string()),
        Err(Rejected::Refused(Refusal::Forward(r))) => retry_later(format!("not kept, retry later: {r}")),
        Err(Rejected::Refused(Refusal::Store(why) | Refusal::Room(why))) => retry_later(why),
        Err(Rejected::Refused(Refusal::Full(f))) => {
            let mut resp = http_error(encoding, StatusCode::TOO_MANY_REQUESTS, f);
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            resp
        }
    }
}

async fn http_metrics(State(r): State<Receiver>, headers: HeaderMap, body: BodyResult) -> Response {
    http_export::<ExportMetricsServiceResponse>(&r, Signal::Metrics, &headers, body, |auth, id, body| {
        r.take_metrics(auth, id, body)
    })
    .await
}

async fn http_traces(State(r): State<Receiver>, headers: HeaderMap, body: BodyResult) -> Response {
    http_export::<ExportTraceServiceResponse>(&r, Signal::Traces, &headers, body, |auth, id, body| {
        r.take_decoded(auth, id, body, Signal::Traces, |m: &ExportTraceServiceRequest| {
            let reports = events::trace_reports(m);
            let spans = reports
                .iter()
                .map(|r| r.timings.len() + r.tables.iter().map(|t| t.rows.len()).sum::<usize>())
                .sum();
            (reports, spans)
        })
    })
    .await
}

async fn http_logs(State(r): State<Receiver>, headers: HeaderMap, body: BodyResult) -> Response {
    http_export::<ExportLogsServiceResponse>(&r, Signal::Logs, &headers, body, |auth, id, body| {
        r.take_decoded(auth, id, body, Signal::Logs, |m: &ExportLogsServiceRequest| {
            (events::log_reports(m), crate::export::otlp::log_record_count(m))
        })
    })
    .await
}

/// A bound receiver, for the banner and the status API.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Bound {
    pub protocol: &'static str,
    pub address: Option<SocketAddr>,
    /// Why it is not listening (port in use, switched off).
    pub error: Option<String>,
}

/// TLS for a receiver: the server configuration loaded from `ingest.tls`,
/// and where refused handshakes are counted.
pub struct ServeTls {
    pub config: Arc<rustls::ServerConfig>,
    pub refused: Arc<std::sync::atomic::AtomicU64>,
}

/// Binds and serves one receiver until `stop`, over TLS when `tls` is given.
/// A bind failure is reported, not fatal: sampling and the plugins go on
/// without this receiver.
pub async fn serve(
    protocol: &'static str,
    listen: &str,
    router: axum::Router,
    tls: Option<ServeTls>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Bound {
    match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => {
            let address = l.local_addr().ok();
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let what = match protocol {
                "gRPC" => "OTLP gRPC receiver",
                _ => "OTLP HTTP receiver",
            };
            tokio::spawn(async move {
                let r = match tls {
                    None => axum::serve(l, router).with_graceful_shutdown(stopped).await,
                    Some(t) => match crate::tls::TlsListener::new(l, t.config, t.refused, what) {
                        Ok(l) => axum::serve(l, router).with_graceful_shutdown(stopped).await,
                        Err(e) => Err(e),
                    },
                };
                if let Err(e) = r {
                    tracing::warn!("{what} stopped: {e}");
                }
            });
            Bound {
                protocol,
                address,
                error: None,
            }
        }
        Err(e) => {
            let error = format!("cannot listen on {listen}: {e}");
            tracing::warn!("OTLP {protocol} receiver off: {error}");
            Bound {
                protocol,
                address: None,
                error: Some(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::Timing;
    use crate::ingest::otlp::{metrics_reports, origin, trace_reports};
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::metrics::v1::{
        Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        }
    }

    fn resource() -> Option<Resource> {
        Some(Resource {
            attributes: vec![
                kv("service.name", any_value::Value::StringValue("train".into())),
                kv("host.name", any_value::Value::StringValue("n1".into())),
                kv("sonde.rank", any_value::Value::IntValue(0)),
                kv("sonde.local_rank", any_value::Value::StringValue("0".into())),
            ],
            ..Default::default()
        })
    }

    fn gauge(name: &str, points: &[(u64, f64)]) -> Metric {
        Metric {
            name: name.into(),
            unit: "1".into(),
            data: Some(metric::Data::Gauge(Gauge {
                data_points: points
                    .iter()
                    .map(|&(t, v)| NumberDataPoint {
                        time_unix_nano: t,
                        value: Some(number_data_point::Value::AsDouble(v)),
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        }
    }

    #[test]
    fn the_batch_index_metric_becomes_progress_and_the_rest_points() {
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: resource(),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        gauge("sonde.batch_idx", &[(20, 4.0), (10, 3.0)]),
                        gauge("samples_per_second", &[(15, 800.0)]),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let (reports, skipped) = metrics_reports(&req);
        assert_eq!(skipped, 0);
        let r = &reports[0];
        assert_eq!((r.origin.job.as_str(), r.origin.node.as_str()), ("train", "n1"));
        assert_eq!((r.origin.rank, r.origin.local_rank, r.origin.index), (0, 0, -1));
        let idx: Vec<(u64, u64)> = r.progress.iter().map(|p| (p.time, p.value)).collect();
        assert_eq!(idx, vec![(10, 3), (20, 4)], "in time order");
        assert_eq!(r.points.len(), 1);
        assert_eq!(r.series[r.points[0].series as usize].metric, "samples_per_second");
    }

    #[test]
    fn spans_become_timings_with_the_batch_index_attribute() {
        let span = |name: &str, attrs: Vec<KeyValue>| Span {
            name: name.into(),
            start_time_unix_nano: 100,
            end_time_unix_nano: 250,
            attributes: attrs,
            ..Default::default()
        };
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: resource(),
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        span(
                            "train_batch",
                            vec![kv("sonde.batch_idx", any_value::Value::IntValue(7))],
                        ),
                        span("dataloader_next", vec![]),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let r = &trace_reports(&req)[0];
        let progress: Vec<(u64, u64)> = r.progress.iter().map(|p| (p.time, p.value)).collect();
        assert_eq!(
            progress,
            vec![(100, 7)],
            "the span's batch index is current from its start"
        );
        assert_eq!(
            r.timings,
            vec![
                Timing {
                    name: "train_batch".into(),
                    start: 100,
                    end: 250,
                    step: 7
                },
                Timing {
                    name: "dataloader_next".into(),
                    start: 100,
                    end: 250,
                    step: -1
                },
            ]
        );
    }

    #[test]
    fn a_resource_without_sonde_attributes_has_unknown_ranks() {
        let o = origin(&[kv("sonde.job", any_value::Value::StringValue("j".into()))]);
        assert_eq!(o.job, "j");
        assert_eq!((o.rank, o.local_rank), (-1, -1));
        let o = origin(&[kv("sonde.rank", any_value::Value::IntValue(-3))]);
        assert_eq!(o.rank, -1, "negative ranks are unknown");
    }

    fn receiver() -> Receiver {
        Receiver {
            hub: IngestHub::new(10_000, Arc::new(|_: &crate::plugin::bindings::types::EventBatch| 1)),
            forward: None,
            tokens: Vec::new(),
            max_body: 1 << 20,
            limits: Limits::default(),
        }
    }

    fn metrics_request() -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: resource(),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![gauge("util", &[(1, 0.5), (2, 0.6), (3, 0.7)])],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    async fn call(
        router: axum::Router,
        req: axum::http::Request<axum::body::Body>,
    ) -> axum::http::Response<axum::body::Body> {
        use tonic::codegen::Service;
        let mut router = router;
        router.call(req).await.expect("routers are infallible")
    }

    fn grpc_frame(body: &[u8]) -> axum::body::Body {
        let mut framed = vec![0u8];
        framed.extend((body.len() as u32).to_be_bytes());
        framed.extend_from_slice(body);
        axum::body::Body::from(framed)
    }

    /// The gRPC status of a unary answer: in the headers (trailers-only) or the trailers.
    async fn grpc_status_of(resp: axum::http::Response<axum::body::Body>) -> String {
        use http_body_util::BodyExt;
        if let Some(s) = resp.headers().get("grpc-status") {
            return s.to_str().unwrap().to_string();
        }
        let collected = resp.into_body().collect().await.unwrap();
        let trailers = collected.trailers().expect("a grpc-status trailer").clone();
        trailers["grpc-status"].to_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn grpc_metrics_are_read_in_place_and_garbage_is_invalid_argument() {
        let r = receiver();
        let router = grpc_router(r.clone(), 1 << 20);
        let post = |body: axum::body::Body| {
            axum::http::Request::post("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(body)
                .unwrap()
        };
        let ok = call(router.clone(), post(grpc_frame(&metrics_request().encode_to_vec()))).await;
        assert_eq!(grpc_status_of(ok).await, "0");
        assert_eq!(r.hub.stats().waiting, 3, "three points taken");
        let bad = call(router, post(grpc_frame(&[0x0a, 0x7f, 0x01]))).await;
        assert_eq!(grpc_status_of(bad).await, "3", "INVALID_ARGUMENT");
        let st = r.hub.stats();
        assert_eq!((st.otlp.requests, st.otlp.rejected, st.waiting), (2, 1, 3));
    }

    #[tokio::test]
    async fn overlong_names_and_attributes_are_cut_and_counted_not_refused() {
        let r = receiver();
        let mut req = metrics_request();
        let rm = &mut req.resource_metrics[0];
        let attrs = &mut rm.resource.as_mut().unwrap().attributes;
        attrs.push(kv("sonde.job", any_value::Value::StringValue("j".repeat(100_000))));
        let m = &mut rm.scope_metrics[0].metrics[0];
        m.name = "m".repeat(300);
        let many: Vec<KeyValue> = (0..70)
            .map(|i| kv(&format!("k{i}"), any_value::Value::StringValue("v".repeat(5000))))
            .collect();
        let m = &mut rm.scope_metrics[0].metrics[0];
        if let Some(metric::Data::Gauge(g)) = m.data.as_mut() {
            g.data_points[0].attributes = many;
        }
        let router = grpc_router(r.clone(), 1 << 20);
        let post = axum::http::Request::post("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(grpc_frame(&req.encode_to_vec()))
            .unwrap();
        assert_eq!(
            grpc_status_of(call(router, post).await).await,
            "0",
            "taken, not refused"
        );
        let st = r.hub.stats();
        assert_eq!(st.waiting, 3, "every point kept");
        // The job once, the metric name of both series (the first point's,
        // with the attributes, and the other two's), 6 attributes past the 64
        // and the 64 values of 5000 bytes.
        assert_eq!(st.otlp.truncated, 1 + 2 + 6 + 64, "{st:?}");
        assert_eq!(st.otlp.rejected, 0);
    }

    #[tokio::test]
    async fn http_metrics_answer_the_otlp_way_for_good_and_bad_bodies() {
        let r = receiver();
        let router = http_router(r.clone(), 1 << 20);
        let post = |ctype: &str, body: Vec<u8>| {
            axum::http::Request::post("/v1/metrics")
                .header("content-type", ctype)
                .body(axum::body::Body::from(body))
                .unwrap()
        };
        let ok = call(
            router.clone(),
            post("application/x-protobuf", metrics_request().encode_to_vec()),
        )
        .await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(r.hub.stats().waiting, 3);
        let bad = call(router.clone(), post("application/x-protobuf", vec![0x0a, 0x7f, 0x01])).await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        let json = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":[
            {"timeUnixNano":"1700000000000000000","asDouble":1.5}]}}]}]}]}"#;
        let ok = call(router.clone(), post("application/json", json.as_bytes().to_vec())).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()["content-type"], "application/json");
        assert_eq!(r.hub.stats().waiting, 4, "the JSON point taken too");
        let bad_json = call(
            router.clone(),
            post("application/json", br#"{"resourceMetrics":7}"#.to_vec()),
        )
        .await;
        assert_eq!(bad_json.status(), StatusCode::BAD_REQUEST);
        let status: serde_json::Value = serde_json::from_slice(
            &http_body_util::BodyExt::collect(bad_json.into_body())
                .await
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        assert_eq!(status["code"], 3, "{status}");
        assert!(
            status["message"].as_str().unwrap().starts_with("resourceMetrics:"),
            "{status}"
        );
        let other = call(router.clone(), post("text/plain", b"hi".to_vec())).await;
        assert_eq!(other.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let logs = axum::http::Request::post("/v1/logs")
            .header("content-type", "application/x-protobuf")
            .body(axum::body::Body::from(vec![0xff]))
            .unwrap();
        assert_eq!(call(router, logs).await.status(), StatusCode::BAD_REQUEST);
        let st = r.hub.stats();
        assert_eq!((st.otlp.requests, st.otlp.rejected, st.waiting), (6, 4, 4));
    }
}
