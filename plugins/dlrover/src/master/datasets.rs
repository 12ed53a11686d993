//! The master's side of dynamic data sharding: registering a dataset and
//! committing its state (called by the routes; each writes before it
//! answers), the first task result (a start rule of the plan loop), and what
//! a node's end does to the shards it held (R9.4).

use serde_json::{Value, json};
use sonde_plugin_sdk::types::Severity;

use super::Master;
use crate::sharding::{Dataset, DatasetParams, ReportAnswer};
use sonde_plugin_sdk::Host;

impl Master {
    pub fn register(&mut self, host: &mut dyn Host, p: DatasetParams) -> Result<(bool, Value), String> {
        p.validate()?;
        if let Some(d) = self.datasets.get(&p.dataset_name) {
            return Ok((false, d.progress_json(false)));
        }
        let d = Dataset::new(
            p,
            self.settings.default_minibatches_per_shard,
            self.settings.max_shards_per_sub_epoch,
            host.now(),
        );
        let v = d.progress_json(false);
        self.commit_dataset(host, d)?;
        Ok((true, v))
    }

    pub fn first_result(&mut self, host: &mut dyn Host, now: u64) {
        if self.misc.first_result_ns.is_none() {
            self.misc.first_result_ns = Some(now);
            self.put_misc(host);
        } else if !self.scaler.started && self.perf.total == 0 {
            // The no-global-step start rule looks at the latest result.
            self.misc.first_result_ns = Some(now);
        }
    }

    /// Every DOING shard of `node`, in every dataset, fails (R9.4).
    pub(super) fn release_shards(&mut self, host: &mut dyn Host, node: &str, reason: &str, now: u64) {
        let names: Vec<String> = self
            .datasets
            .iter()
            .filter(|(_, d)| d.doing.values().any(|t| t.node == node))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            let mut d = self.datasets[&name].clone();
            let failed = d.fail_node(node, reason, self.settings.max_shard_failures, now);
            self.after_failures(host, &name, node, reason, &failed, &d);
            if let Err(e) = self.commit_dataset(host, d.clone()) {
                host.log(
                    Severity::Error,
                    &format!("dlrover: {e}; the re-queue of {node}'s shards is kept in memory"),
                );
                self.datasets.insert(name, d);
            }
        }
    }

    pub fn after_failures(
        &mut self,
        host: &mut dyn Host,
        dataset: &str,
        node: &str,
        reason: &str,
        failed: &[(u64, ReportAnswer)],
        d: &Dataset,
    ) {
        let requeued: Vec<u64> = failed
            .iter()
            .filter(|(_, a)| matches!(a, ReportAnswer::Requeued { .. }))
            .map(|(id, _)| *id)
            .collect();
        if !requeued.is_empty() {
            self.record(
                host,
                "shards-requeued",
                node,
                &format!("{} DOING shard(s) of {dataset} back to TODO: {reason}", requeued.len()),
                json!({"dataset": dataset, "task_ids": requeued}),
            );
        }
        for (id, a) in failed {
            if let ReportAnswer::DeadLettered { failures } = a {
                let shard = d
                    .dead_letter
                    .iter()
                    .find(|x| x.task_id == *id)
                    .map(|x| (x.shard.start, x.shard.end));
                self.record(
                    host,
                    "shard-dead-letter",
                    dataset,
                    &format!("task {id} failed {failures} times (last: {reason}): moved to the dead-letter list"),
                    json!({"dataset": dataset, "task_id": id, "shard": shard, "node": node}),
                );
            }
        }
    }
}
