//! The HTTP API of a running sonde: status, plugins and their self-metrics,
//! plugin routes answered by the plugin, the bearer token on state changes.

use std::time::Duration;

use sonde_e2e::*;

#[test]
fn api_reports_plugins_and_routes_requests_to_them() {
    let tmp = tempfile::tempdir().unwrap();
    let garbage = tmp.path().join("garbage.wasm");
    std::fs::write(&garbage, b"not wasm").unwrap();
    let s = Sonde::start(
        tmp.path(),
        &[
            (plugin_file("bundled/sysmetrics.wasm"), "sysmetrics"),
            (plugin_file("testing/testbed.wasm"), "echo"),
            (garbage, "garbage"),
        ],
        &["--set", "api.token=s3cret"],
    );
    assert_eq!(s.json("/api/health")["status"], "ok");
    let st = s.json("/api/status");
    assert_eq!(st["contract"], "0.2.0");
    assert_eq!(st["export"]["stats"]["enabled"], false, "no collector configured");

    // Plugins with state, reasons and self-metrics.
    assert!(wait_for(Duration::from_secs(5), || {
        s.json("/api/plugins/sysmetrics")["metrics"]["calls"]
            .as_u64()
            .unwrap_or(0)
            > 1
    }));
    let list = s.json("/api/plugins");
    let by_name = |n: &str| {
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_name("sysmetrics")["state"], "running");
    assert_eq!(by_name("garbage")["state"], "failed");
    assert!(
        by_name("garbage")["reason"]
            .as_str()
            .unwrap()
            .contains("not a WebAssembly file")
    );
    assert_eq!(s.get("/api/plugins/nope").0, 404);

    // Plugin routes: reads are open, writes need the token.
    let (code, body) = s.get("/api/plugins/echo/restarts");
    assert_eq!((code, body.as_str()), (200, "0"));
    assert_eq!(http(&s.api, "PUT", "/api/plugins/echo/state/k", b"v").0, 401);
    let auth = [("Authorization", "Bearer s3cret")];
    assert_eq!(
        http_with(&s.api, "PUT", "/api/plugins/echo/state/k", &auth, b"v").0,
        204
    );
    assert_eq!(s.get("/api/plugins/echo/state/k"), (200, "v".to_string()));
    assert_eq!(
        http_with(
            &s.api,
            "PUT",
            "/api/plugins/echo/state/k",
            &[("Authorization", "Bearer wrong")],
            b"v"
        )
        .0,
        401
    );
    // A failed plugin's routes answer 503 with its reason instead of hanging.
    let (code, body) = s.get("/api/plugins/garbage/x");
    assert_eq!(code, 503);
    assert!(body.contains("not a WebAssembly file"), "{body}");

    // Decisions made through a route are listed.
    assert_eq!(
        http_with(
            &s.api,
            "POST",
            "/api/plugins/echo/decision?kind=plan&subject=j1",
            &auth,
            b"{\"n\":1}"
        )
        .0,
        204
    );
    let d = s.json("/api/decisions?plugin=echo");
    assert_eq!(d["decisions"][0]["body"]["n"], 1);
    // The config is readable, the token is not.
    let cfg = s.json("/api/config");
    assert_eq!(cfg["api"]["token"], "<redacted>");
    assert_eq!(cfg["sampler"]["period_ms"], 100);
    assert!(s.get("/").1.contains("<title>sonde</title>"));
}
