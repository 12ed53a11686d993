//! The plugin's view on the dashboard (`GET /panel`, see the SDK's `panel`):
//! the training speed, the job's nodes and what they use, the current
//! resource plan and why (or why there is none), shard progress per dataset,
//! and the latest failures. Built from `/overview`'s JSON, so the two agree.

use serde_json::Value;
use sonde_plugin_sdk::panel::{Cell, ListEntry, Panel, Segment, Table, Tone, percent};
use sonde_plugin_sdk::types::HttpResponse;

use crate::master::Master;

fn fixed(v: &Value, digits: usize) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or("–".into(), |x| format!("{x:.digits$}"))
}

fn mib(v: &Value) -> String {
    match v.as_f64().filter(|x| x.is_finite()) {
        None => "–".into(),
        Some(m) if m >= 1024.0 => format!("{:.1} GiB", m / 1024.0),
        Some(m) => format!("{m:.0} MiB"),
    }
}

/// What a node was given; 0 means unknown.
fn given(n: &Value, key: &str) -> Value {
    n["config"][key]
        .as_f64()
        .filter(|v| *v > 0.0)
        .map_or(Value::Null, Value::from)
}

/// A resource plan's groups and per-node changes as one line.
fn plan_line(plan: &Value) -> String {
    let mut parts: Vec<String> = plan["groups"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(t, g)| {
            format!(
                "{t}: {} × {} CPU, {}",
                g["count"],
                fixed(&g["cpu"], 1),
                mib(&g["memory_mib"])
            )
        })
        .collect();
    parts.extend(plan["nodes"].as_object().into_iter().flatten().map(|(n, r)| {
        let res: Vec<String> = [
            r["cpu"].as_f64().filter(|c| *c > 0.0).map(|c| format!("{c:.1} CPU")),
            r["memory_mib"]
                .as_f64()
                .filter(|m| *m > 0.0)
                .map(|_| mib(&r["memory_mib"])),
        ]
        .into_iter()
        .flatten()
        .collect();
        format!("{n} → {}", res.join(", "))
    }));
    parts.join("; ")
}

