//! The What-if diagnosis of one trace, natively: reads a trace (JSON with
//! `ops` as rows, see `whatif::OpRow`, and `nodes`, the node names the rows
//! index) on stdin and prints one JSON object: the diagnosis, the shares,
//! the per-step slowdowns, the slow episodes found in them (`onset`) and
//! how long `analyze` + `diagnose` took (the
//! fastest of `--repeat N` runs, default 1). `scripts/bench_diagnosis.py`
//! and `tests/whatif_agrees.rs` drive it.
//!
//! `--windows N` also cuts the trace's steps into N consecutive windows and
//! diagnoses each in turn through the plugin's confirmation rule
//! (`confirm::Seen`), as the plugin does over a running job: `confirmed` is
//! what the last window says, `windows` what each said alone and confirmed.
//!
//! `cargo run --release --example whatif --manifest-path plugins/Cargo.toml -p sonde-bottleneck < trace.json`

use std::io::Read;
use std::time::Instant;

use bottleneck::confirm::Seen;
use bottleneck::onset::{OnsetSettings, episodes};
use bottleneck::whatif::{Culprit, Diagnosis, Op, OpRow, Thresholds, analyze, diagnose};
use serde::Deserialize;

#[derive(Deserialize)]
struct Trace {
    ops: Vec<OpRow>,
    #[serde(default)]
    nodes: Vec<String>,
}

/// This thread's time on a CPU (Linux's schedstat, in ns): on a shared
/// machine the wall clock also counts the time other processes ran.
fn on_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn main() {
    let mut repeat = 1usize;
    let mut windows = 0usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeat" => repeat = args.next().and_then(|v| v.parse().ok()).expect("--repeat N"),
            "--windows" => windows = args.next().and_then(|v| v.parse().ok()).expect("--windows N"),
            other => {
                eprintln!("whatif: unknown argument {other}; usage: whatif [--repeat N] [--windows N] < trace.json");
                std::process::exit(2);
            }
        }
    }
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).expect("reading stdin");
    let parse_start = Instant::now();
    let trace: Trace = serde_json::from_str(&text).expect("a trace: {\"ops\": [[rank, node, ...], ...]}");
    let parse_ms = parse_start.elapsed().as_secs_f64() * 1e3;
    let ops: Vec<_> = trace.ops.into_iter().map(Into::into).collect();
    let th = Thresholds::default();
    let mut best = f64::INFINITY;
    let mut best_cpu = f64::INFINITY;
    let mut result = None;
    for _ in 0..repeat.max(1) {
        let t = Instant::now();
        let cpu = on_cpu_ns();
        let a = analyze(&ops, &th);
        let d = diagnose(&a, &th);
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        if let (Some(before), Some(after)) = (cpu, on_cpu_ns()) {
            best_cpu = best_cpu.min((after - before) as f64 / 1e6);
        }
        result = Some((a, d));
    }
    let (a, d) = result.expect("ran at least once");
    let node_name = match d.culprit {
        Culprit::Link { node } => trace.nodes.get(node as usize).cloned(),
        _ => None,
    };
    let (confirmed, per_window) = confirmed(&ops, windows, &th);
    let out = serde_json::json!({
        "confirmed": confirmed,
        "windows": per_window,
        "diagnosis": d,
        "node_name": node_name,
        "slowdown": a.slowdown,
        "stage_slowdown": a.stage_slowdown,
        "worker_share": a.worker_share,
        "stage_share": a.stage_share,
        "compute_gain": a.compute_gain,
        "workers": a.workers,
        "nodes": a.nodes,
        "stage_costs": a.stage_costs,
        "step_slowdowns": a.steps.iter().map(|s| s.slowdown()).collect::<Vec<_>>(),
        "steps": a.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        "episodes": episodes(&a.steps.iter().map(|s| s.slowdown()).collect::<Vec<_>>(), &OnsetSettings::default()),
        "skipped_steps": a.skipped_steps,
        "ops": a.ops,
        "ranks": a.ranks,
        "analyze_ms": best,
        "analyze_cpu_ms": best_cpu.is_finite().then_some(best_cpu),
        "parse_ms": parse_ms,
    });
    println!("{out}");
}

/// The trace's steps cut into `n` consecutive windows, each diagnosed and
/// passed through the confirmation rule in turn: the last window's confirmed
/// diagnosis, and per window (first step, last step, alone, confirmed).
fn confirmed(ops: &[Op], n: usize, th: &Thresholds) -> (Option<Diagnosis>, Vec<serde_json::Value>) {
    let mut steps: Vec<u64> = ops.iter().map(|o| o.step).collect();
    steps.sort_unstable();
    steps.dedup();
    if n == 0 || steps.len() < n {
        return (None, Vec::new());
    }
    let mut seen = Seen::default();
    let mut last = None;
    let mut out = Vec::new();
    for chunk in steps.chunks(steps.len().div_ceil(n)) {
        let (first, end) = (chunk[0], chunk[chunk.len() - 1]);
        let window: Vec<Op> = ops
            .iter()
            .filter(|o| (first..=end).contains(&o.step))
            .cloned()
            .collect();
        let a = analyze(&window, th);
        let alone = diagnose(&a, th);
        let said = seen.confirm(&a, alone.clone(), th);
        out.push(serde_json::json!({"first": first, "last": end, "alone": alone.culprit, "confirmed": said.culprit}));
        last = Some(said);
    }
    (last, out)
}
