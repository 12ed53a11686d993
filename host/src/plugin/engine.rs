//! The wasmtime engine shared by all plugins with the clock of its call
//! deadlines (`deadline.rs`; the deadlines themselves: `limits.rs`), the
//! on-disk cache of compiled components, and the check that a file really is
//! a sonde plugin of a contract version we speak.
//!
//! Compiling a component takes tens of MB for a moment (Cranelift, its
//! worker threads, their malloc arenas), and glibc keeps much of it after it
//! is freed. The sonde binary therefore compiles in a child process: itself,
//! re-run as the hidden `sonde compile-plugin - OUT` with the component on
//! stdin, writing into the compile cache; the host only maps the result. A
//! host embedded in another program (the in-process agent, the tests) has no
//! such binary and compiles in its own process ([`compile_in_child`] unset).

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use super::deadline::{CallTimer, Deadlines};

/// The contract this host implements: the package version of
/// `wit/sonde-plugin.wit`, read from its `package` line by `build.rs`, so
/// it is written in one place.
pub const CONTRACT_VERSION: &str = env!("SONDE_CONTRACT_VERSION");
const CONTRACT_MAJOR: u64 = version_part(CONTRACT_VERSION, 0);
const CONTRACT_MINOR: u64 = version_part(CONTRACT_VERSION, 1);

/// Part `n` (0 major, 1 minor, 2 patch) of "MAJOR.MINOR.PATCH", at compile time.
const fn version_part(v: &str, n: usize) -> u64 {
    let b = v.as_bytes();
    let (mut i, mut part, mut value) = (0, 0, 0u64);
    while i < b.len() {
        match b[i] {
            b'.' => {
                if part == n {
                    return value;
                }
                part += 1;
                value = 0;
            }
            d @ b'0'..=b'9' => value = value * 10 + (d - b'0') as u64,
            _ => panic!("the contract version is not MAJOR.MINOR.PATCH"),
        }
        i += 1;
    }
    assert!(part == n, "the contract version is not MAJOR.MINOR.PATCH");
    value
}

/// The engine plus the clock of its call deadlines.
#[derive(Clone)]
pub struct PluginEngine {
    pub engine: Engine,
    deadlines: Arc<Deadlines>,
    cache_dir: PathBuf,
    /// Compiles in a child process with this executable (see the module doc).
    compiler: Option<PathBuf>,
}

/// The sonde executable that compiles components in a child process (see the module doc).
static COMPILER: OnceLock<PathBuf> = OnceLock::new();

/// Makes every engine of this process compile components by running `exe
/// compile-plugin` (the sonde binary itself) instead of in this process.
pub fn compile_in_child(exe: PathBuf) {
    let _ = COMPILER.set(exe);
}

/// The engine settings; a compiled component only loads into an engine with
/// the same ones (the compile child uses this too).
fn engine_config() -> Config {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true);
    // Deadlines: the epoch advances when a call is late (deadline.rs); a call past its deadline traps.
    cfg.epoch_interruption(true);
    // No component-model async here: synchronous calls cost ~3x less.
    cfg.concurrency_support(false);
    cfg.max_wasm_stack(1 << 20);
    cfg
}

/// `sonde compile-plugin IN OUT` (hidden): compiles the component in `IN`
/// (`-`: stdin) for this build's engine into `OUT`, written whole or not at all.
pub fn compile_file(input: &Path, out: &Path) -> Result<()> {
    let bytes = if input == Path::new("-") {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b).context("reading the component from stdin")?;
        b
    } else {
        std::fs::read(input).with_context(|| format!("reading {}", input.display()))?
    };
    check_wasm_header(&bytes)?;
    let engine = Engine::new(&engine_config()).map_err(|e| anyhow!("{e:#}"))?;
    let compiled = engine.precompile_component(&bytes).map_err(|e| anyhow!("{e:#}"))?;
    write_whole(out, &compiled)
}

/// Writes `path` through a temporary file and a rename, so a reader never sees it half written.
fn write_whole(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))
}

impl PluginEngine {
    pub fn new(cache_dir: &Path) -> Result<Self> {
        let engine = Engine::new(&engine_config()).map_err(|e| anyhow!("{e:#}"))?;
        std::fs::create_dir_all(cache_dir)
            .with_context(|| format!("creating the compile cache {}", cache_dir.display()))?;
        let deadlines = Arc::new(Deadlines::start(engine.clone())?);
        Ok(Self {
            engine,
            deadlines,
            cache_dir: cache_dir.to_path_buf(),
            compiler: COMPILER.get().cloned(),
        })
    }