/// The panel; on a job's page only for a job this master counts as its own.
pub fn panel(m: &Master, job: Option<&str>, now: u64) -> HttpResponse {
    if let Some(job) = job
        && m.settings.job != job
        && !m.jobs_seen.contains(job)
    {
        return Panel::none(&format!("job {job} is not this DLRover master's"));
    }
    let o = crate::routes::overview(m, now);
    let mut p = Panel::new("Resources and data (DLRover)");
    p.stats(
        "training",
        &[
            ("training nodes running", o["workers"].to_string()),
            (
                "global step",
                if o["global_step"].is_null() {
                    "–".into()
                } else {
                    o["global_step"].to_string()
                },
            ),
            ("speed, steps/s", fixed(&o["speed"], 2)),
            ("runtime records", o["stats_records"].to_string()),
            ("strategy", o["strategy"].as_str().unwrap_or("").to_string()),
        ],
    );
    let stragglers: Vec<&str> = o["stragglers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if !stragglers.is_empty() {
        p.text(
            "stragglers",
            format!("Stragglers: {}.", stragglers.join(", ")),
            Tone::Error,
        );
    }
    let mut t = Table::new(
        "nodes",
        "Nodes",
        &[
            "node",
            "type",
            "status",
            "CPU used / given",
            "memory used / given",
            "GPU",
            "heartbeat",
            "median step",
            "flags",
        ],
    )
    .empty("No nodes yet: samples, heartbeats or shard requests create them.");
    for n in o["nodes"].as_array().into_iter().flatten() {
        let gpus: Vec<String> = n["gpus"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| {
                format!(
                    "{} {}",
                    percent(g["utilization"].as_f64().unwrap_or(f64::NAN)),
                    mib(&g["used_mib"])
                )
            })
            .collect();
        let flags: Vec<&str> = [
            (n["straggler"].as_bool() == Some(true)).then_some("straggler"),
            (n["hung"].as_bool() == Some(true)).then_some("hung"),
            n["exit_reason"].as_str().filter(|r| !r.is_empty()),
        ]
        .into_iter()
        .flatten()
        .collect();
        let age = n["last_heartbeat_age_s"].as_f64();
        let row = t.row(
            n["name"].as_str().unwrap_or(""),
            vec![
                Cell::text(n["name"].as_str().unwrap_or("")),
                Cell::text(n["type"].as_str().unwrap_or("?")),
                Cell::text(n["status"].as_str().unwrap_or("")),
                Cell::text(format!("{} / {}", fixed(&n["cpu"], 2), fixed(&given(n, "cpu"), 0))),
                Cell::text(format!("{} / {}", mib(&n["memory_mib"]), mib(&given(n, "memory_mib")))),
                Cell::text(if gpus.is_empty() { "–".into() } else { gpus.join(", ") }),
                Cell::text(match age {
                    None => "–".into(),
                    Some(a) if a < 1.0 => "now".into(),
                    Some(a) => format!("{a:.0} s ago"),
                }),
                match n["median_step_s"].as_f64() {
                    Some(s) => Cell::number(s, format!("{:.0} ms", s * 1e3)),
                    None => Cell::text("–"),
                },
                Cell::text(flags.join(" ")),
            ],
        );
        if !flags.is_empty() {
            row.tone = Tone::Error;
        }
    }
    p.table(t);

    let plan = &o["plan"];
    let latest = &plan["latest"];
    p.heading("Resource plan");
    if latest.is_null() {
        p.text("plan", "No plan yet.", Tone::Plain);
    } else {
        p.text(
            "plan",
            format!(
                "Plan #{} ({}): {}",
                latest["id"],
                latest["kind"].as_str().unwrap_or(""),
                plan_line(&latest["plan"])
            ),
            Tone::Plain,
        );
        p.text(
            "plan-why",
            format!("Why: {}", latest["reason"].as_str().unwrap_or("")),
            Tone::Plain,
        );
        let adjusted: Vec<&str> = latest["adjustments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !adjusted.is_empty() {
            p.text(
                "plan-adjusted",
                format!("Adjusted: {}.", adjusted.join("; ")),
                Tone::Muted,
            );
        }
    }
    let mut stage = format!("Stage {}; auto-scaling ", plan["stage"].as_str().unwrap_or(""));
    match plan["started"].as_bool() {
        Some(true) => stage.push_str(&format!("started ({})", plan["started_reason"].as_str().unwrap_or(""))),
        _ => stage.push_str("not started"),
    }
    if !plan["target_workers"].is_null() {
        stage.push_str(&format!("; target {} workers", plan["target_workers"]));
    }
    if let Some(why) = plan["why_no_plan"].as_str() {
        stage.push_str(&format!("; no new plan: {why}"));
    }
    p.text("plan-stage", stage, Tone::Muted);

    let mut d = Table::new(
        "datasets",
        "Shards",
        &[
            "dataset",
            "epoch",
            "records done",
            "todo",
            "doing",
            "done shards",
            "re-queued",
            "dead letters",
        ],
    )
    .empty("No dataset registered.");
    for ds in o["datasets"].as_array().into_iter().flatten() {
        let (done, total) = (
            ds["done_records"].as_f64().unwrap_or(0.0),
            ds["total_records"].as_f64().unwrap_or(0.0),
        );
        let share = if total > 0.0 { done / total } else { 0.0 };
        let epoch = match ds["epoch"].as_u64() {
            Some(e) if e > 0 => format!("{e} of {}", ds["params"]["num_epochs"]),
            _ => "not started".into(),
        };
        let row = d.row(
            ds["dataset_name"].as_str().unwrap_or(""),
            vec![
                Cell::text(ds["dataset_name"].as_str().unwrap_or("")),
                Cell::text(epoch),
                Cell {
                    value: Some(done),
                    ..Cell::bar(
                        vec![
                            Segment::new("done", done, "#3a8f5c"),
                            Segment::new("to do", (total - done).max(0.0), "#e6e6e6"),
                        ],
                        format!("{done:.0} of {total:.0} ({})", percent(share)),
                    )
                },
                Cell::number(ds["todo"].as_f64().unwrap_or(0.0), ds["todo"].to_string()),
                Cell::number(ds["doing"].as_f64().unwrap_or(0.0), ds["doing"].to_string()),
                Cell::number(ds["done_shards"].as_f64().unwrap_or(0.0), ds["done_shards"].to_string()),
                Cell::number(ds["requeued"].as_f64().unwrap_or(0.0), ds["requeued"].to_string()),
                Cell::number(ds["dead_letter"].as_f64().unwrap_or(0.0), ds["dead_letter"].to_string()),
            ],
        );
        if ds["completed"].as_bool() == Some(true) {
            row.tone = Tone::Ok;
        }
    }
    p.table(d);

    p.heading("Failures and stragglers");
    let events = o["events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            ListEntry::new(format!(
                "{} {}: {}",
                e["kind"].as_str().unwrap_or(""),
                e["subject"].as_str().unwrap_or(""),
                e["reason"].as_str().unwrap_or("")
            ))
        })
        .collect();
    p.list("events", events, "None.");
    p.response()
}
