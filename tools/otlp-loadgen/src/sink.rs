//! `--sink ADDR`: an OTLP/gRPC blackhole. It answers every unary export (any
//! service: metrics, logs, traces) with an empty success and throws the body
//! away unread, so a benchmark's exporter can be measured without a collector
//! decoding on the same cores. It counts requests and bytes, printed as one
//! JSON line when it is stopped (SIGTERM or Ctrl-C).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Buf;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::{Request, Response};
use tonic::codegen::{BoxFuture, Service};
use tonic::{Status, server::Grpc, server::UnaryService};

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    bytes: AtomicU64,
}

#[derive(Clone)]
struct Sink(Arc<Counts>);

/// Reads the body's length only; the answer is an empty message, which is a
/// valid Export*ServiceResponse of every signal.
#[derive(Clone, Copy, Default)]
struct DiscardCodec;
struct LengthDecoder;
struct EmptyEncoder;

impl Codec for DiscardCodec {
    type Encode = ();
    type Decode = usize;
    type Encoder = EmptyEncoder;
    type Decoder = LengthDecoder;
    fn encoder(&mut self) -> EmptyEncoder {
        EmptyEncoder
    }
    fn decoder(&mut self) -> LengthDecoder {
        LengthDecoder
    }
}

impl Decoder for LengthDecoder {
    type Item = usize;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<usize>, Status> {
        let n = src.remaining();
        src.advance(n);
        Ok(Some(n))
    }
}

impl Encoder for EmptyEncoder {
    type Item = ();
    type Error = Status;
    fn encode(&mut self, _: (), _: &mut EncodeBuf<'_>) -> Result<(), Status> {
        Ok(())
    }
}

impl UnaryService<usize> for Sink {
    type Response = ();
    type Future = std::future::Ready<Result<tonic::Response<()>, Status>>;
    fn call(&mut self, req: tonic::Request<usize>) -> Self::Future {
        self.0.requests.fetch_add(1, Ordering::Relaxed);
        self.0.bytes.fetch_add(*req.get_ref() as u64, Ordering::Relaxed);
        std::future::ready(Ok(tonic::Response::new(())))
    }
}

impl Service<Request<Body>> for Sink {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            let mut grpc = Grpc::new(DiscardCodec).max_decoding_message_size(256 << 20);
            Ok(grpc.unary(svc, req).await)
        })
    }
}

pub async fn run(addr: SocketAddr) {
    let counts = Arc::new(Counts::default());
    let stop = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    let served = tonic::transport::Server::builder()
        .serve_with_shutdown(addr, Sink(counts.clone()), stop)
        .await;
    if let Err(e) = served {
        eprintln!("otlp-loadgen: sink on {addr}: {e}");
        std::process::exit(1);
    }
    println!(
        "{}",
        serde_json::json!({
            "requests": counts.requests.load(Ordering::Relaxed),
            "bytes": counts.bytes.load(Ordering::Relaxed),
        })
    );
}
