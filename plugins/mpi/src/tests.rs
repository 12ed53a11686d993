//! Native tests of the plugin's logic through its hooks, with a fake host.

use sonde_plugin_sdk::types::{Attribute, EventBatch, HttpRequest, Origin, Value};

use crate::plugin::Mpi;
use crate::profile::{folded_file_name, state_name};
use crate::routes;
use crate::settings::Settings;
use crate::table::samples_table;
use sonde_plugin_sdk::testing::FakeHost;

const MS: u64 = 1_000_000;

/// (job, rank, thread, state, function, callsite, count) rows at 1 ms per tick.
type Row<'a> = (&'a str, i32, u32, u8, &'a str, &'a str, u32);

fn batch(rows: &[Row]) -> EventBatch {
    batch_at(rows, 1_000 * MS)
}

/// The rows as the host hands them over, all flushed at `time`.
fn batch_at(rows: &[Row], time: u64) -> EventBatch {
    let mut b = EventBatch::default();
    let decl = samples_table();
    for &(job, rank, thread, state, function, callsite, count) in rows {
        let o = match b.origins.iter().position(|o| o.job == job && o.rank == rank) {
            Some(i) => i as u32,
            None => {
                b.origins.push(Origin {
                    job: job.into(),
                    node: "n1".into(),
                    role: "rank".into(),
                    index: -1,
                    rank,
                    local_rank: rank,
                    attributes: vec![Attribute::new("mpi.world_size", "4")],
                });
                b.origins.len() as u32 - 1
            }
        };
        b.push_row(
            &decl,
            o,
            &[
                ("thread", Value::Int(thread.into())),
                ("time_ns", Value::Int(time as i64)),
                ("state", Value::Int(state.into())),
                ("function", Value::Str(function.into())),
                ("callsite", Value::Str(callsite.into())),
                ("count", Value::Int(count.into())),
                ("period_ns", Value::Int(MS as i64)),
            ],
        )
        .unwrap();
    }
    b
}

/// Rank r computes r+1 units of 100 ticks, then waits for rank 3 in Allreduce
/// (30 ticks of its own work inside the call) and Barrier.
fn imbalanced() -> Vec<Row<'static>> {
    let mut rows = Vec::new();
    for r in 0..4i32 {
        let compute = 100 * (r as u32 + 1);
        let wait = 400 - compute;
        rows.push(("job", r, 0, 0, "", "", compute));
        rows.push(("job", r, 0, 1, "MPI_Allreduce", "main+0x10 (app)", 30));
        if wait > 0 {
            rows.push(("job", r, 0, 2, "MPI_Allreduce", "main+0x10 (app)", wait * 3 / 4));
            rows.push(("job", r, 0, 2, "MPI_Barrier", "main+0x20 (app)", wait / 4));
        }
    }
    rows
}

fn get(m: &mut Mpi, path: &str, query: &str) -> (u16, String) {
    req(m, "GET", path, query)
}

fn req(m: &mut Mpi, method: &str, path: &str, query: &str) -> (u16, String) {
    let r = routes::handle(
        m,
        &HttpRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            headers: vec![],
            body: vec![],
        },
    );
    (r.status, String::from_utf8(r.body).unwrap())
}

fn started(settings: &str) -> (FakeHost, Mpi) {
    let mut host = FakeHost {
        now: 5,
        ..FakeHost::default()
    };
    let m = Mpi::start(&mut host, Settings::parse(settings).unwrap());
    (host, m)
}

