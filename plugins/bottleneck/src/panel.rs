//! The plugin's view on the dashboard (`GET /panel`, see the SDK's `panel`).
//! On a job's page: the verdict strip, one row per rank and one column per
//! batch (or MPI window), each cell coloured by its step's verdict and marked
//! where the rank finished last, with the persistent straggler said above
//! it. A job that reports its operations gets the What-if replay first: its
//! slowdown and what explains it, the stage view of a pipeline job (each
//! stage's compute per rank and step, and what balancing it would gain) and
//! the ranks whose fixing recovers most. Without a job: the jobs judged, each
//! linking to its page.

use sonde_plugin_sdk::panel::{Cell, ListEntry, Panel, Segment, Strip, StripCell, Table, Tone, percent, seconds};
use sonde_plugin_sdk::types::HttpResponse;

use crate::plugin::{Bottleneck, named_sentence};
use crate::verdict::Verdict;
use crate::whatif::{Analysis, Culprit, Diagnosis};

/// Candidate ranks listed under the What-if replay.
const TOP_WORKERS: usize = 5;

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
    let mut panel = Panel::new(if job.whatif.is_some() {
        "What-if diagnosis"
    } else {
        "Step verdicts"
    });
    if let Some((a, d)) = &job.whatif {
        whatif(&mut panel, a, d, &job.ops.node_names);
        if job.rows.is_empty() {
            return panel.response();
        }
        panel.heading("Step verdicts");
    }
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

/// A bar cell whose number is kept exact (`data-value`).
fn bar(label: &str, value: f64, of: f64, text: String, color: &str) -> Cell {
    let mut c = Cell::bar(
        vec![
            Segment::new(label, value.max(0.0), color),
            Segment::new("", (of - value).max(0.0), "transparent"),
        ],
        text,
    );
    c.value = Some(value);
    c
}

/// The What-if replay of the job's last steps: the answer, the shares, the
/// stages (a pipeline job) and the ranks whose fixing recovers most.
fn whatif(panel: &mut Panel, a: &Analysis, d: &Diagnosis, nodes: &[String]) {
    panel.heading(format!("What-if replay of the last {} steps", a.steps.len()));
    let tone = if matches!(d.culprit, Culprit::None) {
        Tone::Plain
    } else {
        Tone::Error
    };
    panel.text("whatif-sentence", named_sentence(d, nodes), tone);
    panel.stats(
        "whatif-shares",
        &[
            ("steps over their ideal", format!("{:.2}×", a.slowdown)),
            ("single ranks explain", percent(a.worker_share)),
            ("stage imbalance explains", percent(a.stage_share)),
            ("ranks", a.ranks.to_string()),
            ("operations", a.ops.to_string()),
        ],
    );
    if a.stages > 1 {
        let mut stages = Table::new(
            "stages",
            "Pipeline stages",
            &[
                "stage",
                "ranks",
                "compute per rank and step",
                "against the other stages",
                "the job gains if it matched them",
            ],
        );
        let mut costs = a.stage_costs.clone();
        costs.sort_by_key(|c| c.stage);
        let longest = costs.iter().map(|c| c.compute_ns).fold(0.0, f64::max);
        let named = match d.culprit {
            Culprit::Stage { stage, .. } => Some(stage),
            _ => None,
        };
        for c in &costs {
            let ranks = a.stages_fixed.iter().find(|g| g.id == c.stage).map_or(0, |g| g.ranks);
            let row = stages.row(
                c.stage,
                vec![
                    Cell::text(format!("stage {}", c.stage)),
                    Cell::number(ranks as f64, ranks.to_string()),
                    bar(
                        "compute (ms)",
                        c.compute_ns / 1e6,
                        longest / 1e6,
                        seconds(c.compute_ns / 1e9),
                        "#4f8fc9",
                    ),
                    Cell::number(c.excess * 100.0, format!("{:+.1} %", c.excess * 100.0)),
                    Cell::number(c.cost.max(0.0) * 100.0, percent(c.cost.max(0.0))),
                ],
            );
            if named == Some(c.stage) {
                row.tone = Tone::Error;
            }
        }
        panel.table(stages);
    }
    let mut workers = Table::new(
        "whatif-ranks",
        "Ranks whose fixing recovers most",
        &["rank", "node", "dp", "stage", "tp", "its slowest kind", "recovers"],
    )
    .empty("No single rank stands out.");
    for w in a.workers.iter().filter(|w| w.gain > 0.0).take(TOP_WORKERS) {
        workers.row(
            w.rank,
            vec![
                Cell::text(format!("rank {}", w.rank)),
                Cell::text(nodes.get(w.node as usize).cloned().unwrap_or_else(|| "?".into())),
                Cell::number(w.dp as f64, w.dp.to_string()),
                Cell::number(w.stage as f64, w.stage.to_string()),
                Cell::number(w.tp as f64, w.tp.to_string()),
                Cell::text(w.cause.name()),
                bar(
                    "recovers (%)",
                    w.gain.min(1.0) * 100.0,
                    100.0,
                    percent(w.gain),
                    "#d0554b",
                ),
            ],
        );
    }
    panel.table(workers);
}
