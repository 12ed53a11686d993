//! A TCP proxy between a sender and a receiver that can hold back the
//! receiver's answers: what a slow network, or a receiver slower than the
//! sender's timeout, looks like to the sender. The bytes towards the receiver
//! always flow, so it takes every request; its answers wait in the proxy
//! until [`HoldProxy::hold`] is switched off, then arrive late, in order.
//!
//! ```text
//!  sender ──► proxy (port) ──► receiver (target)     requests: always through
//!  sender ◄── proxy ◄─────────  receiver              answers: held while hold is on
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub struct HoldProxy {
    pub port: u16,
    hold: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// Chunks of answers that had to wait.
    held: Arc<AtomicU64>,
}

impl HoldProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:target`.
    pub fn start(target: u16) -> HoldProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (hold, stop, held) = (Arc::default(), Arc::new(AtomicBool::new(false)), Arc::default());
        let p = HoldProxy { port, hold, stop, held };
        let (hold, stop, held) = (p.hold.clone(), p.stop.clone(), p.held.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue; // the receiver is down: the sender sees the connection close
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pipe(client, server, None, None));
                let (hold, held) = (hold.clone(), held.clone());
                std::thread::spawn(move || pipe(s2, c2, Some(hold), Some(held)));
            }
        });
        p
    }

    /// Holds the receiver's answers back (true) or lets them through (false).
    pub fn hold(&self, on: bool) {
        self.hold.store(on, Ordering::Release);
    }

    /// Chunks of answers that waited because of `hold`.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

impl Drop for HoldProxy {
    fn drop(&mut self) {
        self.hold(false);
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop so that it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` into `to` until either end closes; each chunk waits while `hold` is on.
fn pipe(mut from: TcpStream, mut to: TcpStream, hold: Option<Arc<AtomicBool>>, held: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(h) = &hold
            && h.load(Ordering::Acquire)
        {
            if let Some(c) = &held {
                c.fetch_add(1, Ordering::Relaxed);
            }
            while h.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}
