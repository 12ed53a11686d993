//! remote_write/: history beyond one master, in an existing Prometheus-compatible
//! engine (Prometheus, VictoriaMetrics, Mimir, Thanos receive, Cortex).
//!
//! - [`RemoteWriter`] writes samples with Prometheus remote-write 1.0: a
//!   `WriteRequest` protobuf ([`wire`]), snappy block-compressed, POSTed with
//!   `Content-Encoding: snappy`, `Content-Type: application/x-protobuf` and
//!   `X-Prometheus-Remote-Write-Version: 0.1.0`.
//! - [`PromQueryClient`] reads history back through the engine's Prometheus
//!   HTTP query API (`/api/v1/series`, `/api/v1/query_range`, `/api/v1/query`).
//! - [`prometheus_metric_name`] and [`prometheus_label_name`] name series the
//!   way Prometheus names what it receives over OTLP, so a series reads the same
//!   whether it reached the engine from sonde or from an OpenTelemetry collector.
//!
//! ```text
//!  push(series, samples) / push_batch(MetricBatch, resource)     (any thread, never blocks)
//!      │ translate names → sorted label set (names.rs)
//!      ▼
//!  bounded sample queue (queue_capacity samples; full → oldest dropped, counted)
//!      │ woken at batch_max_samples, or flush_interval_ms after the oldest sample
//!      ▼
//!  sender task: take ≤ batch_max_samples, group by series, sort by time
//!      │ prost encode → snappy → POST url (timeout_ms)
//!      ▼
//!  2xx → sent · 5xx/429/refused/timeout → retry with backoff (Retry-After honoured)
//!  until retry_max_elapsed_ms → failed · other 4xx → failed at once (body logged once per episode)
//! ```
//!
//! # Names
//! | OpenTelemetry | Prometheus |
//! |---|---|
//! | metric name | split into words at every character outside `[A-Za-z0-9:]` (so `.`, `-`, `_` and runs of them), words joined with `_`: `system.cpu.time` → `system_cpu_time` |
//! | unit | its word appended unless the name already has it: `s` seconds, `ms` milliseconds, `us` microseconds, `ns` nanoseconds, `min` minutes, `h` hours, `d` days, `By` bytes, `KiBy`/`MiBy`/`GiBy`/`TiBy` kibibytes…, `KBy`/`MBy`/`GBy`/`TBy` kilobytes…, `m` meters, `V` volts, `A` amperes, `J` joules, `W` watts, `g` grams, `Cel` celsius, `Hz` hertz, `%` percent; any other unit as written, made name-safe |
//! | unit `a/b` | `a`'s word, then `per_` and `b`'s word (`s` second, `m` minute, `h` hour, `d` day, `w` week, `mo` month, `y` year): `By/s` → `_bytes_per_second` |
//! | unit `1`, or `{annotation}` | no unit word |
//! | monotonic counter | `_total` last (a `total` word elsewhere in the name is removed) |
//! | gauge of unit `1` | `_ratio` last (likewise); not for counters or up-down counters |
//! | up-down counter | like a gauge, without `_ratio` |
//! | name starting with a digit | `_` before it |
//! | attribute key | every character outside `[A-Za-z0-9_]` → `_`, runs of `_` → one, leading digit → `key_` before it: `host.name` → `host_name`; keys equal once translated join their values with `;` |
//! | resource `service.name` (`service.namespace`) | label `job` = `namespace/name` or `name` |
//! | resource `service.instance.id` | label `instance` |
//! | other resource attributes | labels only when listed in `promote_resource_attributes` (default `host.name`) and no point attribute has the label already |
//! | empty attribute values | left out |
//!
//! Labels go out sorted by name in byte order, as the remote-write spec asks;
//! `__name__` is first whenever the other names are lower-case (an upper-case
//! name such as `Zone` sorts before it). Timestamps are cut from ns to ms.
//!
//! # Limits
//! - Float samples only: no native histograms, exemplars or metadata (types,
//!   units, help) are sent; Prometheus' OTLP receiver would also write
//!   `target_info` with the remaining resource attributes, this writer does not.
//! - One request in flight at a time (Prometheus shards its queue); at the
//!   defaults that is 2 000 samples per round trip.
//! - `http://` only until the project's TLS work lands; `https://` is refused
//!   at validation.
//! - The queue is in memory. The export spool (`pipeline/spool.rs`) does not drop
//!   in: it is private to the pipeline and keyed by OTLP signal; reusing it means
//!   making it `pub(crate)` and giving it a remote-write record kind. Until then a
//!   master restart loses what is queued (at most `queue_capacity` samples).
//! - Samples are sorted by time within a request, not across requests: pushes of
//!   one series must not go back in time. Samples older than the engine accepts
//!   (Prometheus: out of order, or before its head block) come back as 400 and are
//!   counted as failed, not retried.
//! - Precision is the engine's: Prometheus keeps the float64; VictoriaMetrics
//!   stores decimals with one exponent per block (1/7 reads back as
//!   0.142857142857; a tiny value beside 1e300 in one series reads back as 0).
//! - Remote-write 2.0 (string interning, `io.prometheus.write.v2.Request`) is not spoken.

pub mod config;
mod http;
mod names;
pub mod query;
mod sender;
pub mod wire;

pub use config::{BasicAuth, RemoteQueryConfig, RemoteWriteConfig};
pub use names::{
    KNOWN_ATTRIBUTE_KEYS, SeriesFromLabels, prometheus_label_name, prometheus_metric_name, series_from_labels,
    series_labels,
};
pub use query::{InstantSample, LabelSet, PromQueryClient, QueryError, QueryResult, RangeSeries, exact_selector};
pub use sender::{RemoteSeries, RemoteWriteStats, RemoteWriter, SeriesLabels};
