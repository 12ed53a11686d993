//! The bottleneck plugin end to end: real sonde, real training loops on the
//! official OpenTelemetry Python SDK (tests/py/bottleneck_inject.py) and a
//! real Open MPI job, each with one bottleneck injected. Each test checks
//! that at least 90 % of the affected steps get the injected cause's verdict
//! and that no unaffected step gets it; the MPI test, that the slow rank is
//! named the straggler, live and again when the recorded run is replayed
//! through the plugin with `sonde plugin test`.
//!
//! Ground truth comes from the injector's own record (which steps it slowed
//! and how), never from sonde. The machine's own contention counts too: the
//! injector records, per step, the time its thread waited for a CPU
//! (`/proc/thread-self/schedstat`), and a step that was not injected but
//! waited for a CPU for 10 % of its time more than the least contended quarter
//! of its rank's earlier steps was held back by the machine in truth, whoever
//! took the CPU. Such a step is neither affected nor
//! unaffected: starved of CPU it can truthfully read as host-bound, and, its
//! process getting little CPU, as idle or as waiting on its dataloader. On a
//! quiet machine there are none; beside other builds or a CPU burner there are.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sonde_e2e::*;

const JOB: &str = "inject";

struct Truth {
    batch: i64,
    rank: i64,
    injected: bool,
    transfer_share: f64,
    runq_share: f64,
}

/// A sonde with the bottleneck plugin. `loopback`: the network scenario's
/// transfers run over loopback, so its interface is sampled there; elsewhere
/// it is not, as by default: whatever else on the machine talks over
/// loopback (other tests, other builds) would be evidence about this job.
fn start_sonde(dir: &Path, loopback: bool) -> (Sonde, u16) {
    let otlp = free_port();
    let listen = format!("ingest.otlp_http_listen=\"127.0.0.1:{otlp}\"");
    let lo = format!("sampler.include_loopback={loopback}");
    // The mpi plugin declares the `mpi_samples` table that bottleneck reads.
    let sonde = Sonde::start(
        dir,
        &[
            (plugin_file("bundled/bottleneck.wasm"), "bottleneck"),
            (plugin_file("bundled/mpi.wasm"), "mpi"),
        ],
        &[
            "--set",
            &listen,
            "--set",
            "ingest.otlp_grpc_listen=\"off\"",
            "--set",
            &lo,
        ],
    );
    (sonde, otlp)
}

/// Runs the injector once per rank (in parallel) and returns its ground truth.
fn inject(dir: &Path, otlp: u16, scenario: &str, ranks: u32, extra: &[&str]) -> Vec<Truth> {
    let script = repo().join("tests/py/bottleneck_inject.py");
    let children: Vec<(PathBuf, std::process::Child)> = (0..ranks)
        .map(|r| {
            let record = dir.join(format!("truth-{r}.json"));
            let child = Command::new("python3")
                .arg(&script)
                .arg(format!("http://127.0.0.1:{otlp}"))
                .arg(scenario)
                .arg(&record)
                .args(["--job", JOB, "--rank", &r.to_string()])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("running python3");
            (record, child)
        })
        .collect();
    let mut truth = Vec::new();
    for (record, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the injector failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<Value> = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        for r in rows {
            let wall = (r["end_ns"].as_u64().unwrap() - r["start_ns"].as_u64().unwrap()) as f64 / 1e9;
            truth.push(Truth {
                batch: r["batch"].as_i64().unwrap(),
                rank: r["rank"].as_i64().unwrap(),
                injected: r["injected"].as_bool().unwrap(),
                transfer_share: r["transfer_s"].as_f64().unwrap() / wall,
                runq_share: r["runq_s"].as_f64().unwrap() / wall,
            });
        }
    }
    truth
}

/// The plugin's job route once it has judged `rows` rows (steps are judged
/// `lag_ms` after they end).
fn judged(sonde: &Sonde, rows: usize) -> Value {
    let mut last = Value::Null;
    let ok = wait_for(Duration::from_secs(60), || {
        let (code, body) = sonde.get(&format!("/api/plugins/bottleneck/jobs/{JOB}?limit=100000"));
        if code != 200 {
            return false;
        }
        last = serde_json::from_str(&body).unwrap();
        last["rows"].as_array().unwrap().len() >= rows
    });
    assert!(ok, "fewer than {rows} rows judged: {last}\n{}", sonde.output());
    last
}

