//! The mpi plugin end to end with real Open MPI: `mpirun --oversubscribe -np 4`
//! runs tests/mpi/imbalance.c (rank r computes r+1 units, then all meet in
//! MPI_Allreduce and MPI_Barrier) with the probe (probes/mpi/) preloaded; the
//! probe streams MPI state samples to a real sonde running the mpi plugin,
//! which exports metrics to a real collector (rotel) and writes the profile as
//! folded stacks. Checked: stall shares ordered rank 0 > 1 > 2 > 3 in the
//! plugin's route, the folded file and the metrics at rotel; rank-selective
//! sampling includes only the chosen ranks; a job killed mid-way leaves sonde
//! healthy and the partial profile usable. With tests/mpi/stacks.c (two paths
//! to one MPI_Sendrecv): whole call stacks with symbol names, with and without
//! frame pointers, stripped, and cut at the probe's depth; the pprof profile's
//! totals equal the profile route's.
//!
//! Needs Open MPI (`mpicc`, `mpirun`): `just setup` installs Debian's
//! openmpi-bin and libopenmpi-dev. The probe and the program are built here by
//! scripts/build-mpi-probe.sh (idempotent), as the test recipe does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sonde_e2e::*;

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The probe and the test program, built if needed; fails clearly without Open MPI.
fn mpi_parts() -> (PathBuf, PathBuf) {
    assert!(
        have("mpicc") && have("mpirun"),
        "Open MPI is not installed (mpicc/mpirun missing): run `just setup`, or \
         `apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev`"
    );
    let out = Command::new("bash")
        .arg(repo().join("scripts/build-mpi-probe.sh"))
        .output()
        .expect("running scripts/build-mpi-probe.sh");
    assert!(
        out.status.success(),
        "building the MPI probe failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        repo().join("target/probes/libsonde_mpi.so"),
        repo().join("target/mpi/imbalance"),
    )
}

fn start(dir: &Path, rotel: &Rotel) -> Sonde {
    let endpoint = format!("http://127.0.0.1:{}", rotel.grpc);
    Sonde::start(
        dir,
        &[
            (plugin_file("bundled/mpi.wasm"), "mpi"),
            (plugin_file("bundled/sysmetrics.wasm"), "sysmetrics"),
        ],
        &[
            "--export-endpoint",
            &endpoint,
            "--set",
            "export.interval_ms=200",
            "--set",
            "plugin.mpi.settings={emit_every_ms=200, write_every_ms=200}",
        ],
    )
}

/// `mpirun -np 4 --oversubscribe` of the imbalanced program with the probe preloaded.
fn mpirun(sonde: &Sonde, job: &str, env: &[(&str, &str)], steps: u32, unit_ms: u32) -> Command {
    mpirun_args(sonde, job, env, &[steps.to_string(), unit_ms.to_string()])
}

/// The same with the program's arguments as given (`steps unit_ms [pause_after]`).
fn mpirun_args(sonde: &Sonde, job: &str, env: &[(&str, &str)], args: &[String]) -> Command {
    let (_, program) = mpi_parts();
    let mut c = mpirun_probed(4, &sonde.api, job);
    for (k, v) in env {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    c.arg(&program)
        .args(args)
        // The MPI job must never see sonde's own config variables.
        .env_remove("SONDE_BIN")
        .stdin(Stdio::null());
    c
}

fn profile(sonde: &Sonde, job: &str) -> Option<Value> {
    let (code, body) = sonde.get(&format!("/api/plugins/mpi/profile?job={job}"));
    (code == 200).then(|| serde_json::from_str(&body).unwrap())
}

/// The profile once it has `ranks` ranks and stopped changing (the last batches arrived).
fn settled_profile(sonde: &Sonde, job: &str, ranks: usize) -> Value {
    let mut last_rows = u64::MAX;
    let mut got = None;
    let ok = wait_for(Duration::from_secs(15), || {
        let Some(p) = profile(sonde, job) else { return false };
        let rows = p["rows"].as_u64().unwrap();
        let stable = p["ranks"].as_array().unwrap().len() == ranks && rows == last_rows;
        last_rows = rows;
        got = Some(p);
        if !stable {
            std::thread::sleep(Duration::from_millis(300));
        }
        stable
    });
    assert!(ok, "no settled profile of {job} with {ranks} ranks: {got:?}");
    got.unwrap()
}

fn stall_shares(p: &Value) -> BTreeMap<i64, f64> {
    p["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rank"].as_i64().unwrap(), r["stall_share"].as_f64().unwrap()))
        .collect()
}

