//! A job whose ranks run on several nodes: every rank's timings, labelled
//! with rank and node; each node's system metrics from that node's agent
//! (its forwarded samples), or from this host where a node has none.

use serde_json::{Value, json};
use sonde_plugin_sdk::types::{EventBatch, Origin, PointColumns, SeriesKind};

use super::*;

/// A sonde agent's own telemetry: no job, its node.
fn agent(node: &str) -> Origin {
    origin("", node, -1, -1)
}

/// Rank 0 on node-a and rank 1 on node-b, each its node's local rank 0.
fn two_ranks() -> Vec<Origin> {
    vec![origin("t1", "node-a", 0, 0), origin("t1", "node-b", 1, 0)]
}

/// The all-CPU idle series of each agent in `nodes`, so that the busy share
/// reads `value(node, tick)` at `ticks` (ms).
fn agent_cpu(nodes: &[&str], ticks: &[u64], value: impl Fn(usize, u64) -> f64) -> EventBatch {
    let mut b = empty(nodes.iter().map(|n| agent(n)).collect(), &[]);
    b.point_series = vec![
        series(0, "system.cpu.utilization", SeriesKind::Gauge, &[("cpu.mode", "idle")]),
        // What a determined plugin on the agent emits is not a sample (one
        // from before the rename to `sonde.cpu.busy` had this name).
        series(
            1,
            "system.cpu.utilization",
            SeriesKind::Gauge,
            &[("determined.trial", "t1")],
        ),
    ];
    let mut c = PointColumns {
        origin: vec![],
        series: vec![],
        time: vec![],
        value: vec![],
    };
    for (i, _) in nodes.iter().enumerate() {
        for &t in ticks {
            for s in 0..2 {
                c.origin.push(i as u32);
                c.series.push(s);
                c.time.push(ms(t));
                c.value.push(if s == 0 { 1.0 - value(i, t) } else { value(i, t) });
            }
        }
    }
    b.points = Some(c);
    b
}

fn cpu_by_node(host: &FakeHost, node: &str) -> Vec<(u64, f64)> {
    host.series("sonde.cpu.busy", &[("host.name", node), ("determined.trial", "t1")])
}

#[test]
fn every_rank_reports_timings_labelled_with_its_rank_and_node() {
    for (json, ranks) in [("{}", vec![0, 1]), (r#"{"timing_ranks":"rank0"}"#, vec![0])] {
        let mut host = FakeHost::at(ms(0));
        let mut settings: Value = serde_json::from_str(json).unwrap();
        settings["lag_ms"] = 0.into();
        let mut p = start(&mut host, &settings.to_string());
        p.on_events(&mut host, progress(two_ranks(), &[(0, 0, 0), (1, 1, 0)]));
        host.now = ms(100);
        p.on_events(
            &mut host,
            timings(two_ranks(), &[(0, "forward", 10, 18, 0), (1, "forward", 11, 26, 0)]),
        );
        for rank in [0, 1] {
            let got = host.series(
                "sonde.timing.duration",
                &[
                    ("determined.rank", &rank.to_string()),
                    ("host.name", ["node-a", "node-b"][rank]),
                ],
            );
            let want: Vec<(u64, f64)> = if ranks.contains(&rank) {
                vec![(ms(10 + rank as u64), [0.008, 0.015][rank])]
            } else {
                vec![]
            };
            assert_eq!(got, want, "{json}: rank {rank}");
        }
        let (_, rows) = get(&mut p, &mut host, "GET", "/timings", "");
        let listed: Vec<(i64, String)> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["rank"].as_i64().unwrap(), r["node"].as_str().unwrap().to_string()))
            .collect();
        let want: Vec<(i64, String)> = ranks
            .iter()
            .map(|&r| (r as i64, ["node-a", "node-b"][r].to_string()))
            .collect();
        assert_eq!(listed, want, "{json}");
        // /state lists both ranks either way, and which may report timings.
        let j = job_state(&mut p, &mut host, "t1");
        assert_eq!(
            j["ranks"],
            json!([
                {"rank":0,"node":"node-a","local_rank":0,"system_metrics":true,"timings":true},
                {"rank":1,"node":"node-b","local_rank":0,"system_metrics":true,"timings":ranks.len() == 2},
            ]),
            "{json}"
        );
        assert_eq!(j["system_nodes"], json!(["node-a", "node-b"]));
        // Batch records name the node as Determined's `agent`, and carry the rank.
        p.flush(&mut host);
        let agents: Vec<(String, Option<String>)> = host
            .records
            .iter()
            .filter(|r| r.body.contains("\"forward\""))
            .map(|r| {
                let body: Value = serde_json::from_str(&r.body).unwrap();
                let rank = r
                    .attributes
                    .iter()
                    .find(|a| a.key == "determined.rank")
                    .map(|a| format!("{:?}", a.value));
                (body["agent"].as_str().unwrap().to_string(), rank)
            })
            .collect();
        assert_eq!(agents.len(), ranks.len(), "{json}: {agents:?}");
        assert_eq!(agents[0], ("node-a".to_string(), Some("Value::Int(0)".to_string())));
    }
}

