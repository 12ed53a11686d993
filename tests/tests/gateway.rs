//! Gateway mode: an edge sonde exports to a gateway sonde's OTLP receiver; the
//! gateway takes what it receives in (its plugins see the points) and forwards
//! every request, unchanged, to the collector (`ingest.forward = true`).

use std::time::Duration;

use sonde_e2e::*;

#[test]
fn a_sonde_in_front_of_another_forwards_everything_unchanged_to_the_collector() {
    let tmp = tempfile::tempdir().unwrap();
    let rotel = Rotel::start(tmp.path());
    let gateway_dir = tmp.path().join("gateway");
    let edge_dir = tmp.path().join("edge");
    let grpc = free_port();
    let gateway = Sonde::start(
        &gateway_dir,
        &[],
        &[
            "--export-endpoint",
            &format!("http://127.0.0.1:{}", rotel.grpc),
            "--set",
            "export.interval_ms=300",
            "--set",
            "ingest.forward=true",
            "--set",
            &format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\""),
            "--set",
            "ingest.otlp_http_listen=\"off\"",
            "--set",
            "export.service_name=\"gateway-sonde\"",
        ],
    );
    assert!(
        gateway.output().contains(&format!("OTLP gRPC 127.0.0.1:{grpc}")),
        "the banner names the receiver:\n{}",
        gateway.output()
    );
    let mut edge = Sonde::start(
        &edge_dir,
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[
            "--export-endpoint",
            &format!("http://127.0.0.1:{grpc}"),
            "--set",
            "export.interval_ms=300",
            "--set",
            "export.service_name=\"edge-sonde\"",
        ],
    );
    let forwarded = wait_for(Duration::from_secs(30), || {
        let log = rotel.received();
        log.contains("edge-sonde")
            && parse_rotel_metrics(&log)
                .iter()
                .any(|m| m.name == "system.cpu.utilization" && m.scope.ends_with("sysmetrics"))
    });
    assert!(
        forwarded,
        "the edge's metrics did not reach the collector through the gateway\nedge:\n{}\ngateway:\n{}",
        edge.output(),
        gateway.output()
    );
    // The gateway took the points in as events as well, and its queue is bounded and counted.
    let ingest = gateway.json("/api/ingest");
    assert!(ingest["otlp"]["requests"].as_u64().unwrap() > 0, "{ingest}");
    assert!(ingest["otlp"]["rows"].as_u64().unwrap() > 0, "{ingest}");
    assert_eq!(ingest["otlp"]["rejected"], 0, "{ingest}");
    // Counted as exported once the collector's answer is in (it may still be in flight).
    let counted = wait_for(Duration::from_secs(10), || {
        gateway.json("/api/status")["export"]["stats"]["points_exported"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    assert!(
        counted,
        "forwarded points are counted as exported: {}",
        gateway.json("/api/status")
    );
    // Unchanged: the edge's resource, not the gateway's, on the forwarded points.
    let log = rotel.received();
    assert!(log.contains("service.name: Str(edge-sonde)"), "edge resource kept");
    assert_eq!(
        edge.proc.terminate(Duration::from_secs(8)).map(|s| s.success()),
        Some(true)
    );
}
