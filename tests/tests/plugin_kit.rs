//! `sonde plugin new` end to end, as a plugin author meets it: from an empty
//! folder, write a plugin in each language, build it with the one command
//! its README states, drop the `.wasm` into a running sonde's plugins
//! directory, feed it progress events over `/api/ingest` and read its route,
//! which answers with what the plugin counted.
//!
//! The toolchains come from `./dev setup` (`./dev guest-toolchains`):
//! componentize-py from PyPI, componentize-js from npm (pinned in
//! `tests/guest-js/`), the `wasm32-wasip2` Rust target. A test whose
//! toolchain is missing says so and stops; `./dev test` never lacks one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use sonde_e2e::*;

/// Writes the plugin `demo` in `lang` under `tmp` with the real binary; returns its folder.
fn plugin_new(tmp: &Path, lang: &str) -> PathBuf {
    let out = Command::new(sonde_bin())
        .args(["plugin", "new", "demo", "--lang", lang])
        .current_dir(tmp)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The README states the build command, and `plugin new` prints the same one.
    let dir = tmp.join("demo");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let printed = stdout.lines().find_map(|l| l.split_once("): ")).unwrap().1;
    assert!(readme.contains(printed), "the README does not state {printed:?}");
    dir
}

/// Runs `wasm` as the plugin `demo` in a sonde, sends progress events and
/// checks the plugin's `/hello` answers with what it received.
fn run_and_ask(tmp: &Path, wasm: PathBuf, language: &str) {
    let s = Sonde::start_waiting(
        &tmp.join("sonde"),
        &[(wasm, "demo")],
        &[],
        &[],
        free_port(),
        Duration::from_secs(600),
    );
    let status = s.json("/api/plugins/demo");
    assert_eq!(status["state"], "running", "{status}");
    assert_eq!(status["contract"], "0.2.0");

    let origin = json!({"job": "kit-job", "node": "kit-node", "rank": 0, "local_rank": 0});
    let t = now_ns();
    let progress: Vec<_> = [5, 6, 7]
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"name": "batch_idx", "value": v, "time_ns": t + i as u64}))
        .collect();
    let (code, body) = post_json(&s.api, "/api/ingest", &json!({"origin": origin, "progress": progress}));
    assert!((200..300).contains(&code), "{code} {body}");

    let mut last = serde_json::Value::Null;
    let answered = wait_for(Duration::from_secs(60), || {
        let (code, body) = s.get("/api/plugins/demo/hello");
        last = serde_json::from_str(&body).unwrap_or(json!({"status": code, "body": body}));
        code == 200 && last["progress_rows"] == 3 && last["sample_batches"].as_u64().unwrap_or(0) > 0
    });
    assert!(
        answered,
        "{language}: /hello never counted the events and samples: {last}\n{}",
        s.output()
    );
    assert_eq!(last["plugin"], "demo");
    assert_eq!(last["language"], language);
    assert_eq!(last["event_batches"], 1);
    assert_eq!(last["latest_progress"], json!({"kit-job": 7}));
    assert!(
        last["samples"].as_u64().unwrap() >= last["sample_batches"].as_u64().unwrap(),
        "{last}"
    );
    assert_eq!(s.get("/api/plugins/demo/nope").0, 404);
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

#[test]
fn a_new_python_plugin_builds_loads_and_answers() {
    if !have("componentize-py", "--version") {
        eprintln!("SKIPPED: componentize-py is not installed; `./dev guest-toolchains` installs it");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_new(tmp.path(), "python");
    shell(&dir, "python3 -m unittest -q");
    shell(&dir, "componentize-py -d wit -w plugin componentize app -o demo.wasm");
    run_and_ask(tmp.path(), dir.join("demo.wasm"), "python");
}

#[test]
fn a_new_javascript_plugin_builds_loads_and_answers() {
    let toolchain = repo().join("tests/guest-js/node_modules");
    if !toolchain.join(".bin/componentize-js").exists() {
        eprintln!(
            "SKIPPED: {} is missing; `./dev guest-toolchains` installs it",
            toolchain.display()
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_new(tmp.path(), "js");
    // `npm install` would fetch the same pinned componentize-js that
    // `./dev guest-toolchains` installed; the test uses that copy.
    std::os::unix::fs::symlink(&toolchain, dir.join("node_modules")).unwrap();
    shell(&dir, "npm test --silent");
    shell(&dir, "npm run build --silent");
    run_and_ask(tmp.path(), dir.join("demo.wasm"), "javascript");
}

#[test]
fn a_new_rust_plugin_builds_loads_and_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = plugin_new(tmp.path(), "rust");
    // The plugins' own target folder: the SDK and its dependencies are
    // already built there by `./dev plugins`.
    let target = repo().join("plugins/target");
    // The template's own test, natively, then the component.
    shell(
        &dir,
        &format!("CARGO_TARGET_DIR={} cargo test --quiet", target.display()),
    );
    shell(
        &dir,
        &format!(
            "CARGO_TARGET_DIR={} cargo build --release --target wasm32-wasip2",
            target.display()
        ),
    );
    run_and_ask(tmp.path(), target.join("wasm32-wasip2/release/demo.wasm"), "rust");
}
