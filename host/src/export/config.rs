//! `[export]`: where and how the host sends what it exports (OTLP endpoint,
//! batching, retries, the disk spool). Beside the exporters it configures;
//! `crate::config` assembles and validates the sections, and layers the
//! standard `OTEL_*` variables onto this one (`config/otel_env.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tls::config::ClientTls;

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Protocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

/// Request body compression.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    None,
    /// gzip, what OpenTelemetry exporters send by default.
    Gzip,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// Collector base URL, e.g. "http://127.0.0.1:4317", or `https://…` for
    /// TLS (see `tls`). None: export off.
    pub endpoint: Option<String>,
    pub protocol: Protocol,
    /// `gzip` or `none` (`OTEL_EXPORTER_OTLP_COMPRESSION`). Default: gzip on
    /// an agent (to its master, across a network), none otherwise (a
    /// collector on the same machine gains nothing from it).
    pub compression: Option<Compression>,
    /// Full URLs per signal for http/protobuf (default: endpoint + /v1/metrics, /v1/logs).
    pub metrics_endpoint: Option<String>,
    pub logs_endpoint: Option<String>,
    /// Extra request headers (API keys), sent with every request: as HTTP
    /// headers over http/protobuf, as metadata over gRPC
    /// (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: BTreeMap<String, String>,
    /// How `https://` endpoints are checked and how sonde proves who it is
    /// (`[export.tls]`: `ca`, and `cert` + `key` for mutual TLS; or
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`, `_CLIENT_CERTIFICATE`,
    /// `_CLIENT_KEY`). Also used by an agent's heartbeat. `http://` endpoints
    /// ignore it.
    pub tls: ClientTls,
    /// Per-request timeout.
    pub timeout_ms: u64,
    /// Batching window: what was emitted during it goes out in one request.
    /// Each request costs ~0.7 ms of CPU (gRPC round trip) on a 2-core VM, so
    /// 5 s keeps export well under the cost of sampling; points keep their
    /// own 100 ms timestamps either way.
    pub interval_ms: u64,
    /// Largest number of points (or log records) per request.
    pub max_batch_points: usize,
    /// Encoded requests waiting to be sent; when full, the oldest is dropped and counted.
    pub queue_capacity: usize,
    /// Requests sent at once (1 to 64). They start in queue order and may be
    /// answered out of order; while one waits to be retried no new one starts.
    /// Several let a busy host keep up with a collector's round trips at
    /// hundreds of thousands of points a second. Default: 4, and 1 on an
    /// agent: its master's history keeps each series in time order and drops
    /// a point older than one it already has, so what an agent delivers late
    /// (a spool's backlog after an outage) must arrive in the order sampled.
    pub max_in_flight: Option<usize>,
    /// Retry backoff: first delay, cap, and total time before giving up on a request.
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub retry_max_elapsed_ms: u64,
    /// `service.name` resource attribute.
    pub service_name: String,
    /// Extra resource attributes.
    pub resource: BTreeMap<String, String>,
    /// How often the host's own metrics (plugin calls, drops, ...) are exported;
    /// 0 = never (a gateway that should forward only what it receives).
    pub self_metrics_interval_ms: u64,
    /// Disk spool for the send queue, in bytes; 0 = off (the queue is in memory).
    /// On: every encoded or forwarded request is written and synced to disk
    /// before it counts as queued, removed only once the collector answered,
    /// and replayed after a restart; retryable failures are retried until
    /// delivered, and once the spool is full new requests are dropped and counted.
    pub spool_max_bytes: u64,
    /// Where the spool lives (default: `<host.data_dir>/spool`).
    pub spool_dir: Option<PathBuf>,
}

impl ExportConfig {
    /// This config with `spool_dir` resolved against the data directory.
    pub fn with_spool_dir(&self, data_dir: &Path) -> ExportConfig {
        let mut c = self.clone();
        c.spool_dir.get_or_insert_with(|| data_dir.join("spool"));
        c
    }
}

impl ExportConfig {
    /// Requests sent at once: `max_in_flight`, or its default off an agent.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight.unwrap_or(4)
    }
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            protocol: Protocol::Grpc,
            compression: None,
            metrics_endpoint: None,
            logs_endpoint: None,
            headers: BTreeMap::new(),
            tls: ClientTls::default(),
            timeout_ms: 10_000,
            interval_ms: 5_000,
            max_batch_points: 8_192,
            queue_capacity: 64,
            max_in_flight: None,
            retry_initial_ms: 200,
            retry_max_ms: 5_000,
            retry_max_elapsed_ms: 30_000,
            service_name: "sonde".into(),
            resource: BTreeMap::new(),
            self_metrics_interval_ms: 10_000,
            spool_max_bytes: 0,
            spool_dir: None,
        }
    }
}