/// Folded lines: (frames, weight). Panics on a line a folded-stack reader would refuse.
fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("no weight: {l:?}"));
            let n = n.parse().unwrap_or_else(|_| panic!("weight is not an integer: {l:?}"));
            (stack.split(';').map(String::from).collect(), n)
        })
        .collect()
}

fn folded_file(sonde: &Sonde, job: &str) -> String {
    let path = sonde.dir.join("sinks").join(format!("mpi-{job}.folded"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn an_imbalanced_job_stalls_most_on_the_rank_with_least_work() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start(tmp.path(), &rotel);
    let job = "imbalance-e2e";
    // Units of 200 ms: adjacent ranks differ by 200 ms of stall per step, well
    // above the scheduling delays of 4 ranks sharing 2 busy cores (a rank late
    // off the CPU at its deadline, a peer not yet scheduled in a collective:
    // up to ~100 ms per step measured at load average 8).
    let out = mpirun(&sonde, job, &[("MPI_SONDE_HZ", "1000")], 4, 200)
        .output()
        .expect("running mpirun");
    assert!(
        out.status.success(),
        "mpirun failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let p = settled_profile(&sonde, job, 4);
    let shares = stall_shares(&p);
    println!("stall shares {shares:?}; imbalance {}", p["imbalance"]);
    assert!(
        shares[&0] > shares[&1] && shares[&1] > shares[&2] && shares[&2] > shares[&3],
        "stall shares must fall with the work per rank: {shares:?}"
    );
    assert_eq!(p["imbalance"]["ranks_by_stall"], serde_json::json!([0, 1, 2, 3]));
    assert!(
        p["imbalance"]["load_balance"].as_f64().unwrap() < 0.9,
        "{}",
        p["imbalance"]
    );
    // Every rank ran ~3.2 s; at 1 kHz that is well over 1500 samples each.
    for r in p["ranks"].as_array().unwrap() {
        let total =
            r["not_in_mpi_s"].as_f64().unwrap() + r["work_s"].as_f64().unwrap() + r["stall_s"].as_f64().unwrap();
        assert!(total > 1.5, "rank {} sampled only {total} s", r["rank"]);
    }
    // The stall is in the two collectives, at their call sites in the program.
    let sites = p["callsites"].as_array().unwrap();
    for f in ["MPI_Allreduce", "MPI_Barrier"] {
        let s = sites
            .iter()
            .find(|s| s["function"] == f)
            .unwrap_or_else(|| panic!("no {f} call site: {sites:?}"));
        assert!(s["callsite"].as_str().unwrap().contains("imbalance"), "{s}");
    }
    let allreduce = sites.iter().find(|s| s["function"] == "MPI_Allreduce").unwrap();
    assert_eq!(allreduce["max_stall_rank"], 0, "{allreduce}");

    // The folded file (written through the file sink) says the same.
    assert!(wait_for(Duration::from_secs(5), || {
        let f = folded_file(&sonde, job);
        let total: u64 = parse_folded(&f).iter().map(|(_, n)| n).sum();
        (total as f64
            - p["not_in_mpi_s"].as_f64().unwrap() * 1e6
            - p["work_s"].as_f64().unwrap() * 1e6
            - p["stall_s"].as_f64().unwrap() * 1e6)
            .abs()
            < 100.0
    }));
    let lines = parse_folded(&folded_file(&sonde, job));
    let per_rank = |rank: i64, state: &str| -> u64 {
        lines
            .iter()
            .filter(|(f, _)| f[0] == format!("rank {rank}") && f[2] == state)
            .map(|(_, n)| n)
            .sum()
    };
    let share = |r: i64| {
        let s = per_rank(r, "stall") as f64;
        s / (s + per_rank(r, "work") as f64 + per_rank(r, "not_in_mpi") as f64)
    };
    assert!(share(0) > share(1) && share(1) > share(2) && share(2) > share(3));
    assert!(
        lines
            .iter()
            .all(|(f, _)| f.len() == 3 || (f.len() >= 5 && f.last().unwrap().starts_with("MPI_"))),
        "rank;thread;state[;stack...;function]"
    );
    assert!(
        lines.iter().any(|(f, _)| f.iter().any(|x| x.starts_with("main"))),
        "stacks reach main: {lines:?}"
    );

    // And so do the metrics at the collector.
    let mut last: BTreeMap<String, f64> = BTreeMap::new();
    let arrived = wait_for(Duration::from_secs(10), || {
        for pt in parse_rotel_points(&rotel.received()) {
            if pt.name == "mpi.stall.share" && pt.has(&format!("sonde.job=Str({job})")) {
                let rank = pt.attrs.iter().find(|a| a.starts_with("mpi.rank=")).unwrap().clone();
                last.insert(rank, pt.value);
            }
        }
        last.len() == 4 && (0..4).all(|r| (last[&format!("mpi.rank=Int({r})")] - shares[&r]).abs() < 1e-9)
    });
    assert!(arrived, "mpi.stall.share at rotel {last:?}, route {shares:?}");
    let log = rotel.received();
    for m in [
        "mpi.state.time",
        "mpi.function.time",
        "mpi.stall.imbalance",
        "mpi.load_balance",
    ] {
        assert!(log.contains(&format!("Name: {m}")), "{m} did not reach the collector");
    }
}

#[test]
fn rank_selective_sampling_includes_only_the_chosen_ranks() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start(tmp.path(), &rotel);
    let job = "selective-e2e";
    let out = mpirun(&sonde, job, &[("MPI_SONDE_RANKS", "0,3")], 5, 20)
        .output()
        .expect("running mpirun");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = settled_profile(&sonde, job, 2);
    let ranks: Vec<i64> = stall_shares(&p).into_keys().collect();
    assert_eq!(ranks, vec![0, 3]);
    assert!(wait_for(Duration::from_secs(5), || sonde
        .dir
        .join("sinks/mpi-selective-e2e.folded")
        .exists()));
    let lines = parse_folded(&folded_file(&sonde, job));
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|(f, _)| f[0] == "rank 0" || f[0] == "rank 3"),
        "only ranks 0 and 3 in {lines:?}"
    );
    let shares = stall_shares(&p);
    assert!(shares[&0] > shares[&3], "{shares:?}");
}

