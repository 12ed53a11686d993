//! Dynamic data sharding (reference section 9): a dataset is split into
//! shards of `batch_size x num_minibatches_per_shard` records; workers pull
//! shards from TODO (FIFO) into DOING and report them done or failed.
//!
//! What it keeps is small whatever the dataset's size: the shards of the
//! current (sub-)epoch not yet handed out are a *run* (a range of shard
//! positions, generated on demand), and only re-queued or restored shards are
//! listed one by one. So the whole state is written to the host's store before
//! every answer that changes it, and a restart of sonde resumes exactly.
//!
//! Kept from DLRover: first registration wins; TODO is FIFO; the next epoch is
//! created as soon as TODO is empty, even while DOING is not; a failed shard
//! keeps its task id and goes to the tail of TODO; table storage with shuffle
//! shuffles the order of shards, text storage with shuffle shuffles record
//! indices; more than 50000 shards per epoch are split into sub-epochs;
//! success adds `ceil(len / batch_size)` to the completed steps; checkpoint
//! format and restore order (DOING first, then TODO, new task ids).
//!
//! Fixed (defect D7): a shard that fails `max_failures` times goes to a
//! dead-letter list that the routes show (and can re-queue) instead of being
//! dropped; a DOING shard older than the task timeout is re-queued whatever
//! the task type, so a hung worker's shards are not stuck. Added: a retried
//! get (same request id) gets the same shard back, and a retried report of a
//! shard already done is acknowledged, so a lost answer never loses or
//! duplicates a shard.
//!
//! Here: the dataset's parameters, its shards and their queues, and what
//! hands them out and takes them back. `wire.rs` writes and restores
//! checkpoints and shapes the routes' answers.

#[cfg(test)]
mod tests;
mod wire;

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// Completed task ids remembered per node, to acknowledge retried reports.
const RECENT_DONE: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TaskType {
    #[default]
    Training,
    Evaluation,
    Prediction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    #[default]
    Table,
    Text,
}

/// DLRover's DatasetShardParams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetParams {
    pub dataset_name: String,
    pub batch_size: u64,
    #[serde(default = "one")]
    pub num_epochs: u32,
    pub dataset_size: u64,
    #[serde(default)]
    pub shuffle: bool,
    /// 0 = the master's default (settings `default_minibatches_per_shard`).
    #[serde(default)]
    pub num_minibatches_per_shard: u64,
    #[serde(default)]
    pub task_type: TaskType,
    #[serde(default)]
    pub storage_type: Storage,
    /// Shuffle seed; by default derived from the name.
    #[serde(default)]
    pub seed: Option<u64>,
}

fn one() -> u32 {
    1
}

impl DatasetParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.dataset_name.trim().is_empty() || self.dataset_name.len() > 200 {
            return Err("dataset_name must be 1 to 200 characters".into());
        }
        if self.batch_size == 0 {
            return Err("batch_size must be >= 1".into());
        }
        if self.num_epochs == 0 {
            return Err("num_epochs must be >= 1".into());
        }
        Ok(())
    }
}

/// A shard: records [start, end) of one epoch. With text storage and shuffle,
/// `start..end` are positions in the epoch's shuffled record order and the
/// records are `indices`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    pub start: u64,
    pub end: u64,
    pub epoch: u32,
    #[serde(default)]
    pub sub_epoch: u32,
    /// Explicit record indices (a restored checkpoint's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indices: Option<Vec<u64>>,
    /// Indices come from the epoch's record permutation (text + shuffle).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shuffled: bool,
}