#[test]
fn stall_shares_follow_the_imbalance_and_work_stays_apart() {
    let (_, mut m) = started("{}");
    m.on_events(&batch(&imbalanced())).unwrap();
    let s = m.jobs["job"].summary("job");
    let shares: Vec<f64> = s.ranks.iter().map(|r| r.stall_share).collect();
    // rank r: stall (300 - 100r) of (100(r+1) + 30 + 300 - 100r) = 430 ticks
    let want: Vec<f64> = (0..4).map(|r| (300.0 - 100.0 * r as f64) / 430.0).collect();
    for (got, want) in shares.iter().zip(&want) {
        assert!((got - want).abs() < 1e-9, "{shares:?} vs {want:?}");
    }
    assert_eq!(s.imbalance.ranks_by_stall, vec![0, 1, 2, 3]);
    assert_eq!(s.imbalance.stall_max_rank, 0);
    // stall 0.3, 0.2, 0.1, 0 s: mean 0.15, max/mean 2
    assert!((s.imbalance.stall_max_over_mean - 2.0).abs() < 1e-9);
    // outside MPI 0.1..0.4 s: mean 0.25 / max 0.4
    assert!((s.imbalance.load_balance - 0.625).abs() < 1e-9);
    for r in &s.ranks {
        assert!(
            (r.times.work_s - 0.030).abs() < 1e-12,
            "each rank worked 30 ticks in MPI: {r:?}"
        );
        assert!((r.times.total_s() - 0.430).abs() < 1e-12);
        assert_eq!(r.threads.len(), 1);
        assert_eq!(r.node, "n1");
    }
    assert_eq!(s.world_size, Some(4));
    let ar = s.callsites.iter().find(|c| c.function == "MPI_Allreduce").unwrap();
    assert_eq!(ar.callsite, "main+0x10 (app)");
    assert!((ar.work_s - 0.120).abs() < 1e-12);
    assert!((ar.stall_s - 0.450).abs() < 1e-12, "{ar:?}");
    assert_eq!((ar.ranks, ar.max_stall_rank), (4, 0));
    let barrier = s.functions.iter().find(|f| f.function == "MPI_Barrier").unwrap();
    assert!((barrier.stall_s - 0.150).abs() < 1e-12 && barrier.work_s == 0.0);
}

#[test]
fn metrics_per_rank_state_and_function_are_emitted_for_changed_jobs_only() {
    let (mut host, mut m) = started("{}");
    m.on_events(&batch(&imbalanced())).unwrap();
    m.emit_metrics(&mut host).unwrap();
    let share = |host: &FakeHost, r: &str| {
        host.last("mpi.stall.share", &[("sonde.job", "job"), ("mpi.rank", r)])
            .unwrap()
    };
    assert!(share(&host, "0") > share(&host, "1") && share(&host, "1") > share(&host, "2"));
    assert_eq!(share(&host, "3"), 0.0);
    let t = host
        .last("mpi.state.time", &[("mpi.rank", "2"), ("mpi.state", "not_in_mpi")])
        .unwrap();
    assert!((t - 0.3).abs() < 1e-12);
    let f = host
        .last(
            "mpi.function.time",
            &[("mpi.function", "MPI_Barrier"), ("mpi.state", "stall")],
        )
        .unwrap();
    assert!((f - 0.15).abs() < 1e-12);
    assert_eq!(host.last("mpi.stall.imbalance", &[("sonde.job", "job")]), Some(2.0));
    let n = host.points.len();
    m.emit_metrics(&mut host).unwrap();
    assert_eq!(host.points.len(), n, "nothing changed: nothing emitted");
    m.on_events(&batch(&[("job", 3, 0, 2, "MPI_Barrier", "x", 430)]))
        .unwrap();
    m.emit_metrics(&mut host).unwrap();
    assert!(
        (share(&host, "3") - 0.5).abs() < 1e-12,
        "counts accumulate across batches"
    );
    let kinds: Vec<_> = host
        .declared
        .iter()
        .map(|d| (d.name.as_str(), d.unit.as_str()))
        .collect();
    assert!(kinds.contains(&("mpi.state.time", "s")) && kinds.contains(&("mpi.stall.share", "1")));
}

/// Parses a folded file: (frames, weight) per line.
fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("a weight after the stack");
            (
                stack.split(';').map(String::from).collect(),
                n.parse().expect("an integer weight"),
            )
        })
        .collect()
}

#[test]
fn the_folded_file_is_written_through_a_replace_sink_and_adds_up() {
    let (mut host, mut m) = started("{}");
    m.on_events(&batch(&imbalanced())).unwrap();
    m.write_files(&mut host);
    let name = folded_file_name("job");
    assert_eq!(name, "mpi-job.folded");
    assert_eq!(host.sinks.len(), 1);
    assert!(matches!(host.sinks[0].mode, sonde_plugin_sdk::types::SinkMode::Replace));
    let lines = parse_folded(&host.files[&name]);
    let total: u64 = lines.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 4 * 430 * 1000, "microseconds of every sample");
    let stall0: u64 = lines
        .iter()
        .filter(|(f, _)| f[0] == "rank 0" && f[2] == state_name(2))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(stall0, 300_000);
    assert!(
        lines
            .iter()
            .any(|(f, n)| f == &["rank 1", "thread 0", "stall", "main+0x10 (app)", "MPI_Allreduce"] && *n == 150_000)
    );
    assert!(lines.iter().any(|(f, _)| f == &["rank 3", "thread 0", "not_in_mpi"]));
    // Unchanged: not rewritten; changed: rewritten whole, same sink.
    let written = m.files_written;
    m.write_files(&mut host);
    assert_eq!(m.files_written, written);
    m.on_events(&batch(&[("job", 0, 1, 1, "MPI_Send", "a;b", 1)])).unwrap();
    m.write_files(&mut host);
    assert_eq!(host.sinks.len(), 1);
    assert!(
        host.files[&name].contains("rank 0;thread 1;work;a;b;MPI_Send 1000"),
        "a call stack (outermost first) ends in the MPI function: {}",
        host.files[&name]
    );
}

