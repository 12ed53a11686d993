//! The plugin's view on the dashboard (`GET /panel`, see the SDK's `panel`).
//! On a job's page: the verdict strip, one row per rank and one column per
//! batch (or MPI window), each cell coloured by its step's verdict and marked
//! where the rank finished last, with the persistent straggler said above
//! it. Without a job: the jobs judged, each linking to its page.

use sonde_plugin_sdk::panel::{ListEntry, Panel, Strip, StripCell, Tone};
use sonde_plugin_sdk::types::HttpResponse;

use crate::plugin::Bottleneck;
use crate::verdict::Verdict;

/// Cells sent at most: the strip's last batches, enough to fill a wide screen.
const MAX_ROWS: usize = 4000;

fn color(v: Verdict) -> &'static str {
    match v.name() {
        "input-bound" => "#e8a33d",
        "compute-bound" => "#4f8fc9",
        "communication-bound" => "#9b59b6",
        "host-bound" => "#d0554b",
        "idle" => "#8fbf6a",
        _ => "#b8b8b8",
    }
}

pub fn panel(p: &Bottleneck, job: Option<&str>) -> HttpResponse {
    let Some(name) = job else {
        let mut panel = Panel::new("Step verdicts");
        let jobs = p
            .jobs
            .iter()
            .map(|(n, j)| {
                let counts: Vec<String> = Verdict::ALL
                    .iter()
                    .filter(|v| j.totals[v.index()] > 0)
                    .map(|v| format!("{} {}", j.totals[v.index()], v.name()))
                    .collect();
                ListEntry::new(format!("{n}: {}", counts.join(", ")))
                    .link(format!("#/jobs/{}", sonde_plugin_sdk::percent_encode(n)))
            })
            .collect();
        panel.list(
            "jobs",
            jobs,
            "No verdicts yet: steps are judged a moment after they end, once the node's samples covering them are in.",
        );
        return panel.response();
    };
    let Some(job) = p.jobs.get(name) else {
        return Panel::none(&format!("no job named {name} has reported steps or MPI samples"));
    };
    let mut panel = Panel::new("Step verdicts");
    let rows: Vec<_> = job.rows.iter().collect();
    let rows = &rows[rows.len().saturating_sub(MAX_ROWS)..];
    let unit = if job.ranks.values().all(|r| !r.timed) {
        "window"
    } else {
        "batch"
    };
    panel.text(
        "straggler",
        match &job.persistent {
            Some(s) => format!(
                "Rank {} finished last in {} of the last {} {unit}es, by {:.0} ms on average; its steps there are {}.",
                s.rank,
                s.batches,
                s.of,
                s.late_by_s * 1e3,
                s.verdict.name()
            ),
            None => "No rank finishes last persistently.".into(),
        },
        Tone::Plain,
    );
    let ranks: Vec<i32> = job.ranks.keys().copied().collect();
    let mut columns: Vec<i64> = rows.iter().map(|r| r.batch).collect();
    columns.sort_unstable();
    columns.dedup();
    let mut counts = [0u64; 6];
    let cells = rows
        .iter()
        .filter_map(|r| {
            counts[r.verdict.index()] += 1;
            Some(StripCell {
                row: ranks.binary_search(&r.rank).ok()? as u32,
                col: columns.binary_search(&r.batch).ok()? as u32,
                category: r.verdict.index() as u32,
                marked: r.last,
                detail: format!(
                    "{}{} — {}",
                    r.verdict.name(),
                    if r.last { " (finished last)" } else { "" },
                    r.reason
                ),
            })
        })
        .collect();
    let mut categories = vec![(String::new(), String::new(), 0); Verdict::ALL.len()];
    for v in Verdict::ALL {
        categories[v.index()] = (v.name().to_string(), color(v).to_string(), counts[v.index()]);
    }
    panel.strip(Strip {
        id: "verdicts".into(),
        title: format!("Verdict per step, rank × {unit}"),
        column_label: unit.into(),
        rows: ranks.iter().map(|r| format!("rank {r}")).collect(),
        columns,
        categories,
        mark: format!("A black mark on a cell: that rank finished last in the {unit}."),
        cells,
    });
    panel.response()
}
