//! The binary alone is the product: `sonde` carries the bundled plugins
//! (`host/build.rs` embeds `target/plugins/bundled/`), runs them when no
//! plugins directory is given, and writes them out with
//! `sonde plugins extract DIR`. These tests hold the real binary to that: the
//! set it carries is the set `./dev plugins` built, byte for byte, and every
//! one of them runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sonde_e2e::*;

/// (name, path) of every plugin `./dev plugins` put in target/plugins/bundled/.
fn built_set() -> Vec<(String, PathBuf)> {
    let dir = repo().join("target/plugins/bundled");
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}; run `./dev plugins`", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.strip_suffix(".wasm")?.to_string();
            (!name.starts_with('.')).then_some((name, p.clone()))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 5, "target/plugins/bundled/ holds {v:?}");
    v
}

/// A component (not a core module): "\0asm", then version 0x0d and layer 1.
fn is_component(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\0asm\x0d\x00\x01\x00")
}

#[test]
fn extract_writes_every_bundled_plugin_as_built() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("new/plugins");
    let out = Command::new(sonde_bin())
        .args(["plugins", "extract"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let built = built_set();
    let mut written: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let expected: Vec<String> = built.iter().map(|(n, _)| format!("{n}.wasm")).collect();
    assert_eq!(
        written, expected,
        "extract wrote other files than target/plugins/bundled/ holds"
    );
    for (name, src) in &built {
        let file = out_dir.join(format!("{name}.wasm"));
        let bytes = std::fs::read(&file).unwrap();
        assert!(is_component(&bytes), "{name}.wasm is not a component");
        assert!(
            bytes == std::fs::read(src).unwrap(),
            "{name}.wasm differs from {}: the binary carries a stale build",
            src.display()
        );
        // It names each file it wrote.
        assert!(stdout.lines().any(|l| Path::new(l) == file), "{stdout}");
    }
    // Run again over what is there: the files are replaced, not refused.
    std::fs::write(out_dir.join(format!("{}.wasm", built[0].0)), b"not a plugin").unwrap();
    let again = Command::new(sonde_bin())
        .args(["plugin", "extract"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(again.status.success());
    assert!(is_component(
        &std::fs::read(out_dir.join(format!("{}.wasm", built[0].0))).unwrap()
    ));
}

/// Starts the real binary with a data directory and no `--plugins-dir`.
fn start_without_plugins_dir(dir: &Path) -> Sonde {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    // The compiled plugins the other tests share, so a debug build does not compile them again.
    let cache = repo().join("target/test-plugin-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let _ = std::os::unix::fs::symlink(&cache, data.join("cache"));
    std::fs::create_dir_all(dir.join("sinks")).unwrap();
    let port = free_port();
    let api = format!("127.0.0.1:{port}");
    let out = dir.join("sonde.out");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out)
        .unwrap();
    let child = Command::new(sonde_bin())
        .arg("--data-dir")
        .arg(&data)
        .arg("--sinks-dir")
        .arg(dir.join("sinks"))
        .args(["--listen", &api])
        .args([
            "--set",
            "ingest.otlp_grpc_listen=\"off\"",
            "--set",
            "ingest.otlp_http_listen=\"off\"",
        ])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("SONDE_PLUGINS__DIR")
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .spawn()
        .unwrap();
    let s = Sonde {
        proc: Proc { child, name: "sonde" },
        api,
        out,
        dir: dir.to_path_buf(),
    };
    let up = wait_for(Duration::from_secs(300), || s.get("/api/ready").0 == 200);
    assert!(up, "sonde did not become ready:\n{}", s.output());
    s
}

#[test]
fn a_sonde_given_no_plugins_dir_runs_every_bundled_plugin() {
    let tmp = tempfile::tempdir().unwrap();
    let built = built_set();
    let s = start_without_plugins_dir(tmp.path());
    let plugins_dir = tmp.path().join("data/plugins");
    let status = s.json("/api/status");
    assert_eq!(
        status["plugins_dir"].as_str().map(PathBuf::from),
        Some(plugins_dir.clone()),
        "{status}"
    );
    // Read with `get`, not `json`, so that a plugin missing here shows sonde's log.
    let plugin = |s: &Sonde, name: &str| -> serde_json::Value {
        let (code, body) = s.get(&format!("/api/plugins/{name}"));
        assert_eq!(code, 200, "{name}: {body}\n{}", s.output());
        serde_json::from_str(&body).unwrap()
    };
    for (name, src) in &built {
        let p = plugin(&s, name);
        assert_eq!(p["state"], "running", "{name}: {p}\n{}", s.output());
        assert_eq!(
            std::fs::read(plugins_dir.join(format!("{name}.wasm"))).unwrap(),
            std::fs::read(src).unwrap(),
            "{name}"
        );
    }

    // The directory is the operator's: a plugin removed through the API is
    // not written again at the next start.
    let gone = &built[0].0;
    let (code, body) = http(&s.api, "DELETE", &format!("/api/admin/plugins/{gone}"), b"");
    assert!((200..300).contains(&code), "{code} {body}");
    drop(s);
    let s = start_without_plugins_dir(tmp.path());
    assert!(!plugins_dir.join(format!("{gone}.wasm")).exists());
    assert_eq!(s.get(&format!("/api/plugins/{gone}")).0, 404, "{}", s.output());
    let (name, _) = &built[1];
    assert_eq!(plugin(&s, name)["state"], "running");
    assert!(
        s.output()
            .contains(&format!("left out: removed from the directory earlier: {gone}")),
        "{}",
        s.output()
    );
}
