//! bottleneck: why is this step slow? For each job, node and rank this
//! plugin joins step timings with the node's samples in the step's window,
//! the process's own CPU time and the MPI probe's state samples, and labels
//! every step input-bound, compute-bound, communication-bound, host-bound,
//! idle or unknown, with its evidence. Across ranks it names, per batch, the
//! rank that finished last and by how much, and over a window the persistent
//! straggler with its cause.
//!
//! - `settings`: the settings JSON; every threshold with the reasoning for its default.
//! - `verdict`: the rules: evidence in, verdict and sentence out (pure).
//! - `node`: the node's samples as ticks; a window's CPU, memory, network and
//!   disk against their observed peaks, GPU.
//! - `rank`: one rank's steps, phases, CPU time, MPI spans, history, dominant verdict.
//! - `job`: per-step rows, per-batch and persistent stragglers, verdict shares.
//! - `plugin`: every hook's logic, with the host behind `host::Host`.
//! - `routes`: `GET /jobs`, `GET /jobs/{job}`, `GET /counters`.
//! - `host`: the host calls, their real implementation and a test fake.

pub mod host;
pub mod job;
pub mod node;
pub mod plugin;
pub mod rank;
pub mod routes;
pub mod settings;
pub mod verdict;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{
    EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, SampleRequest, StartInfo,
};
use sonde_plugin_sdk::{Guest, InstanceCell};

use crate::host::Wasm;
use crate::plugin::Bottleneck;
use crate::settings::Settings;

static STATE: InstanceCell<Bottleneck> = InstanceCell::new();

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Why is this step slow: a verdict per step and rank with its evidence, and the straggler"
            .to_string(),
        samples: Some(SampleRequest {
            period_ms: 100,
            deliver_every_ms: 500,
            metrics: vec![
                "system.cpu.utilization".into(),
                "system.memory.limit".into(),
                "system.linux.memory.available".into(),
                "system.network.io".into(),
                "system.disk.io".into(),
                "hw.gpu.utilization".into(),
            ],
        }),
        events: vec![
            EventKind::Progress,
            EventKind::Timings,
            EventKind::Points,
            EventKind::MpiSamples,
        ],
    }
}

struct Plugin;

impl Guest for Plugin {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        STATE.set(Bottleneck::start(&mut Wasm, settings));
        Ok(manifest())
    }

    fn configure(json: String) -> Result<(), String> {
        let new = Settings::parse(&json)?;
        STATE.with(|b| b.configure(&mut Wasm, new))
    }

    fn on_samples(batch: SampleBatch) -> Result<(), String> {
        STATE.with(|b| b.on_samples(&mut Wasm, batch))?
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        STATE.with(|b| b.on_events(&mut Wasm, &batch))
    }

    fn on_timer(id: u64) -> Result<(), String> {
        STATE.with(|b| b.on_timer(&mut Wasm, id))
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        STATE
            .with(|b| routes::handle(b, &request))
            .unwrap_or_else(|e| HttpResponse::error(503, &e))
    }

    fn stop() {}
}

sonde_plugin_sdk::export!(Plugin);
