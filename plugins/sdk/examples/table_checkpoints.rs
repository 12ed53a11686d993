//! Example: an event table of your own, with no change to the host.
//!
//! The host knows a few kinds of events by heart (progress, timings, points,
//! ...). Anything else a job reports travels as rows of an event table that
//! a plugin declares in its manifest: a name and typed columns. Once this
//! plugin runs, sonde's ingest takes rows of `checkpoints`:
//!
//! ```text
//! POST /api/ingest   {"origin": {"job": "llm-7b"},
//!                     "checkpoints": [{"step": 1200, "bytes": 14000000000, "write_s": 41.5,
//!                                      "storage": "s3", "verified": true}]}
//! OTLP               a log record (or span) with the attributes
//!                    sonde.table = "checkpoints", step = 1200, bytes = ..., write_s = 41.5, ...
//! ```
//! checks each row against the declaration (a missing `step`, a `write_s`
//! that is not a number, a column it does not declare: that row is refused,
//! naming the table, the row and the column), and hands the rows over in
//! `event-batch.tables`, in columns. `GET /api/tables` lists the table.
//!
//! What the plugin does with them: per job, the checkpoints seen, bytes
//! written, the slowest write and the ones not verified, served at
//! `GET /checkpoints`; and the latest write time as the metric
//! `checkpoint.write.duration` (s) per job.

use std::collections::BTreeMap;

use serde_json::json;
use sonde_plugin_sdk::types::{
    ColumnDefault, ColumnType, EventBatch, HttpRequest, HttpResponse, Manifest, MetricDesc, MetricKind, StartInfo,
    TableDecl,
};
use sonde_plugin_sdk::{Host, MetricRegistry, Plugin, PointBuffer, column};

/// The table's name: the JSON key, and the OTLP `sonde.table` value.
const TABLE: &str = "checkpoints";

/// The declaration. Column names are what senders write, so units go in the
/// name; a column left out of a row gets its default, a `Required` one
/// refuses the row.
fn checkpoints() -> TableDecl {
    use ColumnDefault::{Received, Required, Zero};
    TableDecl::new(
        TABLE,
        "checkpoints a training job wrote: step, size, time to write, where, verified",
        vec![
            column("step", ColumnType::U64, Required),
            column("bytes", ColumnType::U64, Required),
            column("write_s", ColumnType::F64, Required),
            column("storage", ColumnType::String, Zero),
            column("verified", ColumnType::Boolean, Zero),
            // When the job does not say, the time sonde received the row.
            column("saved_ns", ColumnType::Timestamp, Received),
        ],
    )
}

/// One job's checkpoints.
#[derive(Default)]
struct Job {
    checkpoints: u64,
    bytes: u64,
    /// (step, write_s) of the slowest write.
    slowest: Option<(u64, f64)>,
    unverified: Vec<u64>,
    storages: Vec<String>,
    last_saved_ns: u64,
}

#[derive(Default)]
struct Checkpoints {
    jobs: BTreeMap<String, Job>,
    metrics: MetricRegistry,
    points: PointBuffer,
}

impl Checkpoints {
    /// Reads the rows by column name (never by position) and keeps the tally.
    fn take(&mut self, batch: &EventBatch) -> Result<(), String> {
        for t in batch.table(TABLE) {
            let (step, bytes, write_s) = (t.u64s("step")?, t.u64s("bytes")?, t.f64s("write_s")?);
            let (storage, verified, saved) = (
                t.strings("storage")?,
                t.booleans("verified")?,
                t.timestamps("saved_ns")?,
            );
            for (i, &origin) in t.origin().iter().enumerate() {
                let name = batch.origins.get(origin as usize).map_or("", |o| o.job.as_str());
                let job = self.jobs.entry(name.to_string()).or_default();
                job.checkpoints += 1;
                job.bytes = job.bytes.saturating_add(bytes[i]);
                if job.slowest.is_none_or(|(_, s)| write_s[i] > s) {
                    job.slowest = Some((step[i], write_s[i]));
                }
                if !verified[i] {
                    job.unverified.push(step[i]);
                }
                if !storage[i].is_empty() && !job.storages.iter().any(|s| s == storage[i]) {
                    job.storages.push(storage[i].to_string());
                }
                job.last_saved_ns = job.last_saved_ns.max(saved[i]);
            }
        }
        Ok(())
    }
}

