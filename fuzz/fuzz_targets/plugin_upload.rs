//! An uploaded plugin: the name check, then what loading does with the bytes
//! (header check, compile, contract check). Anything but a component built
//! against an accepted contract must come back as an error, never a panic.
//! The body is `sonde::fuzzing::plugin_upload`, which `./dev test` also feeds
//! every seed in `corpus/plugin_upload/`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sonde::plugin::engine::PluginEngine;

/// One engine for the whole run, its compile cache in a temporary directory.
fn engine() -> &'static PluginEngine {
    static ENGINE: OnceLock<(tempfile::TempDir, PluginEngine)> = OnceLock::new();
    &ENGINE
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("a temporary cache directory");
            let engine = PluginEngine::new(dir.path()).expect("the plugin engine");
            (dir, engine)
        })
        .1
}

fuzz_target!(|data: &[u8]| sonde::fuzzing::plugin_upload(engine(), data));