/// Two paths to one MPI call, as the host names a probe's stacks.
fn two_paths() -> Vec<Row<'static>> {
    vec![
        (
            "job",
            0,
            0,
            2,
            "MPI_Sendrecv",
            "main (a.c:9);solve (a.c:5);exchange (a.c:2)",
            300,
        ),
        (
            "job",
            0,
            0,
            2,
            "MPI_Sendrecv",
            "main (a.c:10);refine (a.c:7);exchange (a.c:2)",
            100,
        ),
        (
            "job",
            0,
            0,
            1,
            "MPI_Sendrecv",
            "main (a.c:9);solve (a.c:5);exchange (a.c:2)",
            20,
        ),
        (
            "job",
            1,
            0,
            2,
            "MPI_Sendrecv",
            "main (a.c:10);refine (a.c:7);exchange (a.c:2)",
            50,
        ),
        ("job", 1, 0, 0, "", "", 500),
    ]
}

#[test]
fn the_flame_graph_of_stall_has_both_paths_for_one_rank_or_all() {
    let (_host, mut m) = started("{}");
    m.on_events(&batch(&two_paths())).unwrap();
    let (code, body) = get(&mut m, "/flame", "job=job&state=stall&rank=0");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let tree = &v["tree"];
    assert!((tree["value"].as_f64().unwrap() - 0.4).abs() < 1e-9, "{tree}");
    let main = &tree["children"];
    let names: Vec<&str> = main
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["main (a.c:10)", "main (a.c:9)"]);
    let solve = &main[1]["children"][0];
    assert_eq!(solve["name"], "solve (a.c:5)");
    assert_eq!(solve["children"][0]["children"][0]["name"], "MPI_Sendrecv");
    assert!((solve["value"].as_f64().unwrap() - 0.3).abs() < 1e-9);
    let all: serde_json::Value = serde_json::from_str(&get(&mut m, "/flame", "job=job").1).unwrap();
    assert!(
        (all["tree"]["value"].as_f64().unwrap() - 0.45).abs() < 1e-9,
        "all ranks' stall"
    );
    assert_eq!(get(&mut m, "/flame", "job=job&state=busy").0, 400);
    assert_eq!(get(&mut m, "/flame", "job=job&rank=x").0, 400);
}

/// Reads a varint at `*i`.
fn varint(b: &[u8], i: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let byte = b[*i];
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// (field, wire type 0 value or wire type 2 bytes) of one message.
fn fields(b: &[u8]) -> Vec<(u64, u64, &[u8])> {
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        let key = varint(b, &mut i);
        match key & 7 {
            0 => out.push((key >> 3, varint(b, &mut i), &b[0..0])),
            2 => {
                let n = varint(b, &mut i) as usize;
                out.push((key >> 3, 0, &b[i..i + n]));
                i += n;
            }
            w => panic!("wire type {w}"),
        }
    }
    out
}

#[test]
fn the_pprof_profile_has_work_and_stall_in_nanoseconds_with_named_frames() {
    use std::io::Read;
    let (_host, mut m) = started("{}");
    m.on_events(&batch(&two_paths())).unwrap();
    let r = routes::handle(
        &mut m,
        &HttpRequest {
            method: "GET".into(),
            path: "/pprof".into(),
            query: "job=job".into(),
            headers: vec![],
            body: vec![],
        },
    );
    assert_eq!(r.status, 200);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_end(&mut raw)
        .expect("gzip");
    let top = fields(&raw);
    let strings: Vec<String> = top
        .iter()
        .filter(|f| f.0 == 6)
        .map(|f| String::from_utf8(f.2.to_vec()).unwrap())
        .collect();
    let types: Vec<(String, String)> = top
        .iter()
        .filter(|f| f.0 == 1)
        .map(|f| {
            let vt = fields(f.2);
            (strings[vt[0].1 as usize].clone(), strings[vt[1].1 as usize].clone())
        })
        .collect();
    assert_eq!(
        types,
        [
            ("work".into(), "nanoseconds".into()),
            ("stall".into(), "nanoseconds".into())
        ]
    );
    let (mut work, mut stall) = (0, 0);
    for s in top.iter().filter(|f| f.0 == 2) {
        let values = fields(s.2).into_iter().find(|f| f.0 == 2).unwrap().2;
        let mut i = 0;
        work += varint(values, &mut i);
        stall += varint(values, &mut i);
    }
    assert_eq!((work, stall), (20 * MS, 450 * MS));
    for name in ["MPI_Sendrecv", "exchange", "solve", "refine", "main", "a.c"] {
        assert!(strings.iter().any(|s| s == name), "{name} in {strings:?}");
    }
}

