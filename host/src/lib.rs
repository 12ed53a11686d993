//! The sonde host: samples the machine, takes in what jobs report, runs the
//! profiling logic as sandboxed Wasm plugins and exports over OTLP.
//!
//! Modules depend downward only:
//!
//! ```text
//!   run ──► api ──► plugin ──► sample
//!    │       │        │
//!    │       │        └──────► pipeline ──► export
//!    └──► ingest ──► plugin (hands batches to the plugins)
//!   agent ──► run, ingest     (the in-process Rust API)
//!   history                   (the master's embedded store: depends on model only)
//! ```
//! `model` and `config` are shared by all; nothing depends on `api`.

pub mod agent;
pub mod api;
pub mod cluster;
pub mod config;
pub mod export;
pub mod history;
pub mod ingest;
pub mod model;
pub mod pipeline;
pub mod plugin;
pub mod run;
pub mod sample;
pub mod sinks;
pub mod state;
pub mod storage;
