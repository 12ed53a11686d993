//! Where what a plugin emits goes once its call returns: the pipeline in a
//! running sonde, or a capture that `sonde plugin test` prints. Decisions go
//! to the [`DecisionBoard`](super::DecisionBoard) in both cases (as log
//! records too), so the capture holds points and log records only.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::{LogBatch, LogRecord, MetricBatch, Point};
use crate::pipeline::PipelineHandle;

#[derive(Clone)]
pub enum Output {
    /// Batched and exported (`crate::pipeline`).
    Pipeline(PipelineHandle),
    /// Kept, in the order emitted.
    Capture(Arc<Mutex<Captured>>),
}

/// What a plugin emitted, as `sonde plugin test` shows it.
#[derive(Default)]
pub struct Captured {
    pub points: Vec<Point>,
    pub logs: Vec<LogRecord>,
}

impl Output {
    pub fn submit_metrics(&self, batch: MetricBatch) {
        match self {
            Output::Pipeline(p) => p.submit_metrics(batch),
            Output::Capture(c) => c.lock().points.extend(batch.points),
        }
    }

    pub fn submit_logs(&self, batch: LogBatch) {
        match self {
            Output::Pipeline(p) => p.submit_logs(batch),
            Output::Capture(c) => c.lock().logs.extend(batch.records),
        }
    }
}
