//! clockwork: Clockwork's controller telemetry and scheduling model as a
//! bundled sonde plugin (reference: Clockwork, OSDI 2020, INFER5).
//!
//! Where things live:
//! - `rows`: a finished request / action, and the `requests` / `actions`
//!   event tables this plugin declares for them.
//! - `tsv`: the two telemetry logs exactly as Clockwork's code writes them.
//! - `estimator`: INFER5's per (model, batch size) p99 sliding-window estimator.
//! - `infer5`: SLO and deadline formulas, the batching decision, load/evict priorities.
//! - `in_time`: `requests_in_time` of infer actions sent without it, from their requests.
//! - `analysis`: goodput, SLO, latency, cold starts, batch, errors, GPU
//!   utilisation per window; each request's time split and miss cause.
//! - `settings`, `plugin` (every hook's logic), `routes`; the host is the SDK's
//!   `Host` trait (`FakeHost` in the tests).
//!
//! All plain Rust with native tests; the `Plugin` impl below is only glue.

pub mod analysis;
pub mod estimator;
pub mod in_time;
pub mod infer5;
pub mod panel;
pub mod plugin;
pub mod routes;
pub mod rows;
pub mod settings;
pub mod tsv;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{EventBatch, HttpRequest, HttpResponse, Manifest, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

pub use crate::plugin::Clockwork;
use crate::settings::Settings;

pub fn manifest() -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Clockwork: serving telemetry TSV logs, INFER5's estimator and batching, goodput/SLO analysis"
            .to_string(),
        samples: None,
        events: Vec::new(),
        tables: vec![rows::requests_table(), rows::actions_table()],
        reads: Vec::new(),
    }
}

impl Plugin for Clockwork {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        Ok(Clockwork::start(host, Settings::parse(&info.settings)?))
    }

    fn manifest(&self) -> Manifest {
        manifest()
    }

    fn configure(&mut self, _host: &mut impl Host, json: &str) -> Result<(), String> {
        self.configure(Settings::parse(json)?);
        Ok(())
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let taken = Clockwork::on_events(self, host, &batch);
        self.follow_rows(host);
        taken
    }

    fn on_timer(&mut self, host: &mut impl Host, _id: u64) -> Result<(), String> {
        Clockwork::on_timer(self, host)
    }

    fn on_request(&mut self, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        routes::handle(self, host, request)
    }

    fn stop(&mut self, host: &mut impl Host) {
        Clockwork::stop(self, host)
    }
}

sonde_plugin_sdk::export_plugin!(Clockwork);
