//! Test doubles: fake OTLP collectors on 127.0.0.1 (gRPC via the generated
//! tonic servers, HTTP/protobuf via a tiny HTTP/1.1 server on a TcpListener)
//! that record what arrived and can be told to fail, reject or stall.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use parking_lot::Mutex;
use prost::Message;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::{Code, Status};

use super::otlp::{log_record_count, metric_point_count};

/// What one request looked like on the wire.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub path: String,
    /// Lower-case header names (HTTP headers or gRPC metadata).
    pub headers: BTreeMap<String, String>,
}

/// What the fake collector received and how it behaves.
#[derive(Default)]
pub struct FakeState {
    pub metrics: Mutex<Vec<ExportMetricsServiceRequest>>,
    pub logs: Mutex<Vec<ExportLogsServiceRequest>>,
    pub seen: Mutex<Vec<Seen>>,
    /// Every request, answered or failed.
    pub attempts: AtomicUsize,
    /// Fail this many more requests (with `fail_grpc` / `fail_http`).
    pub fail_remaining: AtomicUsize,
    pub fail_grpc: Mutex<Option<Code>>,
    pub fail_http: AtomicUsize,
    /// Wait this long before answering.
    pub delay_ms: AtomicU64,
    /// Report this many items rejected (partial success) on each accepted request.
    pub reject: AtomicI64,
}

impl FakeState {
    pub fn points(&self) -> usize {
        self.metrics.lock().iter().map(metric_point_count).sum()
    }
    pub fn records(&self) -> usize {
        self.logs.lock().iter().map(log_record_count).sum()
    }
    /// Fails the next `n` requests: gRPC with `code`, HTTP with `http_status`.
    pub fn fail_next(&self, n: usize, code: Code, http_status: u16) {
        *self.fail_grpc.lock() = Some(code);
        self.fail_http.store(http_status as usize, Ordering::SeqCst);
        self.fail_remaining.store(n, Ordering::SeqCst);
    }
    fn take_failure(&self) -> bool {
        self.fail_remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
    /// Waits until `f` holds (polling), up to `timeout`.
    pub async fn wait_for(&self, timeout: Duration, f: impl Fn(&FakeState) -> bool) -> bool {
        let end = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < end {
            if f(self) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        f(self)
    }
}

/// A running fake collector; stops when dropped.
pub struct FakeCollector {
    pub addr: SocketAddr,
    pub state: Arc<FakeState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeCollector {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An OTLP/gRPC collector (metrics and logs services) on 127.0.0.1:0.
    pub async fn grpc() -> FakeCollector {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState::default());
        let svc = Both {
            metrics: MetricsServiceServer::new(Fake(state.clone())),
            logs: LogsServiceServer::new(Fake(state.clone())),
        };
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(svc, incoming, std::future::pending::<()>())
                .await;
        });
        FakeCollector { addr, state, task }
    }

    /// An OTLP/HTTP (protobuf) collector on 127.0.0.1:0: /v1/metrics, /v1/logs
    /// and anything ending in "metrics" or "logs".
    pub async fn http() -> FakeCollector {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState::default());
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                conns.spawn(async move {
                    let _ = http_conn(sock, st).await;
                });
            }
        });
        FakeCollector { addr, state, task }
    }
}

/// A free port with nothing listening on it (bound, then released).
pub async fn dead_endpoint() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

struct Fake(Arc<FakeState>);

impl Fake {
    async fn gate<T>(&self, req: &tonic::Request<T>, path: &str) -> Result<(), Status> {
        let st = &self.0;
        st.attempts.fetch_add(1, Ordering::SeqCst);
        let headers = req
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        st.seen.lock().push(Seen {
            path: path.into(),
            headers,
        });
        let d = st.delay_ms.load(Ordering::SeqCst);
        if d > 0 {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        if st.take_failure() {
            let code = st.fail_grpc.lock().unwrap_or(Code::Unavailable);
            return Err(Status::new(code, "fake collector says no"));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl MetricsService for Fake {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, Status> {
        self.gate(&req, "metrics").await?;
        self.0.metrics.lock().push(req.into_inner());
        let rejected = self.0.reject.load(Ordering::SeqCst);
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: (rejected > 0).then(|| ExportMetricsPartialSuccess {
                rejected_data_points: rejected,
                error_message: "some rejected".into(),
            }),
        }))
    }
}

#[tonic::async_trait]
impl LogsService for Fake {
    async fn export(
        &self,
        req: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, Status> {
        self.gate(&req, "logs").await?;
        self.0.logs.lock().push(req.into_inner());
        let rejected = self.0.reject.load(Ordering::SeqCst);
        Ok(tonic::Response::new(ExportLogsServiceResponse {
            partial_success: (rejected > 0).then(|| ExportLogsPartialSuccess {
                rejected_log_records: rejected,
                error_message: "some rejected".into(),
            }),
        }))
    }
}

/// Routes by path to the metrics or the logs service (tonic's Router needs a feature we don't build).
#[derive(Clone)]
struct Both {
    metrics: MetricsServiceServer<Fake>,
    logs: LogsServiceServer<Fake>,
}

impl Service<http::Request<tonic::body::Body>> for Both {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        if req.uri().path().starts_with("/opentelemetry.proto.collector.logs.") {
            Box::pin(self.logs.call(req))
        } else {
            Box::pin(self.metrics.call(req))
        }
    }
}

/// One HTTP/1.1 connection: keep-alive, Content-Length bodies only.
async fn http_conn(sock: tokio::net::TcpStream, st: Arc<FakeState>) -> std::io::Result<()> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (_method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).await? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await?;
        st.attempts.fetch_add(1, Ordering::SeqCst);
        st.seen.lock().push(Seen {
            path: path.clone(),
            headers,
        });
        let d = st.delay_ms.load(Ordering::SeqCst);
        if d > 0 {
            tokio::time::sleep(Duration::from_millis(d)).await;
        }
        let (status, resp): (u16, Vec<u8>) = if st.take_failure() {
            (
                st.fail_http.load(Ordering::SeqCst) as u16,
                b"fake collector says no".to_vec(),
            )
        } else if path.ends_with("metrics") {
            match ExportMetricsServiceRequest::decode(body.as_slice()) {
                Ok(req) => {
                    st.metrics.lock().push(req);
                    let rejected = st.reject.load(Ordering::SeqCst);
                    let resp = ExportMetricsServiceResponse {
                        partial_success: (rejected > 0).then(|| ExportMetricsPartialSuccess {
                            rejected_data_points: rejected,
                            error_message: "some rejected".into(),
                        }),
                    };
                    (200, resp.encode_to_vec())
                }
                Err(e) => (400, e.to_string().into_bytes()),
            }
        } else if path.ends_with("logs") {
            match ExportLogsServiceRequest::decode(body.as_slice()) {
                Ok(req) => {
                    st.logs.lock().push(req);
                    (200, Vec::new())
                }
                Err(e) => (400, e.to_string().into_bytes()),
            }
        } else {
            (404, b"no such path".to_vec())
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            resp.len()
        );
        w.write_all(head.as_bytes()).await?;
        w.write_all(&resp).await?;
        w.flush().await?;
    }
}
