//! The plugin's view on the dashboard (`GET /panel`, see the SDK's `panel`):
//! each recent incident's recovery as one bar of its five phases and their
//! table, then every job's worker clocks (clock, staleness, blocked time,
//! state). Built from the JSON `/incidents` and `/clocks` serve.

use serde_json::Value;
use sonde_plugin_sdk::panel::{Cell, Panel, Segment, Table, Tone, seconds};
use sonde_plugin_sdk::types::HttpResponse;

use crate::ps::ParamServer;

const PHASE_COLORS: [&str; 5] = ["#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#59a14f"];
/// Incidents shown, newest first.
const RECENT: usize = 5;

fn ms(v: &Value) -> String {
    v.as_f64().map_or("–".into(), |ms| seconds(ms / 1e3))
}

/// The panel; on a job's page only for a job this plugin tracks.
pub fn panel(p: &ParamServer, job: Option<&str>, now: u64) -> HttpResponse {
    if let Some(name) = job
        && p.job_filter(Some(name)).next().is_none()
    {
        return Panel::none(&format!("job {name} has no parameter-server processes"));
    }
    let mut panel = Panel::new("Parameter server");
    let incidents: Vec<Value> = p
        .job_filter(job)
        .flat_map(|j| j.incidents.iter().map(|i| i.to_json(&j.checkpoints)))
        .collect();
    panel.heading("Recovery incidents");
    if incidents.is_empty() {
        panel.text(
            "no-incidents",
            "No incidents: no process has failed its heartbeats or been reported killed.",
            Tone::Muted,
        );
    }
    for inc in incidents.iter().rev().take(RECENT) {
        let id = inc["id"].to_string();
        let phases = inc["phases"].as_array().cloned().unwrap_or_default();
        let bar: Vec<Segment> = phases
            .iter()
            .filter_map(|ph| {
                let n = ph["phase"].as_u64()? as usize;
                let d = ph["duration_ms"].as_f64().filter(|d| *d > 0.0)?;
                Some(Segment::new(
                    format!("phase {n}: {} → {}", ph["from"].as_str()?, ph["to"].as_str()?),
                    d,
                    PHASE_COLORS[(n - 1) % PHASE_COLORS.len()],
                ))
            })
            .collect();
        let lat = &inc["detection_latency_ms"];
        let mut said = format!("detected {} after the last heartbeat", ms(&lat["from_last_heartbeat"]));
        if !lat["from_kill"].is_null() {
            said.push_str(&format!(", {} after the kill", ms(&lat["from_kill"])));
        }
        if !inc["total_ms"].is_null() {
            said.push_str(&format!("; recovered in {}", ms(&inc["total_ms"])));
        }
        let mut t = Table::new(
            &format!("incident-{id}"),
            &format!(
                "Incident {id}: {} / {}{}",
                inc["job"].as_str().unwrap_or(""),
                inc["process"].as_str().unwrap_or(""),
                if inc["complete"].as_bool() == Some(true) {
                    ""
                } else {
                    " (in progress)"
                }
            ),
            &["phase", "from", "to", "time", "share"],
        );
        t.row(
            "all",
            vec![
                Cell::text("all"),
                Cell::bar(bar, said),
                Cell::text(""),
                Cell::number(inc["total_ms"].as_f64().unwrap_or(f64::NAN), ms(&inc["total_ms"])),
                Cell::text(""),
            ],
        );
        for ph in &phases {
            t.row(
                &ph["phase"],
                vec![
                    Cell::text(ph["phase"].to_string()),
                    Cell::text(ph["from"].as_str().unwrap_or("")),
                    Cell::text(ph["to"].as_str().unwrap_or("")),
                    Cell::number(ph["duration_ms"].as_f64().unwrap_or(f64::NAN), ms(&ph["duration_ms"])),
                    match ph["percentage"].as_f64() {
                        Some(pc) => Cell::number(pc, format!("{pc:.0} %")),
                        None => Cell::text("–"),
                    },
                ],
            );
        }
        panel.table(t);
    }
    panel.heading("Clocks");
    let jobs: Vec<Value> = p.job_filter(job).map(|j| p.clocks_json(j, now)).collect();
    if jobs
        .iter()
        .all(|j| j["workers"].as_array().is_none_or(|w| w.is_empty()))
    {
        panel.text(
            "no-clocks",
            "No clocks reported yet (progress named \"clock\").",
            Tone::Muted,
        );
    }
    for j in jobs
        .iter()
        .filter(|j| j["workers"].as_array().is_some_and(|w| !w.is_empty()))
    {
        let max = j["max_clock"].as_f64().unwrap_or(1.0).max(1.0);
        let bound = j["staleness_bound"]
            .as_u64()
            .map(|b| format!(", staleness bound {b}"))
            .unwrap_or_default();
        let mut t = Table::new(
            &format!("clocks-{}", j["job"].as_str().unwrap_or("")),
            &format!(
                "{}: {}{bound}; clocks {} to {}",
                j["job"].as_str().unwrap_or(""),
                j["model"].as_str().unwrap_or("").to_uppercase(),
                j["min_clock"],
                j["max_clock"]
            ),
            &["worker", "clock", "staleness", "blocked", "made others wait", "state"],
        );
        for w in j["workers"].as_array().into_iter().flatten() {
            let (dead, straggler) = (
                w["dead"].as_bool() == Some(true),
                w["straggler"].as_bool() == Some(true),
            );
            let state = if w["left"].as_bool() == Some(true) {
                "left"
            } else if dead {
                "dead"
            } else if straggler {
                "straggler"
            } else if !w["waiting_since_ns"].is_null() {
                "blocked"
            } else {
                "running"
            };
            let clock = w["clock"].as_f64().unwrap_or(0.0);
            let color = if dead {
                "#e15759"
            } else if straggler {
                "#f28e2b"
            } else {
                "#4e79a7"
            };
            let row = t.row(
                w["worker"].as_str().unwrap_or(""),
                vec![
                    Cell::text(w["worker"].as_str().unwrap_or("")),
                    Cell {
                        value: Some(clock),
                        ..Cell::bar(
                            vec![
                                Segment::new("clock", clock, color),
                                Segment::new("", max - clock, "transparent"),
                            ],
                            w["clock"].to_string(),
                        )
                    },
                    match w["staleness"].as_u64() {
                        Some(s) => Cell::number(s as f64, s.to_string()),
                        None => Cell::text("–"),
                    },
                    Cell::number(w["blocked_ms"].as_f64().unwrap_or(0.0), ms(&w["blocked_ms"])),
                    Cell::number(
                        w["caused_blocked_ms"].as_f64().unwrap_or(0.0),
                        ms(&w["caused_blocked_ms"]),
                    ),
                    Cell::text(state),
                ],
            );
            if dead || straggler {
                row.tone = Tone::Error;
            }
        }
        for s in j["servers"].as_array().into_iter().flatten() {
            t.row(
                s["server"].as_str().unwrap_or(""),
                vec![
                    Cell::text(s["server"].as_str().unwrap_or("")),
                    Cell::text(s["clock"].to_string()),
                    Cell::text(""),
                    Cell::text(""),
                    Cell::text(""),
                    Cell::text("server").tone(Tone::Muted),
                ],
            );
        }
        panel.table(t);
    }
    panel.response()
}
