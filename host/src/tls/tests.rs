//! PEM loading and its errors, the config check, and the whole path in one
//! process: the export client over `https://` into the OTLP receivers over
//! TLS, with mutual TLS and tokens.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, metric, number_data_point,
};
use prost::Message;
use sonde_test_support::pki::Pki;

use super::*;
use crate::config::Config;
use crate::export::client::{Client, Signal};
use crate::export::config::{ExportConfig, Protocol};
use crate::ingest::IngestHub;
use crate::ingest::otlp::{Receiver, ServeTls, grpc_router, http_router, serve};

fn server(p: &Pki, mtls: bool) -> ServerTls {
    ServerTls {
        cert: p.server_cert.clone(),
        key: p.server_key.clone(),
        client_ca: mtls.then(|| p.ca.clone()),
    }
}

#[test]
fn tls_files_load_and_bad_ones_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = Pki::make(dir.path());
    server_config(&server(&p, true), "ingest.tls").unwrap();
    client_config(
        &ClientTls {
            ca: Some(p.ca.clone()),
            cert: Some(p.client_cert.clone()),
            key: Some(p.client_key.clone()),
        },
        "export.tls",
    )
    .unwrap();

    let key_of = |t: ServerTls| server_config(&t, "ingest.tls").unwrap_err().key;
    let missing = dir.path().join("absent.pem");
    assert_eq!(
        key_of(ServerTls {
            cert: missing.clone(),
            ..server(&p, false)
        }),
        "ingest.tls.cert"
    );
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a PEM file").unwrap();
    assert_eq!(
        key_of(ServerTls {
            key: garbage.clone(),
            ..server(&p, false)
        }),
        "ingest.tls.key"
    );
    assert_eq!(
        key_of(ServerTls {
            cert: garbage.clone(),
            ..server(&p, false)
        }),
        "ingest.tls.cert",
        "a file without certificates"
    );
    let e = server_config(
        &ServerTls {
            key: p.client_key.clone(),
            ..server(&p, false)
        },
        "api.tls",
    )
    .unwrap_err();
    assert_eq!(e.key, "api.tls.key", "a key of another certificate: {e}");
    assert_eq!(
        key_of(ServerTls {
            client_ca: Some(missing.clone()),
            ..server(&p, false)
        }),
        "ingest.tls.client_ca"
    );

    let client_key_of = |t: ClientTls| client_config(&t, "export.tls").unwrap_err().key;
    let half = ClientTls {
        ca: Some(p.ca.clone()),
        cert: Some(p.client_cert.clone()),
        key: None,
    };
    assert_eq!(client_key_of(half.clone()), "export.tls.key");
    assert_eq!(
        client_key_of(ClientTls {
            cert: None,
            key: Some(p.client_key.clone()),
            ..half.clone()
        }),
        "export.tls.cert"
    );
    assert_eq!(
        client_key_of(ClientTls {
            ca: Some(missing),
            cert: None,
            key: None
        }),
        "export.tls.ca"
    );
}

#[test]
fn tls_config_check_names_the_key_and_otel_variables_map_onto_export_tls() {
    let dir = tempfile::tempdir().unwrap();
    let p = Pki::make(dir.path());
    let err = Config::from_toml_str("[ingest.tls]\ncert = \"/nonexistent/c.pem\"\nkey = \"/nonexistent/k.pem\"\n")
        .unwrap_err();
    let keys: Vec<_> = err.0.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, vec!["ingest.tls.cert"], "{err}");
    let err = Config::from_toml_str("[api.tls]\ncert = \"/x.pem\"\n").unwrap_err();
    assert!(err.to_string().contains("key"), "the missing key is named: {err}");

    let ok = format!(
        "[export]\nendpoint = \"https://127.0.0.1:4317\"\n[export.tls]\nca = {:?}\n[ingest.tls]\ncert = {:?}\nkey = {:?}\nclient_ca = {:?}\n",
        p.ca, p.server_cert, p.server_key, p.ca
    );
    Config::from_toml_str(&ok).unwrap_or_else(|e| panic!("{e}"));

    let env: std::collections::BTreeMap<String, String> = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4318".to_string()),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", p.ca.display().to_string()),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            p.client_cert.display().to_string(),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", p.client_key.display().to_string()),
        (
            "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            p.client_key.display().to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let c = Config::load(None, &env, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.export.tls.ca.as_ref(), Some(&p.ca));
    assert_eq!(c.export.tls.cert.as_ref(), Some(&p.client_cert));
    assert_eq!(c.export.tls.key.as_ref(), Some(&p.client_key));
    let mut bad = env.clone();
    bad.insert("OTEL_EXPORTER_OTLP_CLIENT_KEY".into(), "/nonexistent/k.pem".into());
    bad.remove("OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY");
    let err = Config::load(None, &bad, &[]).unwrap_err();
    assert_eq!(err.0[0].key, "export.tls.key", "{err}");
}

