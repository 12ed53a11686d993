//! paramserver: a parameter server's fault tolerance and consistency as a
//! bundled sonde plugin (seed 004). Processes report heartbeats, clocks
//! (progress named `clock`) and node events (killed, restarted, recovered,
//! all-recovered, checkpoint-begin/-end, no-data); this plugin detects
//! failures by heartbeat timeout, builds each incident's recovery timeline
//! (the seed's seven stages and five phases), tracks checkpoint cost and the
//! BSP/SSP/ASP clock progress (staleness, blocked time, stragglers).
//!
//! Where things live:
//! - `settings`: the settings JSON, validated key by key.
//! - `detector`: heartbeat deadlines and detection latency.
//! - `incidents`: checkpoints, stages → phases, the seed's table.
//! - `consistency`: clocks, staleness, blocked time, stragglers.
//! - `ps`: every hook's logic and the outputs, host behind the SDK's `Host`
//!   trait (`FakeHost` in the tests).
//! - `routes`: the HTTP routes.
//! - `persist`: the jobs in the host's state store, read back at start.
//!
//! All plain Rust with native tests; the `Plugin` impl below is glue.

pub mod consistency;
pub mod detector;
pub mod incidents;
pub mod metrics;
pub mod panel;
pub mod persist;
pub mod ps;
pub mod routes;
pub mod settings;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

pub use crate::ps::ParamServer;
use crate::settings::Settings;

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description:
            "Parameter server: heartbeat failure detection, checkpoint and recovery timeline, BSP/SSP/ASP clocks"
                .to_string(),
        samples: None,
        events: vec![EventKind::Heartbeats, EventKind::Progress, EventKind::NodeEvents],
        ..Default::default()
    }
}

impl Plugin for ParamServer {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        Ok(ParamServer::start(host, Settings::parse(&info.settings)?))
    }

    fn manifest(&self) -> Manifest {
        manifest()
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        ParamServer::configure(self, host, Settings::parse(json)?);
        Ok(())
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        ParamServer::on_events(self, host, &batch);
        Ok(())
    }

    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        ParamServer::on_timer(self, host, id);
        Ok(())
    }

    fn on_request(&mut self, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        routes::handle(self, host, request)
    }

    fn stop(&mut self, host: &mut impl Host) {
        ParamServer::save(self, host);
    }
}

sonde_plugin_sdk::export_plugin!(ParamServer);
