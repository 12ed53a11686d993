//! Example: routes, a plugin's own HTTP API.
//!
//! Every request to `/api/plugins/<name>/...` on sonde's API reaches the
//! plugin's `on_request` with the path after `<name>`, the raw query string,
//! the headers and the body. The plugin answers with a status, headers and a
//! body; the host passes the answer back as is. Authentication is the host's
//! job (the API's token applies to plugin routes too): a route sees only
//! requests that already passed it.
//!
//! What the plugin does: keeps each job's latest progress value and serves
//!
//! - `GET /jobs`: every job, as JSON;
//! - `GET /job?name=J`: one job (404 when unknown, 400 without `name`);
//! - `POST /reset`: forgets everything (204).
//!
//! A known path with the wrong method answers 405, anything else 404.

use std::collections::BTreeMap;

use serde_json::json;
use sonde_plugin_sdk::types::{EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, StartInfo};
use sonde_plugin_sdk::{Host, Plugin};

#[derive(Default)]
struct JobProgress {
    /// job → (latest progress value, reports seen).
    jobs: BTreeMap<String, (u64, u64)>,
}

impl Plugin for JobProgress {
    fn start(_host: &mut impl Host, _info: StartInfo) -> Result<Self, String> {
        Ok(JobProgress::default())
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Each job's latest progress, over HTTP".into(),
            events: vec![EventKind::Progress],
            ..Default::default()
        }
    }

    fn on_events(&mut self, _host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        let Some(p) = &batch.progress else { return Ok(()) };
        for i in 0..p.value.len() {
            let Some(origin) = batch.origins.get(p.origin[i] as usize) else {
                continue;
            };
            let entry = self.jobs.entry(origin.job.clone()).or_default();
            entry.0 = p.value[i];
            entry.1 += 1;
        }
        Ok(())
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        let job_json =
            |name: &str, &(latest, reports): &(u64, u64)| json!({"job": name, "latest": latest, "reports": reports});
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/jobs") => {
                let all: Vec<_> = self.jobs.iter().map(|(name, v)| job_json(name, v)).collect();
                HttpResponse::json(200, json!(all).to_string())
            }
            ("GET", "/job") => match request.query_param("name") {
                None => HttpResponse::error(400, "missing query parameter `name`"),
                Some(name) => match self.jobs.get(name.as_ref()) {
                    Some(v) => HttpResponse::json(200, job_json(&name, v).to_string()),
                    None => HttpResponse::error(404, &format!("no job named {name:?}")),
                },
            },
            ("POST", "/reset") => {
                self.jobs.clear();
                HttpResponse::empty(204)
            }
            (method, path @ ("/jobs" | "/job" | "/reset")) => {
                HttpResponse::error(405, &format!("{method} is not allowed on {path}"))
            }
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}")),
        }
    }
}

sonde_plugin_sdk::export_plugin!(JobProgress);

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{Origin, ProgressColumns};

    use super::*;

    fn request(method: &str, path: &str, query: &str) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            ..Default::default()
        }
    }

    fn ask(p: &mut JobProgress, host: &mut FakeHost, method: &str, path: &str, query: &str) -> (u16, Value) {
        let r = p.on_request(host, &request(method, path, query));
        let body = if r.body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&r.body).unwrap()
        };
        (r.status, body)
    }

    #[test]
    fn routes_answer_from_the_events_seen() {
        let mut host = FakeHost::default();
        let mut p = JobProgress::start(&mut host, StartInfo::default()).unwrap();
        let batch = EventBatch {
            origins: vec![
                Origin {
                    job: "a b".into(),
                    ..Default::default()
                },
                Origin {
                    job: "c".into(),
                    ..Default::default()
                },
            ],
            names: vec!["batch".into()],
            progress: Some(ProgressColumns {
                origin: vec![0, 1, 0],
                name: vec![0, 0, 0],
                time: vec![1, 2, 3],
                value: vec![10, 4, 11],
            }),
            ..Default::default()
        };
        p.on_events(&mut host, batch).unwrap();

        let (status, all) = ask(&mut p, &mut host, "GET", "/jobs", "");
        assert_eq!(status, 200);
        assert_eq!(
            all,
            json!([{"job": "a b", "latest": 11, "reports": 2}, {"job": "c", "latest": 4, "reports": 1}])
        );
        // The query string arrives raw: `name=a%20b` is decoded by query_param.
        assert_eq!(ask(&mut p, &mut host, "GET", "/job", "name=a%20b").1["latest"], 11);
        assert_eq!(ask(&mut p, &mut host, "GET", "/job", "name=zz").0, 404);
        assert_eq!(ask(&mut p, &mut host, "GET", "/job", "").0, 400);
        assert_eq!(ask(&mut p, &mut host, "DELETE", "/jobs", "").0, 405);
        assert_eq!(ask(&mut p, &mut host, "GET", "/nope", "").0, 404);
        assert_eq!(ask(&mut p, &mut host, "POST", "/reset", ""), (204, Value::Null));
        assert_eq!(ask(&mut p, &mut host, "GET", "/jobs", "").1, json!([]));
    }
}
