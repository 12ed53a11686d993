//! Worked examples of INFER5's formulas and decisions, computed by hand.

use std::collections::BTreeMap;

use super::*;
use crate::estimator::{Limits, ModelEstimator, Profile};

fn est() -> ModelEstimator {
    ModelEstimator::new(
        &Profile {
            weights_ns: 8 * MS,
            exec_ns: BTreeMap::from([(1, 2_900_000), (2, 3_600_000), (4, 5 * MS), (8, 8 * MS)]),
        },
        Limits::default(),
    )
}

#[test]
fn slo_and_deadlines_follow_set_slo() {
    let cfg = Config::default();
    let (b1, w) = (2_900_000, 8 * MS);
    let s = Slo::new(&cfg, 1000, 0.0, b1, w);
    // default 100 ms; exec 100 − 5; weights min(25, 100 − 25.9) = 25.
    assert_eq!((s.slo, s.exec_slo, s.weights_slo), (100 * MS, 95 * MS, 25 * MS));
    assert_eq!((s.response_deadline, s.deadline), (1000 + 100 * MS, 1000 + 95 * MS));
    // slo_factor 2: 5.8 ms; exec max(0.8, 10 + 5) = 15; weights: 5.8 < 25.9
    // keeps 5.8 (Clockwork's unsigned guard), then max(5.8, 15) = 15.
    let s = Slo::new(&cfg, 0, 2.0, b1, w);
    assert_eq!((s.slo, s.exec_slo, s.weights_slo), (5_800_000, 15 * MS, 15 * MS));
    // slo_factor 10: 29 ms; exec 24; weights min(25, 3.1) = 3.1 → 15.
    let s = Slo::new(&cfg, 0, 10.0, b1, w);
    assert_eq!((s.slo, s.exec_slo, s.weights_slo), (29 * MS, 24 * MS, 15 * MS));
    // slo_factor 50: 145 ms; exec 140; weights min(25, 119.1) = 25.
    let s = Slo::new(&cfg, 0, 50.0, b1, w);
    assert_eq!((s.slo, s.exec_slo, s.weights_slo), (145 * MS, 140 * MS, 25 * MS));
}

fn q(id: u64, arrival: u64) -> Queued {
    Queued {
        request_id: id,
        arrival_ns: arrival,
        slo_factor: 0.0,
    }
}

const NOW: u64 = 1_000 * MS;

#[test]
fn drops_what_cannot_finish_and_takes_the_largest_full_batch() {
    let cfg = Config::default();
    // Deadlines (arrival + 95 ms): r1 now+2, r2 now+5, r3..r6 now+15.
    let queue = vec![
        q(1, NOW - 93 * MS),
        q(2, NOW - 90 * MS),
        q(3, NOW - 80 * MS),
        q(4, NOW - 80 * MS),
        q(5, NOW - 80 * MS),
        q(6, NOW - 80 * MS),
    ];
    let free_at = NOW + 2 * MS;
    let d = decide_batch(&cfg, &est(), &queue, NOW, free_at, 1380);
    // b1 finishes at now+4.9: r1 (now+2) cannot make it even alone.
    assert_eq!(d.dropped, vec![1]);
    // b2 (now+5.6) and b4 (now+7) drop r2 from their views; b4's view holds
    // r3..r6 = 4 requests; b8's view is too short.
    assert_eq!((d.batch_size, d.batch.clone()), (4, vec![3, 4, 5, 6]));
    assert_eq!(d.expected_exec_duration_ns, 5 * MS);
    assert_eq!(d.expected_exec_complete_ns, NOW + 7 * MS);
    // latest = max(now + 1 + 10, free_at + 10) = now+12; send_by = max(now+1, latest−5).
    assert_eq!((d.earliest_ns, d.latest_ns), (NOW, NOW + 12 * MS));
    assert_eq!(d.send_by_ns, NOW + 7 * MS);
    assert_eq!(d.report_error_at_ns, NOW + 17 * MS);

    // At half the clock everything takes twice as long: b1 = 5.8 ms, so r2
    // (now+5) cannot finish either; b4 = 10 ms still fits r3..r6 (now+15).
    let d = decide_batch(&cfg, &est(), &queue, NOW, free_at, 690);
    assert_eq!(d.dropped, vec![1, 2]);
    assert_eq!(d.batch, vec![3, 4, 5, 6]);
    assert_eq!(d.expected_exec_duration_ns, 10 * MS);
}

