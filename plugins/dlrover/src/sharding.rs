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

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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

    /// Every TODO shard in order.
    fn todo_list(&self) -> Vec<Shard> {
        let mut out = Vec::new();
        for t in &self.todo {
            match t {
                Todo::Run {
                    epoch,
                    sub_epoch,
                    next,
                    end,
                    base,
                    len,
                } => out.extend((*next..*end).map(|p| self.shard_at(*epoch, *sub_epoch, p, *base, *len))),
                Todo::Shard { shard, .. } => out.push(shard.clone()),
            }
        }
        out
    }

    fn shard_json(&self, s: &Shard) -> Value {
        match self.indices(s) {
            Some(ix) => json!([s.start, s.end, ix]),
            None => json!([s.start, s.end]),
        }
    }

    /// DLRover's ShardCheckpoint content, plus `sub_epoch` and the dead letters.
    pub fn checkpoint(&self) -> Value {
        let todo: Vec<Value> = self.todo_list().iter().map(|s| self.shard_json(s)).collect();
        let doing: Vec<Value> = self.doing.values().map(|d| self.shard_json(&d.shard)).collect();
        json!({
            "dataset_name": self.params.dataset_name,
            "todo": todo,
            "doing": doing,
            "epoch": self.epoch,
            "sub_epoch": self.sub_epoch,
            "splitter": null,
            "dead_letter": self.dead_letter.iter().map(|d| self.shard_json(&d.shard)).collect::<Vec<_>>(),
        })
    }

    /// Restores a checkpoint: DOING first, then TODO, all into TODO with new
    /// task ids (given at hand-out); epoch (and sub-epoch) as checkpointed.
    pub fn restore(&mut self, content: &Value) -> Result<usize, String> {
        let list = |key: &str| -> Result<Vec<Entry>, String> {
            let Some(v) = content.get(key) else {
                return Ok(Vec::new());
            };
            let arr = v
                .as_array()
                .ok_or_else(|| format!("checkpoint `{key}` must be a list"))?;
            arr.iter()
                .map(|x| {
                    let a = x.as_array().filter(|a| a.len() == 2 || a.len() == 3).ok_or_else(|| {
                        format!("checkpoint `{key}` entries are [start, end] or [start, end, indices], got {x}")
                    })?;
                    let n = |i: usize| {
                        a[i].as_u64()
                            .ok_or_else(|| format!("checkpoint `{key}`: {x} holds a non-integer"))
                    };
                    let ix = match a.get(2) {
                        None | Some(Value::Null) => None,
                        Some(v) => Some(
                            serde_json::from_value::<Vec<u64>>(v.clone())
                                .map_err(|e| format!("checkpoint `{key}` indices: {e}"))?,
                        ),
                    };
                    let (s, e) = (n(0)?, n(1)?);
                    if e < s || e > self.params.dataset_size {
                        return Err(format!("checkpoint `{key}`: [{s}, {e}) is outside the dataset"));
                    }
                    Ok((s, e, ix))
                })
                .collect()
        };
        let doing = list("doing")?;
        let todo = list("todo")?;
        let epoch = content
            .get("epoch")
            .and_then(Value::as_u64)
            .ok_or("checkpoint `epoch` must be an integer")? as u32;
        if epoch > self.params.num_epochs {
            return Err(format!(
                "checkpoint epoch {epoch} is past the dataset's {} epochs",
                self.params.num_epochs
            ));
        }
        let sub_epoch = content
            .get("sub_epoch")
            .and_then(Value::as_u64)
            .map(|s| s as u32)
            .unwrap_or(self.sub_epochs as u32);
        let cur = epoch.saturating_sub(1);
        self.todo.clear();
        self.doing.clear();
        self.last_get.clear();
        let n = doing.len() + todo.len();
        for (s, e, ix) in doing.into_iter().chain(todo) {
            let shuffled = ix.is_none() && self.params.shuffle && self.params.storage_type == Storage::Text;
            self.todo.push_back(Todo::Shard {
                task_id: None,
                shard: Shard {
                    start: s,
                    end: e,
                    epoch: cur,
                    sub_epoch: sub_epoch.saturating_sub(1),
                    indices: ix,
                    shuffled,
                },
                failures: 0,
            });
        }
        self.epoch = epoch;
        self.sub_epoch = sub_epoch;
        Ok(n)
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

    /// The task as workers get it.
    pub fn task_json(&self, task_id: u64, shard: &Shard) -> Value {
        json!({
            "type": "task",
            "task_type": self.params.task_type,
            "task_id": task_id,
            "dataset_name": self.params.dataset_name,
            "shard": {"start": shard.start, "end": shard.end, "indices": self.indices(shard)},
            "epoch": shard.epoch,
            "sub_epoch": shard.sub_epoch,
            "batch_size": self.params.batch_size,
        })
    }

    pub fn progress_json(&self, with_lists: bool) -> Value {
        let total = self.params.dataset_size * self.params.num_epochs as u64;
        let mut v = json!({
            "dataset_name": self.params.dataset_name,
            "params": self.params,
            "shard_size": self.shard_size,
            "shards_per_epoch": self.shards_per_epoch,
            "sub_epochs": self.sub_epochs,
            "epoch": self.epoch,
            "sub_epoch": self.sub_epoch,
            "todo": self.todo_shards(),
            "doing": self.doing.len(),
            "dead_letter": self.dead_letter.len(),
            "done_shards": self.done_shards,
            "done_records": self.done_records,
            "total_records": total,
            "done_by_epoch": self.done_by_epoch,
            "completed_step": self.completed_step,
            "requeued": self.requeued,
            "completed": self.completed(),
        });
        if with_lists {
            v["doing_tasks"] = self
                .doing
                .iter()
                .map(|(id, d)| {
                    json!({"task_id": id, "node": d.node, "start": d.shard.start, "end": d.shard.end,
                           "epoch": d.shard.epoch, "start_ns": d.start_ns, "failures": d.failures})
                })
                .collect();
            v["dead_letter_shards"] = self
                .dead_letter
                .iter()
                .map(|d| {
                    let mut x = serde_json::to_value(d).expect("serializes");
                    x["records"] = json!(
                        self.indices(&d.shard)
                            .unwrap_or_else(|| (d.shard.start..d.shard.end).collect())
                    );
                    x
                })
                .collect();
        }
        v
    }
}

