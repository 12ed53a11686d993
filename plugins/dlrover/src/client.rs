//! The sharding client's completion rule (R9.6), for workers written in Rust
//! and as the reference for tests/py/dlrover_worker.py: `batch_done(n)`
//! credits n records to the oldest pending task; a task whose count reaches
//! its length is reported, and what is over carries to the next one.

use std::collections::VecDeque;

#[derive(Debug, Default)]
pub struct Pending {
    /// (task id, records in its shard, records done)
    tasks: VecDeque<(u64, u64, u64)>,
}

impl Pending {
    pub fn add(&mut self, task_id: u64, len: u64) {
        self.tasks.push_back((task_id, len, 0));
    }

    /// Credits `n` records; returns the task ids now complete, oldest first.
    pub fn batch_done(&mut self, mut n: u64) -> Vec<u64> {
        let mut done = Vec::new();
        while n > 0 {
            let Some(front) = self.tasks.front_mut() else { break };
            let take = n.min(front.1 - front.2);
            front.2 += take;
            n -= take;
            if front.2 == front.1 {
                done.push(front.0);
                self.tasks.pop_front();
            }
        }
        done
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r9_6_batch_done_carries_over() {
        let mut p = Pending::default();
        p.add(1, 32);
        p.add(2, 32);
        p.add(3, 4);
        assert_eq!(p.batch_done(16), Vec::<u64>::new());
        assert_eq!(
            p.batch_done(20),
            vec![1],
            "16 + 20 = 36: task 1 done, 4 carry to task 2"
        );
        assert_eq!(p.batch_done(28), vec![2]);
        assert_eq!(p.batch_done(16), vec![3], "overflow beyond the last task is dropped");
        assert!(p.is_empty());
    }
}
