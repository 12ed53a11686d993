//! The sonde host: samples the machine, takes in what jobs report, runs the
//! profiling logic as sandboxed Wasm plugins and exports over OTLP.
//!
//! Modules depend downward only:
//!
//! ```text
//!   run ──► api ──► plugin ──► pipeline ──► export
//!    │       │        └──────► sinks, state
//!    │       ├──► sample
//!    │       ├──► cluster ──► ingest, pipeline, export, plugin (decisions)
//!    │       └──► storage ──► history, export::remote_write, pipeline (its tap)
//!    └──► ingest ──► plugin (hands batches to the plugins)
//!           └──► symbolize (names the MPI probe's stack addresses)
//!   agent ──► run, ingest     (the in-process Rust API)
//!   history                   (the embedded store: depends on model only)
//!   tls                       (TLS settings, PEM loading, the TLS listener: depends on nothing)
//!   symbolize                 (DWARF/ELF symbols of a process's modules: depends on nothing)
//!   footprint                 (the host's own resident memory: depends on nothing)
//!   fuzzing                   (the fuzz targets' bodies: ingest, config, plugin; nothing depends on it)
//! ```
//! `model` is shared by all. Each component's settings live beside it
//! (`sample/config.rs`, `plugin/config.rs`, `export/config.rs`,
//! `api/config.rs`, `sinks/config.rs`, `ingest/config.rs`; the `tls` tables
//! they embed are `tls/config.rs`): plain data that imports nothing of its
//! component, and checks its own keys with `config/check.rs` (a leaf).
//! `config` assembles them into `Config` and validates it, so any module may
//! read `Config` without a circle.
//! Nothing depends on `api`. `scripts/check_layers.py` checks that the
//! imports (and the files inside `ingest/`) have no circles.

pub mod agent;
pub mod api;
pub mod cluster;
pub mod config;
pub mod export;
pub mod footprint;
pub mod fuzzing;
pub mod history;
pub mod ingest;
pub mod model;
pub mod pipeline;
pub mod plugin;
pub mod plugin_kit;
pub mod run;
pub mod sample;
pub mod sinks;
pub mod state;
pub mod storage;
pub mod symbolize;
pub mod tls;