#[test]
fn the_trace_has_a_process_per_rank_and_the_state_per_interval() {
    let (_host, mut m) = started("{}");
    m.on_events(&batch(&two_paths())).unwrap();
    let (code, body) = get(&mut m, "/trace", "job=job");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = ev
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rank 0", "rank 1"]);
    let slices: Vec<(i64, &str, f64)> = ev
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| {
            (
                e["pid"].as_i64().unwrap(),
                e["name"].as_str().unwrap(),
                e["dur"].as_f64().unwrap(),
            )
        })
        .collect();
    // rank 0: 420 ms, mostly stall; rank 1: 550 ms, mostly outside MPI (1 ms ticks).
    assert_eq!(slices, [(0, "stall", 420_000.0), (1, "not_in_mpi", 550_000.0)]);
}

#[test]
fn without_a_sink_the_profile_is_still_served_and_the_failure_logged_once() {
    let (mut host, mut m) = started("{}");
    host.fail_open_sink = Some("sink directory /x does not exist".into());
    m.on_events(&batch(&imbalanced())).unwrap();
    m.write_files(&mut host);
    m.on_events(&batch(&imbalanced())).unwrap();
    m.write_files(&mut host);
    assert_eq!(
        host.logs.iter().filter(|(_, l)| l.contains("does not exist")).count(),
        1
    );
    let (code, body) = get(&mut m, "/folded", "job=job");
    assert_eq!(code, 200);
    assert_eq!(
        parse_folded(&body).len(),
        3 * 4 + 2,
        "one line per bin; rank 3 never stalls"
    );
}