/// Processes whose environment carries MPI_SONDE_JOB=`job` (this test's ranks only).
fn ranks_of(job: &str) -> Vec<u32> {
    let needle = format!("MPI_SONDE_JOB={job}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
        })
        .collect()
}

#[test]
fn a_job_killed_midway_leaves_sonde_healthy_and_the_partial_profile_usable() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start(tmp.path(), &rotel);
    let job = "killed-e2e";
    // steps 0: runs until killed
    let mut run = mpirun(&sonde, job, &[("MPI_SONDE_HZ", "1000")], 0, 10)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting mpirun");
    let streaming = wait_for(Duration::from_secs(20), || {
        profile(&sonde, job)
            .is_some_and(|p| p["ranks"].as_array().unwrap().len() == 4 && p["rows"].as_u64().unwrap() > 20)
    });
    let ranks = ranks_of(job);
    // Killed mid-way, without MPI_Finalize: what the ranks held since their last flush is lost.
    let _ = Command::new("kill").args(["-9", &run.id().to_string()]).status();
    for pid in &ranks {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let _ = run.wait();
    assert!(
        streaming,
        "samples never arrived from all 4 ranks: {:?}",
        profile(&sonde, job)
    );
    assert!(
        wait_for(Duration::from_secs(10), || ranks_of(job).is_empty()),
        "ranks still alive"
    );

    // sonde is healthy and goes on sampling.
    let ticks = |s: &Sonde| s.json("/api/status")["sampler"]["period"]["ticks"].as_u64().unwrap();
    let t0 = ticks(&sonde);
    assert_eq!(sonde.get("/api/ready").0, 200);
    assert!(
        wait_for(Duration::from_secs(5), || ticks(&sonde) > t0 + 5),
        "sampling stopped"
    );
    let plugins = sonde.json("/api/plugins");
    let mpi = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "mpi")
        .unwrap();
    assert_eq!(mpi["state"], "running", "{mpi}");

    // The partial profile answers and parses, and the folded file is a whole file.
    let p = settled_profile(&sonde, job, 4);
    assert!(
        p["stall_s"].as_f64().unwrap() + p["not_in_mpi_s"].as_f64().unwrap() > 0.1,
        "{p}"
    );
    let (code, text) = sonde.get(&format!("/api/plugins/mpi/folded?job={job}"));
    assert_eq!(code, 200);
    let from_route = parse_folded(&text);
    assert!(!from_route.is_empty());
    assert!(wait_for(Duration::from_secs(5), || parse_folded(&folded_file(
        &sonde, job
    )) == from_route));
}

