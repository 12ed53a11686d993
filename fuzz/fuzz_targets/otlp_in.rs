//! OTLP in: what the receiver does with a request body, for all three signals.
//!
//! Metrics bodies go to the receiver's own in-place reader (`otlp::wire`), and
//! are checked against prost: whatever prost accepts, the reader must accept
//! too, with the same points. Traces and logs are decoded with prost, as the
//! receiver does, then mapped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use sonde::ingest::Report;
use sonde::ingest::otlp::wire;
use sonde::ingest::otlp::{log_reports, metrics_reports, trace_reports};

/// Each point with its series resolved, its time aside (a point without one
/// is stamped when it is read).
fn points(reports: &[Report]) -> Vec<String> {
    reports
        .iter()
        .flat_map(|r| {
            r.points.iter().map(move |p| {
                let s = &r.series[p.series as usize];
                format!(
                    "{:?}|{}|{}|{:?}|{:?}|{:x}",
                    r.origin,
                    s.metric,
                    s.unit,
                    s.kind,
                    s.attributes,
                    p.value.to_bits()
                )
            })
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    // The property is that nothing panics, whatever the bytes; the reports
    // are built in full (every string and attribute copied) so that it holds
    // for the mapping too, not just for the decoder.
    let reports = match which % 3 {
        0 => {
            let read = wire::metrics_reports(body);
            if let Ok(req) = ExportMetricsServiceRequest::decode(body) {
                let read = read.as_ref().expect("prost decoded it, so must the receiver's reader");
                let (again, skipped) = metrics_reports(&req);
                assert_eq!(points(&read.reports), points(&again), "same points either way");
                assert_eq!(read.skipped, skipped, "same points skipped");
            }
            match read {
                Ok(d) => d.reports,
                Err(_) => return,
            }
        }
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