impl Plugin for Checkpoints {
    fn start(_host: &mut impl Host, _info: StartInfo) -> Result<Self, String> {
        Ok(Checkpoints::default())
    }

    fn manifest(&self) -> Manifest {
        Manifest {
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Checkpoints per job, from an event table this plugin declares".into(),
            tables: vec![checkpoints()],
            ..Default::default()
        }
    }

    fn on_events(&mut self, host: &mut impl Host, batch: EventBatch) -> Result<(), String> {
        self.take(&batch)?;
        let now = host.now();
        for t in batch.table(TABLE) {
            let write_s = t.f64s("write_s")?;
            for (i, &origin) in t.origin().iter().enumerate() {
                let job = batch.origins.get(origin as usize).map_or("", |o| o.job.as_str());
                let desc = MetricDesc::new(
                    "checkpoint.write.duration",
                    MetricKind::Gauge,
                    "s",
                    "Latest checkpoint write",
                )
                .with_attributes(vec![sonde_plugin_sdk::types::Attribute::new("sonde.job", job)]);
                let handle = self.metrics.declare_in(host, &desc)?;
                self.points.push(handle, now, write_s[i]);
            }
        }
        self.points.flush_to(host);
        Ok(())
    }

    fn on_request(&mut self, _host: &mut impl Host, request: &HttpRequest) -> HttpResponse {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/checkpoints") => {
                let jobs: serde_json::Map<String, serde_json::Value> = self
                    .jobs
                    .iter()
                    .map(|(name, j)| {
                        let slowest = j.slowest.map(|(step, s)| json!({"step": step, "write_s": s}));
                        let v = json!({"checkpoints": j.checkpoints, "bytes": j.bytes, "slowest": slowest,
                                       "unverified": j.unverified, "storages": j.storages,
                                       "last_saved_ns": j.last_saved_ns});
                        (name.clone(), v)
                    })
                    .collect();
                HttpResponse::json(200, json!({ "jobs": jobs }).to_string())
            }
            (method, path) => HttpResponse::error(404, &format!("no route {method} {path}")),
        }
    }
}

sonde_plugin_sdk::export_plugin!(Checkpoints);

#[cfg(test)]
mod tests {
    use sonde_plugin_sdk::testing::FakeHost;
    use sonde_plugin_sdk::types::{Origin, Value};

    use super::*;

    #[test]
    fn rows_of_the_declared_table_are_tallied_per_job() {
        let mut host = FakeHost::default();
        let mut p = Checkpoints::start(&mut host, StartInfo::default()).unwrap();
        assert_eq!(p.manifest().tables[0].name, "checkpoints");
        let mut b = EventBatch {
            origins: vec![Origin {
                job: "llm".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let decl = checkpoints();
        let row = |step: i64, write_s: f64, verified: bool| {
            [
                ("step", Value::Int(step)),
                ("bytes", Value::Int(1000)),
                ("write_s", Value::Float(write_s)),
                ("storage", Value::Str("s3".into())),
                ("verified", Value::Boolean(verified)),
            ]
        };
        b.push_row(&decl, 0, &row(100, 4.0, true)).unwrap();
        b.push_row(&decl, 0, &row(200, 9.5, false)).unwrap();
        p.on_events(&mut host, b).unwrap();
        let r = p.on_request(
            &mut host,
            &HttpRequest {
                method: "GET".into(),
                path: "/checkpoints".into(),
                ..Default::default()
            },
        );
        let got: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let llm = &got["jobs"]["llm"];
        assert_eq!(llm["checkpoints"], 2);
        assert_eq!(llm["bytes"], 2000);
        assert_eq!(llm["slowest"], json!({"step": 200, "write_s": 9.5}));
        assert_eq!(llm["unverified"], json!([200]));
        assert_eq!(llm["storages"], json!(["s3"]));
        let last: Vec<f64> = host.points.iter().map(|p| p.value).collect();
        assert_eq!(last, vec![4.0, 9.5]);
    }
}
