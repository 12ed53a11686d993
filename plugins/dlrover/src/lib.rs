//! dlrover: DLRover's job master as a bundled sonde plugin. It collects what
//! every node of a training job uses (from this host's samples and, in gateway
//! mode, from other sondes' exports), turns global-step reports into a
//! training speed, keeps runtime statistics in the host's store, makes
//! resource plans by DLRover's local-optimizer rules or its Brain's
//! algorithms, serves dynamic data shards to workers over plugin routes,
//! detects dead, failed, hung and straggling nodes, and tells all-reduce
//! ranks how many micro-batches keep the global batch fixed.
//!
//! Where things live (all plain Rust with native tests; the `Plugin` impl
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
//!
//! The host is the SDK's `Host` trait (`FakeHost` in the tests).

pub mod batch;
pub mod client;
pub mod failures;
pub mod master;
pub mod model;
pub mod nodes;
pub mod optimizer;
pub mod panel;
pub mod routes;
pub mod scaler;
pub mod settings;
pub mod sharding;
pub mod stats;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

pub use crate::master::Master;
use crate::settings::Settings;

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
        ..Default::default()
    }
}

impl Plugin for Master {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        let settings = Settings::parse(&info.settings)?;
        Ok(Master::start(host, settings, info.restarts))
    }

    fn manifest(&self) -> Manifest {
        manifest(&self.settings)
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        Master::configure(self, host, Settings::parse(json)?)
    }

    fn on_samples(&mut self, host: &mut impl Host, batch: SampleBatch) -> Result<(), String> {
        Master::on_samples(self, host, batch)
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        Master::on_events(self, host, batch);
        Ok(())
    }

    fn on_timer(&mut self, host: &mut impl Host, _id: u64) -> Result<(), String> {
        Master::on_timer(self, host);
        Ok(())
    }

    fn on_request(&mut self, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        routes::handle(self, host, request)
    }

    fn stop(&mut self, host: &mut impl Host) {
        Master::stop(self, host)
    }
}

sonde_plugin_sdk::export_plugin!(Master);
