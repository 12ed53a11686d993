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
//!   restore), with the host behind the SDK's `Host` trait (`FakeHost` in
//!   the tests).
//! - `routes`: `GET /state`, `GET /timings`, `POST /reset`.
//!
//! All of it is plain Rust with native tests; the `Plugin` impl below is only
//! the glue to the host.

pub mod agents;
pub mod machine;
pub mod outputs;
pub mod profiler;
pub mod routes;
pub mod samples;
pub mod settings;
pub mod timeline;

#[cfg(test)]
mod tests;

use sonde_plugin_sdk::types::{
    EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, SampleRequest, StartInfo,
};
use sonde_plugin_sdk::{Host, Plugin};

pub use crate::profiler::Profiler;
use crate::settings::Settings;

/// The manifest, asking for `samples` (`Profiler::samples_wanted`).
pub fn manifest(samples: Option<SampleRequest>) -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Determined's ProfilerAgent: batch-indexed system metrics and timings of training jobs"
            .to_string(),
        samples,
        events: vec![EventKind::Progress, EventKind::Timings, EventKind::Points],
        ..Default::default()
    }
}

impl Plugin for Profiler {
    fn start(host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        let settings = Settings::parse(&info.settings)?;
        Ok(Profiler::start(host, settings, info.restarts))
    }

    fn manifest(&self) -> Manifest {
        manifest(self.samples_wanted())
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        Profiler::configure(self, host, Settings::parse(json)?);
        Ok(())
    }

    fn on_samples(&mut self, host: &mut impl Host, batch: SampleBatch) -> Result<(), String> {
        Profiler::on_samples(self, host, batch)
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        Profiler::on_events(self, host, batch);
        Ok(())
    }

    fn on_timer(&mut self, host: &mut impl Host, id: u64) -> Result<(), String> {
        Profiler::on_timer(self, host, id);
        Ok(())
    }

    fn on_request(&mut self, host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        routes::handle(self, host, request)
    }

    fn stop(&mut self, host: &mut impl Host) {
        Profiler::stop(self, host)
    }
}

sonde_plugin_sdk::export_plugin!(Profiler);