impl Shard {
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One TODO entry: a run of shard positions of a (sub-)epoch, or one shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "lowercase")]
pub enum Todo {
    Run {
        epoch: u32,
        sub_epoch: u32,
        /// Next shard position and the end of the run.
        next: u64,
        end: u64,
        /// First position of the sub-epoch and its length (for the table shuffle).
        base: u64,
        len: u64,
    },
    Shard {
        /// Kept when re-queued; `None` for restored shards (a new id is given at hand-out).
        task_id: Option<u64>,
        shard: Shard,
        failures: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Doing {
    pub shard: Shard,
    pub node: String,
    pub start_ns: u64,
    pub failures: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadShard {
    pub task_id: u64,
    pub shard: Shard,
    pub failures: u32,
    pub node: String,
    pub reason: String,
    pub time_ns: u64,
}

/// What `tasks/next` answers.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskAnswer {
    Task {
        task_id: u64,
        shard: Shard,
    },
    /// No shard now, but the dataset is not finished (others hold DOING shards).
    Wait,
    /// End of data.
    End,
}

/// What `tasks/report` answers.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportAnswer {
    Done {
        steps: u64,
    },
    /// The same success reported again (a retry after a lost answer).
    Duplicate,
    Requeued {
        failures: u32,
    },
    DeadLettered {
        failures: u32,
    },
    /// The task is not this node's: it was re-queued (the node was declared
    /// dead or timed out) and may be someone else's now. Do not commit it.
    Stale,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataset {
    pub params: DatasetParams,
    pub shard_size: u64,
    pub shards_per_epoch: u64,
    pub sub_epochs: u64,
    pub max_per_sub_epoch: u64,
    /// Epochs started (DLRover's splitter epoch); the current epoch is `epoch - 1`.
    pub epoch: u32,
    /// Sub-epochs of the current epoch created so far.
    pub sub_epoch: u32,
    pub todo: VecDeque<Todo>,
    pub doing: BTreeMap<u64, Doing>,
    pub dead_letter: Vec<DeadShard>,
    pub next_task_id: u64,
    pub completed_step: u64,
    pub done_shards: u64,
    pub done_records: u64,
    /// Records done per epoch (0-based epoch).
    pub done_by_epoch: BTreeMap<u32, u64>,
    pub requeued: u64,
    /// node -> (request id, task id) of its last get, for retried gets.
    pub last_get: BTreeMap<String, (String, u64)>,
    /// node -> task ids it completed lately, for retried reports.
    pub recent_done: BTreeMap<String, VecDeque<u64>>,
    pub created_ns: u64,
    pub first_get_ns: Option<u64>,
}

impl Dataset {
    pub fn new(mut params: DatasetParams, default_minibatches: u64, max_per_sub_epoch: u64, now: u64) -> Dataset {
        if params.num_minibatches_per_shard == 0 {
            params.num_minibatches_per_shard = default_minibatches.max(1);
        }
        let shard_size = params.batch_size * params.num_minibatches_per_shard;
        let shards_per_epoch = params.dataset_size.div_ceil(shard_size);
        let max = max_per_sub_epoch.max(1);
        Dataset {
            shard_size,
            shards_per_epoch,
            sub_epochs: shards_per_epoch.div_ceil(max).max(1),
            max_per_sub_epoch: max,
            params,
            epoch: 0,
            sub_epoch: 0,
            todo: VecDeque::new(),
            doing: BTreeMap::new(),
            dead_letter: Vec::new(),
            next_task_id: 0,
            completed_step: 0,
            done_shards: 0,
            done_records: 0,
            done_by_epoch: BTreeMap::new(),
            requeued: 0,
            last_get: BTreeMap::new(),
            recent_done: BTreeMap::new(),
            created_ns: now,
            first_get_ns: None,
        }
    }

    fn seed(&self) -> u64 {
        self.params.seed.unwrap_or_else(|| {
            // FNV-1a of the name: stable across restarts and builds.
            self.params.dataset_name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            })
        })
    }

    /// Creates the next sub-epoch (or epoch) as a run at the tail of TODO;
    /// false when every epoch was created.
    fn create_next(&mut self) -> bool {
        if self.shards_per_epoch == 0 {
            return false;
        }
        if self.epoch == 0 || self.sub_epoch as u64 >= self.sub_epochs {
            if self.epoch >= self.params.num_epochs {
                return false;
            }
            self.epoch += 1;
            self.sub_epoch = 0;
        }
        let sub = self.sub_epoch as u64;
        let base = sub * self.max_per_sub_epoch;
        let end = (base + self.max_per_sub_epoch).min(self.shards_per_epoch);
        self.todo.push_back(Todo::Run {
            epoch: self.epoch - 1,
            sub_epoch: self.sub_epoch,
            next: base,
            end,
            base,
            len: end - base,
        });
        self.sub_epoch += 1;
        true
    }