    /// This engine, compiling in a child process with `exe` (the sonde binary).
    pub fn compiling_with(mut self, exe: PathBuf) -> Self {
        self.compiler = Some(exe);
        self
    }

    /// The deadline timer of one plugin's calls: arm it around every guest call.
    pub fn call_timer(&self) -> Result<CallTimer> {
        self.deadlines.timer()
    }

    /// Compiles `bytes` (or loads the cached compiled form) after checking that
    /// it is a component of a contract version we accept.
    pub fn load_component(&self, bytes: &[u8]) -> Result<LoadedComponent> {
        check_wasm_header(bytes)?;
        let sha = hex::encode(Sha256::digest(bytes));
        let path = self.cache_path(&sha);
        let (component, cached) = match self.try_cached(&path) {
            Some(c) => (c, true),
            None => (self.compile_to_cache(bytes, &path)?, false),
        };
        let contract = check_contract(&self.engine, &component)?;
        Ok(LoadedComponent {
            component,
            sha256: sha,
            contract,
            from_cache: cached,
        })
    }

    fn cache_path(&self, sha: &str) -> PathBuf {
        // Compiled code is only valid for the same wasmtime build and settings.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        self.cache_dir.join(format!("{sha}-{:016x}.cwasm", h.finish()))
    }

    fn try_cached(&self, path: &Path) -> Option<Component> {
        if !path.exists() {
            return None;
        }
        // SAFETY: the file was written by `compile_to_cache` of an engine with
        // the same compatibility hash (it is part of the name), into a
        // directory only sonde writes.
        match unsafe { Component::deserialize_file(&self.engine, path) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), "dropping unusable compiled-plugin cache entry: {e:#}");
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    fn compile_to_cache(&self, bytes: &[u8], path: &Path) -> Result<Component> {
        match &self.compiler {
            Some(exe) => run_compiler(exe, bytes, path)?,
            None => {
                let compiled = self.engine.precompile_component(bytes).map_err(|e| anyhow!("{e:#}"))?;
                write_whole(path, &compiled)?;
            }
        }
        // SAFETY: the file was just written by `precompile_component` of an
        // engine with this engine's settings (this process, or this same
        // executable in a child), into a directory only sonde writes.
        unsafe { Component::deserialize_file(&self.engine, path) }.map_err(|e| anyhow!("{e:#}"))
    }
}

/// Runs `exe compile-plugin - path` with `bytes` on its stdin; its error
/// output becomes the error.
fn run_compiler(exe: &Path, bytes: &[u8], path: &Path) -> Result<()> {
    let mut child = std::process::Command::new(exe)
        .arg("compile-plugin")
        .arg("-")
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} to compile the plugin", exe.display()))?;
    // A child that died early closes its stdin: its stderr says why.
    let fed = child.stdin.take().map(|mut i| i.write_all(bytes));
    let out = child.wait_with_output().context("waiting for the plugin compiler")?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.trim().trim_start_matches("sonde compile-plugin: ");
        bail!(
            "{}",
            if said.is_empty() {
                format!("the plugin compiler ended with {}", out.status)
            } else {
                said.to_string()
            }
        );
    }
    if let Some(Err(e)) = fed {
        bail!("handing the component to the plugin compiler: {e}");
    }
    Ok(())
}

/// A component ready to link.
pub struct LoadedComponent {
    pub component: Component,
    pub sha256: String,
    /// The contract version it was built against, e.g. "0.1.0".
    pub contract: String,
    pub from_cache: bool,
}

/// Gives a clear reason for files that are not components at all.
pub fn check_wasm_header(bytes: &[u8]) -> Result<()> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        let shown: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        bail!("not a WebAssembly file (first bytes: {})", shown.join(" "));
    }
    // Core modules have version 1 and layer 0; components have layer 1.
    if bytes[4..8] == [1, 0, 0, 0] {
        bail!(
            "this is a core WebAssembly module, not a component: build the plugin with \
             `cargo build --target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
        );
    }
    if bytes[6..8] != [1, 0] {
        bail!("unknown WebAssembly encoding (version bytes {:02x?})", &bytes[4..8]);
    }
    Ok(())
}

