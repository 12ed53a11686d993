//! `[ingest]`: how jobs report to sonde (the OTLP receivers and the JSON
//! ingest). Beside the receivers it configures; `crate::config` assembles and
//! validates it with the other sections.

use serde::{Deserialize, Serialize};

use crate::tls::config::ServerTls;

/// What jobs report to sonde: see `host/src/ingest/`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// OTLP/gRPC receiver address, or "off". The default is the port every
    /// OpenTelemetry SDK sends to, so a job needs no exporter settings.
    pub otlp_grpc_listen: String,
    /// OTLP/HTTP (protobuf) receiver address (`/v1/metrics`, `/v1/traces`, `/v1/logs`), or "off".
    pub otlp_http_listen: String,
    /// Gateway mode: forward every OTLP request received, unchanged, to the
    /// export endpoint as well (a sonde in front of another sonde or a collector).
    pub forward: bool,
    /// Largest request body accepted (OTLP and JSON ingest); larger ones get 413.
    pub max_body_bytes: usize,
    /// How often what was received is handed to the plugins, in one batch.
    pub flush_ms: u64,
    /// Records waiting for the next hand-over at most; beyond it a request is
    /// refused (429 / RESOURCE_EXHAUSTED) and counted, never queued unboundedly.
    pub queue_capacity: usize,
    /// Longest name taken, in bytes: an origin's job, node and role, and the
    /// name of a progress counter, timing, metric (and its unit), event or
    /// node event. A name becomes a series attribute and a key in every
    /// plugin, so one runaway string would be copied everywhere.
    pub max_name_bytes: usize,
    /// Longest attribute key, in bytes (origin, point, event and node-event attributes).
    pub max_attribute_key_bytes: usize,
    /// Longest attribute value as text, in bytes; also bounds an event's body
    /// and a node event's reason.
    pub max_attribute_value_bytes: usize,
    /// Most attributes on one origin or one row (a point's series, an event).
    pub max_attributes: usize,
    /// TLS on both OTLP receivers (`[ingest.tls]`: `cert`, `key`, and
    /// `client_ca` to require client certificates). Unset: plain TCP. A
    /// master reached across a network sets it; its agents then export to
    /// `https://MASTER:4317`.
    pub tls: Option<ServerTls>,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            otlp_grpc_listen: "127.0.0.1:4317".into(),
            otlp_http_listen: "127.0.0.1:4318".into(),
            forward: false,
            max_body_bytes: 8 * 1024 * 1024,
            flush_ms: 50,
            queue_capacity: 200_000,
            max_name_bytes: 256,
            max_attribute_key_bytes: 128,
            max_attribute_value_bytes: 4096,
            max_attributes: 64,
            tls: None,
        }
    }
}

impl IngestConfig {
    /// The receiver address, or None when switched off ("off" or empty).
    pub fn address(listen: &str) -> Option<&str> {
        let l = listen.trim();
        (!l.is_empty() && !l.eq_ignore_ascii_case("off")).then_some(l)
    }
}
