//! The sonde host: samples the machine, takes in what jobs report, runs the
//! profiling logic as sandboxed Wasm plugins and exports over OTLP.
//!
//! Modules depend downward only:
//!
//! ```text
//!   api ──► plugin ──► sample, (ingest)
//!    │        │
//!    └──────► pipeline ──► export
//! ```
//! `model` and `config` are shared by all; nothing depends on `api`.

pub mod api;
pub mod config;
pub mod export;
pub mod model;
pub mod pipeline;
pub mod plugin;
pub mod run;
pub mod sample;
pub mod sinks;
pub mod state;
