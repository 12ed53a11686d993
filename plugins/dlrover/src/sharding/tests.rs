//! The reference's sharding rules (section 9) and the fixed defects, one
//! test each; checkpoints, shuffles and retried calls.

use serde_json::{Value, json};

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