/// A checkpoint entry: start, end and explicit record indices.
type Entry = (u64, u64, Option<Vec<u64>>);

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

#[cfg(test)]
mod tests {
    use super::*;

    fn params(size: u64, batch: u64, minibatches: u64, epochs: u32) -> DatasetParams {
        DatasetParams {
            dataset_name: "d".into(),
            batch_size: batch,
            num_epochs: epochs,
            dataset_size: size,
            shuffle: false,
            num_minibatches_per_shard: minibatches,
            task_type: TaskType::Training,
            storage_type: Storage::Table,
            seed: None,
        }
    }

    fn ds(size: u64, batch: u64, minibatches: u64, epochs: u32) -> Dataset {
        Dataset::new(params(size, batch, minibatches, epochs), 100, 50_000, 0)
    }

    fn take(d: &mut Dataset, node: &str) -> (u64, Shard) {
        match d.next_task(node, "", 0) {
            TaskAnswer::Task { task_id, shard } => (task_id, shard),
            other => panic!("expected a task, got {other:?}"),
        }
    }

    #[test]
    fn r9_2_shard_size_and_split() {
        // [test/verified] batch 16, 2 minibatches, 100 records, 2 epochs.
        let mut d = ds(100, 16, 2, 2);
        assert_eq!(d.shard_size, 32);
        let mut got = Vec::new();
        loop {
            match d.next_task("w0", "", 0) {
                TaskAnswer::Task { task_id, shard } => {
                    got.push((shard.epoch, shard.start, shard.end));
                    assert_eq!(
                        d.report(task_id, "w0", "", 4, 0),
                        ReportAnswer::Done {
                            steps: shard.len().div_ceil(16)
                        }
                    );
                }
                TaskAnswer::End => break,
                TaskAnswer::Wait => panic!("nothing is DOING"),
            }
        }
        let per_epoch = [(0, 32), (32, 64), (64, 96), (96, 100)];
        let want: Vec<_> = (0..2u32)
            .flat_map(|e| per_epoch.iter().map(move |(s, x)| (e, *s, *x)))
            .collect();
        assert_eq!(got, want, "8 shards in all");
        assert!(d.completed());
    }

