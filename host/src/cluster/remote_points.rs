//! A master's view of its agents' series: points that arrived over OTLP
//! (an agent's sampler output, a job's SDK metrics) are shown by the
//! dashboard and kept in history like the master's own, labelled with the
//! node (`host.name`) and job (`sonde.job`) they came from.
//!
//! ```text
//!  IngestHub ──(reports with points)──► RemotePoints::observe
//!     ─► MetricBatch (scope `sonde.cluster.remote`)
//!          ├─► the history, appended here, on the receiver's thread (`storage::append_direct`)
//!          └─► PipelineHandle::publish_live ─► the live store (never exported again: the agent did)
//! ```
//! Appended here rather than by the history's tap task: the receiver then
//! waits for a group commit (`ingest/durable.rs`) that writes the history's
//! write-ahead log before the agent is answered, and only points already
//! appended are in it. So a point the master acknowledged survives its
//! `kill -9`.

use std::sync::Arc;

use crate::history::History;
use crate::ingest::{Report, ReportTap};
use crate::model::{AttrValue, MetricBatch, MetricKind, MetricSeries, Point, Scope, SeriesKind};
use crate::pipeline::PipelineHandle;

/// The scope the master's copies of remote points carry.
pub const SCOPE: &str = crate::storage::DIRECT_SCOPE;

pub struct RemotePoints {
    pipeline: PipelineHandle,
    /// The master's embedded history, when it has one.
    history: Option<Arc<History>>,
    scope: Arc<Scope>,
}

impl RemotePoints {
    pub fn new(pipeline: PipelineHandle, history: Option<Arc<History>>) -> Self {
        RemotePoints {
            pipeline,
            history,
            scope: Arc::new(Scope {
                name: SCOPE.into(),
                version: env!("CARGO_PKG_VERSION").into(),
            }),
        }
    }

    /// One report's points as a batch, each series labelled with its node and job.
    pub fn batch(&self, r: &Report) -> MetricBatch {
        let series: Vec<Arc<MetricSeries>> = r
            .series
            .iter()
            .map(|s| {
                let mut attributes = s.attributes.clone();
                for (k, v) in [("host.name", &r.origin.node), ("sonde.job", &r.origin.job)] {
                    if !v.is_empty() && !attributes.iter().any(|(key, _)| key == k) {
                        attributes.push((k.to_string(), AttrValue::Str(v.clone())));
                    }
                }
                Arc::new(MetricSeries {
                    name: s.metric.clone(),
                    description: String::new(),
                    unit: s.unit.clone(),
                    kind: match s.kind {
                        SeriesKind::Gauge => MetricKind::Gauge,
                        SeriesKind::Counter => MetricKind::Counter,
                    },
                    attributes,
                    start_time_ns: 0,
                })
            })
            .collect();
        MetricBatch {
            scope: self.scope.clone(),
            points: r
                .points
                .iter()
                .filter_map(|p| {
                    Some(Point {
                        series: series.get(p.series as usize)?.clone(),
                        time_ns: p.time,
                        value: p.value,
                    })
                })
                .collect(),
        }
    }
}

impl ReportTap for RemotePoints {
    fn observe(&self, reports: &[Report]) {
        for r in reports.iter().filter(|r| !r.points.is_empty()) {
            let batch = self.batch(r);
            if let Some(h) = &self.history {
                crate::storage::append_direct(h, &batch);
            }
            self.pipeline.publish_live(batch);
        }
    }
}