fn row_of(job: &Value, rank: i64, batch: i64) -> &Value {
    job["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == rank && r["batch"] == batch)
        .unwrap_or_else(|| panic!("no row for rank {rank} batch {batch}"))
}

fn verdict_of(job: &Value, rank: i64, batch: i64) -> String {
    row_of(job, rank, batch)["verdict"].as_str().unwrap().to_string()
}

/// Asserts the 90 % / none rule for `cause` and prints the confusion of both sets.
fn check(job: &Value, truth: &[Truth], cause: &str, affected: impl Fn(&Truth) -> Option<bool>) {
    let mut hit = 0;
    let mut total = 0;
    let mut false_hits = Vec::new();
    let mut unaffected = 0;
    let mut seen = std::collections::BTreeMap::<(bool, String), usize>::new();
    for t in truth {
        let Some(is_affected) = affected(t) else { continue };
        let v = verdict_of(job, t.rank, t.batch);
        *seen.entry((is_affected, v.clone())).or_default() += 1;
        if is_affected {
            total += 1;
            hit += usize::from(v == cause);
        } else {
            unaffected += 1;
            if v == cause {
                false_hits.push((t.rank, t.batch));
                eprintln!(
                    "unaffected step labelled {cause}: rank {} batch {}, waited for a CPU {:.0} % of it, \
                     transfers {:.0} %; sonde: {}",
                    t.rank,
                    t.batch,
                    t.runq_share * 100.0,
                    t.transfer_share * 100.0,
                    row_of(job, t.rank, t.batch)["reason"]
                );
            }
        }
    }
    eprintln!("{cause}: (affected, verdict) -> steps: {seen:?}");
    assert!(
        total >= 5 && unaffected >= 5,
        "too few steps: {total} affected, {unaffected} unaffected"
    );
    assert!(
        hit * 10 >= total * 9,
        "{hit} of {total} affected steps are {cause} (want >= 90 %): {seen:?}"
    );
    assert!(
        false_hits.is_empty(),
        "unaffected steps labelled {cause} (rank, batch): {false_hits:?}; {seen:?}"
    );
}

/// How much more of its time than usual a step may have waited for a CPU
/// and still count as not contended. The plugin calls a step starved when its
/// process got at most 75 % of its usual CPU; its readings (the process's CPU
/// time every 100 ms, all its threads) differ from the injector's (one
/// thread, per step) by up to about a tenth, so a step counts as not
/// contended only well below that: 10 % more waiting than usual.
const MORE_CONTENDED: f64 = 0.10;

/// What each step counts as usual waiting for a CPU: the least contended
/// quarter of its rank's earlier steps that were not injected (the plugin, too,
/// compares a step with its rank's fast quarter of the steps before it).
struct Contention(std::collections::BTreeMap<(i64, i64), f64>);

impl Contention {
    fn of(truth: &[Truth]) -> Contention {
        let mut steps: Vec<&Truth> = truth.iter().collect();
        steps.sort_by_key(|t| (t.rank, t.batch));
        let mut usual = std::collections::BTreeMap::new();
        let mut before = Vec::<f64>::new();
        let mut rank = None;
        for t in steps {
            if rank != Some(t.rank) {
                (rank, before) = (Some(t.rank), Vec::new());
            }
            // The plugin's host-bound rule needs 8 steps of history as well.
            if before.len() >= 8 {
                let mut v = before.clone();
                v.sort_by(f64::total_cmp);
                usual.insert((t.rank, t.batch), v[v.len() / 4]);
            }
            if !t.injected {
                before.push(t.runq_share);
            }
        }
        Contention(usual)
    }

    /// Whether the machine itself held `t` back (see the top of this file);
    /// `None` for the first steps, which have no usual yet.
    fn held_back(&self, t: &Truth) -> Option<bool> {
        let usual = self.0.get(&(t.rank, t.batch))?;
        Some(t.runq_share > usual + MORE_CONTENDED)
    }

    /// Affected: injected; unaffected: not injected and not held back by the
    /// machine; the rest (and the first steps) counts neither way.
    fn split(&self, t: &Truth) -> Option<bool> {
        match (t.injected, self.held_back(t)?) {
            (true, _) => Some(true),
            (false, true) => None,
            (false, false) => Some(false),
        }
    }
}

fn decisions(sonde: &Sonde) -> Vec<Value> {
    let d = sonde.json("/api/decisions");
    let list = d.get("decisions").cloned().unwrap_or(d);
    list.as_array().cloned().unwrap_or_default()
}

#[test]
fn a_slow_dataloader_is_input_bound() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = start_sonde(tmp.path(), false);
    // Every decision as it is made: /api/decisions keeps the latest per rank,
    // and on a loaded machine the verdict can change again after the injected
    // range (a few host-bound steps) before the test looks.
    let log = DecisionLog::start(&sonde.api, "bottleneck");
    let truth = inject(
        tmp.path(),
        otlp,
        "dataloader",
        1,
        // 0.3 s of waiting against 88 ms of work: as input-bound as 1 s, in
        // a third of the test's time.
        &["--steps", "90", "--from", "30", "--to", "60", "--wait-s", "0.3"],
    );
    let job = judged(&sonde, truth.len());
    let contention = Contention::of(&truth);
    check(&job, &truth, "input-bound", |t| contention.split(t));
    // The change of dominant verdict is a decision naming the injected range:
    // the input-bound run starts at its first steps, and once another verdict
    // takes over, that decision says the input-bound run ended at its last ones.
    let run = |d: &Value| -> Option<(i64, i64)> {
        let b = &d["body"];
        (d["kind"] == "bottleneck" && b["verdict"] == "input-bound")
            .then(|| (b["first"].as_i64().unwrap_or(-1), b["last"].as_i64().unwrap_or(-1)))
    };
    let ok = wait_for(Duration::from_secs(10), || {
        log.all().iter().any(|d| {
            run(d).is_some_and(|(first, _)| (30..=33).contains(&first))
                && d["reason"].as_str().unwrap_or("").contains("input-bound")
        })
    });
    assert!(ok, "no input-bound decision: {:?}", log.all());
    for d in log.all() {
        let p = &d["body"]["previous"];
        if d["kind"] == "bottleneck" && p["verdict"] == "input-bound" {
            let (first, last) = (p["first"].as_i64().unwrap_or(-1), p["last"].as_i64().unwrap_or(-1));
            assert!(
                (30..=33).contains(&first) && (56..=59).contains(&last),
                "the input-bound run ended outside the injected range: {d}"
            );
        }
    }
}

