//! {{name}}: a sonde plugin in Rust.
//!
//! It counts the sample batches and the progress events sonde hands it and
//! answers `GET /api/plugins/{{name}}/hello` with those counts as JSON.

use std::collections::BTreeMap;

use serde_json::json;
use sonde_plugin_sdk::types::{
    EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, SampleRequest, StartInfo,
};
use sonde_plugin_sdk::{Host, Plugin};

#[derive(Default)]
pub struct Counts {
    name: String,
    sample_batches: u64,
    samples: u64,
    event_batches: u64,
    progress_rows: u64,
    /// job → the latest progress value it reported.
    latest_progress: BTreeMap<String, u64>,
}

impl Plugin for Counts {
    fn start(_host: &mut impl Host, info: StartInfo) -> Result<Self, String> {
        if !matches!(info.settings.trim(), "" | "{}") {
            return Err("{{name}} takes no settings".into());
        }
        Ok(Counts {
            name: info.name,
            ..Default::default()
        })
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Counts samples and progress events; GET /hello shows them".into(),
            samples: Some(SampleRequest {
                period_ms: 1000,
                deliver_every_ms: 1000,
                metrics: vec!["system.cpu.".into()],
            }),
            events: vec![EventKind::Progress],
            ..Default::default()
        }
    }

    fn on_samples(&mut self, _host: &mut impl Host, batch: SampleBatch) -> Result<(), String> {
        self.sample_batches += 1;
        self.samples += (batch.timestamps.len() * batch.series.len()) as u64;
        Ok(())
    }

    fn on_events(&mut self, _host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let Some(p) = &batch.progress else { return Ok(()) };
        self.event_batches += 1;
        for (&origin, &value) in p.origin.iter().zip(&p.value) {
            self.progress_rows += 1;
            if let Some(o) = batch.origins.get(origin as usize) {
                self.latest_progress.insert(o.job.clone(), value);
            }
        }
        Ok(())
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/hello") => HttpResponse::json(
                200,
                json!({
                    "plugin": self.name,
                    "language": "rust",
                    "sample_batches": self.sample_batches,
                    "samples": self.samples,
                    "event_batches": self.event_batches,
                    "progress_rows": self.progress_rows,
                    "latest_progress": self.latest_progress,
                })
                .to_string(),
            ),
            (method, "/hello") => HttpResponse::error(405, &format!("{method} is not allowed on /hello")),
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}")),
        }
    }
}

sonde_plugin_sdk::export_plugin!(Counts);

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{Origin, ProgressColumns};

    use super::*;

    #[test]
    fn hello_reports_what_the_hooks_were_given() {
        let mut host = FakeHost::default();
        let info = StartInfo {
            name: "{{name}}".into(),
            settings: "{}".into(),
            ..Default::default()
        };
        let mut p = Counts::start(&mut host, info).unwrap();
        let samples = SampleBatch {
            timestamps: vec![1, 2],
            series: vec![0, 1, 2, 3],
            values: vec![0.0; 8],
            ..Default::default()
        };
        p.on_samples(&mut host, samples).unwrap();
        let job = |j: &str| Origin {
            job: j.into(),
            ..Default::default()
        };
        let events = EventBatch {
            origins: vec![job("job-a"), job("job-b")],
            names: vec!["batch".into()],
            progress: Some(ProgressColumns {
                origin: vec![0, 1, 0],
                name: vec![0, 0, 0],
                time: vec![1, 2, 3],
                value: vec![10, 3, 11],
            }),
            ..Default::default()
        };
        p.on_events(&mut host, events).unwrap();

        let get = HttpRequest {
            method: "GET".into(),
            path: "/hello".into(),
            ..Default::default()
        };
        let r = p.on_request(&mut host, &get);
        assert_eq!(r.status, 200);
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["samples"], 8);
        assert_eq!(body["progress_rows"], 3);
        assert_eq!(body["latest_progress"], json!({"job-a": 11, "job-b": 3}));
        let post = HttpRequest {
            method: "POST".into(),
            ..get
        };
        assert_eq!(p.on_request(&mut host, &post).status, 405);
    }
}
