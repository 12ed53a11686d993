//! mpi: the statistical MPI state profile as a bundled sonde plugin.
//!
//! The probe inside the MPI ranks (`probes/mpi/`, a PMPI library loaded with
//! LD_PRELOAD) samples each thread's MPI state (not in MPI, MPI work, MPI
//! stall) with the MPI function and call site on a wall-clock timer, and
//! sends the counts to sonde's ingest as rows of the `mpi_samples` event
//! table, which this plugin declares (`table`). Here they become, per job:
//! time per state per rank and thread, Work and Stall per MPI function and
//! call site, the imbalance across ranks; exported as metrics, served to the
//! dashboard panel, and written as folded stacks through a file sink.
//!
//! - `table`: the `mpi_samples` table's declaration and the checks of its rows.
//! - `settings`: the settings JSON, validated key by key.
//! - `profile`: bins, summaries, imbalance, folded text, flame graph (plain data).
//! - `pprof`: the profile as a gzip'd pprof `profile.proto` (work, stall in ns).
//! - `trace`: per-rank state over time as a Chrome / Perfetto trace.
//! - `persist`: the profiles in the host's state store, read back at start.
//! - `plugin`: every hook's logic, with the host behind the SDK's `Host`
//!   trait (`FakeHost` in the tests).
//! - `routes`: `GET /jobs`, `/profile`, `/folded`, `/flame`, `/pprof`, `/trace`, `POST /reset`.

pub mod panel;
pub mod persist;
pub mod plugin;
pub mod pprof;
pub mod profile;
pub mod routes;
pub mod settings;
pub mod table;
pub mod trace;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, HttpRequest, HttpResponse, Manifest, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

pub use crate::plugin::Mpi;
use crate::settings::Settings;

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "MPI state profile: not in MPI / MPI work / MPI stall by rank, thread, MPI function and call site"
            .to_string(),
        samples: None,
        events: Vec::new(),
        tables: vec![table::samples_table()],
        reads: Vec::new(),
    }
}

impl Plugin for Mpi {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        Ok(Mpi::start(host, Settings::parse(&info.settings)?))
    }

    fn manifest(&self) -> Manifest {
        manifest()
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        Mpi::configure(self, host, Settings::parse(json)?);
        Ok(())
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let taken = Mpi::on_events(self, &batch);
        self.follow_jobs(host);
        taken
    }

    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        Mpi::on_timer(self, host, id)
    }

    fn on_request(&mut self, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        let r = routes::handle(self, request);
        if !self.forgotten.is_empty() {
            // A reset: its saved profile goes now, not at a timer that may not come.
            self.save(host);
        }
        r
    }

    fn stop(&mut self, host: &mut impl Host) {
        Mpi::stop(self, host)
    }
}

sonde_plugin_sdk::export_plugin!(Mpi);
