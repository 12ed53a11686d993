//! storage/: history beyond the live hour.
//!
//! ```text
//!  PipelineHandle::subscribe (every metric batch: this host's plugins, and
//!  on a master every agent's series)
//!     └─► remote-write (`storage.remote_write`) ─► Prometheus / VictoriaMetrics / Mimir …
//!  GET /api/series/data beyond the live hour ◄── PromQL (`storage.query`)
//! ```
//! The writer's queue is bounded (`storage.remote_write.queue_capacity`
//! samples, oldest dropped and counted); a slow or absent engine never holds
//! up sampling or export. A broadcast receiver that falls more than 1 024
//! batches behind loses the oldest, counted in `batches_lagged`.

pub mod config;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::export::remote_write::{RemoteWriteStats, RemoteWriter};
use crate::model::AttrValue;
use crate::pipeline::PipelineHandle;

pub use config::StorageConfig;

/// The running storage side.
#[derive(Default)]
pub struct Storage {
    pub remote: Option<RemoteWriter>,
    pub batches_lagged: Arc<AtomicU64>,
    writer_task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    feed_task: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct StorageStats {
    pub remote_write: Option<RemoteWriteStats>,
    pub batches_lagged: u64,
}

impl Storage {
    /// Starts what `cfg` turns on, fed from the pipeline's tap. `resource` is
    /// this host's; series from agents carry their node as `host.name`.
    pub fn start(
        cfg: &StorageConfig,
        pipeline: &PipelineHandle,
        resource: Vec<(String, AttrValue)>,
    ) -> anyhow::Result<Storage> {
        let mut s = Storage::default();
        if !cfg.remote_write.enabled() {
            return Ok(s);
        }
        let (writer, task) =
            RemoteWriter::start(cfg.remote_write.clone()).map_err(|e| anyhow::anyhow!("storage.remote_write: {e}"))?;
        *s.writer_task.lock() = Some(task);
        let mut rx = pipeline.subscribe();
        let w = writer.clone();
        let lagged = s.batches_lagged.clone();
        s.feed_task = Some(tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match rx.recv().await {
                    Ok(batch) => {
                        w.push_batch(&batch, &resource);
                    }
                    Err(RecvError::Lagged(n)) => {
                        lagged.fetch_add(n, Relaxed);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }));
        s.remote = Some(writer);
        Ok(s)
    }

    pub fn stats(&self) -> StorageStats {
        StorageStats {
            remote_write: self.remote.as_ref().map(RemoteWriter::stats),
            batches_lagged: self.batches_lagged.load(Relaxed),
        }
    }

    /// Sends what waits, for at most `deadline`, then stops.
    pub async fn shutdown(&self, deadline: std::time::Duration) {
        if let Some(t) = &self.feed_task {
            t.abort();
        }
        if let Some(w) = &self.remote {
            w.close();
        }
        let task = self.writer_task.lock().take();
        if let Some(t) = task {
            let abort = t.abort_handle();
            if tokio::time::timeout(deadline, t).await.is_err() {
                abort.abort();
            }
        }
    }
}