#[test]
fn time_selective_sampling_covers_only_its_window_or_until_mpi_pcontrol_pauses_it() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start(tmp.path(), &rotel);
    let job = "window-e2e";
    let t0 = std::time::Instant::now();
    let out = mpirun(
        &sonde,
        job,
        &[
            ("MPI_SONDE_HZ", "1000"),
            ("MPI_SONDE_START_S", "0.3"),
            ("MPI_SONDE_STOP_S", "0.8"),
        ],
        10,
        30,
    )
    .output()
    .expect("running mpirun");
    let ran = t0.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ran > 1.5, "the job must outlast the window (ran {ran:.2} s)");
    let p = settled_profile(&sonde, job, 4);
    for r in p["ranks"].as_array().unwrap() {
        let total =
            r["not_in_mpi_s"].as_f64().unwrap() + r["work_s"].as_f64().unwrap() + r["stall_s"].as_f64().unwrap();
        // 0.5 s of window, checked at every tick (a tick late by a busy machine still counts).
        println!("window: rank {} sampled {total:.3} s", r["rank"]);
        assert!(
            (0.47..=0.53).contains(&total),
            "rank {} sampled {total} s of a 0.5 s window",
            r["rank"]
        );
    }
}

/// `mpirun -np 2` of a tests/mpi/stacks.c build with the probe at 1 kHz
/// (`MPI_SONDE_VERBOSE=1`); returns the settled profile and the probe's report
/// on stderr.
fn run_stacks(sonde: &Sonde, job: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> (Value, String) {
    mpi_parts();
    let mut c = mpirun_probed(2, &sonde.api, job);
    c.args(["-x", "MPI_SONDE_HZ=1000", "-x", "MPI_SONDE_VERBOSE=1"]);
    for (k, v) in env {
        c.arg("-x").arg(format!("{k}={v}"));
    }
    let out = c
        .arg(repo().join("target/mpi").join(program))
        .args(args)
        .env_remove("SONDE_BIN")
        .stdin(Stdio::null())
        .output()
        .expect("running mpirun");
    assert!(
        out.status.success(),
        "mpirun {program} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        settled_profile(sonde, job, 2),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Rank 0's own account of its time in MPI_Sendrecv (tests/mpi/stacks.c):
/// (from solve, from refine), microseconds.
fn waited(stderr: &str) -> (f64, f64) {
    let line = stderr
        .lines()
        .find_map(|l| l.split_once("stacks: rank 0 waited in MPI_Sendrecv: "))
        .unwrap_or_else(|| panic!("no account of the waits in:\n{stderr}"))
        .1;
    let us = |name: &str| -> f64 {
        line.split(", ")
            .find_map(|p| p.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" us").parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
    };
    (us("solve "), us("refine "))
}

/// Rank 0's stack report at MPI_Finalize (MPI_SONDE_VERBOSE=1): (walks, the
/// unwinder, ticks that took the stack of their call's earlier walk).
fn walk_report(stderr: &str) -> (u64, String, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("rank 0 sent ") && l.contains("stacks: "))
        .unwrap_or_else(|| panic!("no stack report from rank 0:\n{stderr}"));
    let words: Vec<&str> = line.split("stacks: ").nth(1).unwrap().split_whitespace().collect();
    let at = |w: &str| words.iter().position(|x| *x == w).unwrap();
    let walks = words[at("walks") - 1].parse().unwrap();
    let by = words[at("by") + 1].trim_end_matches(',').to_string();
    let reused = words[at("ticks") - 1].parse().unwrap();
    (walks, by, reused)
}

/// The folded lines of `job`'s stall on rank 0 that end in MPI_Sendrecv.
fn stall_stacks(sonde: &Sonde, job: &str) -> Vec<(Vec<String>, u64)> {
    let (code, text) = sonde.get(&format!("/api/plugins/mpi/folded?job={job}"));
    assert_eq!(code, 200, "{text}");
    parse_folded(&text)
        .into_iter()
        .filter(|(f, _)| f[0] == "rank 0" && f[2] == "stall" && f.last().unwrap() == "MPI_Sendrecv")
        .collect()
}

/// Whether `frames` holds, in this order (not necessarily adjacent), frames starting with each of `path`.
fn has_path(frames: &[String], path: &[&str]) -> bool {
    let mut it = frames.iter();
    path.iter()
        .all(|p| it.any(|f| f == p || f.starts_with(&format!("{p} ("))))
}

/// Varint at `*i` of a protobuf message.
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

/// Top-level fields of a protobuf message: (field, varint value, bytes).
fn proto_fields(b: &[u8]) -> Vec<(u64, u64, &[u8])> {
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        let key = varint(b, &mut i);
        match key & 7 {
            0 => out.push((key >> 3, varint(b, &mut i), &b[..0])),
            2 => {
                let n = varint(b, &mut i) as usize;
                out.push((key >> 3, 0, &b[i..i + n]));
                i += n;
            }
            w => panic!("unexpected wire type {w} in the pprof profile"),
        }
    }
    out
}

/// The job's pprof profile, decoded: sample type names and the (work, stall) totals in ns.
fn pprof_totals(sonde: &Sonde, job: &str, dir: &Path) -> (Vec<String>, u64, u64, Vec<String>) {
    use std::io::Read;
    let file = dir.join(format!("{job}.pb.gz"));
    let st = Command::new("curl")
        .args(["-sf", "-o"])
        .arg(&file)
        .arg(format!("http://{}/api/plugins/mpi/pprof?job={job}", sonde.api))
        .status()
        .unwrap();
    assert!(st.success(), "GET /pprof");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap())
        .read_to_end(&mut raw)
        .expect("the pprof profile is gzip");
    let top = proto_fields(&raw);
    let strings: Vec<String> = top
        .iter()
        .filter(|f| f.0 == 6)
        .map(|f| String::from_utf8(f.2.to_vec()).unwrap())
        .collect();
    let types = top
        .iter()
        .filter(|f| f.0 == 1)
        .map(|f| {
            let vt = proto_fields(f.2);
            format!("{}/{}", strings[vt[0].1 as usize], strings[vt[1].1 as usize])
        })
        .collect();
    let (mut work, mut stall) = (0, 0);
    for s in top.iter().filter(|f| f.0 == 2) {
        let values = proto_fields(s.2).into_iter().find(|f| f.0 == 2).unwrap().2;
        let mut i = 0;
        work += varint(values, &mut i);
        stall += varint(values, &mut i);
    }
    (types, work, stall, strings)
}

