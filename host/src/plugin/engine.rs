//! The wasmtime engine shared by all plugins, the epoch ticker that keeps the
//! clock of call deadlines (the deadlines themselves: `limits.rs`), the on-disk cache of compiled components, and the check
//! that a file really is a sonde plugin of a contract version we speak.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use parking_lot::{Condvar, Mutex};
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use super::limits::EPOCH_TICK;

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

/// The engine plus the epoch ticker.
#[derive(Clone)]
pub struct PluginEngine {
    pub engine: Engine,
    ticker: Arc<EpochTicker>,
    cache_dir: PathBuf,
}

impl PluginEngine {
    pub fn new(cache_dir: &Path) -> Result<Self> {
        let mut cfg = Config::new();
        cfg.wasm_component_model(true);
        // Deadlines: the ticker advances the epoch; a call past its deadline traps.
        cfg.epoch_interruption(true);
        // No component-model async here: synchronous calls cost ~3x less.
        cfg.concurrency_support(false);
        cfg.max_wasm_stack(1 << 20);
        let engine = Engine::new(&cfg).map_err(|e| anyhow!("{e:#}"))?;
        std::fs::create_dir_all(cache_dir)
            .with_context(|| format!("creating the compile cache {}", cache_dir.display()))?;
        let ticker = EpochTicker::start(engine.clone());
        Ok(Self {
            engine,
            ticker,
            cache_dir: cache_dir.to_path_buf(),
        })
    }

    /// Marks a plugin call as running for the epoch ticker. Keep the guard
    /// alive for the duration of the call.
    pub fn enter_call(&self) -> CallGuard {
        self.ticker.enter();
        CallGuard {
            ticker: self.ticker.clone(),
        }
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
        let compiled = self.engine.precompile_component(bytes).map_err(|e| anyhow!("{e:#}"))?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &compiled).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
        // SAFETY: we just wrote this file from `precompile_component` of this engine.
        unsafe { Component::deserialize_file(&self.engine, path) }.map_err(|e| anyhow!("{e:#}"))
    }
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

/// Advances the engine's epoch every `EPOCH_TICK`, but only while at least one
/// plugin call is running, so an idle host does not wake up hundreds of times
/// a second just to keep time.
struct EpochTicker {
    in_flight: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl EpochTicker {
    fn start(engine: Engine) -> Arc<Self> {
        let t = Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        // The ticker holds only a weak reference so it ends with the engine's users.
        let weak = Arc::downgrade(&t);
        std::thread::Builder::new()
            .name("sonde-epoch".into())
            .spawn(move || {
                loop {
                    let Some(t) = weak.upgrade() else { return };
                    {
                        let mut g = t.lock.lock();
                        while t.in_flight.load(Ordering::Acquire) == 0 {
                            // Wake up now and then to notice that the host is gone.
                            if t.wake.wait_for(&mut g, Duration::from_secs(1)).timed_out() && Arc::strong_count(&t) == 1
                            {
                                return;
                            }
                        }
                    }
                    drop(t);
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch ticker thread");
        t
    }

    fn enter(&self) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            // Notify under the lock so the ticker cannot miss it between its check and its wait.
            let _g = self.lock.lock();
            self.wake.notify_one();
        }
    }
}

/// Ends a call's membership in the ticker's in-flight count when dropped.
pub struct CallGuard {
    ticker: Arc<EpochTicker>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.ticker.in_flight.fetch_sub(1, Ordering::AcqRel);
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
