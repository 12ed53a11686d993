//! The plugin's view on the dashboard (`GET /panel`, see the SDK's `panel`):
//! per model goodput, SLO attainment, latency percentiles, where the time
//! went and why requests missed their SLO, drawn from `/summary`'s figures so
//! the two never disagree.

use serde_json::Value;
use sonde_plugin_sdk::panel::{Cell, Panel, Segment, Table, Tone, percent, seconds};
use sonde_plugin_sdk::types::HttpResponse;

use crate::plugin::Clockwork;
use crate::routes::summary;

/// Miss causes in the order and colours the bar draws them.
const CAUSES: [(&str, &str); 5] = [
    ("coldstart", "#4e79a7"),
    ("queueing", "#f28e2b"),
    ("misprediction", "#e15759"),
    ("late_send", "#76b7b2"),
    ("error", "#59a14f"),
];
const PARTS: [&str; 4] = ["queueing", "network", "execution", "controller"];

/// The panel; on a job's page only for a job whose requests this plugin saw.
pub fn panel(p: &Clockwork, job: Option<&str>) -> HttpResponse {
    let models = match job {
        None => None,
        Some(job) => match p.jobs.get(job) {
            Some(models) => Some(models),
            None => return Panel::none(&format!("no serving requests from job {job}")),
        },
    };
    let s = summary(p);
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut panel = Panel::new("Serving (Clockwork)");
    let logs: Vec<String> = s["logs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| match l["error"].as_str() {
            Some(e) => format!("{}: not written: {e}", l["name"].as_str().unwrap_or("log")),
            None => format!("{}: {} rows", l["name"].as_str().unwrap_or("log"), l["rows"]),
        })
        .collect();
    panel.text(
        "logs",
        format!("{} · window {} s", logs.join(" · "), s["window_s"]),
        Tone::Muted,
    );
    let mut t = Table::new(
        "models",
        "Models",
        &[
            "model",
            "requests",
            "goodput r/s",
            "SLO attainment",
            "p50",
            "p99",
            "max",
            "cold-start share of served",
            "mean batch",
            "time split (mean)",
            "SLO misses by cause",
        ],
    )
    .empty("No requests yet: post `requests` rows (docs/ingest.md).");
    // On a job's page, that job's models only.
    let of_job = |m: &Value| models.is_none_or(|ms| m["model_id"].as_u64().is_some_and(|id| ms.contains(&id)));
    for m in s["models"].as_array().into_iter().flatten().filter(|m| of_job(m)) {
        let misses: Vec<(&str, &str, u64)> = CAUSES
            .iter()
            .map(|(c, color)| (*c, *color, m["misses"][c].as_u64().unwrap_or(0)))
            .collect();
        let said: Vec<String> = misses
            .iter()
            .filter(|x| x.2 > 0)
            .map(|(c, _, n)| format!("{c} {n}"))
            .collect();
        let goodput = m["last_window"]["goodput_rps"].as_f64();
        let lat = &m["latency_s"];
        let split: Vec<String> = PARTS
            .iter()
            .map(|part| format!("{part} {}", seconds(f(&m["time_split_mean_s"][part]))))
            .collect();
        t.row(
            &m["model_id"],
            vec![
                Cell::text(m["model_id"].to_string()),
                Cell::number(f(&m["requests"]), m["requests"].to_string()),
                match goodput {
                    Some(g) => Cell::number(g, format!("{g:.1}")),
                    None => Cell::text("–"),
                },
                Cell::number(f(&m["slo_attainment"]), percent(f(&m["slo_attainment"]))),
                Cell::number(f(&lat["p50"]), seconds(f(&lat["p50"]))),
                Cell::number(f(&lat["p99"]), seconds(f(&lat["p99"]))),
                Cell::number(f(&lat["max"]), seconds(f(&lat["max"]))),
                Cell::number(f(&m["coldstart_share"]), percent(f(&m["coldstart_share"]))),
                Cell::number(f(&m["mean_batch"]), format!("{:.2}", f(&m["mean_batch"]))),
                Cell::text(split.join(" · ")),
                Cell::bar(
                    misses
                        .iter()
                        .filter(|x| x.2 > 0)
                        .map(|(c, color, n)| Segment::new(*c, *n as f64, color))
                        .collect(),
                    if said.is_empty() {
                        "none".into()
                    } else {
                        said.join(", ")
                    },
                ),
            ],
        );
    }
    panel.table(t);
    panel.response()
}