    /// The shard at `pos` of an epoch's sub-epoch starting at `base` (`len` positions).
    fn shard_at(&self, epoch: u32, sub_epoch: u32, pos: u64, base: u64, len: u64) -> Shard {
        let table_shuffle = self.params.shuffle && self.params.storage_type == Storage::Table;
        let idx = if table_shuffle {
            base + permute(
                pos - base,
                len,
                self.seed() ^ mix(((epoch as u64) << 32) | sub_epoch as u64),
            )
        } else {
            pos
        };
        let start = idx * self.shard_size;
        Shard {
            start,
            end: (start + self.shard_size).min(self.params.dataset_size),
            epoch,
            sub_epoch,
            indices: None,
            shuffled: self.params.shuffle && self.params.storage_type == Storage::Text,
        }
    }

    /// The records of a shard: explicit, shuffled, or `None` for the plain range.
    pub fn indices(&self, shard: &Shard) -> Option<Vec<u64>> {
        if let Some(ix) = &shard.indices {
            return Some(ix.clone());
        }
        shard.shuffled.then(|| {
            let key = self.seed() ^ mix(0x5eed_0000_0000 | shard.epoch as u64);
            (shard.start..shard.end)
                .map(|p| permute(p, self.params.dataset_size, key))
                .collect()
        })
    }

    /// Pops the head of TODO: (task id if it kept one, shard, failures so far).
    fn pop(&mut self) -> Option<(Option<u64>, Shard, u32)> {
        loop {
            match self.todo.front_mut()? {
                Todo::Run {
                    epoch,
                    sub_epoch,
                    next,
                    end,
                    base,
                    len,
                } => {
                    if *next >= *end {
                        self.todo.pop_front();
                        continue;
                    }
                    let (e, s, p, b, l) = (*epoch, *sub_epoch, *next, *base, *len);
                    *next += 1;
                    if *next >= *end {
                        self.todo.pop_front();
                    }
                    return Some((None, self.shard_at(e, s, p, b, l), 0));
                }
                Todo::Shard { .. } => {
                    let Some(Todo::Shard {
                        task_id,
                        shard,
                        failures,
                    }) = self.todo.pop_front()
                    else {
                        unreachable!()
                    };
                    return Some((task_id, shard, failures));
                }
            }
        }
    }

    /// get-task for `node`. A retry of the same `request_id` answers the
    /// task the first attempt got, while the node still holds it.
    pub fn next_task(&mut self, node: &str, request_id: &str, now: u64) -> TaskAnswer {
        if !request_id.is_empty()
            && let Some((rid, tid)) = self.last_get.get(node)
            && rid == request_id
            && let Some(d) = self.doing.get(tid)
            && d.node == node
        {
            return TaskAnswer::Task {
                task_id: *tid,
                shard: d.shard.clone(),
            };
        }
        self.first_get_ns.get_or_insert(now);
        if self.todo.is_empty() {
            self.create_next();
        }
        match self.pop() {
            Some((task_id, shard, failures)) => {
                let task_id = task_id.unwrap_or_else(|| {
                    self.next_task_id += 1;
                    self.next_task_id
                });
                self.doing.insert(
                    task_id,
                    Doing {
                        shard: shard.clone(),
                        node: node.to_string(),
                        start_ns: now,
                        failures,
                    },
                );
                if !request_id.is_empty() {
                    self.last_get
                        .insert(node.to_string(), (request_id.to_string(), task_id));
                }
                TaskAnswer::Task { task_id, shard }
            }
            None if self.doing.is_empty() => TaskAnswer::End,
            None => TaskAnswer::Wait,
        }
    }

    /// A task result from `node`: success when `error` is empty.
    pub fn report(&mut self, task_id: u64, node: &str, error: &str, max_failures: u32, now: u64) -> ReportAnswer {
        match self.doing.get(&task_id) {
            Some(d) if d.node == node => {}
            _ => {
                let done_before = self.recent_done.get(node).is_some_and(|r| r.contains(&task_id));
                return if done_before && error.is_empty() {
                    ReportAnswer::Duplicate
                } else {
                    ReportAnswer::Stale
                };
            }
        }
        if !error.is_empty() {
            return self.fail(task_id, error, max_failures, now).expect("checked above");
        }
        let d = self.doing.remove(&task_id).expect("checked above");
        let steps = d.shard.len().div_ceil(self.params.batch_size);
        self.completed_step += steps;
        self.done_shards += 1;
        self.done_records += d.shard.len();
        *self.done_by_epoch.entry(d.shard.epoch).or_default() += d.shard.len();
        let recent = self.recent_done.entry(node.to_string()).or_default();
        recent.push_back(task_id);
        if recent.len() > RECENT_DONE {
            recent.pop_front();
        }
        ReportAnswer::Done { steps }
    }

