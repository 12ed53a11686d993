//! The dataset as JSON on the wire: its checkpoint (DLRover's ShardCheckpoint) written
//! and restored, and the task and progress objects the routes answer with.

use serde_json::{Value, json};

use super::{Dataset, Shard, Storage, Todo};

impl Dataset {
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
