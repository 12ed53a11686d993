//! Example: timers.
//!
//! Hooks run when something arrives. To notice that something did *not*
//! arrive, a plugin sets a timer: `Host::set_timer(after_ms, repeat)` returns
//! an id, and the host calls `on_timer(id)` when it fires. Timers do not
//! survive a re-instantiation, so `start` sets them; `configure` replaces one
//! whose period changed (cancel the old id, set a new one).
//!
//! What the plugin does: every node that sends heartbeats is expected to keep
//! sending them. A node silent for longer than `timeout_ms` gets a
//! `node-silent` decision, once; its next heartbeat gets `node-back`.
//! Settings: `{"timeout_ms": 10000}` (read with the SDK's settings helper).

use std::collections::{BTreeMap, BTreeSet};

use sonde_plugin_sdk::types::{Decision, EventBatch, EventKind, Manifest, StartInfo, Timestamp};
use sonde_plugin_sdk::{Host, Plugin, settings};

const NS_PER_MS: u64 = 1_000_000;

struct SilentNodes {
    timeout_ms: u64,
    /// The id of the repeating check timer.
    check: u64,
    /// node → time of its latest heartbeat.
    last_seen: BTreeMap<String, Timestamp>,
    /// Nodes already reported silent (each is reported once).
    silent: BTreeSet<String>,
}

/// Reads `timeout_ms` (default 10 s); unknown keys are refused.
fn timeout_ms(json: &str) -> Result<u64, String> {
    let s = settings::parse_object("timer_silent_nodes", json, &["timeout_ms"])?;
    let timeout = s.u64_in("timeout_ms", 100..=86_400_000, "milliseconds from 100 to 86400000")?;
    Ok(timeout.unwrap_or(10_000))
}

/// Check twice per timeout, so a node is reported at most half a timeout late.
fn set_check(host: &mut impl Host, timeout_ms: u64) -> u64 {
    host.set_timer(timeout_ms / 2, true)
}

impl Plugin for SilentNodes {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        let timeout_ms = timeout_ms(&info.settings)?;
        Ok(SilentNodes {
            timeout_ms,
            check: set_check(host, timeout_ms),
            last_seen: BTreeMap::new(),
            silent: BTreeSet::new(),
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Reports nodes whose heartbeats stopped".into(),
            events: vec![EventKind::Heartbeats],
            ..Default::default()
        }
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        let timeout_ms = timeout_ms(json)?; // refused: the old settings stay
        if timeout_ms != self.timeout_ms {
            host.cancel_timer(self.check);
            self.check = set_check(host, timeout_ms);
            self.timeout_ms = timeout_ms;
        }
        Ok(())
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let Some(hb) = &batch.heartbeats else { return Ok(()) };
        for (&origin, &time) in hb.origin.iter().zip(&hb.time) {
            let Some(node) = batch.origins.get(origin as usize).map(|o| o.node.clone()) else {
                continue;
            };
            if self.silent.remove(&node) {
                host.emit_decision(&decision("node-back", &node, "heartbeats resumed".into()));
            }
            let seen = self.last_seen.entry(node).or_insert(time);
            *seen = (*seen).max(time);
        }
        Ok(())
    }

    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        if id != self.check {
            return Ok(()); // a timer this instance no longer uses
        }
        let now = host.now();
        for (node, &seen) in &self.last_seen {
            let quiet_ms = now.saturating_sub(seen) / NS_PER_MS;
            if quiet_ms > self.timeout_ms && self.silent.insert(node.clone()) {
                let reason = format!("no heartbeat for {quiet_ms} ms (timeout {} ms)", self.timeout_ms);
                host.emit_decision(&decision("node-silent", node, reason));
            }
        }
        Ok(())
    }
}

fn decision(kind: &str, node: &str, reason: String) -> Decision {
    Decision {
        kind: kind.into(),
        subject: node.into(),
        reason,
        body: "{}".into(),
        ..Default::default()
    }
}

sonde_plugin_sdk::export_plugin!(SilentNodes);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::{FakeHost, Timer};
    use sonde_plugin_sdk::types::{HeartbeatColumns, Origin};

    use super::*;

    fn beats(nodes: &[&str], time: Timestamp) -> EventBatch {
        EventBatch {
            origins: nodes
                .iter()
                .map(|n| Origin {
                    node: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            heartbeats: Some(HeartbeatColumns {
                origin: (0..nodes.len() as u32).collect(),
                time: vec![time; nodes.len()],
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_silent_node_is_reported_once_and_again_when_it_comes_back() {
        let mut host = FakeHost::default();
        let info = StartInfo {
            settings: r#"{"timeout_ms": 1000}"#.into(),
            ..Default::default()
        };
        let mut p = SilentNodes::start(&mut host, info).unwrap();
        let check = host.last_timer;
        assert_eq!(
            host.timers[&check],
            Timer {
                after_ms: 500,
                repeat: true
            }
        );

        p.on_events(&mut host, beats(&["a", "b"], 0)).unwrap();
        host.advance_ms(800);
        let now = host.now;
        p.on_events(&mut host, beats(&["b"], now)).unwrap();
        host.advance_ms(700); // a: 1500 ms quiet, b: 700 ms
        p.on_timer(&mut host, check).unwrap();
        p.on_timer(&mut host, check).unwrap();
        let silent = host.decisions_of("node-silent");
        assert_eq!(silent.len(), 1, "reported once");
        assert_eq!(silent[0].subject, "a");
        assert!(silent[0].reason.contains("1500 ms"), "{}", silent[0].reason);

        let now = host.now;
        p.on_events(&mut host, beats(&["a"], now)).unwrap();
        assert_eq!(host.decisions_of("node-back")[0].subject, "a");
        p.on_timer(&mut host, 999).unwrap(); // not ours: nothing happens
        assert_eq!(host.decisions.len(), 2);
    }

    #[test]
    fn a_new_timeout_replaces_the_timer_and_a_bad_one_is_refused() {
        let mut host = FakeHost::default();
        let mut p = SilentNodes::start(&mut host, StartInfo::default()).unwrap();
        let first = host.last_timer;
        assert_eq!(host.timers[&first].after_ms, 5000, "default timeout 10 s");
        p.configure(&mut host, r#"{"timeout_ms": 2000}"#).unwrap();
        assert!(!host.timers.contains_key(&first), "the old timer is cancelled");
        assert_eq!(
            host.timers.values().collect::<Vec<_>>(),
            [&Timer {
                after_ms: 1000,
                repeat: true
            }]
        );
        let e = p.configure(&mut host, r#"{"timeout": 5}"#).unwrap_err();
        assert!(e.contains("unknown setting `timeout`"), "{e}");
        let e = p.configure(&mut host, r#"{"timeout_ms": 5}"#).unwrap_err();
        assert!(e.contains("`timeout_ms` must be milliseconds from 100"), "{e}");
        assert_eq!(p.timeout_ms, 2000, "refused settings leave the old ones");
    }
}
