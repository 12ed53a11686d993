//! The example plugins of `plugins/examples/`, each in a guest language and
//! in Rust, doing real work through the contract:
//!
//! - step-outliers (Python, componentize-py, beside its Rust twin): timings
//!   of training steps in, a `slow-step` decision for a step over 2x its
//!   rank's rolling median;
//! - serving-limiter (JavaScript, componentize-js, beside its Rust twin):
//!   serving requests in (rows of the `requests` event table, which the
//!   bundled clockwork plugin declares and the twins read), at most one
//!   `slo-misses` decision per model and window, with the misses counted by
//!   cause.
//!
//! Each guest is built from its folder with its toolchain, loaded into a
//! running sonde beside its twin, fed input that must make a decision and
//! input that must not, while the sonde records; both must decide the same,
//! and both must decide it again when the recording is replayed through them
//! with `sonde plugin test`. The guests' native tests run first. The Python
//! and JavaScript components are compiled once into the shared cache
//! (`target/test-plugin-cache`), which the replays must reuse (checked).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sonde_e2e::*;

fn example(path: &str) -> PathBuf {
    repo().join("plugins/examples").join(path)
}

/// Call deadline of every plugin here, guest and twin alike. The default
/// 100 ms is wall time, and a 2-core machine running several builds beside
/// the test stretched one Python call past it (a trap, and the plugin's
/// state with it); what is tested here is the decisions, not the time.
const CALL_TIMEOUT_MS: &str = "2000";

