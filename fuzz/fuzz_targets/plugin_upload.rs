//! An uploaded plugin: the name check, then what loading does with the bytes
//! (header check, compile, contract check). Anything but a component built
//! against an accepted contract must come back as an error, never a panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sonde::plugin::config::check_plugin_name;
use sonde::plugin::engine::PluginEngine;

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

fuzz_target!(|data: &[u8]| {
    // The first bytes up to a NUL are the name the upload would use.
    let (name, bytes) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i..]),
        None => (&data[..0], data),
    };
    if let Ok(name) = std::str::from_utf8(name) {
        if check_plugin_name(name).is_ok() {
            assert!(
                !name.contains('/') && !name.contains(".."),
                "{name:?} passed the name check"
            );
        }
    }
    let _ = engine().load_component(bytes);
});
