//! A TLS listener for `axum::serve`: TCP connections are accepted here and
//! their handshakes run in tasks of their own, so one slow or silent client
//! never holds up the next; only finished handshakes reach the server.
//!
//! ```text
//!  TcpListener ─► accept ─► spawn(handshake, 10 s bound) ─► channel ─► axum::serve
//!                                   └─ failed: counted in `refused`, logged once a minute
//! ```
//! A refused handshake (no client certificate under mTLS, one from another
//! CA, a plain-HTTP client on a TLS port) costs the server one task and is
//! never an error of the listener itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in flight at most; past it new connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// Serves TLS on a bound TCP listener (see the module docs).
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp`; `what` names the listener in logs ("OTLP
    /// gRPC receiver"), `refused` counts failed handshakes. Call inside the
    /// runtime; accepting stops once the listener is dropped.
    pub fn new(
        tcp: TcpListener,
        config: Arc<ServerConfig>,
        refused: Arc<AtomicU64>,
        what: &'static str,
    ) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(tcp, TlsAcceptor::from(config), tx, refused, what));
        Ok(TlsListener { ready, local })
    }
}

async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    refused: Arc<AtomicU64>,
    what: &'static str,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let last_warn: Arc<Mutex<Option<Instant>>> = Arc::default();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = tokio::select! {
            r = tcp.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::debug!("{what}: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = tx.closed() => return,
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, tx, refused, last_warn) = (acceptor.clone(), tx.clone(), refused.clone(), last_warn.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let reason = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = tx.send((tls, peer)).await;
                    return;
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no handshake within {HANDSHAKE_TIMEOUT:?}"),
            };
            refused.fetch_add(1, Ordering::Relaxed);
            let mut last = last_warn.lock();
            if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                *last = Some(Instant::now());
                tracing::warn!(
                    "{what}: TLS handshake with {peer} refused: {reason} (counted; further refusals are logged at debug for a minute)"
                );
            } else {
                tracing::debug!("{what}: TLS handshake with {peer} refused: {reason}");
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop only ends once this listener is gone; wait for shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