#[test]
fn tls_an_agent_token_becomes_its_authorization_header() {
    let dir = tempfile::tempdir().unwrap();
    let p = Pki::make(dir.path());
    let agent = format!(
        "[cluster]\nrole = \"agent\"\nmaster = \"https://127.0.0.1:4317\"\ntoken = \"s3\"\n[export.tls]\nca = {:?}\n",
        p.ca
    );
    let c = Config::from_toml_str(&agent).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.export.headers["authorization"], "Bearer s3");
    assert_eq!(c.export.endpoint.as_deref(), Some("https://127.0.0.1:4317"));
    // A header the user set wins over the token.
    let own = format!("{agent}[export.headers]\nAuthorization = \"Bearer mine\"\n");
    let c = Config::from_toml_str(&own).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.export.headers.len(), 1, "{:?}", c.export.headers);
    assert_eq!(c.export.headers["Authorization"], "Bearer mine");
}

fn metrics() -> bytes::Bytes {
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "util".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            time_unix_nano: 1,
                            value: Some(number_data_point::Value::AsDouble(0.5)),
                            ..Default::default()
                        }],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    bytes::Bytes::from(req.encode_to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_export_reaches_the_receivers_over_mutual_tls_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let p = Pki::make(dir.path());
    let hub = IngestHub::new(10_000, Arc::new(|_: &crate::plugin::bindings::types::EventBatch| 1));
    let receiver = Receiver {
        hub: hub.clone(),
        forward: None,
        tokens: vec!["s3".into()],
        max_body: 1 << 20,
        limits: crate::ingest::limits::Limits::default(),
    };
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let tls = || {
        Some(ServeTls {
            config: server_config(&server(&p, true), "ingest.tls").unwrap(),
            refused: hub.tls_refused.clone(),
        })
    };
    let grpc = serve(
        "gRPC",
        "127.0.0.1:0",
        grpc_router(receiver.clone(), 1 << 20),
        tls(),
        stop.clone(),
    )
    .await;
    let http = serve("HTTP", "127.0.0.1:0", http_router(receiver, 1 << 20), tls(), stop).await;
    let (grpc, http) = (grpc.address.unwrap(), http.address.unwrap());

    let good = ExportConfig {
        tls: ClientTls {
            ca: Some(p.ca.clone()),
            cert: Some(p.client_cert.clone()),
            key: Some(p.client_key.clone()),
        },
        headers: [("authorization".to_string(), "Bearer s3".to_string())].into(),
        timeout_ms: 5_000,
        ..ExportConfig::default()
    };
    let on = |cfg: &ExportConfig, protocol: Protocol| {
        let mut c = cfg.clone();
        c.protocol = protocol;
        c.endpoint = Some(match protocol {
            Protocol::Grpc => format!("https://localhost:{}", grpc.port()),
            Protocol::HttpProtobuf => format!("https://127.0.0.1:{}", http.port()),
        });
        Client::new(&c).unwrap()
    };
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let sent = on(&good, protocol).send(Signal::Metrics, metrics()).await;
        assert!(sent.is_ok(), "{protocol:?}: {sent:?}");
    }
    assert_eq!(hub.stats().otlp.rows, 2, "one point over each protocol");
    assert_eq!(hub.tls_refused.load(Relaxed), 0);

    // The header is what admits it: a wrong token is refused and counted.
    let mut wrong = good.clone();
    wrong.headers.insert("authorization".into(), "Bearer nope".into());
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let e = on(&wrong, protocol).send(Signal::Metrics, metrics()).await.unwrap_err();
        assert!(!e.retryable, "{protocol:?}: {e}");
    }
    assert_eq!(hub.stats().otlp.unauthorized, 2);

    // No client certificate, or one from another CA: the handshake is refused.
    let mut anonymous = good.clone();
    anonymous.tls.cert = None;
    anonymous.tls.key = None;
    let mut stranger = good.clone();
    stranger.tls.cert = Some(p.stranger_cert.clone());
    stranger.tls.key = Some(p.stranger_key.clone());
    for cfg in [&anonymous, &stranger] {
        for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
            let r = on(cfg, protocol).send(Signal::Metrics, metrics()).await;
            assert!(r.is_err(), "{protocol:?} without a trusted client certificate");
        }
    }
    // The server counts once its side of the handshake has failed.
    for _ in 0..100 {
        if hub.tls_refused.load(Relaxed) >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(hub.tls_refused.load(Relaxed) >= 4, "{}", hub.tls_refused.load(Relaxed));

    // Plain HTTP to the TLS port gets nowhere.
    let mut plain = good.clone();
    plain.protocol = Protocol::HttpProtobuf;
    plain.endpoint = Some(format!("http://127.0.0.1:{}", http.port()));
    let r = Client::new(&plain).unwrap().send(Signal::Metrics, metrics()).await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(hub.stats().otlp.rows, 2, "nothing else was taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_the_api_listener_serves_https_and_refuses_plain_http() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client as HyperClient;
    use hyper_util::rt::TokioExecutor;

    let dir = tempfile::tempdir().unwrap();
    let p = Pki::make(dir.path());
    let mut cfg = Config::default();
    cfg.host.data_dir = dir.path().join("data");
    cfg.plugins.dir = Some(dir.path().join("plugins"));
    cfg.plugins.watch = false;
    cfg.sinks.dir = dir.path().join("sinks");
    cfg.api.listen = "127.0.0.1:0".into();
    cfg.api.tls = Some(server(&p, false));
    std::fs::create_dir_all(cfg.plugins_dir()).unwrap();
    let opts = crate::run::HostOptions { api: true, otlp: false };
    let host = crate::run::Host::start(cfg, opts).await.unwrap();
    let addr = host.api_addr.unwrap();

    let tls = client_config(
        &ClientTls {
            ca: Some(p.ca.clone()),
            ..ClientTls::default()
        },
        "export.tls",
    )
    .unwrap();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client: HyperClient<_, Empty<bytes::Bytes>> = HyperClient::builder(TokioExecutor::new()).build(connector);
    let uri: hyper::Uri = format!("https://localhost:{}/api/ready", addr.port()).parse().unwrap();
    let resp = client.get(uri).await.unwrap();
    assert_eq!(resp.status(), 200);
    let _ = resp.into_body().collect().await;

    // A plain-HTTP request gets no HTTP answer, and is counted.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /api/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(!buf.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&buf));
    for _ in 0..100 {
        if host.hub.stats().tls_refused > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(host.hub.stats().tls_refused, 1);
    host.shutdown(false).await;
}

/// The certificate a TLS server on `port` presents (trusting `cas`).
async fn presented(port: u16, cas: &[&std::path::Path]) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(pem: &std::path::Path) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_file(pem).unwrap().to_vec()
}

/// Replaces `dst` the way a renewal does: a new file renamed over the old one.
fn swap_in(src: &std::path::Path, dst: &std::path::Path) {
    let tmp = dst.with_extension("new");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

/// Two PKIs under `dir` (`a/`, `b/`): what was issued, and what renews it.
fn renewal(dir: &std::path::Path) -> (Pki, Pki) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    (Pki::make(&a), Pki::make(&b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_a_renewed_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = renewal(dir.path());
    let live = ServerTls {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        client_ca: None,
    };
    swap_in(&old.server_cert, &live.cert);
    swap_in(&old.server_key, &live.key);

    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let listener = TlsListener::new(
        tcp,
        server_config(&live, "ingest.tls").unwrap(),
        refused.clone(),
        "test",
    )
    .unwrap();
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let cas = [old.ca.as_path(), new.ca.as_path()];
    assert_eq!(presented(port, &cas).await, der(&old.server_cert));

    // Renewed: the certificate first, then its key, as two separate writes.
    swap_in(&new.server_cert, &live.cert);
    tokio::time::sleep(reload::CHECK_EVERY + std::time::Duration::from_millis(100)).await;
    // Caught between the two writes the pair does not match: the old one is still served.
    assert_eq!(presented(port, &cas).await, der(&old.server_cert));
    swap_in(&new.server_key, &live.key);
    tokio::time::sleep(reload::CHECK_EVERY + std::time::Duration::from_millis(100)).await;
    assert_eq!(presented(port, &cas).await, der(&new.server_cert));

    // A broken file keeps the last good pair in use.
    std::fs::write(&live.key, "-----BEGIN PRIVATE KEY-----\ncut short").unwrap();
    tokio::time::sleep(reload::CHECK_EVERY + std::time::Duration::from_millis(100)).await;
    assert_eq!(presented(port, &cas).await, der(&new.server_cert));
    assert_eq!(refused.load(Relaxed), 0);
}

#[test]
fn tls_a_renewed_client_certificate_is_presented_without_a_restart() {
    use rustls::client::ResolvesClientCert;
    let dir = tempfile::tempdir().unwrap();
    let p = Pki::make(dir.path());
    let (cert, key) = (dir.path().join("agent.crt"), dir.path().join("agent.key"));
    swap_in(&p.client_cert, &cert);
    swap_in(&p.client_key, &key);
    let r = reload::ReloadingCert::load(&cert, &key, "export.tls").unwrap();
    let first = |r: &reload::ReloadingCert| r.resolve(&[], &[]).unwrap().cert[0].to_vec();
    assert_eq!(first(&r), der(&p.client_cert));
    swap_in(&p.stranger_cert, &cert);
    swap_in(&p.stranger_key, &key);
    std::thread::sleep(reload::CHECK_EVERY + std::time::Duration::from_millis(100));
    assert_eq!(first(&r), der(&p.stranger_cert));
}

/// The client side over the wire: a sender's renewed certificate is the one
/// a mutual-TLS server sees at the next handshake, with the same
/// `ClientConfig` (the exporter builds it once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_a_renewed_client_certificate_is_seen_by_the_server_at_the_next_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = renewal(dir.path());
    // Both CAs on both sides: the server's certificate is old's, the
    // client's is old's and then new's.
    let cas = dir.path().join("cas.pem");
    let both = [std::fs::read(&old.ca).unwrap(), std::fs::read(&new.ca).unwrap()].concat();
    std::fs::write(&cas, both).unwrap();
    let server = server_config(
        &ServerTls {
            cert: old.server_cert.clone(),
            key: old.server_key.clone(),
            client_ca: Some(cas.clone()),
        },
        "ingest.tls",
    )
    .unwrap();
    let live = ClientTls {
        ca: Some(cas),
        cert: Some(dir.path().join("agent.crt")),
        key: Some(dir.path().join("agent.key")),
    };
    let (cert, key) = (live.cert.clone().unwrap(), live.key.clone().unwrap());
    swap_in(&old.client_cert, &cert);
    swap_in(&old.client_key, &key);
    let client = Arc::new(client_config(&live, "export.tls").unwrap());

    // The server hands back the certificate each handshake presented.
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    tokio::spawn(async move {
        while let Ok((s, _)) = tcp.accept().await {
            let tls = acceptor.accept(s).await.unwrap();
            let _ = tx.send(tls.get_ref().1.peer_certificates().unwrap()[0].to_vec());
        }
    });
    let handshake = || {
        let client = client.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(client)
                .connect(name, tcp)
                .await
                .unwrap();
            // TLS 1.3 sends the client's certificate after the server's
            // last flight: a write makes sure the server has it.
            use tokio::io::AsyncWriteExt;
            tls.write_all(b"x").await.unwrap();
            tls.flush().await.unwrap();
        }
    };
    handshake().await;
    assert_eq!(seen.recv().await.unwrap(), der(&old.client_cert));

    swap_in(&new.client_cert, &cert);
    swap_in(&new.client_key, &key);
    tokio::time::sleep(reload::CHECK_EVERY + std::time::Duration::from_millis(100)).await;
    handshake().await;
    assert_eq!(seen.recv().await.unwrap(), der(&new.client_cert));
}
