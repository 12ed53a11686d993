//! The agent's heartbeat: every `cluster.heartbeat_ms` the agent tells its
//! master it is alive, which version and plugins it runs, how healthy they
//! are, and what its clock reads.
//!
//! ```text
//!  agent: every heartbeat_ms ──► one OTLP log record `sonde.agent.heartbeat`
//!         (body: AgentHeartbeat as JSON, time = the agent's clock)
//!         sent directly, not through the export queue ──► master's receiver
//!         ──► IngestHub ──► NodeRegistry (last seen, version, skew, duplicates)
//! ```
//! Sent outside the export queue on purpose: a heartbeat is only worth its
//! send time. Queued behind an outage (or replayed from the spool) it would
//! say the agent was alive when it was not, and make its clock look late. A
//! failed send is logged once per outage and never retried.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::export::client::{Client, Signal};
use crate::model::{AttrValue, now_ns};

/// The log record's event name.
pub const HEARTBEAT_EVENT: &str = "sonde.agent.heartbeat";

/// What a heartbeat says (its JSON body).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AgentHeartbeat {
    /// sonde's version on the agent.
    pub version: String,
    /// The agent process's `service.instance.id`: two processes claiming one
    /// node name show up as two instances.
    pub instance: String,
    /// Plugins loaded, by name.
    pub plugins: Vec<String>,
    /// Plugins in quarantine or failing to load, by name.
    pub unhealthy: Vec<String>,
    /// The agent's wall clock when it sent this, ns since the epoch.
    pub sent_ns: u64,
    /// Heartbeat period, so the master knows what "late" means for this agent.
    pub period_ms: u64,
}

/// Encodes one heartbeat as an OTLP logs request with the agent's resource.
pub fn encode(resource: &[(String, AttrValue)], hb: &AgentHeartbeat) -> Bytes {
    let body = serde_json::to_string(hb).unwrap_or_default();
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(crate::export::otlp::resource(resource)),
            scope_logs: vec![ScopeLogs {
                scope: Some(opentelemetry_proto::tonic::common::v1::InstrumentationScope {
                    name: "sonde.cluster".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: vec![LogRecord {
                    time_unix_nano: hb.sent_ns,
                    observed_time_unix_nano: hb.sent_ns,
                    event_name: HEARTBEAT_EVENT.into(),
                    body: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(body)),
                    }),
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    };
    Bytes::from(req.encode_to_vec())
}

/// What the heartbeat loop asks the host each time: (loaded, unhealthy) plugin names.
pub type PluginNames = Arc<dyn Fn() -> (Vec<String>, Vec<String>) + Send + Sync>;

/// Sends a heartbeat every `period` until `stop`.
pub async fn run(
    client: Client,
    resource: Vec<(String, AttrValue)>,
    plugins: PluginNames,
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            r = stop.changed() => if r.is_err() || *stop.borrow() { break },
        }
        let (loaded, unhealthy) = plugins();
        let hb = AgentHeartbeat {
            version: env!("CARGO_PKG_VERSION").into(),
            instance: crate::export::resource::instance_id().into(),
            plugins: loaded,
            unhealthy,
            sent_ns: now_ns(),
            period_ms: period.as_millis() as u64,
        };
        match client.send(Signal::Logs, encode(&resource, &hb)).await {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("master reachable again ({})", client.describe());
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(
                    "heartbeat to the master failed ({}): {e}; sampling goes on",
                    client.describe()
                );
            }
            Err(_) => {}
        }
    }
}
