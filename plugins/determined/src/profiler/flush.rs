//! Every `flush_every_s` (and at shutdown): one Determined-format batch log
//! record per series with rows since the last flush, the drop counters as
//! metrics, and the counters persisted when they changed.

use std::collections::BTreeMap;

use sonde_plugin_sdk::types::{Attribute, LogRecord, Severity};

use super::series::{Row, SeriesDef, declare};
use super::{BATCH_EVENT, COUNTERS_KEY, MAX_ROWS_PER_RECORD, Profiler};
use crate::outputs::{self, BatchBody, DROP_REASONS};
use sonde_plugin_sdk::Host;

/// One Determined-format batch for `rows` of a series.
fn batch_record(def: &SeriesDef, rows: &[Row], now: u64) -> LogRecord {
    let spec = &def.spec;
    let body = BatchBody {
        trial: &def.job,
        agent: &def.node,
        gpu_uuid: &def.gpu_uuid,
        metric: &def.determined,
        metric_type: spec.metric_type.label(),
        unit: spec.determined_unit,
        values: rows.iter().map(|r| spec.to_determined(r.value)).collect(),
        batch_indices: rows.iter().map(|r| r.batch).collect(),
        timestamps: rows.iter().map(|r| r.time).collect(),
    };
    let mut attributes = vec![
        Attribute::new("determined.trial", &*def.job),
        Attribute::new("determined.metric", &*def.determined),
        Attribute::new("determined.metric_type", spec.metric_type.attr()),
    ];
    if !def.gpu_uuid.is_empty() {
        attributes.push(Attribute::new("hw.id", def.gpu_uuid.as_str()));
    }
    attributes.extend(outputs::origin_attributes(&def.node, def.rank));
    LogRecord {
        time: now,
        severity: Severity::Info,
        event_name: BATCH_EVENT.to_string(),
        body: serde_json::to_string(&body).expect("batch serializes"),
        attributes,
    }
}

impl Profiler {
    /// Writes one `determined.profiler.batch` log record per series with rows
    /// since the last flush, emits the drop counters and persists what changed.
    pub fn flush(&mut self, host: &mut dyn Host) {
        let now = host.now();
        let rows = std::mem::take(&mut self.out.unflushed);
        if !rows.is_empty() {
            let mut by_series: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
            for row in &rows {
                by_series.entry(row.series).or_default().push(*row);
            }
            let mut records = Vec::new();
            for (idx, rows) in by_series {
                let def = &self.out.series[idx as usize];
                for chunk in rows.chunks(MAX_ROWS_PER_RECORD) {
                    records.push(batch_record(def, chunk, now));
                }
            }
            self.out.counters.flushed += rows.len() as u64;
            host.emit_logs(&records);
        }
        let c = &self.out.counters;
        if c.dropped_queue_full > self.flushed_counters.dropped_queue_full {
            host.log(
                Severity::Warn,
                &format!(
                    "{} measurements dropped since the last flush: more than max_pending ({}) were held",
                    c.dropped_queue_full - self.flushed_counters.dropped_queue_full,
                    self.settings.max_pending
                ),
            );
        }
        self.flushed_counters = c.clone();
        self.emit_dropped(host, now);
        self.persist(host, now);
    }

    fn emit_dropped(&mut self, host: &mut dyn Host, now: u64) {
        if self.dropped_handles.is_empty() {
            self.dropped_handles = DROP_REASONS
                .iter()
                .map(|r| declare(host, &outputs::dropped_desc(r)))
                .collect();
        }
        for (reason, handle) in DROP_REASONS.iter().zip(&self.dropped_handles) {
            if let Some(h) = handle {
                self.out.points.push(*h, now, self.out.counters.dropped(reason) as f64);
            }
        }
    }

    pub(super) fn persist(&mut self, host: &mut dyn Host, now: u64) {
        for job in self.jobs.values_mut() {
            job.persist(host, now);
        }
        if self.persisted_counters.as_ref() != Some(&self.out.counters) {
            let json = serde_json::to_vec(&self.out.counters).expect("counters serialize");
            match host.state_put(COUNTERS_KEY, &json) {
                Ok(()) => self.persisted_counters = Some(self.out.counters.clone()),
                Err(e) => host.log(Severity::Warn, &format!("could not persist counters: {e}")),
            }
        }
    }
}
