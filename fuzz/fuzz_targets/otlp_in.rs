//! OTLP in: what the receiver does with a request body, for all three signals.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use sonde::ingest::otlp::{log_reports, metrics_reports, trace_reports};

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    // The property is that nothing panics, whatever the bytes; the reports
    // are built in full (every string and attribute copied) so that it holds
    // for the mapping too, not just for the decoder.
    let reports = match which % 3 {
        0 => match ExportMetricsServiceRequest::decode(body) {
            Ok(req) => metrics_reports(&req).0,
            Err(_) => return,
        },
        1 => match ExportTraceServiceRequest::decode(body) {
            Ok(req) => trace_reports(&req),
            Err(_) => return,
        },
        _ => match ExportLogsServiceRequest::decode(body) {
            Ok(req) => log_reports(&req),
            Err(_) => return,
        },
    };
    std::hint::black_box(reports);
});
