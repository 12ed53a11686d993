//! The online What-if (`src/whatif.rs`) against the offline reference
//! written from the method's definition (`tests/diagnosis/whatif_ref.py`),
//! on jobs simulated by `tests/diagnosis/simulate.py`: the slowdowns within
//! 5 % of each other, the same culprit, and the injected cause found.
//!
//! Needs python3 (standard library only). Without it the test is skipped
//! with a note, except under CI=true, where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use bottleneck::whatif::{Culprit, Op, OpRow, Thresholds, analyze, diagnose};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// python3, or None (and a panic under CI) when it cannot run.
fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some("python3");
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "python3 is needed to run tests/diagnosis/simulate.py and whatif_ref.py \
             (standard library only): install it, e.g. `sudo apt-get install -y python3`"
        );
    }
    eprintln!("whatif_agrees: python3 not found, skipping (install python3 to run it)");
    None
}

fn run(py: &str, args: &[&str]) -> String {
    let out = Command::new(py)
        .args(args)
        .current_dir(repo())
        .output()
        .expect("starting python3");
    assert!(
        out.status.success(),
        "python3 {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The culprit as the reference writes it: the keys it gives must match.
fn same_culprit(online: &Culprit, reference: &Value) -> bool {
    let mine = serde_json::to_value(online).unwrap();
    reference
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| mine.get(k) == Some(v))
}

/// What the injected cause should be diagnosed as; None: no culprit
/// (nothing, or "steps vary with their input").
fn expected(truth: &Value) -> Option<Value> {
    let cause = truth["cause"].as_str().unwrap();
    Some(match cause {
        "slow_worker" | "fail_slow" | "slow_dataloader" => serde_json::json!({
            "culprit": "worker", "rank": truth["rank"], "dp": truth["dp"], "stage": truth["stage"],
        }),
        "slow_link" => serde_json::json!({"culprit": "link", "node": truth["node"]}),
        "overlong_stage" => serde_json::json!({"culprit": "stage", "stage": truth["stage"]}),
        _ => return None,
    })
}

#[test]
fn online_agrees_with_the_offline_reference_and_finds_the_cause() {
    let Some(py) = python() else { return };
    let dir = std::env::temp_dir().join(format!("whatif-agrees-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // seed, cause, dp, pp, tp, micro-batches, schedule: small jobs of every
    // cause and both schedules.
    let cases: [(u32, &str, u32, u32, u32, u32, &str); 8] = [
        (11, "healthy", 2, 2, 2, 4, "1f1b"),
        (12, "slow_worker", 4, 2, 1, 4, "gpipe"),
        (13, "slow_link", 2, 2, 2, 4, "1f1b"),
        (14, "overlong_stage", 2, 4, 1, 4, "1f1b"),
        (15, "seq_imbalance", 4, 2, 1, 4, "1f1b"),
        (16, "slow_dataloader", 4, 2, 2, 4, "gpipe"),
        (17, "fail_slow", 4, 2, 1, 4, "1f1b"),
        (18, "slow_worker", 2, 1, 2, 2, "gpipe"),
    ];
    let th = Thresholds::default();
    let mut failures = Vec::new();
    for (seed, cause, dp, pp, tp, micro, schedule) in cases {
        let path = dir.join(format!("{seed}-{cause}.json"));
        let p = path.to_str().unwrap();
        let (seed, dp, pp, tp, micro) = (
            seed.to_string(),
            dp.to_string(),
            pp.to_string(),
            tp.to_string(),
            micro.to_string(),
        );
        run(
            py,
            &[
                "tests/diagnosis/simulate.py",
                "--seed",
                &seed,
                "--cause",
                cause,
                "--dp",
                &dp,
                "--pp",
                &pp,
                "--tp",
                &tp,
                "--micro",
                &micro,
                "--schedule",
                schedule,
                "--out",
                p,
            ],
        );
        let reference: Value = serde_json::from_str(&run(py, &["tests/diagnosis/whatif_ref.py", p])).unwrap();
        let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let ops: Vec<Op> = serde_json::from_value::<Vec<OpRow>>(trace["ops"].clone())
            .unwrap()
            .into_iter()
            .map(Into::into)
            .collect();
        let a = analyze(&ops, &th);
        let d = diagnose(&a, &th);
        let label = format!("seed {seed} {cause} dp {dp} pp {pp} tp {tp}");
        let ref_slowdown = reference["slowdown"].as_f64().unwrap();
        let ref_stage = reference["stage_slowdown"].as_f64().unwrap();
        if (a.slowdown / ref_slowdown - 1.0).abs() > 0.05 {
            failures.push(format!(
                "{label}: slowdown {} online, {ref_slowdown} offline",
                a.slowdown
            ));
        }
        if (a.stage_slowdown / ref_stage - 1.0).abs() > 0.05 {
            failures.push(format!(
                "{label}: stage slowdown {} online, {ref_stage} offline",
                a.stage_slowdown
            ));
        }
        if !same_culprit(&d.culprit, &reference["diagnosis"]) {
            failures.push(format!(
                "{label}: culprit {:?} online, {} offline",
                d.culprit, reference["diagnosis"]
            ));
        }
        match expected(&trace["truth"]) {
            Some(want) if !same_culprit(&d.culprit, &want) => {
                failures.push(format!("{label}: culprit {:?}, injected {}", d.culprit, trace["truth"]))
            }
            None if !matches!(d.culprit, Culprit::None | Culprit::InputImbalance) => {
                failures.push(format!("{label}: culprit {:?} where none was injected", d.culprit))
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
