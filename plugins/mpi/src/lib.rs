//! mpi: the statistical MPI state profile as a bundled sonde plugin.
//!
//! The probe inside the MPI ranks (`probes/mpi/`, a PMPI library loaded with
//! LD_PRELOAD) samples each thread's MPI state (not in MPI, MPI work, MPI
//! stall) with the MPI function and call site on a wall-clock timer, and
//! sends the counts to sonde's ingest; the host hands them to this plugin as
//! `mpi-sample-columns`. Here they become, per job:
//! time per state per rank and thread, Work and Stall per MPI function and
//! call site, the imbalance across ranks; exported as metrics, served to the
//! dashboard panel, and written as folded stacks through a file sink.
//!
//! - `settings`: the settings JSON, validated key by key.
//! - `profile`: bins, summaries, imbalance, folded text, flame graph (plain data).
//! - `pprof`: the profile as a gzip'd pprof `profile.proto` (work, stall in ns).
//! - `trace`: per-rank state over time as a Chrome / Perfetto trace.
//! - `plugin`: every hook's logic, with the host behind `host::Host`.
//! - `routes`: `GET /jobs`, `/profile`, `/folded`, `/flame`, `/pprof`, `/trace`, `POST /reset`.
//! - `host`: the `Host` trait, its real implementation and a test fake.

pub mod host;
pub mod plugin;
pub mod pprof;
pub mod profile;
pub mod routes;
pub mod settings;
pub mod trace;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Guest, InstanceCell};

use crate::host::Wasm;
use crate::plugin::Mpi;
use crate::settings::Settings;

static STATE: InstanceCell<Mpi> = InstanceCell::new();

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "MPI state profile: not in MPI / MPI work / MPI stall by rank, thread, MPI function and call site"
            .to_string(),
        samples: None,
        events: vec![EventKind::MpiSamples],
    }
}

struct Plugin;

impl Guest for Plugin {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        STATE.set(Mpi::start(&mut Wasm, settings));
        Ok(manifest())
    }

    fn configure(json: String) -> Result<(), String> {
        let new = Settings::parse(&json)?;
        STATE.with(|m| m.configure(&mut Wasm, new))
    }

    fn on_samples(_batch: SampleBatch) -> Result<(), String> {
        Ok(())
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        STATE.with(|m| m.on_events(&batch))
    }

    fn on_timer(id: u64) -> Result<(), String> {
        STATE.with(|m| m.on_timer(&mut Wasm, id))?
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        STATE
            .with(|m| routes::handle(m, &request))
            .unwrap_or_else(|e| HttpResponse::error(503, &e))
    }

    fn stop() {
        let _ = STATE.with(|m| m.stop(&mut Wasm));
    }
}

sonde_plugin_sdk::export!(Plugin);
