//! Cluster mode across a network: the master's OTLP receivers speak TLS only,
//! want a client certificate from the test's CA (mutual TLS) and the cluster
//! token. Two agents get in, one configured through the standard
//! `OTEL_EXPORTER_OTLP_*` variables (HTTP/protobuf), one through its config
//! (gRPC). Two do not: one with a wrong token, one without a client
//! certificate; the master counts both and they sample on.

use std::time::Duration;

use serde_json::Value;
use sonde_e2e::pki::Pki;
use sonde_e2e::*;

const TOKEN: &str = "agents-s3cret";

fn path(p: &std::path::Path) -> String {
    format!("{:?}", p.display().to_string())
}

fn master(dir: &std::path::Path, pki: &Pki, grpc: u16, http: u16) -> Sonde {
    let args = [
        "--role".to_string(),
        "master".into(),
        "--set".into(),
        format!("ingest.otlp_grpc_listen=\"127.0.0.1:{grpc}\""),
        "--set".into(),
        format!("ingest.otlp_http_listen=\"127.0.0.1:{http}\""),
        "--set".into(),
        format!("ingest.tls.cert={}", path(&pki.server_cert)),
        "--set".into(),
        format!("ingest.tls.key={}", path(&pki.server_key)),
        "--set".into(),
        format!("ingest.tls.client_ca={}", path(&pki.ca)),
        "--set".into(),
        format!("cluster.token=\"{TOKEN}\""),
        "--set".into(),
        "host.name=\"the-master\"".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sonde::start(&dir.join("master"), &[], &args)
}

/// An agent of `master` (its gRPC address); `extra` and `env` say how it
/// reaches it.
fn agent(dir: &std::path::Path, name: &str, master: &str, extra: &[String], env: &[(&str, &str)]) -> Sonde {
    let mut args = vec!["--role".to_string(), "agent".into(), "--master".into(), master.into()];
    args.extend(sets(&[
        ("host.name", format!("{name:?}")),
        ("export.interval_ms", "300".into()),
        ("cluster.heartbeat_ms", "300".into()),
    ]));
    args.extend(extra.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sonde::start_env(
        &dir.join(name),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &args,
        env,
        free_port(),
    )
}

fn sets(pairs: &[(&str, String)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| ["--set".to_string(), format!("{k}={v}")])
        .collect()
}

fn nodes(master: &Sonde) -> Vec<Value> {
    master.json("/api/cluster/nodes")["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn up(master: &Sonde, name: &str) -> bool {
    nodes(master)
        .iter()
        .any(|n| n["node"] == name && n["state"] == "up" && n["plugins"].to_string().contains("sysmetrics"))
}

fn ticks(s: &Sonde) -> u64 {
    s.json("/api/status")["sampler"]["period"]["ticks"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn agents_reach_a_tls_master_with_certificates_and_a_token_and_strangers_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(tmp.path());
    let (grpc, http) = (free_port(), free_port());
    let master = master(tmp.path(), &pki, grpc, http);

    // Through the standard variables, over HTTP/protobuf; its heartbeat goes
    // to the master's gRPC port with the same certificate and header.
    let ca = pki.ca.display().to_string();
    let cert = pki.client_cert.display().to_string();
    let key = pki.client_key.display().to_string();
    let endpoint = format!("https://127.0.0.1:{http}");
    let bearer = format!("authorization=Bearer%20{TOKEN}");
    let by_env = agent(
        tmp.path(),
        "agent-env",
        &format!("https://127.0.0.1:{grpc}"),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key),
            ("OTEL_EXPORTER_OTLP_HEADERS", &bearer),
        ],
    );
    // Through its config, over gRPC, by DNS name.
    let tls_cfg = |cert: &std::path::Path, key: &std::path::Path, token: &str| {
        sets(&[
            ("export.tls.ca", path(&pki.ca)),
            ("export.tls.cert", path(cert)),
            ("export.tls.key", path(key)),
            ("cluster.token", format!("\"{token}\"")),
        ])
    };
    let by_config = agent(
        tmp.path(),
        "agent-cfg",
        &format!("https://localhost:{grpc}"),
        &tls_cfg(&pki.client_cert, &pki.client_key, TOKEN),
        &[],
    );
    let ok = Duration::from_secs(40);
    assert!(
        wait_for(ok, || up(&master, "agent-env") && up(&master, "agent-cfg")),
        "the agents did not reach the master: {:#?}\n--- agent-env:\n{}\n--- agent-cfg:\n{}",
        nodes(&master),
        by_env.output(),
        by_config.output()
    );
    for name in ["agent-env", "agent-cfg"] {
        let has_cpu = wait_for(Duration::from_secs(20), || {
            let s = master.json(&format!("/api/series?node={name}&name=system.cpu"));
            s["series"].as_array().is_some_and(|v| !v.is_empty())
        });
        assert!(
            has_cpu,
            "no {name} series on the master: {}",
            master.json("/api/series")
        );
    }

    // A trusted certificate with the wrong token, and the right token with
    // no certificate at all.
    let wrong_token = agent(
        tmp.path(),
        "agent-wrong-token",
        &format!("https://127.0.0.1:{grpc}"),
        &tls_cfg(&pki.client_cert, &pki.client_key, "not-the-token"),
        &[],
    );
    let no_cert = agent(
        tmp.path(),
        "agent-no-cert",
        &format!("https://127.0.0.1:{grpc}"),
        &sets(&[
            ("export.tls.ca", path(&pki.ca)),
            ("cluster.token", format!("\"{TOKEN}\"")),
        ]),
        &[],
    );
    let refused = |m: &Sonde| {
        let s = m.json("/api/ingest");
        (
            s["otlp"]["unauthorized"].as_u64().unwrap_or(0),
            s["tls_refused"].as_u64().unwrap_or(0),
        )
    };
    let counted = wait_for(Duration::from_secs(20), || {
        let (unauthorized, tls) = refused(&master);
        unauthorized >= 2 && tls >= 2
    });
    assert!(counted, "refusals not counted: {}", master.json("/api/ingest"));
    let before = (ticks(&wrong_token), ticks(&no_cert));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        ticks(&wrong_token) >= before.0 + 10,
        "the refused agent stopped sampling"
    );
    assert!(ticks(&no_cert) >= before.1 + 10, "the refused agent stopped sampling");
    let listed: Vec<String> = nodes(&master).iter().map(|n| n["node"].to_string()).collect();
    assert!(
        !listed
            .iter()
            .any(|n| n.contains("agent-wrong-token") || n.contains("agent-no-cert")),
        "a refused agent got in: {listed:?}"
    );
    // Each says why once per outage, not once per attempt (about ten a second).
    for a in [&wrong_token, &no_cert] {
        let out = a.output();
        let warnings = out
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("127.0.0.1"))
            .count();
        assert!((1..=4).contains(&warnings), "{warnings} warnings:\n{out}");
    }
    assert!(
        wrong_token.output().contains("Unauthenticated"),
        "{}",
        wrong_token.output()
    );

    // Plain HTTP on a TLS port gets no HTTP answer, and is counted.
    let tls_before = refused(&master).1;
    let (code, _) = sonde_e2e::http(&format!("127.0.0.1:{http}"), "POST", "/v1/metrics", b"x");
    assert_eq!(code, 0, "a plain-HTTP request was answered");
    assert!(wait_for(Duration::from_secs(10), || refused(&master).1 > tls_before));

    // The two good agents are still there.
    assert!(
        up(&master, "agent-env") && up(&master, "agent-cfg"),
        "{:#?}",
        nodes(&master)
    );
}