    /// A DOING task failed: to the tail of TODO with the same id, or to the
    /// dead-letter list at its `max_failures`-th failure.
    pub fn fail(&mut self, task_id: u64, reason: &str, max_failures: u32, now: u64) -> Option<ReportAnswer> {
        let d = self.doing.remove(&task_id)?;
        let failures = d.failures + 1;
        if failures >= max_failures {
            self.dead_letter.push(DeadShard {
                task_id,
                shard: d.shard,
                failures,
                node: d.node,
                reason: reason.to_string(),
                time_ns: now,
            });
            Some(ReportAnswer::DeadLettered { failures })
        } else {
            self.requeued += 1;
            self.todo.push_back(Todo::Shard {
                task_id: Some(task_id),
                shard: d.shard,
                failures,
            });
            Some(ReportAnswer::Requeued { failures })
        }
    }

    /// Every DOING task of a failed or dead node fails (DLRover R9.4).
    pub fn fail_node(&mut self, node: &str, reason: &str, max_failures: u32, now: u64) -> Vec<(u64, ReportAnswer)> {
        let ids: Vec<u64> = self
            .doing
            .iter()
            .filter(|(_, d)| d.node == node)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.fail(id, reason, max_failures, now).map(|a| (id, a)))
            .collect()
    }

    /// DOING tasks handed out longer than `timeout_ns` ago fail (any task type).
    pub fn time_out(&mut self, timeout_ns: u64, max_failures: u32, now: u64) -> Vec<(u64, String, ReportAnswer)> {
        let ids: Vec<(u64, String)> = self
            .doing
            .iter()
            .filter(|(_, d)| now.saturating_sub(d.start_ns) > timeout_ns)
            .map(|(id, d)| (*id, d.node.clone()))
            .collect();
        ids.into_iter()
            .filter_map(|(id, node)| {
                self.fail(id, "task timed out", max_failures, now)
                    .map(|a| (id, node, a))
            })
            .collect()
    }

    /// Epochs exhausted, TODO and DOING empty.
    pub fn completed(&self) -> bool {
        let all_created = self.shards_per_epoch == 0
            || (self.epoch >= self.params.num_epochs && self.sub_epoch as u64 >= self.sub_epochs);
        all_created && self.todo_shards() == 0 && self.doing.is_empty()
    }

    pub fn todo_shards(&self) -> u64 {
        self.todo
            .iter()
            .map(|t| match t {
                Todo::Run { next, end, .. } => end.saturating_sub(*next),
                Todo::Shard { .. } => 1,
            })
            .sum()
    }

    /// Starts the dataset over (DLRover's reset_dataset, which its client
    /// could not call: defect D3). Counters and dead letters are cleared too.
    pub fn reset(&mut self, now: u64) {
        *self = Dataset::new(
            self.params.clone(),
            self.params.num_minibatches_per_shard,
            self.max_per_sub_epoch,
            now,
        );
    }

    /// Moves the dead letters back to the tail of TODO (an operator's decision).
    pub fn requeue_dead_letter(&mut self) -> usize {
        let n = self.dead_letter.len();
        for d in self.dead_letter.drain(..) {
            self.todo.push_back(Todo::Shard {
                task_id: Some(d.task_id),
                shard: d.shard,
                failures: 0,
            });
        }
        n
    }
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A permutation of [0, n) keyed by `key`, computed per element (a Feistel
/// network with cycle walking): shuffles of any size with no memory.
pub fn permute(i: u64, n: u64, key: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    let bits = 64 - (n - 1).leading_zeros();
    let half = bits.div_ceil(2);
    let mask = (1u64 << half) - 1;
    let mut x = i;
    loop {
        let (mut l, mut r) = (x >> half, x & mask);
        for round in 0..4u64 {
            let f = mix(r ^ key ^ (round << 56)) & mask;
            (l, r) = (r, l ^ f);
        }
        x = (l << half) | r;
        if x < n {
            return x;
        }
    }
}