#[test]
fn a_cpu_burner_beside_the_job_is_host_bound() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = start_sonde(tmp.path(), false);
    let truth = inject(
        tmp.path(),
        otlp,
        "burner",
        1,
        &["--steps", "100", "--from", "40", "--to", "70"],
    );
    let job = judged(&sonde, truth.len());
    // The first steps build the rank's usual compute time. The step before the
    // burners start and the one after they stop are not counted: the plugin
    // reads the process's CPU every 100 ms and interpolates a step's share, so
    // the reading of a step that short straddles the injector's pause while
    // the burners start, or their end.
    let contention = Contention::of(&truth);
    check(&job, &truth, "host-bound", |t| match t.batch {
        ..10 | 39 | 70 => None,
        _ => contention.split(t),
    });
}

#[test]
fn growing_loopback_transfers_are_communication_bound() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = start_sonde(tmp.path(), true);
    let truth = inject(
        tmp.path(),
        otlp,
        "network",
        1,
        &["--steps", "70", "--from", "30", "--to", "56"],
    );
    let job = judged(&sonde, truth.len());
    // Affected: the transfer took at least half the step; unaffected: none or
    // under a tenth of it. Steps in between are not counted either way.
    let contention = Contention::of(&truth);
    check(&job, &truth, "communication-bound", |t| {
        if t.transfer_share >= 0.5 {
            Some(true)
        } else if t.transfer_share < 0.1 && contention.held_back(t) == Some(false) {
            Some(false)
        } else {
            None
        }
    });
    let lo = job["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "communication-bound")
        .all(|r| r["reason"].as_str().unwrap().contains("network lo at"));
    assert!(lo, "the evidence names the loopback interface");
}

