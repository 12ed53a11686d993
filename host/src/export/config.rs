//! `[export]`: where and how the host sends what it exports (OTLP endpoint,
//! batching, retries, the disk spool). Beside the exporters it configures;
//! `crate::config` assembles the sections, and layers the standard `OTEL_*`
//! variables onto this one (`config/otel_env.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::check::Check;
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
    /// TLS (see `tls`; `OTEL_EXPORTER_OTLP_ENDPOINT`). Unset: export off
    /// (on an agent: its master, `cluster.master`).
    pub endpoint: Option<String>,
    /// `grpc` (OTLP/gRPC, port 4317 by convention) or `http/protobuf`
    /// (OTLP/HTTP, port 4318; `OTEL_EXPORTER_OTLP_PROTOCOL`).
    pub protocol: Protocol,
    /// `gzip` or `none` (`OTEL_EXPORTER_OTLP_COMPRESSION`). Default: gzip on
    /// an agent (to its master, across a network), none otherwise (a
    /// collector on the same machine gains nothing from it).
    pub compression: Option<Compression>,
    /// The full URL metrics go to over http/protobuf
    /// (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`). Unset: `endpoint` + `/v1/metrics`.
    pub metrics_endpoint: Option<String>,
    /// The full URL logs go to over http/protobuf
    /// (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`). Unset: `endpoint` + `/v1/logs`.
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
    /// How long a request may wait for its answer: past it the request has
    /// failed and is retried (`retry_*`; `OTEL_EXPORTER_OTLP_TIMEOUT`).
    /// Range: 1 ..= 600 000.
    pub timeout_ms: u64,
    /// Batching window: what was emitted during it goes out in one request
    /// (`OTEL_METRIC_EXPORT_INTERVAL`). Every request costs a round trip of
    /// CPU, so a window of seconds keeps export well under the cost of
    /// sampling; points keep their own timestamps either way.
    /// Range: 10 ..= 3 600 000.
    pub interval_ms: u64,
    /// Largest number of points (or log records) per request.
    /// Range: 1 ..= 10 000 000.
    pub max_batch_points: usize,
    /// Encoded requests waiting to be sent; when full, the oldest is dropped
    /// and counted (with the spool on, `spool_max_bytes` bounds the queue instead).
    /// Range: 1 ..= 1 000 000.
    pub queue_capacity: usize,
    /// Requests sent at once. They start in queue order and may be
    /// answered out of order; while one waits to be retried no new one starts.
    /// Several let a busy host keep up with a collector's round trips at
    /// hundreds of thousands of points a second. Default: 4, and 1 on an
    /// agent: its master's history keeps each series in time order and drops
    /// a point older than one it already has, so what an agent delivers late
    /// (a spool's backlog after an outage) must arrive in the order sampled.
    /// Range: 1 ..= 64.
    pub max_in_flight: Option<usize>,
    /// The first wait before a failed request is sent again; each further
    /// failure doubles it, up to `retry_max_ms`.
    /// Range: 1 ..= 600 000.
    pub retry_initial_ms: u64,
    /// The longest wait between two tries of a request.
    /// Range: 1 ..= 3 600 000.
    pub retry_max_ms: u64,
    /// How long a request is retried before it is given up and its points
    /// are counted as dropped (with the spool on, it is retried until delivered).
    pub retry_max_elapsed_ms: u64,
    /// The `service.name` resource attribute (`OTEL_SERVICE_NAME`); not empty.
    pub service_name: String,
    /// Extra resource attributes on everything exported
    /// (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: BTreeMap<String, String>,
    /// How often the host's own metrics (plugin calls, drops, ...) are
    /// exported; 0: never (a gateway that should forward only what it receives).
    /// Range: 0 (off) or 100 ..= 3 600 000.
    pub self_metrics_interval_ms: u64,
    /// Disk spool for the send queue, in bytes; 0: off (the queue is in memory).
    /// On: every encoded or forwarded request is written and synced to disk
    /// before it counts as queued, removed only once the collector answered,
    /// and replayed after a restart; retryable failures are retried until
    /// delivered, and once the spool is full new requests are dropped and
    /// counted. At least 1 MiB, so that a segment (an eighth of it) holds a
    /// request or two.
    /// Range: 0 (off) or 1 MiB ..= 1 TiB.
    pub spool_max_bytes: u64,
    /// Where the spool lives; not empty. Unset: `<host.data_dir>/spool`.
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

    /// Checks what types alone cannot, and loads the TLS files when
    /// anything will use them.
    pub fn validate(&self, c: &mut Check) {
        for (key, url) in [
            ("endpoint", &self.endpoint),
            ("metrics_endpoint", &self.metrics_endpoint),
            ("logs_endpoint", &self.logs_endpoint),
        ] {
            if let Some(u) = url {
                c.url(key, u);
            }
        }
        c.range("timeout_ms", self.timeout_ms, 1, 600_000);
        c.range("interval_ms", self.interval_ms, 10, 3_600_000);
        c.range("max_batch_points", self.max_batch_points, 1, 10_000_000);
        c.range("queue_capacity", self.queue_capacity, 1, 1_000_000);
        c.range("max_in_flight", self.in_flight(), 1, 64);
        c.range("retry_initial_ms", self.retry_initial_ms, 1, 600_000);
        c.range("retry_max_ms", self.retry_max_ms, 1, 3_600_000);
        if self.service_name.trim().is_empty() {
            c.bad("service_name", "must not be empty");
        }
        if self.self_metrics_interval_ms != 0 {
            c.range(
                "self_metrics_interval_ms",
                self.self_metrics_interval_ms,
                100,
                3_600_000,
            );
        }
        if self.spool_max_bytes != 0 {
            c.range("spool_max_bytes", self.spool_max_bytes, 1 << 20, 1 << 40);
        }
        if self.spool_dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            c.bad(
                "spool_dir",
                "must not be empty (leave it out for <host.data_dir>/spool)",
            );
        }
        let https = [&self.endpoint, &self.metrics_endpoint, &self.logs_endpoint]
            .iter()
            .any(|u| u.as_deref().is_some_and(|u| u.starts_with("https://")));
        // The system trust store is only read when something will use it.
        if (https || !self.tls.is_empty())
            && let Err(e) = crate::tls::client_config(&self.tls, &c.key("tls"))
        {
            c.bad_whole(e.key, e.reason);
        }
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
