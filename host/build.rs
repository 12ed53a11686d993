//! Embeds the dashboard (`web/dist/`, built by `npm run build` in `web/`; the
//! justfile's `web` recipe) into the binary. When it has not been built, a
//! small page saying so is embedded instead and cargo prints a warning, so a
//! plain `cargo build` still works without Node.
//!
//! The same for the bundled plugins (`target/plugins/bundled/*.wasm`, built by
//! `./dev plugins`): listed for `main.rs` to embed when they are there, an
//! empty list and a warning when not. This script never builds them: CI
//! builds the plugins once, before the host, and a plain `cargo build` works
//! without the wasm target. And the plugin SDK's sources (`plugins/sdk/`, with
//! the plugins' `Cargo.lock`), which `sonde plugin new --lang rust` writes
//! beside a new plugin so that it builds outside any checkout.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    contract_version();
    hot_code_first();
    bundled_plugins();
    plugin_sdk();
    // Read at run time: a build-script binary reused from another checkout's
    // target/ must still embed this checkout's dashboard.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let web = Path::new(&manifest_dir).join("../web");
    let dist = web.join("dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    println!("cargo:rerun-if-changed={}", web.join("fallback.html").display());
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
    } else {
        println!(
            "cargo:warning=web/dist is missing: the dashboard is not embedded (run `just web`, or `npm ci && npm run build` in web/)"
        );
        files.push(("index.html".to_string(), web.join("fallback.html")));
    }
    files.sort();
    let mut out = String::from(
        "/// (path under /, content type, bytes) of every dashboard file.\npub static ASSETS: &[(&str, &str, &[u8])] = &[\n",
    );
    for (rel, path) in &files {
        let path = path.canonicalize().expect("dashboard file");
        writeln!(
            out,
            "    ({rel:?}, {:?}, include_bytes!({:?})),",
            mime(rel),
            path.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("web_assets.rs");
    std::fs::write(dest, out).unwrap();
}

/// A release build of the `sonde` binary on x86-64 Linux (linked by rustc's
/// bundled LLD) lays out the functions a running host runs (idle first, then
/// those reading the API and taking OTLP add) first in `.text`, in the order
/// `hot-code.txt` lists them (made by `./dev hot-code` from a profile of the
/// running host). Why: every page fault on the binary maps the 64 KB around
/// the page (the kernel's fault-around), so hot code spread over the binary's
/// 25 MB of code kept 8.7 MB resident where the listed functions span 1.3 MB.
/// Names no longer in the binary are skipped silently. `SONDE_NO_HOT_CODE_ORDER=1` (or another linker)
/// leaves the layout to the linker.
fn hot_code_first() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let list = Path::new(&manifest_dir).join("hot-code.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-env-changed=SONDE_NO_HOT_CODE_ORDER");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let other_linker = var("CARGO_ENCODED_RUSTFLAGS").contains("fuse-ld=") || !var("RUSTC_LINKER").is_empty();
    if var("PROFILE") != "release"
        || var("TARGET") != "x86_64-unknown-linux-gnu"
        || other_linker
        || !var("SONDE_NO_HOT_CODE_ORDER").is_empty()
        || !list.is_file()
    {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=sonde=-Wl,--symbol-ordering-file={}",
        list.display()
    );
    println!("cargo:rustc-link-arg-bin=sonde=-Wl,--no-warn-symbol-ordering");
}

/// The plugin contract's version, from the `package` line of
/// `wit/sonde-plugin.wit`, as `SONDE_CONTRACT_VERSION` (the one place it is written).
fn contract_version() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let wit = Path::new(&manifest_dir).join("../wit/sonde-plugin.wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    let text = std::fs::read_to_string(&wit).expect("reading wit/sonde-plugin.wit");
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package sonde:plugin@"))
        .and_then(|v| v.strip_suffix(';'))
        .expect("wit/sonde-plugin.wit has a `package sonde:plugin@X.Y.Z;` line");
    println!("cargo:rustc-env=SONDE_CONTRACT_VERSION={version}");
}

/// `OUT_DIR/bundled_plugins.rs`: `BUNDLED_PLUGINS`, (name, component) of
/// every `.wasm` file in `target/plugins/bundled/`, by name. Cargo reruns this
/// when that folder changes (`scripts/build-plugins.sh` replaces a file only
/// when its content changed, so an unchanged plugin build relinks nothing).
fn bundled_plugins() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest_dir).join("../target/plugins/bundled");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter_map(|p| {
                    let name = p.file_name()?.to_str()?;
                    let stem = name.strip_suffix(".wasm").filter(|_| !name.starts_with('.'))?;
                    Some((stem.to_string(), p.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    if found.is_empty() {
        println!(
            "cargo:warning=target/plugins/bundled/ is empty or missing: this sonde carries no plugins (run `./dev plugins` before building)"
        );
    }
    let mut out = String::from(
        "/// (name, component) of every plugin this binary carries (`target/plugins/bundled/` when it was built).\n\
         pub static BUNDLED_PLUGINS: &[(&str, &[u8])] = &[\n",
    );
    for (name, path) in &found {
        let path = path.canonicalize().expect("bundled plugin file");
        writeln!(out, "    ({name:?}, include_bytes!({:?})),", path.display().to_string()).unwrap();
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("bundled_plugins.rs");
    std::fs::write(dest, out).unwrap();
}

/// `OUT_DIR/plugin_sdk.rs`: `SDK_FILES`, (path, text) of the plugin SDK's
/// package (`plugins/sdk/`: its manifest, README, sources, examples and its
/// copy of the contract) and `SDK_LOCK`, the plugins' `Cargo.lock`, so a
/// plugin made outside a checkout builds with the versions sonde's own plugins
/// were tested with.
fn plugin_sdk() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let plugins = Path::new(&manifest_dir).join("../plugins");
    let sdk = plugins.join("sdk");
    println!("cargo:rerun-if-changed={}", sdk.display());
    println!("cargo:rerun-if-changed={}", plugins.join("Cargo.lock").display());
    let mut files = vec![
        ("Cargo.toml".to_string(), sdk.join("Cargo.toml")),
        ("README.md".to_string(), sdk.join("README.md")),
    ];
    for sub in ["src", "examples", "wit"] {
        let mut found = Vec::new();
        collect(&sdk, &sdk.join(sub), &mut found);
        files.extend(found);
    }
    files.sort();
    let mut out = String::from(
        "/// (path in the SDK's folder, text) of every file of the plugin SDK.\npub static SDK_FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, path) in &files {
        let path = path.canonicalize().expect("plugin SDK file");
        writeln!(out, "    ({rel:?}, include_str!({:?})),", path.display().to_string()).unwrap();
    }
    out.push_str("];\n");
    let lock = plugins.join("Cargo.lock").canonicalize().expect("plugins/Cargo.lock");
    writeln!(
        out,
        "/// The plugins' lock file: the dependency versions the SDK was tested with.\npub static SDK_LOCK: &str = include_str!({:?});",
        lock.display().to_string()
    )
    .unwrap();
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("plugin_sdk.rs");
    std::fs::write(dest, out).unwrap();
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push((rel.to_string_lossy().replace('\\', "/"), p.clone()));
        }
    }
}

fn mime(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "map" => "application/json",
        _ => "application/octet-stream",
    }
}
