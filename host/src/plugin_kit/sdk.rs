//! The Rust plugin SDK this binary carries (`plugins/sdk/`, embedded by
//! `host/build.rs`), written beside a new Rust plugin.
//!
//! Why carry it: a path to the checkout the binary was built from means an
//! installed `sonde` (a release tarball, `cargo install`) cannot start a Rust
//! plugin. A copy inside the plugin's folder builds wherever the folder goes,
//! and speaks exactly the contract this sonde speaks. The plugins' own
//! `Cargo.lock` comes with it, so the new plugin builds with the dependency
//! versions sonde's bundled plugins were tested with (cargo drops the entries
//! the plugin does not use).

use std::path::{Path, PathBuf};

mod carried {
    include!(concat!(env!("OUT_DIR"), "/plugin_sdk.rs"));
}

/// The folder, inside a new plugin, that holds the SDK.
pub const FOLDER: &str = "sonde-plugin-sdk";

/// The SDK's version, from its manifest's `[package]` `version`.
pub fn version() -> &'static str {
    let manifest = carried::SDK_FILES
        .iter()
        .find(|(p, _)| *p == "Cargo.toml")
        .map(|(_, t)| *t)
        .unwrap_or_default();
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or("unknown")
}

/// Writes the SDK into `plugin/sonde-plugin-sdk/` and the lock file into
/// `plugin/Cargo.lock`; returns the paths written, relative to `plugin`.
pub fn write_beside(plugin: &Path) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    let root = Path::new(FOLDER);
    for (rel, text) in carried::SDK_FILES {
        written.push(write(plugin, &root.join(rel), text)?);
    }
    written.push(write(plugin, Path::new("Cargo.lock"), carried::SDK_LOCK)?);
    Ok(written)
}

fn write(base: &Path, rel: &Path, text: &str) -> Result<PathBuf, String> {
    let path = base.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(rel.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carried_sdk_is_the_package_with_its_contract() {
        let paths: Vec<&str> = carried::SDK_FILES.iter().map(|(p, _)| *p).collect();
        for needed in ["Cargo.toml", "README.md", "src/lib.rs", "wit/sonde-plugin.wit"] {
            assert!(paths.contains(&needed), "{needed} is not carried: {paths:?}");
        }
        // The manifest stands alone: nothing inherited from a workspace that
        // is not there beside a new plugin.
        let manifest = carried::SDK_FILES.iter().find(|(p, _)| *p == "Cargo.toml").unwrap().1;
        assert!(!manifest.contains(".workspace = true") && !manifest.contains("workspace = true"));
        // The contract it carries is the one this sonde speaks.
        let wit = carried::SDK_FILES
            .iter()
            .find(|(p, _)| *p == "wit/sonde-plugin.wit")
            .unwrap()
            .1;
        assert!(wit.contains(&format!("package sonde:plugin@{};", env!("SONDE_CONTRACT_VERSION"))));
        assert_eq!(
            version(),
            env!("CARGO_PKG_VERSION"),
            "the SDK's version follows sonde's"
        );
        assert!(carried::SDK_LOCK.contains("name = \"wit-bindgen\""));
    }
}