#[test]
fn call_stacks_show_both_paths_to_one_mpi_call_by_name_and_pprof_adds_up() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start(tmp.path(), &rotel);
    // With frame pointers (the probe walks them) and without (libunwind).
    for (job, program, unwinder) in [
        ("stacks-fp", "stacks", "frame"),
        ("stacks-nofp", "stacks-nofp", "libunwind"),
    ] {
        let (p, stderr) = run_stacks(&sonde, job, program, &["8", "40"], &[]);
        let stacks = stall_stacks(&sonde, job);
        println!("{job}: {stacks:?}");
        // MPI_SONDE_UNWIND=auto chose the walk the build allows; a stall in
        // MPI_Sendrecv lasts tens of ticks, and only its first tick walks.
        let (walks, by, reused) = walk_report(&stderr);
        assert_eq!(by, unwinder, "{job}: {stderr}");
        assert!(
            walks <= 2 * 8 + 8 && reused > 4 * walks,
            "{job}: rank 0 made about 2 x 8 calls of MPI_Sendrecv and a few others, \
             but walked {walks} times and reused a walk {reused} times:\n{stderr}"
        );
        let via = |mid: &str| {
            stacks
                .iter()
                .filter(|(f, _)| has_path(f, &["main", mid, "exchange", "MPI_Sendrecv"]))
                .map(|(_, n)| n)
                .sum::<u64>()
        };
        let (solve, refine) = (via("solve"), via("refine"));
        assert!(solve > 0 && refine > 0, "{job}: both paths, by name: {stacks:?}");
        // solve waits twice as long as refine per step (2 units of imbalance
        // against 1) on a quiet machine; beside other work the scheduler adds
        // its own delays to either. The program's own account of its waits is
        // the truth: the probe puts the clearly longer one on its path.
        let (t_solve, t_refine) = waited(&stderr);
        println!("{job}: rank 0 waited solve {t_solve} us, refine {t_refine} us (its own clock)");
        if t_solve > 1.3 * t_refine {
            assert!(
                solve > refine,
                "{job}: solve {solve} us, refine {refine} us; {t_solve} / {t_refine} waited"
            );
        } else if t_refine > 1.3 * t_solve {
            assert!(
                refine > solve,
                "{job}: solve {solve} us, refine {refine} us; {t_solve} / {t_refine} waited"
            );
        }
        assert!(
            stacks.iter().any(|(f, _)| f.iter().any(|x| x.contains("stacks.c:"))),
            "{job}: file:line from DWARF: {stacks:?}"
        );
        // pprof: the same totals as the profile route.
        let (types, work, stall, strings) = pprof_totals(&sonde, job, tmp.path());
        assert_eq!(types, ["work/nanoseconds", "stall/nanoseconds"]);
        let route_ns = |k: &str| (p[k].as_f64().unwrap() * 1e9).round() as u64;
        assert!(
            work.abs_diff(route_ns("work_s")) < 1000,
            "{job}: pprof work {work} ns, route {}",
            p["work_s"]
        );
        assert!(
            stall.abs_diff(route_ns("stall_s")) < 1000,
            "{job}: pprof stall {stall} ns, route {}",
            p["stall_s"]
        );
        for f in ["main", "solve", "refine", "exchange", "MPI_Sendrecv", "stacks.c"] {
            assert!(strings.iter().any(|s| s == f), "{job}: {f} in the pprof strings");
        }
    }
    // The trace has both ranks' state over time.
    let trace = sonde.json("/api/plugins/mpi/trace?job=stacks-fp");
    let ranks: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .collect();
    assert_eq!(ranks.len(), 2, "{trace}");
}

