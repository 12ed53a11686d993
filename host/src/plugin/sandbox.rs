//! The WASI side of the sandbox: what a plugin may touch outside its memory.
//! Everything is denied unless the plugin's `grants` in the config allow it;
//! stdout and stderr go to the host's log, tagged with the plugin's name.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, Result};
use parking_lot::Mutex;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use super::config::Grants;

/// The last lines a plugin wrote to stderr: a panic message explains a trap
/// far better than the trap itself (`unreachable executed`).
pub type LastLines = Arc<Mutex<VecDeque<String>>>;

/// Builds the WASI context of one plugin instance from its grants.
pub fn wasi_ctx(plugin: &str, grants: &Grants, last_stderr: LastLines) -> Result<WasiCtx> {
    let mut b = WasiCtxBuilder::new();
    b.stdout(LogStream {
        plugin: plugin.to_string(),
        stream: "stdout",
        last: None,
    });
    b.stderr(LogStream {
        plugin: plugin.to_string(),
        stream: "stderr",
        last: Some(last_stderr),
    });
    for name in &grants.env {
        if let Ok(v) = std::env::var(name) {
            b.env(name, v);
        }
    }
    for d in &grants.dirs {
        let perms = if d.read_only {
            FsPerms::ReadOnly
        } else {
            FsPerms::ReadWrite
        };
        b.preopened_dir(&d.host, &d.guest, perms)
            .map_err(|e| anyhow::anyhow!("{e:#}"))
            .with_context(|| format!("granting directory {} as {}", d.host.display(), d.guest))?;
    }
    if grants.network {
        b.inherit_network();
        b.allow_ip_name_lookup(true);
    }
    // Without a grant, the builder's defaults deny every socket address and name lookup.
    Ok(b.build())
}

/// A guest output stream that ends up in the host's log, line by line.
#[derive(Clone)]
struct LogStream {
    plugin: String,
    stream: &'static str,
    last: Option<LastLines>,
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineLogger {
            plugin: self.plugin.clone(),
            stream: self.stream,
            buf: Vec::new(),
            last: self.last.clone(),
        })
    }
}

struct LineLogger {
    plugin: String,
    stream: &'static str,
    buf: Vec<u8>,
    last: Option<LastLines>,
}

impl LineLogger {
    fn emit_lines(&mut self, flush_all: bool) {
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            self.log(&line[..line.len() - 1]);
        }
        // A runaway writer without newlines must not grow the buffer forever.
        if flush_all || self.buf.len() > 8192 {
            let rest = std::mem::take(&mut self.buf);
            if !rest.is_empty() {
                self.log(&rest);
            }
        }
    }

    fn log(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        tracing::info!(plugin = %self.plugin, stream = self.stream, "{text}");
        if let Some(last) = &self.last {
            let mut l = last.lock();
            if l.len() == 4 {
                l.pop_front();
            }
            l.push_back(text.chars().take(300).collect());
        }
    }
}

impl AsyncWrite for LineLogger {
    fn poll_write(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        self.buf.extend_from_slice(data);
        self.emit_lines(false);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.emit_lines(true);
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineLogger {
    fn drop(&mut self) {
        self.emit_lines(true);
    }
}
