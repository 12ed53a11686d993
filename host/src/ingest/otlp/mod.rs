//! otlp/: the OTLP receiver. Any OpenTelemetry SDK (or collector, or another sonde)
//! sends metrics, traces and logs here, over gRPC (`ingest.otlp_grpc_listen`,
//! default 127.0.0.1:4317) or HTTP (`ingest.otlp_http_listen`, default
//! 127.0.0.1:4318, paths `/v1/metrics`, `/v1/traces`, `/v1/logs`), as
//! protobuf or OTLP/JSON, each optionally gzip- or zstd-compressed.
//!
//! How OTLP maps onto sonde's events (what plugins see):
//!
//! | OTLP | event |
//! |---|---|
//! | resource `sonde.job`, else `service.name` (else nothing for a sonde agent's own telemetry, marked `sonde.agent`) | origin.job |
//! | resource `host.name` | origin.node |
//! | resource `sonde.role`, `sonde.index`, `sonde.rank`, `sonde.local_rank` | origin fields (-1 when absent) |
//! | metric `sonde.batch_idx` or `batch_idx` (gauge or sum, any number type) | progress "batch_idx" = the value, at the point's time |
//! | any other gauge / sum number point | a point (`points`), series = metric name + unit + attributes |
//! | histograms, summaries | not used (counted as skipped; still forwarded) |
//! | span | a timing: name, start, end; step = span attribute `sonde.batch_idx` / `batch_idx`, else -1 |
//! | span with `sonde.batch_idx` | also progress: that batch index is current from the span's start (not for spans a sonde agent forwarded, marked `sonde.forwarded`) |
//! | log record | a custom event: name = `event_name` or attribute `event.name` (else "log"), body as text |
//! | metric `sonde.progress` with point attribute `sonde.progress.name`; log records `sonde.heartbeat`, `sonde.node_event` | named progress, heartbeats, node events: see `events.rs` |
//! | span or log record with the attribute `sonde.table` = NAME | a row of the event table NAME a plugin declared (attributes = fields by column name; `events.rs`), not a timing or custom event |
//!
//! Where each part of the mapping lives:
//!
//! ```text
//!  receiver.rs  gRPC + HTTP services, auth, 429s, gateway forwarding   ──► json, wire, events
//!  json.rs      OTLP/JSON bodies rewritten as protobuf (one format after it)
//!  wire.rs      metrics read in place from their bytes (the hot path)   ──► resource, events
//!  events.rs    spans and log records (prost-decoded) → timings, custom
//!               events, heartbeats, node events, table rows; named progress ──► resource
//!  resource.rs  resource → origin, key-values → attributes
//! ```
//! Metrics requests, the bulk of what arrives, are read in place (no prost
//! tree, nothing allocated per point); traces and logs are decoded with prost.
//! Every file makes [`Report`](crate::ingest::Report)s and imports only the
//! files to its right above; this file only names what the others export.
//!
//! With `ingest.forward = true` every request is also queued, unchanged, for
//! the export endpoint (gateway mode) through the pipeline's bounded queue.
//! Receivers bound beyond loopback require `authorization: Bearer <api.token>`;
//! on a master with `cluster.token` set every request needs one of the two.
//! With `ingest.tls` both receivers speak TLS only (mutual TLS with
//! `ingest.tls.client_ca`); refused handshakes count in `tls_refused`.

pub mod compression;
pub mod events;
pub mod json;
pub mod receiver;
pub mod resource;
pub mod wire;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

pub use self::events::{BATCH_ATTRIBUTES, log_reports, trace_reports};
pub use self::receiver::{Bound, Receiver, ServeTls, grpc_router, http_router, serve};
pub use self::resource::origin;
pub use self::wire::BATCH_METRICS;
use crate::ingest::Report;

/// Converts a metrics request: one report per resource. Returns (reports,
/// skipped points). The receivers read requests in place (`wire.rs`); this
/// is the same mapping for a request already decoded.
pub fn metrics_reports(req: &ExportMetricsServiceRequest) -> (Vec<Report>, usize) {
    let d = wire::metrics_reports(&req.encode_to_vec()).expect("prost encodes valid protobuf");
    (d.reports, d.skipped)
}
