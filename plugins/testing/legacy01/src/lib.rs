//! legacy01: a plugin of the previous contract, 0.1, built from the frozen
//! `wit/0.1/sonde-plugin.wit` as any 0.1 plugin was, so the host's tests can
//! check that it still loads and still gets its rows
//! (`host/tests/plugin_runtime.rs`).
//!
//! It subscribes to 0.1's `requests`, `actions` and `mpi-samples` kinds (the
//! host fills them from the tables of those names) and to `progress`, opens a
//! sink the 0.1 way, and answers `GET /seen` with what it received:
//!
//! ```json
//! {"requests": [[68, 30, 10, 20]], "actions": [[2, 4, 30, 31]],
//!  "mpi": [[2, "MPI_Barrier", "a+0x1", 4, 1000]], "progress": 3, "sink": "ok"}
//! ```
//! (request: id, model, arrival, departure; action: id, batch size, result
//! received, result processed; mpi bin: state, function, callsite, count,
//! period). `Seen` is plain Rust with a native test.

wit_bindgen::generate!({
    path: "../../../wit/0.1",
    world: "plugin",
});

use std::sync::Mutex;

use exports::sonde::plugin::hooks::Guest;
use serde_json::{Value, json};
use sonde::plugin::types::{
    EventBatch, EventKind, HttpRequest, HttpResponse, Manifest, SampleBatch, SinkFormat, SinkMode, SinkSpec, StartInfo,
};

/// What the plugin received, by kind.
#[derive(Default)]
pub struct Seen {
    pub requests: Vec<Value>,
    pub actions: Vec<Value>,
    pub mpi: Vec<Value>,
    pub progress: usize,
    pub sink: String,
}

impl Seen {
    pub fn take(&mut self, b: &EventBatch) {
        let name = |i: u32| b.names.get(i as usize).cloned().unwrap_or_default();
        if let Some(c) = &b.requests {
            for i in 0..c.request_id.len() {
                self.requests
                    .push(json!([c.request_id[i], c.model_id[i], c.arrival[i], c.departure[i]]));
            }
        }
        if let Some(c) = &b.actions {
            for i in 0..c.action_id.len() {
                self.actions.push(json!([
                    c.action_id[i],
                    c.batch_size[i],
                    c.result_received[i],
                    c.result_processed[i]
                ]));
            }
        }
        if let Some(c) = &b.mpi_samples {
            for i in 0..c.time.len() {
                self.mpi.push(json!([
                    c.state[i],
                    name(c.function[i]),
                    name(c.callsite[i]),
                    c.count[i],
                    c.period_ns[i]
                ]));
            }
        }
        self.progress += b.progress.as_ref().map_or(0, |p| p.time.len());
    }

    pub fn json(&self) -> Value {
        json!({"requests": self.requests, "actions": self.actions, "mpi": self.mpi,
               "progress": self.progress, "sink": self.sink})
    }
}

static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Seen) -> R) -> R {
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Seen::default))
}

struct Legacy;

impl Guest for Legacy {
    fn start(_info: StartInfo) -> Result<Manifest, String> {
        let sink = sonde::plugin::host::open_sink(&SinkSpec {
            name: "legacy01.tsv".into(),
            format: SinkFormat::Tsv,
            mode: SinkMode::Append,
            columns: vec!["n".into()],
        });
        with(|s| {
            s.sink = match sink {
                Ok(_) => "ok".into(),
                Err(e) => e,
            }
        });
        Ok(Manifest {
            version: "0.1.0".into(),
            description: "a plugin of contract 0.1".into(),
            samples: None,
            events: vec![
                EventKind::Requests,
                EventKind::Actions,
                EventKind::MpiSamples,
                EventKind::Progress,
            ],
        })
    }

    fn configure(_settings: String) -> Result<(), String> {
        Ok(())
    }

    fn on_samples(_batch: SampleBatch) -> Result<(), String> {
        Ok(())
    }

    fn on_events(batch: EventBatch) -> Result<(), String> {
        with(|s| s.take(&batch));
        Ok(())
    }

    fn on_timer(_id: u64) -> Result<(), String> {
        Ok(())
    }

    fn on_request(request: HttpRequest) -> HttpResponse {
        let (status, body) = match request.path.as_str() {
            "/seen" => (200, with(|s| s.json())),
            other => (404, json!({"error": format!("no route {other}")})),
        };
        HttpResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    fn stop() {}
}

// Native builds (the plugins workspace's tests) cannot link the export symbols' names.
#[cfg(target_arch = "wasm32")]
export!(Legacy);

#[cfg(test)]
mod tests {
    use super::*;
    use sonde::plugin::types::{MpiSampleColumns, RequestColumns};

    #[test]
    fn rows_of_each_kind_are_kept_as_received() {
        let mut s = Seen::default();
        s.take(&EventBatch {
            origins: vec![],
            names: vec!["".into(), "MPI_Send".into()],
            point_series: vec![],
            progress: None,
            timings: None,
            requests: Some(RequestColumns {
                origin: vec![0],
                request_id: vec![7],
                user_id: vec![0],
                model_id: vec![3],
                slo_factor: vec![0.0],
                arrival: vec![1],
                departure: vec![2],
                deadline: vec![0],
                result: vec![0],
                arrival_copies: vec![0],
                departure_copies: vec![0],
                action_id: vec![0],
                client_sent: vec![0],
                client_received: vec![0],
            }),
            actions: None,
            mpi_samples: Some(MpiSampleColumns {
                origin: vec![0],
                thread: vec![0],
                time: vec![5],
                state: vec![2],
                function: vec![1],
                callsite: vec![0],
                count: vec![3],
                period_ns: vec![10],
            }),
            heartbeats: None,
            points: None,
            node_events: vec![],
            custom: vec![],
        });
        let j = s.json();
        assert_eq!(j["requests"], json!([[7, 3, 1, 2]]));
        assert_eq!(j["mpi"], json!([[2, "MPI_Send", "", 3, 10]]));
    }
}
