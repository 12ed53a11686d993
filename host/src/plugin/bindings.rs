//! Host-side bindings generated from `wit/sonde-plugin.wit`.
//!
//! Every import is synchronous and infallible from the guest's view: the
//! host functions never trap a plugin on purpose; they return `err` values
//! the plugin can handle.

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
});

pub use self::exports::sonde::plugin::hooks;
pub use self::sonde::plugin::types;
