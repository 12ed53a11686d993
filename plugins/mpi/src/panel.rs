//! The plugin's view on the dashboard (`GET /panel`, see the SDK's `panel`):
//! one job's statistical MPI state profile: per rank a bar of time outside
//! MPI, in MPI work and in MPI stall with the stall share; the imbalance; a
//! flame graph of stall time by call stack (all ranks or one); the call
//! sites that took most MPI time; and the profile to download as folded
//! stacks, pprof and a Perfetto trace. Built from `/profile`'s summary.

use serde_json::Value;
use sonde_plugin_sdk::panel::{Cell, FlameNode, Link, Panel, Segment, Table, Tone, percent, seconds};
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::plugin::Mpi;
use crate::profile::{self, STALL, safe_job_name};

const STATES: [(&str, &str, &str); 3] = [
    ("not_in_mpi_s", "not in MPI", "#9ab8d8"),
    ("work_s", "MPI work", "#e8b04a"),
    ("stall_s", "MPI stall", "#d0554b"),
];
/// Call sites listed, most MPI time first.
const SITES: usize = 12;

fn tree(n: &profile::FlameNode) -> FlameNode {
    FlameNode {
        name: n.name.clone(),
        value: n.value,
        children: n.children.iter().map(tree).collect(),
    }
}

pub fn panel(m: &Mpi, req: &HttpRequest) -> HttpResponse {
    let asked = req.query_param("job").map(|j| j.into_owned());
    let Some(job) = m.pick_job(asked.as_deref()) else {
        return match asked.filter(|j| !j.is_empty()) {
            Some(j) => Panel::none(&format!("no MPI samples from job {j}")),
            None => {
                let mut p = Panel::new("MPI state profile");
                p.text(
                    "empty",
                    "No MPI samples yet: run an MPI job with the probe \
                     (LD_PRELOAD=target/probes/libsonde_mpi.so, see probes/mpi/README.md).",
                    Tone::Muted,
                );
                p.response()
            }
        };
    };
    let prof = &m.jobs[&job];
    let s = serde_json::to_value(prof.summary(&job)).expect("summary serializes");
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let mut p = Panel::new("MPI state profile");
    let mut jobs: Vec<(&String, u64)> = m.jobs.iter().map(|(j, pr)| (j, pr.last_ns)).collect();
    jobs.sort_by_key(|(_, last)| std::cmp::Reverse(*last));
    p.control(
        "job",
        "job",
        jobs.iter().map(|(j, _)| ((*j).clone(), (*j).clone())).collect(),
        &job,
    );
    let ranks: Vec<&Value> = s["ranks"].as_array().into_iter().flatten().collect();
    let mut rank_options = vec![("all".to_string(), "all ranks".to_string())];
    rank_options.extend(
        ranks
            .iter()
            .map(|r| (r["rank"].to_string(), format!("rank {}", r["rank"]))),
    );
    let rank = req
        .query_param("rank")
        .filter(|r| rank_options.iter().any(|(v, _)| v == r.as_ref()))
        .map_or("all".to_string(), |r| r.into_owned());
    p.control("rank", "flame graph of", rank_options, &rank);

    let imb = &s["imbalance"];
    let total = f(&s["not_in_mpi_s"]) + f(&s["work_s"]) + f(&s["stall_s"]);
    let mut head = format!(
        "{} rank(s) sampled{}; stall is {} of sampled time; stall max/mean {:.2} (rank {} waits most); load balance {}.",
        ranks.len(),
        s["world_size"].as_u64().map(|w| format!(" of {w}")).unwrap_or_default(),
        percent(if total > 0.0 { f(&s["stall_s"]) / total } else { 0.0 }),
        f(&imb["stall_max_over_mean"]),
        imb["stall_max_rank"],
        percent(f(&imb["load_balance"])),
    );
    if s["dropped_samples"].as_u64().unwrap_or(0) > 0 {
        head.push_str(&format!(" {} samples dropped (max_bins).", s["dropped_samples"]));
    }
    p.text("summary", head, Tone::Plain);
    let q = format!("job={}", sonde_plugin_sdk::percent_encode(&job));
    let file = safe_job_name(&job);
    p.links(
        "downloads",
        vec![
            Link::download("folded stacks", format!("folded?{q}"), format!("mpi-{file}.folded")),
            Link::download("pprof", format!("pprof?{q}"), format!("mpi-{file}.pb.gz")),
            Link::download("Perfetto trace", format!("trace?{q}"), format!("mpi-{file}.trace.json")),
        ],
    );

    let mut t = Table::new(
        "ranks",
        "Time by state per rank",
        &[
            "rank",
            "time by state",
            "not in MPI",
            "MPI work",
            "MPI stall",
            "stall share",
            "threads",
        ],
    );
    for r in &ranks {
        t.row(
            &r["rank"],
            vec![
                Cell::text(format!("rank {}", r["rank"])),
                Cell::bar(
                    STATES
                        .iter()
                        .map(|(k, label, color)| Segment::new(*label, f(&r[*k]), color))
                        .collect(),
                    "",
                ),
                Cell::number(f(&r["not_in_mpi_s"]), seconds(f(&r["not_in_mpi_s"]))),
                Cell::number(f(&r["work_s"]), seconds(f(&r["work_s"]))),
                Cell::number(f(&r["stall_s"]), seconds(f(&r["stall_s"]))),
                Cell::number(f(&r["stall_share"]), percent(f(&r["stall_share"]))),
                Cell::text(r["threads"].as_array().map_or(0, Vec::len).to_string()),
            ],
        );
    }
    p.table(t);

    let flame = prof.flame(STALL, rank.parse().ok());
    let note = if flame.value > 0.0 {
        "Root at the bottom, the MPI call on top; width is stall time."
    } else {
        "No MPI stall sampled here."
    };
    p.flame(
        "flame",
        &format!(
            "MPI stall by call stack, {}",
            if rank == "all" {
                "all ranks".into()
            } else {
                format!("rank {rank}")
            }
        ),
        note,
        "s",
        tree(&flame),
    );

    let mut sites = Table::new(
        "callsites",
        "Call sites by MPI time",
        &["function", "call site", "MPI work", "MPI stall", "ranks", "stalls most"],
    );
    for c in s["callsites"].as_array().into_iter().flatten().take(SITES) {
        sites.row(
            format!(
                "{}@{}",
                c["function"].as_str().unwrap_or(""),
                c["callsite"].as_str().unwrap_or("")
            ),
            vec![
                Cell::text(c["function"].as_str().unwrap_or("")),
                Cell::text(c["callsite"].as_str().filter(|s| !s.is_empty()).unwrap_or("(unknown)")),
                Cell::number(f(&c["work_s"]), seconds(f(&c["work_s"]))),
                Cell::number(f(&c["stall_s"]), seconds(f(&c["stall_s"]))),
                Cell::text(c["ranks"].to_string()),
                Cell::text(if f(&c["max_stall_s"]) > 0.0 {
                    format!("rank {} ({})", c["max_stall_rank"], seconds(f(&c["max_stall_s"])))
                } else {
                    String::new()
                }),
            ],
        );
    }
    p.table(sites);
    p.response()
}