#[test]
fn stripped_and_deep_programs_still_profile_with_fewer_names() {
    let _one = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let sonde = start(tmp.path(), &rotel);
    // Stripped (no symbol table, no DWARF, no frame pointers): the program's
    // frames are module+offset, the MPI function and libc's names remain.
    run_stacks(&sonde, "stripped", "stacks-stripped", &["6", "30"], &[]);
    let stacks = stall_stacks(&sonde, "stripped");
    assert!(!stacks.is_empty());
    assert!(
        stacks
            .iter()
            .all(|(f, _)| f.iter().any(|x| x.starts_with("stacks-stripped+0x"))),
        "{stacks:?}"
    );
    assert!(stacks.iter().all(|(f, _)| !f.iter().any(|x| x.starts_with("solve"))));
    // 200 levels of recursion: cut at the depth asked for, marked at the root.
    run_stacks(
        &sonde,
        "deep",
        "stacks",
        &["4", "30", "deep"],
        &[("MPI_SONDE_DEPTH", "16")],
    );
    let stacks = stall_stacks(&sonde, "deep");
    let cut: Vec<_> = stacks.iter().filter(|(f, _)| f[3] == "[truncated]").collect();
    assert!(!cut.is_empty(), "{stacks:?}");
    for (f, _) in &cut {
        // rank, thread, state, [truncated], 16 frames (some may expand into inlined ones), function
        assert!(f.iter().filter(|x| x.starts_with("descend")).count() >= 10, "{f:?}");
        assert!(f.len() <= 4 + 16 + 4 + 1, "{} frames: {f:?}", f.len());
    }
    // A depth of 1: the call site alone, without a walk, marked as cut.
    run_stacks(&sonde, "site", "stacks", &["4", "30"], &[("MPI_SONDE_DEPTH", "1")]);
    let stacks = stall_stacks(&sonde, "site");
    assert!(!stacks.is_empty());
    for (f, _) in &stacks {
        // rank, thread, state, [truncated], the call site (in exchange, maybe with inlined frames), function
        assert_eq!(f[3], "[truncated]", "{f:?}");
        assert!(f[4..f.len() - 1].iter().all(|x| x.starts_with("exchange")), "{f:?}");
    }
    // sonde took it all and goes on.
    assert_eq!(sonde.get("/api/ready").0, 200);
}
