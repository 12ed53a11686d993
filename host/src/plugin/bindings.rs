//! Host-side bindings generated from `wit/sonde-plugin.wit`.
//!
//! Every import is synchronous and infallible from the guest's view: the
//! host functions never trap a plugin on purpose; they return `err` values
//! the plugin can handle.
//!
//! Every generated type is serde-serializable: a recording (`plugin::recording`)
//! holds the event batches exactly as plugins receive them, so its format
//! follows the contract.

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../wit",
    additional_derives: [serde::Serialize, serde::Deserialize],
});

pub use self::exports::sonde::plugin::hooks;
pub use self::sonde::plugin::types;