#[test]
fn routes_answer_for_the_latest_or_the_named_job() {
    let (_, mut m) = started("{}");
    assert_eq!(get(&mut m, "/profile", "").0, 404);
    m.on_events(&batch(&imbalanced())).unwrap();
    let (code, body) = get(&mut m, "/profile", "");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["job"], "job");
    assert_eq!(v["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(v["imbalance"]["ranks_by_stall"], serde_json::json!([0, 1, 2, 3]));
    assert!(v["ranks"][0]["stall_s"].as_f64().unwrap() > 0.29);
    let (code, body) = get(&mut m, "/profile", "job=nope");
    assert_eq!(code, 404);
    assert!(body.contains("nope"));
    let (code, body) = get(&mut m, "/jobs", "");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["jobs"][0]["ranks"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(v["counters"]["rows"], 14);
    assert_eq!(req(&mut m, "POST", "/profile", "").0, 405);
    assert_eq!(get(&mut m, "/nothing", "").0, 404);
    assert_eq!(req(&mut m, "POST", "/reset", "").0, 400);
    let (code, body) = req(&mut m, "POST", "/reset", "job=job");
    assert_eq!(code, 200);
    assert!(body.contains("\"existed\":true"));
    assert_eq!(get(&mut m, "/profile", "job=job").0, 404);
}

#[test]
fn bounds_filters_and_bad_rows() {
    let (_, mut m) = started(r#"{"max_bins":3,"max_jobs":2}"#);
    m.on_events(&batch(&imbalanced())).unwrap();
    assert_eq!(m.jobs["job"].bins.len(), 3);
    assert!(m.dropped_samples > 0);
    assert_eq!(m.jobs["job"].dropped_samples, m.dropped_samples);
    // A third job pushes out the one seen longest ago.
    m.on_events(&batch_at(&[("a", 0, 0, 0, "", "", 1)], 2_000 * MS))
        .unwrap();
    m.on_events(&batch_at(
        &[("b", 0, 0, 0, "", "", 1), ("b", 0, 0, 7, "", "", 1)],
        3_000 * MS,
    ))
    .unwrap();
    assert_eq!(m.jobs.keys().collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(m.skipped_rows, 1, "state 7 is not a state");

    let (_, mut m) = started(r#"{"job":"b"}"#);
    m.on_events(&batch(&imbalanced())).unwrap();
    m.on_events(&batch(&[("b", 1, 0, 0, "", "", 1)])).unwrap();
    assert_eq!(m.jobs.keys().collect::<Vec<_>>(), vec!["b"]);
}

#[test]
fn a_not_in_mpi_row_never_carries_a_function() {
    let (_, mut m) = started("{}");
    m.on_events(&batch(&[("j", 0, 0, 0, "MPI_Send", "x", 2), ("j", 0, 0, 0, "", "", 3)]))
        .unwrap();
    let p = &m.jobs["j"];
    assert_eq!(p.bins.len(), 1);
    assert_eq!(*p.bins.values().next().unwrap(), 5 * MS);
}

#[test]
fn the_timers_run_only_while_a_job_is_held() {
    let (mut host, mut m) = started("{}");
    assert!(host.timers.is_empty(), "no job, no timers: {:?}", host.timers);
    m.on_events(&batch(&[("job", 0, 0, 1, "MPI_Barrier", "main", 3)]))
        .unwrap();
    m.follow_jobs(&mut host);
    assert_eq!(host.timers.len(), 2, "emit and write timers");
    // The job forgotten (POST /reset): the next timer stops them.
    assert_eq!(req(&mut m, "POST", "/reset", "job=job").0, 200);
    let emit = *host.timers.keys().next().unwrap();
    m.on_timer(&mut host, emit).unwrap();
    assert!(host.timers.is_empty(), "{:?}", host.timers);
}

#[test]
fn configure_resets_the_timers_only_when_their_periods_change() {
    let (mut host, mut m) = started("{}");
    m.on_events(&batch(&[("job", 0, 0, 1, "MPI_Barrier", "main", 3)]))
        .unwrap();
    m.follow_jobs(&mut host);
    assert_eq!(host.timers.len(), 2);
    let before: Vec<u64> = host.timers.keys().copied().collect();
    m.configure(&mut host, Settings::parse(r#"{"job":"x"}"#).unwrap());
    assert_eq!(host.timers.keys().copied().collect::<Vec<_>>(), before);
    m.configure(&mut host, Settings::parse(r#"{"emit_every_ms":200}"#).unwrap());
    assert_eq!(host.timers.len(), 2);
    assert!(host.timers.values().any(|t| t.after_ms == 200 && t.repeat));
    assert_ne!(host.timers.keys().copied().collect::<Vec<_>>(), before);
}

#[test]
fn a_restart_keeps_the_profiles_and_a_reset_job_stays_forgotten() {
    let (mut host, mut m) = started("{}");
    m.on_events(&batch(&imbalanced())).unwrap();
    let mut other: Vec<Row> = imbalanced();
    for r in &mut other {
        r.0 = "other";
    }
    m.on_events(&batch(&other)).unwrap();
    m.follow_jobs(&mut host);
    let before = get(&mut m, "/profile", "job=job");
    assert_eq!(before.0, 200);
    // The write timer saves what changed.
    let write = m_write_timer(&host);
    m.on_timer(&mut host, write).unwrap();
    assert!(host.store.kv.contains_key("profile/job"), "{:?}", host.store.kv.keys());
    let (code, _) = req(&mut m, "POST", "/reset", "job=other");
    assert_eq!(code, 200);
    m.save(&mut host);
    assert!(
        !host.store.kv.contains_key("profile/other"),
        "a reset job's profile goes"
    );

    // A new sonde process over the same state store.
    let mut again = host.restarted(10);
    let mut m2 = Mpi::start(&mut again, Settings::parse("{}").unwrap());
    assert_eq!(
        get(&mut m2, "/profile", "job=job"),
        before,
        "the same profile after the restart"
    );
    assert_eq!(get(&mut m2, "/profile", "job=other").0, 404);
    assert!(!again.timers.is_empty(), "a restored job runs the timers");

    // A full disk: the write fails, is logged once, and the profile is kept for the next try.
    m2.on_events(&batch(&imbalanced())).unwrap();
    again.fail_state_writes = Some("no space left on device".into());
    m2.save(&mut again);
    m2.save(&mut again);
    let warned = again
        .logs
        .iter()
        .filter(|(_, l)| l.contains("saving the profile"))
        .count();
    assert_eq!(warned, 1, "{:?}", again.logs);
    again.fail_state_writes = None;
    m2.save(&mut again);
    let saved = again.store.kv["profile/job"].len();
    assert!(saved > 0);
}

/// The id of the write timer: the second of the two timers `follow_jobs` sets.
fn m_write_timer(host: &FakeHost) -> u64 {
    *host.timers.keys().max().unwrap()
}
