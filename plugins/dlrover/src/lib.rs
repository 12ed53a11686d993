//! dlrover: DLRover's job master as a bundled sonde plugin. It collects what
//! every node of a training job uses (from this host's samples and, in gateway
//! mode, from other sondes' exports), turns global-step reports into a
//! training speed, keeps runtime statistics in the host's store, makes
//! resource plans by DLRover's local-optimizer rules or its Brain's
//! algorithms, serves dynamic data shards to workers over plugin routes,
//! detects dead, failed, hung and straggling nodes, and tells all-reduce
//! ranks how many micro-batches keep the global batch fixed.
//!
//! Where things live (all plain Rust with native tests; the `Guest` impl
//! below is only the glue to the host):
//! - `model`: node types, resources (cores, MiB), plans, runtime records.
//! - `settings`: the settings JSON.
//! - `stats`: samples -> resource use per node; global steps -> speed.
//! - `optimizer` (`local`, `brain`): the plan rules of both strategies, and
//!   the user-settings / auto / clamp adjustments.
//! - `scaler`: when plans are made (cadence, stages, OOM memory, pending nodes).
//! - `sharding`: datasets, TODO/DOING, failures, dead letters, checkpoints.
//! - `client`: the sharding client's batch-done rule (R9.6).
//! - `batch`: fixed global batch micro-batch counts.
//! - `failures`: exit codes, heartbeat death, relaunch, hangs, stragglers.
//! - `nodes`: the node registry's records.
//! - `master`: every hook's logic and the state store layout.
//! - `routes`: the HTTP routes.
//! - `host`: the `Host` trait, the real host and a test fake.

pub mod batch;
pub mod client;
pub mod failures;
pub mod host;
pub mod master;
pub mod model;
pub mod nodes;
pub mod optimizer;
pub mod routes;
pub mod scaler;
pub mod settings;
pub mod sharding;
pub mod stats;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Guest, InstanceCell};

use crate::host::Wasm;
use crate::master::Master;
use crate::settings::Settings;

static STATE: InstanceCell<Master> = InstanceCell::new();

struct Dlrover;

pub fn manifest(settings: &Settings) -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "DLRover's master: runtime statistics, resource plans, dynamic data sharding, failures"
            .to_string(),
        samples: Some(settings.sample_request()),
        events: vec![
            EventKind::Progress,
            EventKind::Timings,
            EventKind::Heartbeats,
            EventKind::NodeEvents,
            EventKind::Points,
        ],
    }
}

impl Guest for Dlrover {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        let manifest = manifest(&settings);
        STATE.set(Master::start(&mut Wasm, settings, info.restarts));
        Ok(manifest)
    }

    fn configure(json: String) -> Result<(), String> {
        let new = Settings::parse(&json)?;
        STATE.with(|m| m.configure(&mut Wasm, new))?
    }

    fn on_samples(batch: SampleBatch) -> Result<(), String> {
        STATE.with(|m| m.on_samples(&mut Wasm, batch))?
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        STATE.with(|m| m.on_events(&mut Wasm, batch))
    }

    fn on_timer(_id: u64) -> Result<(), String> {
        STATE.with(|m| m.on_timer(&mut Wasm))
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        STATE
            .with(|m| routes::handle(m, &mut Wasm, &request))
            .unwrap_or_else(|e| HttpResponse::error(503, &e))
    }

    fn stop() {
        let _ = STATE.with(|m| m.stop(&mut Wasm));
    }
}

sonde_plugin_sdk::export!(Dlrover);