    #[test]
    fn r9_2_default_minibatches() {
        // The master's default when the client sends 0.
        let d = Dataset::new(params(1000, 4, 0, 1), 100, 50_000, 0);
        assert_eq!(d.shard_size, 400);
        assert_eq!(d.params.num_minibatches_per_shard, 100);
    }

    #[test]
    fn r9_3_next_epoch_while_doing_is_not_empty() {
        // [verified] TODO empty and epochs remain: the next epoch's shards are
        // created even while DOING is not empty.
        let mut d = ds(100, 16, 2, 2);
        for _ in 0..4 {
            take(&mut d, "w0");
        }
        assert_eq!(d.doing.len(), 4);
        let (_, s) = take(&mut d, "w1");
        assert_eq!((s.epoch, s.start, s.end), (1, 0, 32));
        // Last epoch exhausted with DOING left: WAIT, not END.
        for _ in 0..3 {
            take(&mut d, "w1");
        }
        assert_eq!(d.next_task("w2", "", 0), TaskAnswer::Wait);
    }

    #[test]
    fn r9_3_todo_is_fifo_and_sub_epochs() {
        let mut d = ds(10, 1, 1, 1);
        let starts: Vec<u64> = (0..10).map(|_| take(&mut d, "w").1.start).collect();
        assert_eq!(starts, (0..10).collect::<Vec<_>>());
        // [verified] 1e7 records / shard 100 -> 2 sub-epochs.
        let mut big = ds(10_000_000, 100, 1, 1);
        assert_eq!(big.shards_per_epoch, 100_000);
        assert_eq!(big.sub_epochs, 2);
        let (_, first) = take(&mut big, "w");
        assert_eq!((first.sub_epoch, first.start), (0, 0));
        assert_eq!(big.todo_shards(), 49_999, "only the first sub-epoch is created");
        for _ in 0..49_999 {
            take(&mut big, "w");
        }
        let (_, second) = take(&mut big, "w");
        assert_eq!((second.epoch, second.sub_epoch, second.start), (0, 1, 5_000_000));
    }

