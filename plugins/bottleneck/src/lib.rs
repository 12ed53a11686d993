//! bottleneck: why is this step slow? For each job, node and rank this
//! plugin joins step timings with the node's samples in the step's window,
//! the process's own CPU time and the MPI probe's state samples (the
//! `mpi_samples` table the mpi plugin declares, read here), and labels
//! every step input-bound, compute-bound, communication-bound, host-bound,
//! idle or unknown, with its evidence. Across ranks it names, per batch, the
//! rank that finished last and by how much, and over a window the persistent
//! straggler with its cause and what fixing it gains: the job's headline
//! finding.
//!
//! - `settings`: the settings JSON; every threshold with the reasoning for its default.
//! - `verdict`: the rules: evidence in, verdict and sentence out (pure).
//! - `node`: the node's samples as ticks; a window's CPU, memory, network and
//!   disk against their observed peaks, GPU. A rank is judged against its own
//!   node: this host's samples, or on a master its node's agent's.
//! - `rank`: one rank's steps, phases, CPU time, MPI spans, history, dominant verdict.
//! - `job`: per-step rows, per-batch and persistent stragglers, verdict shares.
//! - `plugin`: every hook's logic, with the host behind the SDK's `Host`.
//! - `routes`: `GET /panel`, `GET /jobs`, `GET /jobs/{job}`, `GET /counters`.
//! - `panel`: the dashboard's view: the verdict strip, or the jobs judged.
//! - `whatif`: What-if attribution over a window of operation-level steps (pure).
//! - `confirm`: a What-if culprit said only once a window of other steps names it too.
//! - `onset`: a fail-slow's onset and end from the per-step slowdown series (CUSUM, pure).
//! - `gain`: what fixing the straggler gains: the judged steps replayed by `whatif`.
//! - `ops`: the `ops` table (operations with parallel coordinates) and each
//!   job's window of them, which `whatif` replays online.

pub mod confirm;
pub mod gain;
pub mod job;
pub mod node;
pub mod onset;
pub mod ops;
pub mod panel;
pub mod persist;
pub mod plugin;
pub mod rank;
pub mod routes;
pub mod settings;
pub mod verdict;
pub mod whatif;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{
    EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, SampleRequest, StartInfo,
};
use sonde_plugin_sdk::{Host, Plugin};

use crate::plugin::Bottleneck;
use crate::settings::Settings;

/// How often the node's samples come while no job has reported: they are
/// only kept for a job's first steps, which are judged after `lag_ms`, so
/// they may come ten times less often than once a job runs (see
/// `Bottleneck::follow_jobs`).
pub const IDLE_DELIVER_EVERY_MS: u32 = 10_000;

/// The node's samples, every 100 ms: delivered once a second while some job
/// has reported (the same tick as the other bundled plugins' deliveries, the
/// host putting them on the clock's whole seconds, well inside `lag_ms`),
/// every [`IDLE_DELIVER_EVERY_MS`] before.
pub fn sample_request(has_jobs: bool) -> SampleRequest {
    SampleRequest {
        period_ms: 100,
        deliver_every_ms: if has_jobs { 1000 } else { IDLE_DELIVER_EVERY_MS },
        metrics: NODE_METRICS.iter().map(|m| m.to_string()).collect(),
    }
}

/// What a step is judged against on its node: this host's samples, or on a
/// cluster master the samples the node's agent forwarded.
pub const NODE_METRICS: [&str; 6] = [
    "system.cpu.utilization",
    "system.memory.limit",
    "system.memory.linux.available",
    "system.network.io",
    "system.disk.io",
    "hw.gpu.utilization",
];

pub fn manifest(has_jobs: bool) -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Why is this step slow: a verdict per step and rank with its evidence, and the straggler"
            .to_string(),
        samples: Some(sample_request(has_jobs)),
        events: vec![EventKind::Progress, EventKind::Timings, EventKind::Points],
        // Operations with their parallel coordinates, for the What-if diagnosis.
        tables: vec![ops::ops_table()],
        // The MPI probe's state bins: the mpi plugin declares the table.
        reads: vec![MPI_SAMPLES.into()],
    }
}

/// The event table of the MPI probe's state bins, declared by the mpi plugin
/// (its columns are read by name: state, count, period_ns, time_ns, thread).
pub const MPI_SAMPLES: &str = "mpi_samples";

/// The component: each hook of the SDK's [`Plugin`] handed to [`Bottleneck`].
pub struct Hooks(Bottleneck);

impl Plugin for Hooks {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        let settings = Settings::parse(&info.settings)?;
        Ok(Hooks(Bottleneck::start(host, settings)))
    }

    fn manifest(&self) -> Manifest {
        manifest(!self.0.jobs.is_empty())
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        let new = Settings::parse(json)?;
        self.0.configure(host, new);
        Ok(())
    }

    fn on_samples(&mut self, host: &mut impl Host, batch: SampleBatch) -> Result<(), String> {
        self.0.on_samples(host, batch)
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        self.0.on_events(host, &batch);
        Ok(())
    }

    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        self.0.on_timer(host, id);
        Ok(())
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        routes::handle(&self.0, request)
    }

    fn stop(&mut self, host: &mut impl Host) {
        self.0.save(host, true);
    }
}

sonde_plugin_sdk::export_plugin!(Hooks);