#[test]
fn each_nodes_system_metrics_come_from_its_agent() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":100}"#);
    p.on_events(&mut host, progress(two_ranks(), &[(0, 0, 0), (1, 0, 0)]));
    // The agents' samples arrive late, as an export does: each waits the lag from its arrival.
    host.now = ms(1000);
    p.on_events(
        &mut host,
        agent_cpu(&["node-a", "node-b"], &[100, 200], |i, _| [0.25, 0.75][i]),
    );
    assert!(cpu_by_node(&host, "node-a").is_empty(), "waiting for the lag");
    // This host's own samples: every node of the job has an agent, so they stand for none.
    p.on_samples(&mut host, cpu_samples(&[900, 1000], &[0.5, 0.5])).unwrap();
    tick(&mut p, &mut host, 1200);
    assert_eq!(cpu_by_node(&host, "node-a"), [(ms(100), 0.25), (ms(200), 0.25)]);
    assert_eq!(cpu_by_node(&host, "node-b"), [(ms(100), 0.75), (ms(200), 0.75)]);
    assert_eq!(host.series("sonde.cpu.busy", &[]).len(), 4, "nothing else");
    // Determined's records: one per node, the node as `agent`.
    p.flush(&mut host);
    let bodies = batches(&host);
    let cpu = batch_of(&bodies, "cpu_util_simple");
    let agents: Vec<(&str, Value)> = cpu
        .iter()
        .map(|b| (b["agent"].as_str().unwrap(), b["values"].clone()))
        .collect();
    assert_eq!(
        agents,
        [("node-a", json!([25.0, 25.0])), ("node-b", json!([75.0, 75.0]))]
    );
    // A node not in the job gives it nothing.
    p.on_events(&mut host, agent_cpu(&["node-c"], &[300], |_, _| 0.1));
    tick(&mut p, &mut host, 1500);
    assert!(host.points_of("sonde.cpu.busy", &[("host.name", "node-c")]).is_empty());
}

#[test]
fn this_host_stands_in_for_nodes_without_an_agent_unless_told_otherwise() {
    // (setting, which of this host's / node-a agent's samples count, and as which node)
    let table = [
        ("auto", vec![("node-a", 0.25), ("node-b", 0.5)]),
        ("local", vec![("node-a", 0.5)]),
        ("agents", vec![("node-a", 0.25)]),
    ];
    for (from, want) in table {
        let mut host = FakeHost::at(ms(0));
        let mut p = start(&mut host, &format!(r#"{{"lag_ms":0,"system_metrics_from":"{from}"}}"#));
        assert_eq!(
            p.samples_wanted().is_some(),
            from != "agents",
            "{from}: only agents' samples need none of this host's"
        );
        // Only node-a has an agent.
        p.on_events(&mut host, agent_cpu(&["node-a"], &[50], |_, _| 0.25));
        p.on_events(&mut host, progress(two_ranks(), &[(0, 0, 0), (1, 0, 0)]));
        host.now = ms(500);
        p.on_samples(&mut host, cpu_samples(&[100], &[0.5])).unwrap();
        let mut got: Vec<(String, f64)> = host
            .points_of("sonde.cpu.busy", &[])
            .iter()
            .map(|pt| (pt.attr("host.name").unwrap().to_string(), pt.value))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let want: Vec<(String, f64)> = want.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(got, want, "{from}");
        assert!(p.has_agent("node-a"));
    }
}

#[test]
fn a_timing_without_a_batch_index_is_tied_by_its_own_ranks_reports() {
    let mut host = FakeHost::at(ms(0));
    let mut p = start(&mut host, r#"{"lag_ms":0}"#);
    // Batch 1 starts at 100 ms on rank 0 and only at 150 ms on rank 1.
    p.on_events(
        &mut host,
        progress(two_ranks(), &[(0, 0, 0), (1, 0, 0), (0, 100, 1), (1, 150, 1)]),
    );
    host.now = ms(500);
    p.on_events(
        &mut host,
        timings(two_ranks(), &[(0, "load", 120, 130, -1), (1, "load", 120, 130, -1)]),
    );
    let (_, rows) = get(&mut p, &mut host, "GET", "/timings", "");
    let got: Vec<(i64, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rank"].as_i64().unwrap(), r["batch_idx"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, [(0, 1), (1, 0)]);
}