/// Finds the `sonde:plugin/hooks@X.Y.Z` export and checks its version.
fn check_contract(engine: &Engine, component: &Component) -> Result<String> {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let Some(hooks) = exports.iter().find(|n| n.starts_with("sonde:plugin/hooks")) else {
        bail!(
            "not a sonde plugin: it does not export `sonde:plugin/hooks` (its exports: {}); \
             plugins implement the world `sonde:plugin/plugin` in wit/sonde-plugin.wit",
            if exports.is_empty() {
                "none".to_string()
            } else {
                exports.join(", ")
            }
        );
    };
    let version = hooks.split_once('@').map(|(_, v)| v).unwrap_or("");
    if !accepts_contract(version) {
        bail!(
            "built against contract sonde:plugin@{} but this host speaks {CONTRACT_VERSION} \
             (it accepts {CONTRACT_MAJOR}.{CONTRACT_MINOR}.x and {CONTRACT_MAJOR}.{}.x, the previous minor); \
             rebuild the plugin against this host's wit/",
            if version.is_empty() { "<unversioned>" } else { version },
            CONTRACT_MINOR.saturating_sub(1)
        );
    }
    Ok(version.to_string())
}

/// The current and the previous minor version of the contract are accepted.
pub fn accepts_contract(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u64>());
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), Some(Ok(_patch))) => {
            major == CONTRACT_MAJOR && (minor == CONTRACT_MINOR || minor + 1 == CONTRACT_MINOR)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_versions() {
        assert_eq!((CONTRACT_MAJOR, CONTRACT_MINOR), (0, 2));
        assert!(accepts_contract("0.2.0"));
        assert!(accepts_contract("0.2.7"));
        assert!(accepts_contract("0.1.0"), "previous minor");
        assert!(!accepts_contract("0.0.3"), "two minors back");
        assert!(!accepts_contract("0.3.0"));
        assert!(!accepts_contract("9.0.0"));
        assert!(!accepts_contract("1.2.0"));
        assert!(!accepts_contract(""));
        assert!(!accepts_contract("0.2"));
    }

    /// Every copy of the contract version agrees with the WIT's package line:
    /// the frozen 0.1 world's, the SDK's constant, and the docs that name it.
    #[test]
    fn the_contract_version_is_written_once() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let read = |p: &str| std::fs::read_to_string(repo.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        let wit = read("wit/sonde-plugin.wit");
        assert!(wit.contains(&format!("package sonde:plugin@{CONTRACT_VERSION};")));
        assert!(read("wit/0.1/sonde-plugin.wit").contains("package sonde:plugin@0.1.0;"));
        assert_eq!(CONTRACT_MINOR - 1, 1, "the frozen world is the previous minor");
        let sdk = read("plugins/sdk/src/lib.rs");
        assert!(
            sdk.contains(&format!("\"sonde:plugin/types@{CONTRACT_VERSION}/")),
            "the SDK's type selectors name another version"
        );
        assert!(
            sdk.contains(&format!("pub const CONTRACT_VERSION: &str = \"{CONTRACT_VERSION}\";")),
            "the SDK's CONTRACT_VERSION is another version"
        );
        for doc in ["wit/README.md", "docs/plugins.md", "plugins/README.md"] {
            let text = read(doc);
            assert!(
                text.contains(&format!("sonde:plugin@{CONTRACT_VERSION}")),
                "{doc} does not name the contract"
            );
            for (i, _) in text.match_indices("sonde:plugin@") {
                let named: String = text[i + 13..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let named = named.trim_end_matches('.');
                assert!(
                    named == CONTRACT_VERSION || named == "0.1.0" || named == "9.0.0",
                    "{doc} names sonde:plugin@{named}"
                );
            }
        }
    }

    #[test]
    fn headers_are_explained() {
        let e = check_wasm_header(b"hello world, not wasm").unwrap_err().to_string();
        assert!(e.contains("not a WebAssembly file"), "{e}");
        let e = check_wasm_header(b"\0asm\x01\0\0\0").unwrap_err().to_string();
        assert!(e.contains("core WebAssembly module"), "{e}");
        assert!(check_wasm_header(b"\0asm\x0d\0\x01\0").is_ok());
        assert!(check_wasm_header(b"").is_err());
    }
}
