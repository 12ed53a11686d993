//! determined: Determined's ProfilerAgent as a bundled sonde plugin. The host
//! samples the machine; jobs report batch indices, timings and throughput as
//! events; this plugin runs the enabled/active state machine per job, ties
//! every measurement to the batch index current when it was taken, and emits
//! metrics, Determined-format batch log records and state decisions. Timings
//! come from every rank; on a cluster master, each node's system metrics come
//! from that node's agent.
//!
//! Where things live:
//! - `settings`: the settings JSON, validated key by key.
//! - `machine`: one job's enabled/active state machine and what it persists.
//! - `timeline`: a job's (time, batch index) reports, for tying measurements.
//! - `samples`: host sample columns -> Determined's system measurements
//!   (levels, counter rates, GPU free memory).
//! - `agents`: on a cluster master, agents' forwarded samples -> the same
//!   measurements, per node.
//! - `outputs`: Determined metric -> metric name, unit, attributes; the
//!   Determined batch format.
//! - `profiler`: every hook's logic (events, lag, resolution, flush, stop,
//!   restore), with the host behind the `host::Host` trait.
//! - `routes`: `GET /state`, `GET /timings`, `POST /reset`.
//! - `host`: the `Host` trait, its real implementation and a test fake.
//!
//! All of it is plain Rust with native tests; the `Guest` impl below is only
//! the glue to the host.

pub mod agents;
pub mod host;
pub mod machine;
pub mod outputs;
pub mod profiler;
pub mod routes;
pub mod samples;
pub mod settings;
pub mod timeline;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Guest, InstanceCell};

use crate::host::Wasm;
use crate::profiler::Profiler;
use crate::settings::Settings;

static STATE: InstanceCell<Profiler> = InstanceCell::new();

struct Determined;

pub fn manifest(settings: &Settings) -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Determined's ProfilerAgent: batch-indexed system metrics and timings of training jobs"
            .to_string(),
        samples: settings.wanted_samples(),
        events: vec![EventKind::Progress, EventKind::Timings, EventKind::Points],
    }
}

impl Guest for Determined {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        let manifest = manifest(&settings);
        STATE.set(Profiler::start(&mut Wasm, settings, info.restarts));
        Ok(manifest)
    }

    fn configure(json: String) -> Result<(), String> {
        let new = Settings::parse(&json)?;
        STATE.with(|p| p.configure(&mut Wasm, new))
    }

    fn on_samples(batch: SampleBatch) -> Result<(), String> {
        STATE.with(|p| p.on_samples(&mut Wasm, batch))?
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        STATE.with(|p| p.on_events(&mut Wasm, batch))
    }

    fn on_timer(id: u64) -> Result<(), String> {
        STATE.with(|p| p.on_timer(&mut Wasm, id))
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        STATE
            .with(|p| routes::handle(p, &mut Wasm, &request))
            .unwrap_or_else(|e| HttpResponse::error(503, &e))
    }

    fn stop() {
        let _ = STATE.with(|p| p.stop(&mut Wasm));
    }
}

sonde_plugin_sdk::export!(Determined);
