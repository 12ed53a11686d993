//! plugin_kit/: the tools for plugin authors, behind `sonde plugin ...` and
//! `sonde record`. Nothing of the host runs here: each command does its one
//! job and exits.
//!
//! - `new`:    `sonde plugin new NAME --lang rust|python|js` writes a plugin from `templates/`
//! - `sdk`:    the Rust SDK this binary carries, written beside a new Rust plugin
//! - `record`: `sonde record --seconds N` asks a running sonde for `GET /api/record` and saves it
//! - `replay`: `sonde plugin test FILE.wasm --events RECORDING` runs a recording through a
//!   plugin in the host's own runtime (`crate::plugin`: engine, sandbox, limits) on the
//!   recording's clock, and collects what it emitted
//! - `report`: what `sonde plugin test` prints, readable or `--json`
//!
//! ```text
//!  running sonde ── GET /api/record ──► RECORDING (JSON lines: ticks, series, event batches)
//!                                             │
//!  FILE.wasm ── plugin::manager::prepare ──► plugin::instance::drive ◄── replay: line by line,
//!                                             │                          timers on the recording's clock
//!                                             ▼
//!                     points, log records, decisions, sink files, route answers ──► report
//! ```
//!
//! Depends on `plugin` (the runtime it replays through) and `model`; nothing
//! depends on it but `main.rs`.

mod new;
pub mod record;
pub mod replay;
pub mod report;
pub mod sdk;

pub use new::{Lang, NewPlugin, build_command, check_name, write};
