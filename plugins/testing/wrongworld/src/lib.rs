//! wrongworld: a component that exports `sonde:plugin/hooks@9.0.0` instead of
//! the host's 0.1.x, so the host's tests can check that loading it fails with
//! a "wrong contract version" error and leaves the other plugins running
//! (`host/tests/plugin_runtime.rs`).
//!
//! `wit/sonde-plugin.wit` is a few lines, not a copy of the real contract: the
//! host checks the version on the hooks export before anything else, so one
//! hook is all the component needs. It does nothing; the host must refuse the
//! component before calling it.

wit_bindgen::generate!({
    path: "wit",
    world: "plugin",
});

use exports::sonde::plugin::hooks::Guest;

struct WrongWorld;

impl Guest for WrongWorld {
    fn stop() {}
}

// Native builds (the plugins workspace's tests) cannot link the export symbols' names.
#[cfg(target_arch = "wasm32")]
export!(WrongWorld);