#[test]
fn a_rank_sleeping_every_tenth_step_is_idle_then() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, otlp) = start_sonde(tmp.path(), false);
    // Only rank 1 sleeps: rank 0's every 10th step is healthy.
    let truth = inject(
        tmp.path(),
        otlp,
        "sleeper",
        2,
        &["--steps", "60", "--sleepy-rank", "1", "--wait-s", "0.3"],
    );
    let job = judged(&sonde, truth.len());
    // Steps before the rank has a usual CPU rate are judged on absolute CPU: skipped.
    let contention = Contention::of(&truth);
    check(&job, &truth, "idle", |t| {
        if t.batch < 10 { None } else { contention.split(t) }
    });
    // On those batches rank 1 finished last, by about the sleep.
    let stragglers = job["stragglers"].as_array().unwrap().clone();
    for s in stragglers.iter().filter(|s| s["batch"].as_i64().unwrap() % 10 == 9) {
        assert_eq!(s["rank"], 1, "{s}");
        assert!(s["late_by_s"].as_f64().unwrap() > 0.15, "{s}");
    }
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_slow_rank_of_an_mpi_job_is_named_the_straggler() {
    let _serial = one_at_a_time();
    assert!(
        have("mpicc") && have("mpirun"),
        "Open MPI is not installed (mpicc/mpirun missing): run `just setup`"
    );
    let out = Command::new("bash")
        .arg(repo().join("scripts/build-mpi-probe.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tmp = tempfile::tempdir().unwrap();
    let (sonde, _) = start_sonde(tmp.path(), false);
    // The run is recorded (`sonde record`) for the replay at the end: 30 s of
    // steps when the machine is quiet, until the straggler's verdict.
    let rec = tmp.path().join("mpi.jsonl");
    let mut job = Value::Null;
    let recorded = record_until(&sonde, 120, Duration::from_secs(2), &rec, || {
        // imbalance.c: rank r computes r+1 units of 50 ms per step, then all
        // meet in MPI_Allreduce and MPI_Barrier; rank 3 is the slow one.
        let status = mpirun_probed(4, &sonde.api, "inject")
            .args(["-x", "MPI_SONDE_HZ=200"])
            .arg(repo().join("target/mpi/imbalance"))
            .args(["150", "50"])
            .env_remove("SONDE_BIN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "mpirun failed");
        let ok = wait_for(Duration::from_secs(30), || {
            job = sonde.json(&format!("/api/plugins/bottleneck/jobs/{JOB}?limit=100000"));
            !job["straggler"].is_null()
        });
        assert!(ok, "no persistent straggler: {job}");
    });
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert_eq!(job["straggler"]["rank"], 3, "{}", job["straggler"]);
    let rows = job["rows"].as_array().unwrap();
    let of = |rank: i64| rows.iter().filter(move |r| r["rank"] == rank).collect::<Vec<_>>();
    // The slow rank computes; rank 0 waits in MPI for three quarters of each step.
    let share = |rank: i64, v: &str| {
        let rs = of(rank);
        (rs.iter().filter(|r| r["verdict"] == v).count(), rs.len())
    };
    let (c3, n3) = share(3, "compute-bound");
    let (c0, n0) = share(0, "communication-bound");
    assert!(
        n3 >= 5 && c3 * 10 >= n3 * 9,
        "rank 3: {c3} of {n3} windows compute-bound"
    );
    assert!(
        n0 >= 5 && c0 * 10 >= n0 * 9,
        "rank 0: {c0} of {n0} windows communication-bound"
    );
    assert_eq!(
        share(3, "communication-bound").0,
        0,
        "the slow rank never waits on the others"
    );
    let named = decisions(&sonde)
        .iter()
        .any(|d| d["kind"] == "straggler" && d["reason"].as_str().unwrap_or("").starts_with("rank 3 (node "));
    assert!(named, "no straggler decision naming rank 3: {:?}", decisions(&sonde));

    // Replayed alone with `sonde plugin test` (no mpi plugin: bottleneck only
    // reads the `mpi_samples` table, whose rows the recording holds), the
    // plugin names the same straggler from the same input.
    let route = format!("/jobs/{JOB}?limit=100000");
    let wasm = plugin_file("bundled/bottleneck.wasm");
    let (code, r, stderr) = plugin_test(&wasm, &rec, &["--name", "bottleneck", "--route", &route]);
    assert_eq!(code, 0, "{stderr}");
    assert!(r["delivered"]["events"].as_u64().unwrap() > 0, "{}", r["delivered"]);
    let replayed = &r["routes"][0]["body"];
    assert_eq!(replayed["straggler"]["rank"], 3, "{}", replayed["straggler"]);
    let named = r["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["kind"] == "straggler" && d["reason"].as_str().unwrap_or("").starts_with("rank 3 (node "));
    assert!(named, "the replay named no straggler: {}", r["decisions"]);
}
