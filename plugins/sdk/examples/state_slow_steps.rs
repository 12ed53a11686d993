//! Example: state across calls, and across restarts.
//!
//! A plugin keeps state in two places, and this one uses both:
//!
//! - **Its own value** (`self`): kept between hook calls for as long as the
//!   instance lives. Here: each rank's recent step durations.
//! - **The host's state store** (`Host::state_*`): kept on disk by the host,
//!   so it survives a trap (the host re-creates the instance and calls
//!   `start` again) and a restart of sonde. Here: how many slow steps each job
//!   had, which `start` reads back.
//!
//! What the plugin does: a training step (a timing named `train_batch`) that
//! takes more than twice the median of the same rank's previous steps is
//! flagged with a `slow-step` decision and counted per job.

use std::collections::{BTreeMap, HashMap, VecDeque};

use sonde_plugin_sdk::types::{Decision, EventBatch, EventKind, Manifest, Severity, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

/// The timing that marks one training step.
const STEP: &str = "train_batch";
/// Steps remembered per rank.
const WINDOW: usize = 20;
/// Steps needed before a median means something.
const MIN_HISTORY: usize = 5;
/// Slower than this many medians is slow.
const FACTOR: f64 = 2.0;
/// State-store keys: `slow/<job>` holds that job's count as decimal text.
const KEY_PREFIX: &str = "slow/";

struct SlowSteps {
    /// (job, rank) → that rank's latest step durations (ns), oldest first.
    /// Memory only: after a restart the window refills from new steps.
    recent: HashMap<(String, i32), VecDeque<u64>>,
    /// job → slow steps so far; every change is written to the store.
    slow: BTreeMap<String, u64>,
}

impl Plugin for SlowSteps {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        // Read back what an earlier instance stored. A value we cannot read
        // is logged and skipped, never a reason to refuse to start.
        let mut slow = BTreeMap::new();
        for key in host.state_keys(KEY_PREFIX) {
            let count = host
                .state_get(&key)
                .and_then(|v| String::from_utf8(v).ok()?.parse().ok());
            match count {
                Some(n) => {
                    slow.insert(key[KEY_PREFIX.len()..].to_string(), n);
                }
                None => host.log(Severity::Warn, &format!("ignoring unreadable state {key:?}")),
            }
        }
        if info.restarts > 0 {
            host.log(
                Severity::Info,
                &format!("restart {}: {} jobs restored", info.restarts, slow.len()),
            );
        }
        Ok(SlowSteps {
            recent: HashMap::new(),
            slow,
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Flags training steps slower than twice their rank's median".into(),
            events: vec![EventKind::Timings],
            ..Default::default()
        }
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let Some(t) = &batch.timings else { return Ok(()) };
        for i in 0..t.start.len() {
            // Columns index the batch's interned tables; a bad index is the
            // reporter's mistake: skip the row rather than panic (a trap).
            let (Some(name), Some(origin)) = (
                batch.names.get(t.name[i] as usize),
                batch.origins.get(t.origin[i] as usize),
            ) else {
                continue;
            };
            if name != STEP {
                continue;
            }
            let took = t.end[i].saturating_sub(t.start[i]);
            let history = self.recent.entry((origin.job.clone(), origin.rank)).or_default();
            if history.len() >= MIN_HISTORY {
                let median = median(history);
                if took as f64 > FACTOR * median as f64 {
                    let count = self.slow.entry(origin.job.clone()).or_insert(0);
                    *count += 1;
                    let count = *count;
                    // Durable before we move on; a full disk costs the count,
                    // not the decision.
                    let key = format!("{KEY_PREFIX}{}", origin.job);
                    if let Err(e) = host.state_put(&key, count.to_string().as_bytes()) {
                        host.log(Severity::Warn, &format!("could not store {key}: {e}"));
                    }
                    host.emit_decision(&Decision {
                        kind: "slow-step".into(),
                        subject: format!("{}/rank-{}", origin.job, origin.rank),
                        reason: format!(
                            "step took {} ms, the median is {} ms",
                            took / 1_000_000,
                            median / 1_000_000
                        ),
                        body: serde_json::json!({"took_ns": took, "median_ns": median, "slow_steps": count})
                            .to_string(),
                        ..Default::default()
                    });
                }
            }
            history.push_back(took);
            if history.len() > WINDOW {
                history.pop_front();
            }
        }
        Ok(())
    }
}

fn median(values: &VecDeque<u64>) -> u64 {
    let mut sorted: Vec<u64> = values.iter().copied().collect();
    sorted.sort_unstable();
    sorted[sorted.len() / 2]
}

sonde_plugin_sdk::export_plugin!(SlowSteps);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{Origin, TimingColumns};

    use super::*;

    const MS: u64 = 1_000_000;

    /// One rank's steps of the given durations (ms), back to back.
    fn steps(job: &str, ms: &[u64]) -> EventBatch {
        let mut start = Vec::new();
        let mut end = Vec::new();
        let mut t = 0;
        for d in ms {
            start.push(t);
            t += d * MS;
            end.push(t);
        }
        EventBatch {
            origins: vec![Origin {
                job: job.into(),
                rank: 0,
                ..Default::default()
            }],
            names: vec![STEP.into()],
            timings: Some(TimingColumns {
                origin: vec![0; ms.len()],
                name: vec![0; ms.len()],
                step: vec![-1; ms.len()],
                start,
                end,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_step_over_twice_the_median_is_flagged_and_the_count_survives_a_restart() {
        let mut host = FakeHost::default();
        let mut p = SlowSteps::start(&mut host, StartInfo::default()).unwrap();
        // 190 ms is under 2 × 100: not slow. 250 ms is.
        p.on_events(&mut host, steps("j", &[100, 100, 100, 100, 100, 190, 250]))
            .unwrap();
        assert_eq!(host.decisions_of("slow-step").len(), 1);
        assert_eq!(host.decisions[0].subject, "j/rank-0");
        assert_eq!(host.store.kv["slow/j"], b"1");

        // A new host process over the same store: the count comes back; the
        // in-memory window does not, so five new steps are needed first.
        let mut host = host.restarted(0);
        let info = StartInfo {
            restarts: 1,
            ..Default::default()
        };
        let mut p = SlowSteps::start(&mut host, info).unwrap();
        assert!(host.logged("1 jobs restored"));
        p.on_events(&mut host, steps("j", &[100, 300])).unwrap();
        assert!(host.decisions.is_empty(), "no median yet");
        p.on_events(&mut host, steps("j", &[100, 100, 100, 100, 400])).unwrap();
        assert_eq!(host.store.kv["slow/j"], b"2");
    }

    #[test]
    fn a_full_disk_keeps_the_decision_and_bad_rows_are_skipped() {
        let mut host = FakeHost {
            fail_state_writes: Some("disk full".into()),
            ..Default::default()
        };
        host.store.kv.insert("slow/old".into(), b"not a number".to_vec());
        let mut p = SlowSteps::start(&mut host, StartInfo::default()).unwrap();
        assert!(host.logged("ignoring unreadable state \"slow/old\""));
        let mut b = steps("j", &[100, 100, 100, 100, 100, 500]);
        b.timings.as_mut().unwrap().origin[0] = 7; // no such origin
        p.on_events(&mut host, b).unwrap();
        // The bad row is skipped, so only four steps made the history: no median.
        assert!(host.decisions.is_empty());
        p.on_events(&mut host, steps("j", &[100, 500])).unwrap();
        assert_eq!(host.decisions.len(), 1);
        assert!(host.logged("could not store slow/j: disk full"));
    }
}
