//! export/: OTLP encoding and clients (gRPC, HTTP/protobuf), resource attributes.
//!
//! - [`resource`]: the resource attributes every request carries (`service.*`,
//!   `host.*`, `os.type`, `process.pid`, plus the configured extras).
//! - [`otlp`]: turns [`MetricBatch`](crate::model::MetricBatch) and
//!   [`LogBatch`](crate::model::LogBatch) into OTLP export requests.
//! - [`client`]: sends encoded requests over gRPC (tonic) or HTTP/protobuf
//!   (hyper), with a per-request timeout and errors classified as retryable or not.
//! - [`sequence`]: a request's identity (producer, number), sent as headers so
//!   that a sonde receiver takes a re-sent request once.
//!
//! Batching, queueing, retry and drop accounting live one level up, in
//! [`crate::pipeline`]; this module only encodes and sends one request at a time.
//!
//! # Why not the `opentelemetry-otlp` SDK exporter
//! The SDK's metric pipeline aggregates per collection interval: one data point
//! per (instrument, attribute set) per export, stamped with the collection time.
//! sonde samples every 100 ms and ships the individual samples, each with its
//! own timestamp, in one request per window; the SDK's data model cannot carry
//! that. So we use the generated OTLP wire types from `opentelemetry-proto`
//! (the same protobufs the SDK sends, so any collector accepts them) with our own
//! encoder and sender.
//!
//! Depends on `model` and `config` only.

pub mod client;
pub mod config;
pub mod otlp;
pub mod remote_write;
pub mod resource;
pub mod sequence;

#[cfg(test)]
pub(crate) mod testing;

pub use client::{Client, SendError};
pub use otlp::{encode_logs, encode_metrics};
pub use resource::resource_attributes;
