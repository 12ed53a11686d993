//! `sonde plugin new` end to end, as a plugin author meets it: from an empty
//! folder outside any checkout, write a plugin in each language, build it with the one command
//! its README states, drop the `.wasm` into a running sonde's plugins
//! directory, feed it progress events over `/api/ingest` and read its route,
//! which answers with what the plugin counted.
//!
//! The toolchains come from `./dev setup` (`./dev guest-toolchains`):
//! componentize-py from PyPI, componentize-js from npm (pinned in
//! `tests/guest-js/`), the `wasm32-wasip2` Rust target. A test whose
//! toolchain is missing says so and stops, or fails under CI and in `./dev test`
//! (`sonde_e2e::toolchains_required`).

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
    if language != "rust" {
        // A guest's build is new bytes every time: its compiled form serves no later run.
        forget_compiled(status["sha256"].as_str().unwrap());
    }
}

#[test]
fn a_new_python_plugin_builds_loads_and_answers() {
    if !have_componentize_py() {
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
    let Some(toolchain) = guest_js_toolchain() else {
        return;
    };
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
    assert!(
        !tmp.path().starts_with(repo()),
        "the plugin must be made outside the checkout"
    );
    let dir = plugin_new(tmp.path(), "rust");
    // It builds from the SDK the binary carries, written beside it: nothing
    // points into a sonde checkout.
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(manifest.contains(r#"path = "sonde-plugin-sdk""#), "{manifest}");
    assert!(!manifest.contains(&repo().display().to_string()), "{manifest}");
    for f in [
        "sonde-plugin-sdk/Cargo.toml",
        "sonde-plugin-sdk/wit/sonde-plugin.wit",
        "Cargo.lock",
    ] {
        assert!(dir.join(f).is_file(), "{f} was not written");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("sonde-plugin-sdk/wit/sonde-plugin.wit")).unwrap(),
        std::fs::read_to_string(repo().join("wit/sonde-plugin.wit")).unwrap(),
        "the carried contract is not this checkout's"
    );
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

/// A plugin's refusal of its settings names the plugin once: sonde says
/// whose settings they are (the plugin's status and banner line, the config
/// key), and the plugin's own message (the SDK's settings helpers) does not
/// say it again.
#[test]
fn a_refused_setting_names_the_plugin_once() {
    let tmp = tempfile::tempdir().unwrap();
    let determined = plugin_file("bundled/determined.wasm");
    // At start: the plugin refuses and the status says why.
    let s = Sonde::start(
        &tmp.path().join("bad"),
        &[(determined.clone(), "determined")],
        &["--set", "plugin.determined.settings={begin_on_batc=3}"],
    );
    let status = s.json("/api/plugins/determined");
    assert_eq!(status["state"], "failed", "{status}");
    let reason = status["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("start refused: unknown setting `begin_on_batc` (known: "),
        "{reason}"
    );
    assert!(
        !reason.contains("determined"),
        "the status is the plugin's own: {reason}"
    );
    let banner = s.output();
    let line = banner
        .lines()
        .find(|l| l.starts_with("  plugins ") && l.contains("start refused"))
        .unwrap_or_else(|| panic!("{banner}"));
    assert_eq!(line.matches("determined").count(), 1, "{line}");
    drop(s);

    // While running: a live change is refused under the key that names it.
    let s = Sonde::start(&tmp.path().join("live"), &[(determined, "determined")], &[]);
    let (code, body) = http(
        &s.api,
        "PATCH",
        "/api/config",
        br#"{"plugin": {"determined": {"settings": {"begin_on_batch": -1}}}}"#,
    );
    assert_eq!(code, 422, "{body}");
    let e: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(e["key"], "plugin.determined.settings");
    let reason = e["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("refused by the plugin: setting `begin_on_batch` must be"),
        "{e}"
    );
    assert!(!reason.contains("determined"), "{e}");
    assert_eq!(
        body.matches("determined").count(),
        2,
        "the key, once at the top and once in `errors`: {body}"
    );
}