#[test]
fn a_long_queue_runs_the_largest_supported_batch_and_an_empty_one_nothing() {
    let cfg = Config::default();
    let queue: Vec<Queued> = (0..11).map(|i| q(i, NOW)).collect();
    let d = decide_batch(&cfg, &est(), &queue, NOW, NOW, 1380);
    assert_eq!(d.batch_size, 8);
    assert_eq!(d.batch, (0..8).collect::<Vec<_>>());
    // 3 requests: b2 (b4 needs 4).
    let d = decide_batch(&cfg, &est(), &queue[..3], NOW, NOW, 1380);
    assert_eq!(d.batch, vec![0, 1]);
    // free_at in the past counts as now + 1 ms.
    assert_eq!(d.exec_start_ns, NOW + MS);
    let d = decide_batch(&cfg, &est(), &[], NOW, NOW, 1380);
    assert!(d.batch.is_empty() && d.dropped.is_empty());
}

#[test]
fn demand_follows_the_load_tracker_formulas() {
    let cfg = Config::default();
    let s = Slo::new(&cfg, 0, 0.0, 2_900_000, 8 * MS);
    let d = Demand::new(&cfg, 7, &s, 2_900_000);
    // exec: 2.9 ms × 100 ms / 95 ms; weights: 2.9 ms × 100 ms / 25 ms.
    assert!((d.exec_size - 2_900_000.0 * 100.0 / 95.0).abs() < 1e-6);
    assert!((d.loadweights_size - 11_600_000.0).abs() < 1e-6);
}

#[test]
fn a_satisfied_model_is_not_loaded_again_and_an_unserved_one_is() {
    // Clockwork's `if (priority <= 0)` compared a pointer and never held.
    let cfg = Config::default();
    let mut t = LoadTracker::new(&cfg, &[0, 1]);
    let s = Slo::new(&cfg, 0, 0.0, 2_900_000, 8 * MS);
    let d7 = Demand::new(&cfg, 7, &s, 2_900_000);
    t.set_loaded(0, 7);
    t.add_request(&d7);
    let out = t.gpu_outstanding();
    // GPU 0: 1 ms + model 7's exec demand (3.05 ms); GPU 1: 1 ms.
    assert!((out[&0] - (1e6 + d7.exec_size)).abs() < 1e-3);
    // served by GPU 0 = 100 ms × 11.6 ms / 4.05 ms ≫ 11.6 ms: priority < 0.
    assert!(t.load_priority(7, &out) < 0.0);
    assert_eq!(t.model_to_load(1), None, "model 7 is served: GPU 1 loads nothing");
    let d9 = Demand::new(&cfg, 9, &s, 2_900_000);
    t.add_request(&d9);
    let (m, p) = t.model_to_load(1).expect("model 9 has no copy");
    assert_eq!(m, 9);
    assert!((p - 11_600_000.0).abs() < 1e-3, "all of its weights demand: {p}");
}

#[test]
fn a_request_leaving_removes_exactly_its_own_demand() {
    // Clockwork subtracted the demand after exchanging it to 0.
    let cfg = Config::default();
    let mut t = LoadTracker::new(&cfg, &[0]);
    let s = Slo::new(&cfg, 0, 0.0, 2_900_000, 8 * MS);
    let d = Demand::new(&cfg, 3, &s, 2_900_000);
    t.add_request(&d);
    t.add_request(&d);
    t.remove_request(&d);
    let (e, l) = t.outstanding(3);
    assert!((e - d.exec_size).abs() < 1e-6 && (l - d.loadweights_size).abs() < 1e-6);
    t.remove_request(&d);
    assert_eq!(t.outstanding(3), (0.0, 0.0));
}

#[test]
fn a_stale_load_error_does_not_touch_a_newer_load() {
    // Clockwork's `if (version = instance->version)` always matched.
    let cfg = Config::default();
    let mut t = LoadTracker::new(&cfg, &[0]);
    let v1 = t.start_load(0, 5);
    t.evicted(0, 5);
    let v3 = t.start_load(0, 5);
    assert!(!t.load_error(0, 5, v1), "an old version's error is ignored");
    assert_eq!(t.holders(5), vec![0], "the newer load is still under way");
    assert!(t.load_error(0, 5, v3));
    assert!(t.holders(5).is_empty());
}

#[test]
fn eviction_takes_idle_models_least_recently_used_first() {
    let cfg = Config::default();
    let mut t = LoadTracker::new(&cfg, &[0]);
    let s = Slo::new(&cfg, 0, 0.0, 2_900_000, 8 * MS);
    t.set_loaded(0, 1);
    t.set_loaded(0, 2); // idle, used before 3
    t.set_loaded(0, 3); // idle, used last
    t.add_request(&Demand::new(&cfg, 1, &s, 2_900_000)); // busy: last to go
    assert_eq!(t.eviction_order(0), vec![2, 3, 1]);
}
