//! sysmetrics: the bundled plugin that turns the host's sampled columns into
//! OpenTelemetry system and GPU metrics.
//!
//! - `settings`: what the plugin asks for (period, delivery, metric prefixes).
//! - `mapping`: host series -> metric description and instrument kind.
//! - `convert`: sample batch -> metric points (host calls passed in).
//!
//! Those three are plain Rust with native tests; the `Plugin` impl below is
//! only the glue to the host, tested with the SDK's `FakeHost`.

pub mod convert;
pub mod mapping;
pub mod settings;

use sonde_plugin_sdk::types::{HttpRequest, HttpResponse, Manifest, SampleBatch, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

use crate::convert::Converter;
use crate::settings::Settings;

pub struct Sysmetrics {
    settings: Settings,
    converter: Converter,
}

impl Plugin for Sysmetrics {
    fn start(_host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        let settings = Settings::parse(&info.settings)?;
        Ok(Sysmetrics {
            converter: Converter::new(settings.metrics.clone()),
            settings,
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").to_string(),
            description: "Host samples as OpenTelemetry system.* and hw.* metrics".to_string(),
            samples: Some(self.settings.sample_request()),
            ..Default::default()
        }
    }

    fn configure(&mut self, host: &mut impl Host, json: &str) -> Result<(), String> {
        let new = Settings::parse(json)?;
        if new.sample_request() != self.settings.sample_request() {
            host.request_samples(Some(&new.sample_request()));
        }
        self.converter.set_prefixes(new.metrics.clone());
        self.settings = new;
        Ok(())
    }

    fn on_samples(&mut self, host: &mut impl Host, batch: SampleBatch) -> Result<(), String> {
        let result = self.converter.convert(batch, |d| host.declare_metric(d));
        // Emit what converted even when some series had problems.
        self.converter.points().flush_to(host);
        result
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/settings") => HttpResponse::json(200, self.settings.to_json()),
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}")),
        }
    }

    // No events, no timers; points are emitted in the call that converts
    // them, so `stop` has nothing to flush: the default hooks do.
}

sonde_plugin_sdk::export_plugin!(Sysmetrics);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{SeriesInfo, SeriesKind};

    use super::*;

    fn started(settings: &str, host: &mut FakeHost) -> Sysmetrics {
        let info = StartInfo {
            settings: settings.into(),
            ..Default::default()
        };
        Sysmetrics::start(host, info).unwrap()
    }

    #[test]
    fn the_hooks_declare_emit_and_follow_new_settings() {
        let mut host = FakeHost::default();
        let mut p = started(r#"{"period_ms":50}"#, &mut host);
        assert_eq!(p.manifest().samples.unwrap().period_ms, 50);
        let cpu = SeriesInfo {
            id: 7,
            metric: "system.cpu.utilization".into(),
            unit: "1".into(),
            kind: SeriesKind::Gauge,
            attributes: vec![],
        };
        let batch = SampleBatch {
            new_series: vec![cpu],
            timestamps: vec![10, 20],
            series: vec![7],
            values: vec![0.25, f64::NAN],
        };
        p.on_samples(&mut host, batch).unwrap();
        assert_eq!(host.series("system.cpu.utilization", &[]), vec![(10, 0.25)]);

        p.configure(&mut host, r#"{"period_ms":50}"#).unwrap();
        assert!(host.sample_requests.is_empty(), "same request: not asked again");
        p.configure(&mut host, r#"{"period_ms":200}"#).unwrap();
        assert_eq!(host.sample_requests.len(), 1);
        assert!(
            p.configure(&mut host, r#"{"period":1}"#)
                .unwrap_err()
                .contains("unknown setting `period`")
        );
        let get = HttpRequest {
            method: "GET".into(),
            path: "/settings".into(),
            ..Default::default()
        };
        let body = p.on_request(&mut host, &get).body;
        assert!(String::from_utf8(body).unwrap().contains("\"period_ms\":200"));
    }
}