    #[test]
    fn shuffles() {
        // Table + shuffle: the order of shards is shuffled, the shards are the same.
        let mut p = params(100, 10, 1, 2);
        p.shuffle = true;
        let mut d = Dataset::new(p.clone(), 100, 50_000, 0);
        let e0: Vec<u64> = (0..10).map(|_| take(&mut d, "w").1.start).collect();
        let e1: Vec<u64> = (0..10).map(|_| take(&mut d, "w").1.start).collect();
        let mut sorted = e0.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).map(|i| i * 10).collect::<Vec<_>>());
        assert_ne!(e0, sorted, "order is shuffled");
        assert_ne!(e0, e1, "each epoch has its own order");
        // Text + shuffle: record indices are shuffled into shard.indices.
        p.storage_type = Storage::Text;
        let mut d = Dataset::new(p, 100, 50_000, 0);
        let mut seen = Vec::new();
        for _ in 0..10 {
            let (_, s) = take(&mut d, "w");
            let ix = d.indices(&s).expect("text shuffle has indices");
            assert_eq!(ix.len() as u64, s.len());
            seen.extend(ix);
        }
        assert_ne!(seen[..10], (0..10).collect::<Vec<_>>()[..]);
        seen.sort();
        assert_eq!(
            seen,
            (0..100).collect::<Vec<_>>(),
            "a permutation of the epoch's records"
        );
    }

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 7, 64, 100, 1000, 4097] {
            let mut v: Vec<u64> = (0..n).map(|i| permute(i, n, 42)).collect();
            v.sort();
            assert_eq!(v, (0..n).collect::<Vec<_>>(), "n = {n}");
        }
    }

    #[test]
    fn r9_4_failure_requeues_at_the_tail_with_the_same_id() {
        let mut d = ds(40, 10, 1, 1);
        let (t0, s0) = take(&mut d, "w0");
        let (_t1, _) = take(&mut d, "w1");
        assert_eq!(d.report(t0, "w0", "boom", 4, 0), ReportAnswer::Requeued { failures: 1 });
        // The two untouched shards come first, then the failed one, same id.
        assert_eq!(take(&mut d, "w2").1.start, 20);
        assert_eq!(take(&mut d, "w2").1.start, 30);
        let (again, s) = take(&mut d, "w2");
        assert_eq!((again, s.start), (t0, s0.start));
    }

    #[test]
    fn r9_4_d7_fourth_failure_goes_to_dead_letter_not_dropped() {
        // [verified] upstream drops the shard after 4 failures and the dataset
        // reports completed; here it is listed in the dead letters.
        let mut d = ds(10, 10, 1, 1);
        let mut answers = Vec::new();
        for _ in 0..4 {
            let (t, _) = take(&mut d, "w0");
            answers.push(d.report(t, "w0", "bad record", 4, 7));
        }
        assert_eq!(
            answers,
            vec![
                ReportAnswer::Requeued { failures: 1 },
                ReportAnswer::Requeued { failures: 2 },
                ReportAnswer::Requeued { failures: 3 },
                ReportAnswer::DeadLettered { failures: 4 },
            ]
        );
        assert!(d.completed(), "nothing left to hand out");
        assert_eq!(d.next_task("w0", "", 0), TaskAnswer::End);
        assert_eq!(d.dead_letter.len(), 1);
        let dead = &d.dead_letter[0];
        assert_eq!((dead.shard.start, dead.shard.end, dead.failures), (0, 10, 4));
        assert_eq!(dead.reason, "bad record");
        assert_eq!(d.checkpoint()["dead_letter"], json!([[0, 10]]));
        // An operator can put it back.
        assert_eq!(d.requeue_dead_letter(), 1);
        assert!(!d.completed());
        assert_eq!(take(&mut d, "w1").1.start, 0);
    }

    #[test]
    fn r9_4_dead_node_requeues_only_its_shards() {
        let mut d = ds(40, 10, 1, 1);
        let (a, _) = take(&mut d, "w0");
        let (b, _) = take(&mut d, "w1");
        let (c, _) = take(&mut d, "w0");
        let failed = d.fail_node("w0", "no heartbeat", 4, 0);
        assert_eq!(failed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![a, c]);
        assert!(d.doing.contains_key(&b));
        assert_eq!(d.todo_shards(), 3);
        // The dead node's late report is refused: its shard is someone else's now.
        assert_eq!(d.report(a, "w0", "", 4, 0), ReportAnswer::Stale);
    }

    #[test]
    fn d7_timeout_requeues_training_tasks_of_a_hung_worker() {
        let mut d = ds(20, 10, 1, 1);
        let TaskAnswer::Task { task_id: t, .. } = d.next_task("hung", "", 100) else {
            panic!()
        };
        assert!(d.time_out(1_000, 4, 1_000).is_empty(), "not yet");
        let out = d.time_out(1_000, 4, 1_101);
        assert_eq!(
            out,
            vec![(t, "hung".to_string(), ReportAnswer::Requeued { failures: 1 })]
        );
        assert_eq!(take(&mut d, "w1").1.start, 10);
        assert_eq!(take(&mut d, "w1").0, t);
    }

    #[test]
    fn r9_5_success_adds_steps() {
        // [verified] 32 records, batch 16 -> 2 steps.
        let mut d = ds(100, 16, 2, 1);
        let (t, s) = take(&mut d, "w0");
        assert_eq!(s.len(), 32);
        assert_eq!(d.report(t, "w0", "", 4, 0), ReportAnswer::Done { steps: 2 });
        assert_eq!(d.completed_step, 2);
        // The 4-record tail shard is one (partial) step.
        for _ in 0..2 {
            let (t, _) = take(&mut d, "w0");
            d.report(t, "w0", "", 4, 0);
        }
        let (t, s) = take(&mut d, "w0");
        assert_eq!(s.len(), 4);
        assert_eq!(d.report(t, "w0", "", 4, 0), ReportAnswer::Done { steps: 1 });
        assert_eq!(d.completed_step, 7);
        assert!(d.completed());
    }

    #[test]
    fn retried_calls_are_idempotent() {
        let mut d = ds(30, 10, 1, 1);
        let a = d.next_task("w0", "r1", 0);
        assert_eq!(d.next_task("w0", "r1", 0), a, "same request id: same shard");
        let TaskAnswer::Task { task_id, .. } = a else { panic!() };
        assert_eq!(d.report(task_id, "w0", "", 4, 0), ReportAnswer::Done { steps: 1 });
        assert_eq!(d.report(task_id, "w0", "", 4, 0), ReportAnswer::Duplicate);
        assert_eq!(d.done_shards, 1, "counted once");
        let TaskAnswer::Task { shard, .. } = d.next_task("w0", "r1", 0) else {
            panic!()
        };
        assert_eq!(shard.start, 10, "the old request's task is done: a new shard");
        assert_eq!(
            d.report(task_id, "w1", "", 4, 0),
            ReportAnswer::Stale,
            "another node's task"
        );
    }

    #[test]
    fn r9_7_checkpoint_and_restore_doing_first_new_ids() {
        // [verified] restore puts DOING first, then TODO, all into TODO with
        // new task ids, and sets the epoch.
        let mut d = ds(100, 16, 2, 2);
        let (t0, _) = take(&mut d, "w0"); // [0,32) DOING
        let (t1, _) = take(&mut d, "w1"); // [32,64) DOING
        d.report(t0, "w0", "", 4, 0);
        let ck = d.checkpoint();
        assert_eq!(ck["dataset_name"], "d");
        assert_eq!(ck["todo"], json!([[64, 96], [96, 100]]));
        assert_eq!(ck["doing"], json!([[32, 64]]));
        assert_eq!(ck["epoch"], 1);
        assert_eq!(ck["splitter"], Value::Null);

        let mut r = ds(100, 16, 2, 2);
        r.next_task_id = 10;
        assert_eq!(r.restore(&ck).unwrap(), 3);
        assert!(r.doing.is_empty());
        assert_eq!(r.epoch, 1);
        let got: Vec<(u64, u64, u64)> = (0..3)
            .map(|_| {
                let (id, s) = take(&mut r, "w2");
                (id, s.start, s.end)
            })
            .collect();
        assert_eq!(got, vec![(11, 32, 64), (12, 64, 96), (13, 96, 100)]);
        assert_ne!(got[0].0, t1, "a new task id");
        // Then epoch 2 (index 1) as usual.
        assert_eq!(take(&mut r, "w2").1.epoch, 1);
        // Malformed checkpoints are refused with the reason.
        for bad in [
            json!({"todo": [[1]], "epoch": 1}),
            json!({"todo": [], "epoch": "x"}),
            json!({"todo": [[0, 1000]], "epoch": 1}),
            json!({"todo": [], "epoch": 9}),
        ] {
            assert!(ds(100, 16, 2, 2).restore(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn checkpoint_of_text_shuffle_carries_indices() {
        let mut p = params(20, 5, 1, 1);
        p.shuffle = true;
        p.storage_type = Storage::Text;
        let mut d = Dataset::new(p.clone(), 100, 50_000, 0);
        let (_, s) = take(&mut d, "w");
        let ix = d.indices(&s).unwrap();
        let ck = d.checkpoint();
        assert_eq!(ck["doing"][0][2], json!(ix));
        let mut r = Dataset::new(p, 100, 50_000, 0);
        r.restore(&ck).unwrap();
        let (_, s2) = take(&mut r, "w");
        assert_eq!(r.indices(&s2).unwrap(), ix, "the same records after a restore");
    }

    #[test]
    fn reset_starts_over() {
        let mut d = ds(20, 10, 1, 1);
        let (t, _) = take(&mut d, "w");
        d.report(t, "w", "", 4, 0);
        d.reset(5);
        assert_eq!((d.epoch, d.done_shards, d.todo_shards()), (0, 0, 0));
        assert_eq!(take(&mut d, "w").1.start, 0);
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut d = ds(100, 16, 2, 2);
        take(&mut d, "w0");
        let (t, _) = take(&mut d, "w1");
        d.report(t, "w1", "x", 4, 0);
        let back: Dataset = serde_json::from_slice(&serde_json::to_vec(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        assert!(
            serde_json::to_vec(&d).unwrap().len() < 2000,
            "small whatever the dataset size"
        );
    }
}
