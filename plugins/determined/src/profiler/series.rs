//! Where resolved measurements go: one declared series per (job, Determined
//! metric, GPU, node, rank), its points emitted at once, its rows kept until the next
//! flush, and the recent timings `GET /timings` lists.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;
use sonde_plugin_sdk::PointBuffer;
use sonde_plugin_sdk::types::Severity;

use super::Counters;
use crate::agents::Source;
use crate::outputs::{self, Spec, SysMetric};
use sonde_plugin_sdk::Host;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum SeriesKind {
    Sys(SysMetric),
    Timing(Arc<str>),
    Misc,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SeriesKey {
    pub(super) job: Arc<str>,
    pub(super) output: SeriesKind,
    /// Where a system measurement was sampled (GPU indices are per source).
    pub(super) source: Source,
    pub(super) gpu: u16,
    pub(super) node: Arc<str>,
    /// A timing's or throughput's rank; `None` for system metrics.
    pub(super) rank: Option<i32>,
}

/// One (job, Determined metric, GPU, node, rank) series.
#[derive(Debug)]
pub(super) struct SeriesDef {
    pub(super) job: Arc<str>,
    pub(super) determined: Arc<str>,
    pub(super) spec: Spec,
    pub(super) gpu_uuid: String,
    /// The node it was measured on (the batch record's `agent`).
    pub(super) node: Arc<str>,
    pub(super) rank: Option<i32>,
    /// `None` when the host refused the declaration (logged once).
    pub(super) handle: Option<u32>,
}

/// A resolved measurement waiting for the next flush.
#[derive(Debug, Clone, Copy)]
pub(super) struct Row {
    pub(super) series: u32,
    pub(super) time: u64,
    pub(super) batch: u64,
    /// In the metric's unit (converted to Determined's at flush).
    pub(super) value: f64,
}

/// A resolved timing, as `GET /timings` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimingRow {
    #[serde(serialize_with = "arc_str")]
    pub job: Arc<str>,
    pub rank: i32,
    #[serde(serialize_with = "arc_str")]
    pub node: Arc<str>,
    #[serde(serialize_with = "arc_str")]
    pub name: Arc<str>,
    pub batch_idx: u64,
    pub start_ns: u64,
    pub duration_s: f64,
}

fn arc_str<S: serde::Serializer>(s: &Arc<str>, ser: S) -> Result<S::Ok, S::Error> {
    ser.serialize_str(s)
}

pub(super) fn declare(host: &mut dyn Host, desc: &sonde_plugin_sdk::types::MetricDesc) -> Option<u32> {
    match host.declare_metric(desc) {
        Ok(h) => Some(h),
        Err(e) => {
            host.log(
                Severity::Warn,
                &format!("declare-metric {}: {e}; its points are not emitted", desc.name),
            );
            None
        }
    }
}

/// Where resolved measurements go: points now, rows until the flush.
#[derive(Default)]
pub(super) struct Resolved {
    pub(super) series: Vec<SeriesDef>,
    pub(super) index: HashMap<SeriesKey, u32>,
    pub(super) unflushed: VecDeque<Row>,
    pub(super) points: PointBuffer,
    pub(super) recent: VecDeque<TimingRow>,
    pub(super) counters: Counters,
}

impl Resolved {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &mut self,
        host: &mut dyn Host,
        key: SeriesKey,
        spec: Spec,
        determined: &Arc<str>,
        gpu_uuid: &str,
        time: u64,
        batch: u64,
        value: f64,
    ) {
        let idx = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let desc = outputs::metric_desc(&spec, &key.job, determined, gpu_uuid, &key.node, key.rank);
                let handle = declare(host, &desc);
                let i = self.series.len() as u32;
                self.series.push(SeriesDef {
                    job: key.job.clone(),
                    determined: determined.clone(),
                    spec,
                    gpu_uuid: gpu_uuid.to_string(),
                    node: key.node.clone(),
                    rank: key.rank,
                    handle,
                });
                self.index.insert(key, i);
                i
            }
        };
        if let Some(h) = self.series[idx as usize].handle {
            self.points.push(h, time, value);
        }
        self.unflushed.push_back(Row {
            series: idx,
            time,
            batch,
            value,
        });
        self.counters.resolved += 1;
    }
}
