//! `[ingest]`: how jobs report to sonde (the OTLP receivers and the JSON
//! ingest). Beside the receivers it configures; `crate::config` assembles it
//! with the other sections.

use std::net::{AddrParseError, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::config::check::Check;
use crate::tls::config::ServerTls;

/// What jobs report to sonde: see `host/src/ingest/`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// OTLP/gRPC receiver address (`address:port`), or "off". The default is
    /// the port every OpenTelemetry SDK sends to, so a job needs no exporter
    /// settings. Beyond loopback it needs `api.token`.
    pub otlp_grpc_listen: String,
    /// OTLP/HTTP (protobuf) receiver address (`/v1/metrics`, `/v1/traces`,
    /// `/v1/logs`), or "off". Beyond loopback it needs `api.token`.
    pub otlp_http_listen: String,
    /// Gateway mode: forward every OTLP request received, unchanged, to the
    /// export endpoint as well (a sonde in front of another sonde or a
    /// collector). Needs `export.endpoint`.
    pub forward: bool,
    /// Largest request body accepted (OTLP and JSON ingest); larger ones get 413.
    /// Range: 1 KiB ..= 1 GiB.
    pub max_body_bytes: usize,
    /// How often what was received is handed to the plugins, in one batch.
    /// Range: 1 ..= 60 000.
    pub flush_ms: u64,
    /// Records waiting for the next hand-over at most; beyond it a request is
    /// refused (429 / RESOURCE_EXHAUSTED) and counted, never queued unboundedly.
    /// Range: 1 ..= 100 000 000.
    pub queue_capacity: usize,
    /// Longest name taken, in bytes: an origin's job, node and role, and the
    /// name of a progress counter, timing, metric (and its unit), event or
    /// node event. A name becomes a series attribute and a key in every
    /// plugin, so one runaway string would be copied everywhere. The JSON
    /// ingest refuses a longer one with 422; OTLP cuts it and counts it.
    /// Range: 1 ..= 1 048 576.
    pub max_name_bytes: usize,
    /// Longest attribute key, in bytes (origin, point, event and node-event attributes).
    /// Range: 1 ..= 1 048 576.
    pub max_attribute_key_bytes: usize,
    /// Longest attribute value as text, in bytes; also bounds an event's body
    /// and a node event's reason.
    /// Range: 1 ..= 1 048 576.
    pub max_attribute_value_bytes: usize,
    /// Most attributes on one origin or one row (a point's series, an event).
    /// Range: 1 ..= 1 048 576.
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

    /// Each receiver that is on, as (its key, what its address parses to).
    fn listens(&self) -> impl Iterator<Item = (&'static str, Result<SocketAddr, AddrParseError>)> {
        [
            ("otlp_grpc_listen", &self.otlp_grpc_listen),
            ("otlp_http_listen", &self.otlp_http_listen),
        ]
        .into_iter()
        .filter_map(|(key, l)| Some((key, Self::address(l)?.parse())))
    }

    /// The receivers that are on, as (key, address); an address that does
    /// not parse is left out (`validate` names it).
    pub fn receivers(&self) -> Vec<(&'static str, SocketAddr)> {
        self.listens().filter_map(|(key, a)| Some((key, a.ok()?))).collect()
    }

    /// Checks what types alone cannot, and loads the TLS files.
    pub fn validate(&self, c: &mut Check) {
        for (key, addr) in self.listens() {
            if let Err(e) = addr {
                c.bad(key, format!("not an address:port or \"off\" ({e})"));
            }
        }
        c.range("max_body_bytes", self.max_body_bytes, 1024, 1 << 30);
        c.range("flush_ms", self.flush_ms, 1, 60_000);
        c.range("queue_capacity", self.queue_capacity, 1, 100_000_000);
        c.range("max_name_bytes", self.max_name_bytes, 1, 1 << 20);
        c.range("max_attribute_key_bytes", self.max_attribute_key_bytes, 1, 1 << 20);
        c.range("max_attribute_value_bytes", self.max_attribute_value_bytes, 1, 1 << 20);
        c.range("max_attributes", self.max_attributes, 1, 1 << 20);
        if let Some(t) = &self.tls
            && let Err(e) = crate::tls::server_config(t, &c.key("tls"))
        {
            c.bad_whole(e.key, e.reason);
        }
    }
}