/// A guest and its Rust twin (component, plugin name; the guest first), running side by side
/// in one sonde, each with `settings` (a TOML inline table), beside the
/// plugins in `also` (with their own default settings): the declarers of the
/// event tables the twins only read.
struct Twins {
    plugins: [(PathBuf, &'static str); 2],
    s: Sonde,
}

impl Twins {
    fn start(
        dir: &Path,
        plugins: [(PathBuf, &'static str); 2],
        settings: &str,
        also: &[(PathBuf, &'static str)],
    ) -> Twins {
        let mut args: Vec<String> = vec![format!("plugins.call_timeout_ms={CALL_TIMEOUT_MS}")];
        args.extend(plugins.iter().map(|(_, n)| format!("plugin.{n}.settings={settings}")));
        let args: Vec<&str> = args.iter().flat_map(|a| ["--set", a.as_str()]).collect();
        let all: Vec<(PathBuf, &str)> = plugins.iter().chain(also).cloned().collect();
        // Long enough for a guest's first compile in a debug build.
        let s = Sonde::start_waiting(dir, &all, &args, &[], free_port(), Duration::from_secs(600));
        for (_, name) in &all {
            assert_eq!(s.json(&format!("/api/plugins/{name}"))["state"], "running");
        }
        Twins { plugins, s }
    }

    fn names(&self) -> [&'static str; 2] {
        [self.plugins[0].1, self.plugins[1].1]
    }

    /// Waits until `done` holds for both plugins' answer to `route`.
    fn wait(&self, route: &str, done: impl Fn(&Value) -> bool) {
        let both = wait_for(Duration::from_secs(30), || {
            self.names()
                .iter()
                .all(|n| done(&self.s.json(&format!("/api/plugins/{n}{route}"))))
        });
        assert!(both, "{}", self.s.output());
    }

    /// Both plugins' answer to `route`, which must be the same.
    fn agreed(&self, route: &str) -> Value {
        let [a, b] = self.names().map(|n| self.s.json(&format!("/api/plugins/{n}{route}")));
        assert_eq!(a, b, "{route}: the guest and its Rust twin disagree");
        a
    }

    /// The subjects on each plugin's decision board (the latest decision per
    /// kind and subject), which must be `kind` and `subjects` for both.
    fn board(&self, kind: &str, subjects: &[&str]) {
        for name in self.names() {
            let d = self.s.json(&format!("/api/decisions?plugin={name}"))["decisions"].clone();
            let got: Vec<(&str, &str)> = d
                .as_array()
                .unwrap()
                .iter()
                .map(|d| (d["kind"].as_str().unwrap(), d["subject"].as_str().unwrap()))
                .collect();
            let want: Vec<(&str, &str)> = subjects.iter().map(|s| (kind, *s)).collect();
            assert_eq!(got, want, "{name}: {d}");
        }
    }

    /// Records while `feed` runs and two timer ticks after, at most
    /// `seconds`; returns the recording. `feed` waits for the decisions it
    /// makes.
    fn recorded(&self, seconds: u64, out: &Path, feed: impl FnOnce()) -> PathBuf {
        let done = record_until(&self.s, seconds, Duration::from_secs(2), out, feed);
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        out.to_path_buf()
    }

    /// Replays `rec` through both with `settings` (JSON); each must decide `want` (the bodies, in order).
    fn replay(&self, rec: &Path, settings: &str, want: &[Value]) {
        for (wasm, name) in &self.plugins {
            let args = [
                "--name",
                name,
                "--settings",
                settings,
                "--call-timeout-ms",
                CALL_TIMEOUT_MS,
            ];
            let (code, r, stderr) = plugin_test(wasm, rec, &args);
            assert_eq!(code, 0, "{name}: {stderr}");
            // The running sonde compiled it into the shared cache: a guest's cold compile
            // (minutes in a debug host) happens once per suite, not again for its replay.
            assert_eq!(
                r["status"]["compiled_from_cache"], true,
                "{name}: compiled again for the replay"
            );
            let got: Vec<Value> = r["decisions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["body"].clone())
                .collect();
            assert_eq!(got, want, "{name} replayed");
        }
        // The guest's build is new bytes every time: its compiled form serves no later run.
        let guest = self.plugins[0].1;
        forget_compiled(
            self.s.json(&format!("/api/plugins/{guest}"))["sha256"]
                .as_str()
                .unwrap(),
        );
    }

    fn post(&self, body: &Value) {
        let (code, text) = post_json(&self.s.api, "/api/ingest", body);
        assert_eq!(code, 202, "{text}");
    }
}

/// Timings of one rank's steps, back to back from `t0`, one per duration (ms).
fn steps(job: &str, rank: i32, t0: u64, durations_ms: &[u64], name: &str) -> Value {
    let mut t = t0;
    let rows: Vec<Value> = durations_ms
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let row = json!({"name": name, "start_ns": t, "end_ns": t + d * 1_000_000, "batch_idx": i});
            t += d * 1_000_000;
            row
        })
        .collect();
    json!({"origin": {"job": job, "node": "gpu-1", "rank": rank, "local_rank": rank}, "timings": rows})
}

#[test]
fn step_outliers_in_python_and_rust_flag_the_same_slow_steps() {
    if !have_componentize_py() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = example("step-outliers/python");
    shell(&src, "python3 -m unittest -q");
    let py = tmp.path().join("outliers-py.wasm");
    // The build command of the example's README, with the output moved out of the tree.
    let build = format!(
        "componentize-py -d ../../../../wit -w plugin componentize app -o {}",
        py.display()
    );
    shell(&src, &build);
    let rs = plugin_file("examples/step_outliers.wasm");
    let twins = Twins::start(
        &tmp.path().join("sonde"),
        [(py, "outliers-py"), (rs, "outliers-rs")],
        "{}",
        &[],
    );

    let t0 = now_ns();
    let rec = twins.recorded(4, &tmp.path().join("steps.jsonl"), || {
        let mut rank0 = vec![100, 104, 97, 101, 99, 103, 98, 102, 100, 101];
        rank0.extend([190, 100, 99, 101]); // 1.9x: not slow
        let mut rank1 = vec![100, 98, 101, 103, 99, 100, 102, 97, 100, 101];
        rank1.extend([350, 100, 99, 260, 101]); // 3.5x and 2.6x: slow
        twins.post(&steps("train", 0, t0, &rank0, "step"));
        twins.post(&steps("train", 1, t0, &rank1, "step"));
        // Long timings that are not steps.
        twins.post(&steps(
            "train",
            0,
            t0,
            &[100, 100, 100, 100, 100, 900],
            "dataloader_next",
        ));
        twins.post(&steps("eval", 0, t0, &[100, 100, 100, 100, 100, 900], "validation"));
        twins.wait("/slow", |v| v["slow"].as_array().is_some_and(|a| a.len() == 2));
    });

    let view = twins.agreed("/slow");
    let slow = view["slow"].as_array().unwrap();
    let picked: Vec<(i64, i64)> = slow
        .iter()
        .map(|f| (f["rank"].as_i64().unwrap(), f["step"].as_i64().unwrap()))
        .collect();
    assert_eq!(picked, [(1, 10), (1, 13)]);
    assert_eq!(slow[0]["ratio"], 3.5);
    assert_eq!(slow[0]["median_ns"], 100_000_000);
    assert_eq!(view["slow_per_job"], json!({"train": 2}));
    // The decision board: rank 1 of train, nobody else, its latest slow step.
    twins.board("slow-step", &["train/rank-1"]);
    let board = twins.s.json("/api/decisions?plugin=outliers-py");
    assert_eq!(board["decisions"][0]["body"], slow[1]);

    // Replayed, each makes the same two decisions.
    twins.replay(&rec, "{}", slow);
}

/// `n` finished requests of `model` leaving from `from` (ns), 10 ms apart;
/// the first `late` after their deadline, the next `timeouts` timed out.
fn requests(model: u64, from: u64, n: u64, late: u64, timeouts: u64) -> Value {
    let rows: Vec<Value> = (0..n)
        .map(|i| {
            let departure = from + i * 10_000_000;
            let deadline = if i < late {
                departure - 1_000_000
            } else {
                departure + 50_000_000
            };
            let result = if i >= late && i < late + timeouts { 4 } else { 0 };
            json!({"request_id": model * 1000 + i, "model_id": model, "arrival_ns": departure - 5_000_000,
                   "departure_ns": departure, "deadline_ns": deadline, "result": result})
        })
        .collect();
    json!({"origin": {"job": "serving", "node": "ctl-1", "role": "controller"}, "requests": rows})
}

#[test]
fn serving_limiter_in_javascript_and_rust_fold_bursts_into_one_decision_per_window() {
    let Some(toolchain) = guest_js_toolchain() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let src = example("serving-limiter/js");
    shell(&src, "node --test");
    let js = tmp.path().join("limiter-js.wasm");
    // The example's `npm run build`, with the toolchain `./dev guest-toolchains` installed.
    let build = format!(
        "{} --wit ../../../../wit --world-name plugin -d stdio -d random -d clocks -d http -d fetch-event -o {} app.js",
        toolchain.join(".bin/componentize-js").display(),
        js.display()
    );
    shell(&src, &build);
    let rs = plugin_file("examples/serving_limiter.wasm");
    let twins = Twins::start(
        &tmp.path().join("sonde"),
        [(js, "limiter-js"), (rs, "limiter-rs")],
        "{window_ms=2000, lag_ms=500}",
        // It declares the `requests` table the twins read: without a declarer the ingest takes no rows.
        &[(plugin_file("bundled/clockwork.wasm"), "clockwork")],
    );
    // Two whole windows ahead of now, so every request is in before either closes.
    let window = 2_000_000_000;
    let w1 = (now_ns() / window + 1) * window;
    let w2 = w1 + window;
    // The second window closes at most 6.5 s after the requests are in (its end
    // and the lag), on the plugins' 1 s timer: 10 s hold it.
    let rec = twins.recorded(10, &tmp.path().join("serving.jsonl"), || {
        twins.post(&requests(7, w1 + 100_000_000, 40, 15, 2)); // a burst: 17 misses, one decision
        twins.post(&requests(9, w1 + 100_000_000, 30, 0, 0)); // all in time: none
        twins.post(&requests(7, w2 + 100_000_000, 10, 3, 0)); // the next window: its own decision
        twins.post(&requests(9, w2 + 100_000_000, 10, 0, 1)); // one timeout: a decision too
        twins.wait("/windows", |v| v["decisions"].as_array().is_some_and(|a| a.len() == 3));
    });

    let view = twins.agreed("/windows");
    let decided = view["decisions"].as_array().unwrap();
    let counts: Vec<(u64, u64, u64, u64, u64, u64)> = decided
        .iter()
        .map(|d| {
            let n = |k: &str| d[k].as_u64().unwrap();
            (
                n("model"),
                n("window_start_ms"),
                n("requests"),
                n("late"),
                n("timeouts"),
                n("misses"),
            )
        })
        .collect();
    let (s1, s2) = (w1 / 1_000_000, w2 / 1_000_000);
    assert_eq!(
        counts,
        [(7, s1, 40, 15, 2, 17), (7, s2, 10, 3, 0, 3), (9, s2, 10, 0, 1, 1)]
    );
    assert_eq!(view["misses_folded"], 21);
    assert_eq!(view["quiet_windows"], 1, "model 9's first window: no decision");
    twins.board("slo-misses", &["model-7", "model-9"]);

    // Replayed, each closes the same windows on the recording's clock.
    twins.replay(&rec, r#"{"window_ms": 2000, "lag_ms": 500}"#, decided);
}
