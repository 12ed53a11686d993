//! clockwork: Clockwork's controller telemetry and scheduling model as a
//! bundled sonde plugin (reference: Clockwork, OSDI 2020, INFER5).
//!
//! Where things live:
//! - `rows`: a finished request / action, from the host's columns.
//! - `tsv`: the two telemetry logs exactly as Clockwork's code writes them.
//! - `estimator`: INFER5's per (model, batch size) p99 sliding-window estimator.
//! - `infer5`: SLO and deadline formulas, the batching decision, load/evict priorities.
//! - `in_time`: `requests_in_time` of infer actions sent without it, from their requests.
//! - `analysis`: goodput, SLO, latency, cold starts, batch, errors, GPU
//!   utilisation per window; each request's time split and miss cause.
//! - `settings`, `plugin` (every hook's logic), `routes`, `host` (trait + fake).
//!
//! All plain Rust with native tests; the `Guest` impl below is only glue.

pub mod analysis;
pub mod estimator;
pub mod host;
pub mod in_time;
pub mod infer5;
pub mod plugin;
pub mod routes;
pub mod rows;
pub mod settings;
pub mod tsv;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Guest, InstanceCell};

use crate::host::Wasm;
use crate::plugin::Clockwork;
use crate::settings::Settings;

static STATE: InstanceCell<Clockwork> = InstanceCell::new();

struct Plugin;

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Clockwork: serving telemetry TSV logs, INFER5's estimator and batching, goodput/SLO analysis"
            .to_string(),
        samples: None,
        events: vec![EventKind::Requests, EventKind::Actions],
    }
}

impl Guest for Plugin {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        STATE.set(Clockwork::start(&mut Wasm, settings));
        Ok(manifest())
    }

    fn configure(json: String) -> Result<(), String> {
        let s = Settings::parse(&json)?;
        STATE.with(|p| p.configure(s))
    }

    fn on_samples(_batch: SampleBatch) -> Result<(), String> {
        Ok(())
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        STATE.with(|p| p.on_events(&mut Wasm, &batch))?
    }

    fn on_timer(_id: u64) -> Result<(), String> {
        STATE.with(|p| p.on_timer(&mut Wasm))?
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

sonde_plugin_sdk::export!(Plugin);
