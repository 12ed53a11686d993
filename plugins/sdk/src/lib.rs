//! sonde-plugin-sdk: what every sonde plugin links.
//!
//! It holds the bindings that `wit-bindgen` generates from `wit/` (the
//! `sonde:plugin` contract, world `plugin`) and everything a plugin would
//! otherwise write again:
//!
//! - `plugin`: the [`Plugin`] trait (the hooks as methods with default no-ops,
//!   each given the host) and [`export_plugin!`], which wires it to the exports.
//! - `host_calls`: the [`Host`] trait, one method per function of the
//!   contract's `host` interface, and [`WasmHost`], the real one.
//! - `testing` (feature `testing`): `testing::FakeHost` for native tests.
//! - `settings`: reading a plugin's settings JSON with errors that name the key.
//! - `tables`: event tables: declaring one ([`column`]), reading a batch's
//!   rows by column name ([`Table`]), and building rows as the host does
//!   (`EventBatch::push_row`, for tests).
//! - `series`, `samples`, `points`, `metrics`: the sampled-series table, a
//!   view over the series-major sample layout, a point buffer and a
//!   metric-handle cache. `attrs`, `http`: conveniences on generated types.
//! - `cpu`: `system.cpu.utilization` per `cpu.mode` read back as one busy
//!   share ([`BusyShare`], [`CpuBusyColumns`]), the one rule every plugin uses.
//! - `instance`: the cell that keeps a plugin's state between calls.
//! - `findings`: [`Finding`], a decision about one job that its page shows.
//! - `panel`: [`panel::Panel`], the plugin's view on the dashboard as data
//!   (sentences, figures, tables, a strip, a flame graph) served at `GET /panel`.
//! - `agents`: on a cluster master, agents' forwarded samples regrouped per
//!   node into sample batches, so a plugin judges a rank by its own node.
//! - `saved`: typed JSON values and streams in the host's state store, read
//!   back at start with what no longer parses logged and left out.
//!
//! A plugin crate (`crate-type = ["cdylib"]`, built for `wasm32-wasip2`)
//! implements [`Plugin`] for its state and ends with
//! `sonde_plugin_sdk::export_plugin!(MyPlugin);`. Complete plugins are in
//! `examples/`; the author's guide is `docs/plugins.md`. A plugin may also
//! implement the generated [`Guest`] trait itself and use [`export!`].
//!
//! Everything here is plain Rust that unit-tests natively, except calls into
//! the real host ([`WasmHost`], `host::*`), which only work inside sonde: in a
//! native build they panic with `unreachable`.

wit_bindgen::generate!({
    // Relative to this crate's Cargo.toml: the contract inside the package
    // (in a checkout, a link to the repository's wit/sonde-plugin.wit).
    path: "wit",
    world: "plugin",
    // The plugin crate, not this one, expands `export!`, so it must be public
    // and find the generated types through this crate's name.
    pub_export_macro: true,
    default_bindings_module: "sonde_plugin_sdk",
    // Wrapped by `export!` below.
    export_macro_name: "__export_hooks",
    // Lets tests and plugins compare records (e.g. a manifest or a batch).
    additional_derives: [PartialEq],
    // `Default` for every record made only of lists, options, strings and
    // numbers: a test (or a plugin) writes the fields it cares about and
    // `..Default::default()`, so a new field or event kind touches none of
    // them. Records holding a WIT enum (metric-desc, sink-spec, log-record)
    // have no sensible default and get none.
    additional_type_attributes: {
        "sonde:plugin/types@0.2.0/point-batch": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/sample-batch": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/sample-request": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/origin": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/progress-columns": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/timing-columns": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/heartbeat-columns": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/point-columns": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/table-rows": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/table-decl": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/node-event": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/custom-event": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/event-batch": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/decision": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/sink-dir": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/http-request": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/start-info": [#[derive(Default)]],
        "sonde:plugin/types@0.2.0/manifest": [#[derive(Default)]],
    },
});

pub mod agents;
mod attrs;
mod cpu;
mod findings;
mod host_calls;
mod http;
mod instance;
mod metrics;
pub mod panel;
pub mod plugin;
mod points;
mod samples;
pub mod saved;
mod series;
pub mod settings;
mod tables;
#[cfg(feature = "testing")]
pub mod testing;

/// The types of the contract (`sonde:plugin/types`).
pub use sonde::plugin::types;

/// Functions the host provides (`sonde:plugin/host`). Only callable inside the host.
pub use sonde::plugin::host;

/// The hooks interface a plugin exports (`sonde:plugin/hooks`).
pub use exports::sonde::plugin::hooks;

/// The trait a plugin implements; `export!(MyPlugin)` wires it to the component's exports.
pub use exports::sonde::plugin::hooks::Guest;

pub use cpu::{BusyShare, CPU_UTILIZATION, CpuBusyColumns, CpuMode, CpuSeries};
pub use findings::Finding;
pub use host_calls::{Host, WasmHost};
pub use http::{percent_encode, query_param};
pub use instance::InstanceCell;
pub use metrics::MetricRegistry;
pub use plugin::Plugin;
pub use points::PointBuffer;
pub use samples::{SampleView, SeriesSamples};
pub use series::SeriesTable;
pub use tables::{Table, column};

/// Exports a type implementing [`Guest`] as the component's `hooks`:
/// `sonde_plugin_sdk::export!(MyPlugin);` at the plugin crate's root.
///
/// It exports nothing on non-wasm targets: the export symbols' names
/// (`sonde:plugin/hooks@0.2.0#start`) are not valid in a native linker's
/// version script, and a native build of a plugin only exists to run its
/// unit tests.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        #[cfg(target_arch = "wasm32")]
        $crate::__export_hooks!($ty);
        // Natively, still refer to the hooks so the plugin type and its impl
        // count as used (no dead-code warnings in native test builds).
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            let _ = <$ty as $crate::Guest>::start;
        };
    };
}

/// The contract version these bindings were generated from, as the host
/// reports it in `start-info.contract-version`.
pub const CONTRACT_VERSION: &str = "0.2.0";

#[cfg(test)]
mod contract_tests {
    /// The version above is the WIT's package version: written there once,
    /// checked here (the type selectors above must name it too, or the
    /// bindings do not build).
    #[test]
    fn the_contract_version_is_the_wits() {
        let wit = include_str!("../../../wit/sonde-plugin.wit");
        assert!(wit.contains(&format!("package sonde:plugin@{};", super::CONTRACT_VERSION)));
    }
}
