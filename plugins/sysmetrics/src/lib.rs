//! sysmetrics: the bundled plugin that turns the host's sampled columns into
//! OpenTelemetry system and GPU metrics.
//!
//! - `settings`: what the plugin asks for (period, delivery, metric prefixes).
//! - `mapping`: host series -> metric description and instrument kind.
//! - `convert`: sample batch -> metric points (host calls passed in).
//!
//! Those three are plain Rust with native tests; the `Guest` impl below is
//! only the glue to the host.

pub mod convert;
pub mod mapping;
pub mod settings;

use sonde_plugin_sdk::types::{EventBatch, HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Guest, InstanceCell, host};

use crate::convert::Converter;
use crate::settings::Settings;

struct State {
    settings: Settings,
    converter: Converter,
}

static STATE: InstanceCell<State> = InstanceCell::new();

struct Sysmetrics;

fn manifest(settings: &Settings) -> Manifest {
    Manifest {
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: "Host samples as OpenTelemetry system.* and hw.* metrics".to_string(),
        samples: Some(settings.sample_request()),
        events: Vec::new(),
    }
}

impl Guest for Sysmetrics {
    fn start(info: StartInfo) -> Result<Manifest, String> {
        let settings = Settings::parse(&info.settings)?;
        let manifest = manifest(&settings);
        STATE.set(State {
            converter: Converter::new(settings.metrics.clone()),
            settings,
        });
        Ok(manifest)
    }

    fn configure(json: String) -> Result<(), String> {
        let new = Settings::parse(&json)?;
        STATE.with(|state| {
            if new.sample_request() != state.settings.sample_request() {
                host::request_samples(Some(&new.sample_request()));
            }
            state.converter.set_prefixes(new.metrics.clone());
            state.settings = new;
        })
    }

    fn on_samples(batch: SampleBatch) -> Result<(), String> {
        STATE.with(|state| {
            let result = state.converter.convert(batch, host::declare_metric);
            // Emit what converted even when some series had problems.
            state.converter.points().flush();
            result
        })?
    }

    fn on_events(_batch: EventBatch) -> Result<(), String> {
        // The manifest subscribes to no events.
        Ok(())
    }

    fn on_timer(_id: u64) -> Result<(), String> {
        // No timers are set.
        Ok(())
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/settings") => match STATE.with(|s| s.settings.to_json()) {
                Ok(json) => HttpResponse::json(200, json),
                Err(e) => HttpResponse::error(503, &e),
            },
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}")),
        }
    }

    fn stop() {
        // Points are emitted in the call that converts them: nothing to flush.
    }
}

sonde_plugin_sdk::export!(Sysmetrics);
