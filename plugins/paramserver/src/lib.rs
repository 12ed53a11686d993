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
//! - `ps`: every hook's logic and the outputs, host behind `host::Host`.
//! - `routes`: the HTTP routes.
//! - `host`: the `Host` trait, the real one and a test fake.
//!
//! All plain Rust with native tests; the `Guest` impl below is glue.

pub mod consistency;
pub mod detector;
pub mod host;
pub mod incidents;
pub mod ps;
pub mod routes;
pub mod settings;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Guest, InstanceCell};

use crate::host::Wasm;
use crate::ps::Plugin;
use crate::settings::Settings;

static STATE: InstanceCell<Plugin> = InstanceCell::new();

struct ParamServer;

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description:
            "Parameter server: heartbeat failure detection, checkpoint and recovery timeline, BSP/SSP/ASP clocks"
                .to_string(),
        samples: None,
        events: vec![EventKind::Heartbeats, EventKind::Progress, EventKind::NodeEvents],
    }
}

impl Guest for ParamServer {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        STATE.set(Plugin::start(&mut Wasm, settings));
        Ok(manifest())
    }

    fn configure(json: String) -> Result<(), String> {
        let new = Settings::parse(&json)?;
        STATE.with(|p| p.configure(&mut Wasm, new))
    }

    fn on_samples(_batch: SampleBatch) -> Result<(), String> {
        Ok(())
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        STATE.with(|p| p.on_events(&mut Wasm, &batch))
    }

    fn on_timer(id: u64) -> Result<(), String> {
        STATE.with(|p| p.on_timer(&mut Wasm, id))
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        STATE
            .with(|p| routes::handle(p, &mut Wasm, &request))
            .unwrap_or_else(|e| HttpResponse::error(503, &e))
    }

    fn stop() {}
}

sonde_plugin_sdk::export!(ParamServer);
