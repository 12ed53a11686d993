//! storage/: history beyond the live hour.
//!
//! ```text
//!  PipelineHandle::subscribe (every metric batch: this host's plugins, and
//!  on a master every agent's series)
//!     ├─► the embedded history (`storage.history`, on by default on a master);
//!     │     an agent's series are appended by `cluster/remote_points.rs`
//!     │     itself (`append_direct`), before the agent is answered
//!     │     key = name, unit, attributes + `otel.scope.name`, `sonde.kind`
//!     └─► remote-write (`storage.remote_write`) ─► Prometheus / VictoriaMetrics / Mimir …
//!  GET /api/series, /api/series/data before the live store's start
//!     ◄── the engine, when `storage.query` is set (engine_read.rs, engine_plan.rs)
//!     ◄── else the embedded history
//! ```
//! With `storage.query` set the embedded history is off unless
//! `storage.embedded = true` says otherwise (the engine is the history); when
//! both run, reads go to the engine only.
//! The writer's queue is bounded (`storage.remote_write.queue_capacity`
//! samples, oldest dropped and counted); a slow or absent engine never holds
//! up sampling or export. A broadcast receiver that falls more than 1 024
//! batches behind loses the oldest, counted in `batches_lagged`.

pub mod config;
pub mod engine_plan;
pub mod engine_read;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::export::remote_write::{RemoteWriteStats, RemoteWriter};
use crate::history::{History, HistoryStats, SeriesKey};
use crate::model::{AttrValue, MetricBatch, MetricKind};
use crate::pipeline::PipelineHandle;
use engine_read::{EngineReadStats, EngineReader};

pub use config::StorageConfig;

/// The running storage side.
#[derive(Default)]
pub struct Storage {
    pub remote: Option<RemoteWriter>,
    pub history: Option<Arc<History>>,
    /// Reads through the engine's query API (`storage.query`).
    pub query: Option<Arc<EngineReader>>,
    pub batches_lagged: Arc<AtomicU64>,
    writer_task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
    feed_task: Option<tokio::task::JoinHandle<()>>,
    history_task: Option<tokio::task::JoinHandle<()>>,
}

/// The attribute the history key keeps a series' instrumentation scope in.
pub const SCOPE_ATTR: &str = "otel.scope.name";
/// The attribute the history key keeps the instrument kind in.
pub const KIND_ATTR: &str = "sonde.kind";

pub fn kind_name(k: MetricKind) -> &'static str {
    match k {
        MetricKind::Gauge => "gauge",
        MetricKind::Counter => "counter",
        MetricKind::UpDownCounter => "updowncounter",
    }
}

/// The scope of batches whose source appends them to the history itself
/// ([`append_direct`]) before its sender is answered: a master's copies of
/// its agents' points (`cluster/remote_points.rs`). The tap leaves them out.
pub const DIRECT_SCOPE: &str = "sonde.cluster.remote";

/// Appends a batch now, on the caller's thread, rather than when the tap's
/// task gets to it: a master answers an agent only once its points are in
/// the history's write-ahead log (`ingest/durable.rs`), which needs them
/// appended before the answer is decided.
pub fn append_direct(h: &History, batch: &MetricBatch) {
    append_history(h, batch, &mut std::collections::HashMap::new());
}

/// Appends a batch to the history, one append per series; `ids` caches keys
/// by series allocation (cleared when it grows past 65 536 entries).
fn append_history(h: &History, batch: &MetricBatch, ids: &mut std::collections::HashMap<usize, Option<u32>>) {
    let mut per: Vec<(u32, Vec<(u64, f64)>)> = Vec::new();
    if ids.len() > 65_536 {
        ids.clear();
    }
    for p in &batch.points {
        let ptr = Arc::as_ptr(&p.series) as usize;
        let id = *ids.entry(ptr).or_insert_with(|| {
            let key = SeriesKey::from_metric(
                &p.series,
                &[
                    (SCOPE_ATTR.to_string(), batch.scope.name.clone()),
                    (KIND_ATTR.to_string(), kind_name(p.series.kind).to_string()),
                ],
            );
            h.append(&key, &[]).ok().and_then(|()| h.id_of(&key))
        });
        let Some(id) = id else { continue };
        match per.iter_mut().find(|(i, _)| *i == id) {
            Some((_, v)) => v.push((p.time_ns, p.value)),
            None => per.push((id, vec![(p.time_ns, p.value)])),
        }
    }
    for (id, points) in per {
        h.append_id(id, &points);
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct StorageStats {
    pub remote_write: Option<RemoteWriteStats>,
    pub history: Option<HistoryStats>,
    pub query: Option<EngineReadStats>,
    pub batches_lagged: u64,
}

impl Storage {
    /// Starts what `cfg` turns on, fed from the pipeline's tap. `resource` is
    /// this host's; series from agents carry their node as `host.name`.
    pub fn start(
        cfg: &StorageConfig,
        master: bool,
        data_dir: &std::path::Path,
        pipeline: &PipelineHandle,
        resource: Vec<(String, AttrValue)>,
    ) -> anyhow::Result<Storage> {
        let mut s = Storage::default();
        if cfg.query.enabled() {
            // The writer's promotions and resource, so lookups use the labels it wrote.
            let reader = EngineReader::new(&cfg.query, &cfg.remote_write.promote_resource_attributes, &resource)
                .map_err(|e| anyhow::anyhow!("storage.query: {e}"))?;
            s.query = Some(Arc::new(reader));
        }
        if cfg.embedded_on(master) {
            let dir = cfg.history.dir(data_dir);
            let h = Arc::new(
                History::open(&cfg.history, data_dir)
                    .map_err(|e| anyhow::anyhow!("storage.history: opening {}: {e:#}", dir.display()))?,
            );
            let mut rx = pipeline.subscribe();
            let lagged = s.batches_lagged.clone();
            let feed = h.clone();
            s.history_task = Some(tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                let mut ids = std::collections::HashMap::new();
                loop {
                    match rx.recv().await {
                        Ok(batch) if batch.scope.name == DIRECT_SCOPE => {}
                        Ok(batch) => append_history(&feed, &batch, &mut ids),
                        Err(RecvError::Lagged(n)) => {
                            lagged.fetch_add(n, Relaxed);
                        }
                        Err(RecvError::Closed) => return,
                    }
                }
            }));
            s.history = Some(h);
        }
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
            history: self.history.as_ref().map(|h| h.stats()),
            query: self.query.as_ref().map(|q| q.stats()),
            batches_lagged: self.batches_lagged.load(Relaxed),
        }
    }

    /// Sends what waits, for at most `deadline`, then stops.
    pub async fn shutdown(&self, deadline: std::time::Duration) {
        for t in [&self.feed_task, &self.history_task].into_iter().flatten() {
            t.abort();
        }
        if let Some(h) = &self.history {
            h.flush();
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
