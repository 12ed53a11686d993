//! The HTTP API against the real binary: every documented operation answers,
//! config changes (valid, malformed, unknown keys, bad values, restart-only
//! keys, refused by a plugin with rollback, oversized), plugin management
//! (upload, traversal names, enable/disable/reload, remove), series and the
//! live stream, and the bearer token when bound beyond loopback.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sonde_e2e::*;

fn call(s: &Sonde, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let (code, text) = http(&s.api, method, path, body);
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn period(s: &Sonde) -> u64 {
    s.json("/api/status")["sampling_period_ms"].as_u64().unwrap()
}

fn testbed() -> Vec<u8> {
    std::fs::read(plugin_file("testing/testbed.wasm")).unwrap()
}

/// The first `n` server-sent events of `path`: (event name, parsed data).
fn sse(addr: &str, path: &str, n: usize, limit: Duration) -> Vec<(String, Value)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let (mut raw, mut buf, t0) = (Vec::new(), [0u8; 65536], Instant::now());
    let mut events = Vec::new();
    while events.len() < n && t0.elapsed() < limit {
        if let Ok(k) = s.read(&mut buf) {
            raw.extend_from_slice(&buf[..k]);
        }
        let text = String::from_utf8_lossy(&raw);
        events = text
            .split("\n\n")
            .filter_map(|block| {
                let name = block.lines().find_map(|l| l.strip_prefix("event: "))?;
                let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
                Some((name.to_string(), serde_json::from_str(data).ok()?))
            })
            .collect();
    }
    assert!(
        String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    events
}

/// A request whose body the server may refuse unread (413): sends
/// `Expect: 100-continue` and the body only when asked for it. Returns the
/// final status and, parsed, the body that came with it.
fn http_big(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nExpect: 100-continue\r\n{extra}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    let status = |s: &mut TcpStream| {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap_or(0) == 1 {
            head.push(b[0]);
        }
        let text = String::from_utf8_lossy(&head).to_string();
        text.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
            .unwrap_or(0)
    };
    let code = match status(&mut s) {
        100 => {
            let _ = s.write_all(body);
            status(&mut s)
        }
        code => code,
    };
    // Connection: close, so the body runs to the end of the stream.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&rest).into_owned();
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

#[test]
fn every_documented_operation_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        tmp.path(),
        &[
            (plugin_file("bundled/sysmetrics.wasm"), "sysmetrics"),
            (plugin_file("testing/testbed.wasm"), "echo"),
        ],
        &[],
    );
    let doc = s.json("/api/openapi.json");
    assert_eq!(doc["openapi"], "3.1.0");
    let dashboard_built = !s.get("/").1.contains("built without the dashboard");
    let mut checked = 0;
    // Uploads before removals, so the removed plugin exists.
    let mut ops: Vec<(String, String, Value)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            ops.push((method.clone(), path.clone(), op.clone()));
        }
    }
    ops.sort_by_key(|(m, p, _)| (m == "delete" && p.starts_with("/api/admin"), p.clone()));
    for (method, path, op) in ops {
        let mut url = path.clone();
        for p in op["parameters"].as_array().into_iter().flatten() {
            if p["in"] == "path" {
                url = url.replace(
                    &format!("{{{}}}", p["name"].as_str().unwrap()),
                    p["example"].as_str().unwrap(),
                );
            }
        }
        if url.starts_with("/assets/") && !dashboard_built {
            continue;
        }
        let body: Vec<u8> = match (method.as_str(), path.as_str()) {
            ("put", "/api/admin/plugins/{name}") => testbed(),
            ("put" | "patch", "/api/config") => b"{}".to_vec(),
            _ => Vec::new(),
        };
        let (code, text) = if path == "/api/stream" {
            let ev = sse(&s.api, &url, 1, Duration::from_secs(5));
            (if ev.is_empty() { 0 } else { 200 }, String::new())
        } else {
            http(&s.api, &method.to_uppercase(), &url, &body)
        };
        // A plugin's own "no route" is the plugin answering, not a missing
        // endpoint; so is a 404 about the thing asked for (no such job, not a
        // master), as long as it is not the router's own "no such endpoint".
        let plugin_answered = path.starts_with("/api/plugins/{name}/") && text.contains("no route");
        let endpoint_answered =
            path.starts_with("/api/") && !text.contains("no such endpoint") && text.contains("error");
        assert!(
            code != 0 && code != 405 && (code != 404 || plugin_answered || endpoint_answered),
            "{} {url} answered {code}: {text}",
            method.to_uppercase()
        );
        checked += 1;
    }
    assert!(checked >= 20, "{checked}");
    // Routes that are not documented are not served.
    assert_eq!(s.get("/api/nope").0, 404);
    assert_eq!(http(&s.api, "DELETE", "/api/status", b"").0, 405);
}

/// Every error is `{"error", "key"?, "reason"?}` JSON, the ones axum answers
/// before any handler runs included.
#[test]
fn every_error_is_json_in_one_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(tmp.path(), &[], &["--set", "ingest.max_body_bytes=4096"]);
    let is_error = |code: u16, want: u16, body: &Value| {
        assert_eq!(code, want, "{body}");
        assert!(body["error"].is_string(), "{want}: not the JSON shape: {body}");
    };
    let (code, body) = call(&s, "GET", "/api/nope", b"");
    is_error(code, 404, &body);
    let (code, body) = call(&s, "DELETE", "/api/status", b"");
    is_error(code, 405, &body);
    let (code, body) = call(&s, "PUT", "/api/ingest", b"");
    is_error(code, 405, &body);
    let (code, body) = call(&s, "GET", "/api/series/data?window_s=x", b"");
    is_error(code, 400, &body);

    let ingest = |body: &[u8]| {
        let (code, text) = http_with(
            &s.api,
            "POST",
            "/api/ingest",
            &[("content-type", "application/json")],
            body,
        );
        (
            code,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
        )
    };
    let (code, body) = ingest(b"{\"progress\": [");
    is_error(code, 400, &body);
    let (code, body) = http_big(
        &s.api,
        "POST",
        "/api/ingest",
        &[("content-type", "application/json")],
        &vec![b' '; 8192],
    );
    is_error(code, 413, &body);
    assert_eq!(body["key"], "ingest.max_body_bytes", "{body}");
    let (code, body) = call(&s, "POST", "/api/ingest", b"{}");
    assert_eq!(code, 202, "no content type is taken as JSON: {body}");
    let (code, text) = http_with(&s.api, "POST", "/api/ingest", &[("content-type", "text/csv")], b"{}");
    is_error(code, 415, &serde_json::from_str(&text).unwrap());

    // A name over ingest.max_name_bytes: 422 naming the field and the limit.
    let long = json!({"origin": {"job": "j".repeat(300)}}).to_string();
    let (code, body) = ingest(long.as_bytes());
    is_error(code, 422, &body);
    assert_eq!(body["key"], "origin.job", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("at most 256 (ingest.max_name_bytes)"),
        "{body}"
    );
    let st = s.json("/api/status");
    assert_eq!(st["ingest"]["json"]["rejected"], 4, "{st:#}");
    assert_eq!(st["ingest"]["otlp"]["truncated"], 0, "{st:#}");
}

#[test]
fn config_changes_are_validated_applied_live_and_atomic() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        tmp.path(),
        &[
            (plugin_file("testing/testbed.wasm"), "a-echo"),
            (plugin_file("testing/testbed.wasm"), "echo"),
        ],
        &["--set", "api.token=s3cret"],
    );
    let auth = [("Authorization", "Bearer s3cret")];
    let send = |method: &str, body: &str| {
        let (code, text) = http_with(&s.api, method, "/api/config", &auth, body.as_bytes());
        (
            code,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
        )
    };
    assert_eq!(period(&s), 100);
    let cfg = s.json("/api/config");
    assert_eq!(cfg["api"]["token"], "<redacted>");

    // A live change: the sampling period, at once.
    let (code, body) = send("PATCH", r#"{"sampler": {"period_ms": 50}}"#);
    assert_eq!(code, 200, "{body}");
    assert_eq!(period(&s), 50);
    assert!(
        body["applied"][0].as_str().unwrap().contains("sampler.period_ms"),
        "{body}"
    );

    // Bad input: nothing changes and the answer names the key.
    let (code, body) = send("PATCH", "{not json");
    assert_eq!((code, body["key"].as_str()), (400, Some("<body>")), "{body}");
    let (code, body) = send("PATCH", r#"{"sampler": {"period_msec": 5}}"#);
    assert_eq!(
        (code, body["key"].as_str()),
        (422, Some("sampler.period_msec")),
        "{body}"
    );
    assert!(body["reason"].as_str().unwrap().contains("unknown field"), "{body}");
    let (code, body) = send("PATCH", r#"{"sampler": {"period_ms": 1}}"#);
    assert_eq!((code, body["key"].as_str()), (422, Some("sampler.period_ms")), "{body}");
    assert!(body["reason"].as_str().unwrap().contains("out of range"), "{body}");
    let (code, body) = send("PATCH", r#"{"sampler": {"period_ms": "fast"}}"#);
    assert_eq!((code, body["key"].as_str()), (422, Some("sampler.period_ms")), "{body}");
    let (code, body) = send("PATCH", r#"{"export": {"endpoint": "ftp://x"}}"#);
    assert_eq!((code, body["key"].as_str()), (422, Some("export.endpoint")), "{body}");
    let (code, _) = send("PATCH", "[1, 2]");
    assert_eq!(code, 422);
    let (code, body) = send("PATCH", r#"{"api": {"listen": "127.0.0.1:1"}}"#);
    assert_eq!((code, body["key"].as_str()), (409, Some("api.listen")), "{body}");
    assert!(body["reason"].as_str().unwrap().contains("needs a restart"), "{body}");
    let big = format!(r#"{{"export": {{"resource": {{"k": "{}"}}}}}}"#, "x".repeat(5 << 20));
    let (code, body) = http_big(&s.api, "PATCH", "/api/config", &auth, big.as_bytes());
    assert_eq!(code, 413);
    assert!(body["error"].is_string(), "a JSON error: {body}");
    assert_eq!(period(&s), 50, "refused changes left the running config alone");

    // A plugin refuses its new settings: the other plugin's change is undone
    // and the period change in the same request never happens.
    let refused = json!({
        "sampler": {"period_ms": 20},
        "plugin": {"a-echo": {"settings": {"timer_ms": 0, "sink": "a.tsv"}}, "echo": {"settings": {"mode": "trap"}}}
    });
    let (code, body) = send("PATCH", &refused.to_string());
    assert_eq!(
        (code, body["key"].as_str()),
        (422, Some("plugin.echo.settings")),
        "{body}"
    );
    assert!(body["reason"].as_str().unwrap().contains("cannot change"), "{body}");
    assert_eq!(period(&s), 50);
    assert_eq!(
        s.get("/api/plugins/a-echo/config").1,
        "{}",
        "a-echo's settings were rolled back"
    );
    assert!(s.json("/api/config")["plugin"]["a-echo"].is_null());

    // Accepted plugin settings reach the plugin; export switches on live.
    let ok = json!({"plugin": {"echo": {"settings": {"timer_ms": 0}}}, "export": {"endpoint": "http://127.0.0.1:9"}});
    let (code, body) = send("PATCH", &ok.to_string());
    assert_eq!(code, 200, "{body}");
    assert_eq!(s.get("/api/plugins/echo/config").1, r#"{"timer_ms":0}"#);
    let st = s.json("/api/status");
    assert_eq!(st["export"]["endpoint"], "http://127.0.0.1:9");
    assert_eq!(st["export"]["stats"]["enabled"], true);

    // PUT of what GET returned (token redacted) changes nothing and keeps the token.
    let whole = s.json("/api/config");
    let (code, body) = send("PUT", &whole.to_string());
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["applied"], json!([]));
    assert_eq!(
        send("PATCH", r#"{"export": {"endpoint": null}}"#).0,
        200,
        "the token still works"
    );
    assert_eq!(s.json("/api/status")["export"]["stats"]["enabled"], false);
    // PUT of a partial document resets the rest to defaults: the restart-only ones are refused.
    let (code, body) = send("PUT", r#"{"sampler": {"period_ms": 100}}"#);
    assert_eq!(code, 409, "{body}");
    // No token, no change.
    assert_eq!(http(&s.api, "PATCH", "/api/config", b"{}").0, 401);
}

#[test]
fn plugins_are_uploaded_managed_and_names_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        tmp.path(),
        &[(plugin_file("testing/testbed.wasm"), "echo")],
        &["--set", "plugins.max_traps=2", "--set", "plugins.backoff_initial_ms=20"],
    );
    let pdir = tmp.path().join("plugins");
    let wasm = testbed();

    let (code, body) = call(&s, "PUT", "/api/admin/plugins/fresh", &wasm);
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["plugin"]["state"], "running");
    assert!(pdir.join("fresh.wasm").is_file());
    assert_eq!(s.json("/api/plugins/fresh")["state"], "running");
    let (code, body) = call(&s, "PUT", "/api/admin/plugins/fresh", &wasm);
    assert_eq!((code, &body["replaced"]), (200, &json!(true)), "{body}");

    // Names that could leave the directory, or are not plugin names, are refused.
    for bad in [
        "..",
        "..%2Fx",
        "a%2Fb",
        "%2Fetc%2Fpasswd",
        ".hidden",
        "UPPER",
        "a.wasm",
        "-x",
    ] {
        let (code, body) = call(&s, "PUT", &format!("/api/admin/plugins/{bad}"), &wasm);
        assert_eq!(code, 400, "{bad}: {body}");
        assert!(body["error"].as_str().unwrap().contains("invalid"), "{body}");
    }
    for raw in ["/api/admin/plugins/../x", "/api/admin/plugins/a/b"] {
        let code = call(&s, "PUT", raw, &wasm).0;
        assert!((400..500).contains(&code), "{raw}: {code}");
    }
    assert!(!tmp.path().join("x.wasm").exists());
    let names: Vec<_> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only echo.wasm and fresh.wasm, no temporary files: {names:?}"
    );

    // Not Wasm, too big.
    let (code, body) = call(&s, "PUT", "/api/admin/plugins/junk", b"hello, world");
    assert_eq!(code, 422, "{body}");
    let mut big = b"\0asm\x0d\0\x01\0".to_vec();
    big.resize(33 << 20, 0);
    assert_eq!(http_big(&s.api, "PUT", "/api/admin/plugins/big", &[], &big).0, 413);
    assert!(!pdir.join("big.wasm").exists() && !pdir.join("junk.wasm").exists());

    // A component that fails to load is kept and reported.
    let (code, body) = call(&s, "PUT", "/api/admin/plugins/core", b"\0asm\x01\0\0\0");
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["plugin"]["state"], "failed");

    // Disable, enable, reload: the config follows.
    let (code, body) = call(&s, "POST", "/api/admin/plugins/fresh/disable", b"");
    assert_eq!((code, &body["plugin"]["state"]), (200, &json!("disabled")), "{body}");
    assert_eq!(s.json("/api/config")["plugin"]["fresh"]["enabled"], false);
    let (code, body) = call(&s, "POST", "/api/admin/plugins/fresh/enable", b"");
    assert_eq!((code, &body["plugin"]["state"]), (200, &json!("running")), "{body}");
    assert_eq!(s.json("/api/config")["plugin"]["fresh"]["enabled"], true);
    let (code, body) = call(&s, "POST", "/api/admin/plugins/fresh/reload", b"");
    assert_eq!((code, &body["plugin"]["state"]), (200, &json!("running")), "{body}");
    assert_eq!(call(&s, "POST", "/api/admin/plugins/absent/reload", b"").0, 404);
    assert_eq!(call(&s, "POST", "/api/admin/plugins/absent/enable", b"").0, 404);
    assert_eq!(call(&s, "POST", "/api/admin/plugins/fresh/explode", b"").0, 404);
    assert_eq!(call(&s, "POST", "/api/admin/plugins/..%2Fx/reload", b"").0, 400);

    // A trapping upload ends quarantined with its reason; reload brings it back.
    assert_eq!(call(&s, "PUT", "/api/admin/plugins/trap-up", &wasm).0, 201);
    assert!(wait_for(
        Duration::from_secs(20),
        || s.json("/api/plugins/trap-up")["state"] == "quarantined"
    ));
    let reason = s.json("/api/plugins/trap-up")["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("quarantined after 2 traps"), "{reason}");

    // Plugin routes keep working beside the admin routes.
    assert_eq!(s.get("/api/plugins/fresh/restarts"), (200, "0".to_string()));

    // Remove.
    assert_eq!(call(&s, "DELETE", "/api/admin/plugins/fresh", b"").0, 204);
    assert!(!pdir.join("fresh.wasm").exists());
    assert_eq!(s.get("/api/plugins/fresh").0, 404);
    assert_eq!(call(&s, "DELETE", "/api/admin/plugins/fresh", b"").0, 404);
}

#[test]
fn series_history_and_the_live_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        tmp.path(),
        &[(plugin_file("bundled/sysmetrics.wasm"), "sysmetrics")],
        &[],
    );
    assert!(wait_for(Duration::from_secs(10), || {
        s.json("/api/series?plugin=sysmetrics&name=system.cpu.utilization")["series"]
            .as_array()
            .unwrap()
            .len()
            >= 2
    }));
    let list = s.json("/api/series?plugin=sysmetrics");
    let series = list["series"].as_array().unwrap();
    let net = series.iter().find(|m| m["name"] == "system.network.io");
    if let Some(net) = net {
        assert_eq!(
            (net["rate"].as_bool(), net["unit"].as_str()),
            (Some(true), Some("By/s"))
        );
    }
    let cpu = series
        .iter()
        .find(|m| m["name"] == "system.cpu.utilization" && m["attributes"].get("cpu.logical_number").is_some())
        .unwrap();
    let id = cpu["id"].as_u64().unwrap();
    // Five seconds of history, so the snapshot clearly holds more per series
    // than any half-second increment can.
    assert!(wait_for(Duration::from_secs(20), || {
        s.json(&format!("/api/series/data?ids={id}&window_s=60"))["data"][0]["t"]
            .as_array()
            .is_some_and(|t| t.len() >= 50)
    }));
    let d = s.json(&format!("/api/series/data?ids={id}&window_s=60&max_points=5"));
    let b = &d["data"][0];
    assert!(b["t"].as_array().unwrap().len() <= 6, "{d}");
    assert_eq!(d["bucket_ms"], 12_000);
    let (mn, mx, mean) = (
        b["min"][0].as_f64().unwrap(),
        b["max"][0].as_f64().unwrap(),
        b["mean"][0].as_f64().unwrap(),
    );
    assert!(mn <= mean && mean <= mx, "{b}");

    for bad in [
        "/api/series/data?max_points=0",
        "/api/series/data?window_s=99999",
        "/api/series/data?ids=abc",
        "/api/series/data?bogus=1",
        "/api/series/data?from=10&to=5",
        "/api/stream?interval_ms=5",
        "/api/series?ids=1,x",
    ] {
        let (code, body) = s.get(bad);
        assert_eq!(code, 400, "{bad}: {body}");
    }

    // The stream: a snapshot of the window, then only what is new.
    let events = sse(
        &s.api,
        "/api/stream?plugin=sysmetrics&name=system.cpu&window_s=60&interval_ms=500",
        4,
        Duration::from_secs(10),
    );
    assert!(events.len() >= 3, "{events:?}");
    assert_eq!(events[0].0, "snapshot");
    let snap = &events[0].1;
    assert!(snap["series"].as_array().unwrap().len() >= 2, "{snap}");
    let snap_points: usize = snap["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["t"].as_array().unwrap().len())
        .sum();
    assert!(snap_points >= 20, "{snap}");
    let mut appended = 0;
    for (name, ev) in &events[1..] {
        assert_eq!(name, "append");
        assert_eq!(ev["series"], json!([]), "series are announced once");
        for b in ev["data"].as_array().unwrap() {
            // An increment starts at (or after) the last bucket already sent,
            // and holds about one interval's worth of samples (5 at 100 ms),
            // never the window again (50 or more per series here).
            let n = b["t"].as_array().unwrap().len();
            appended += n;
            assert!(n <= 25, "increments are not the whole window again: {n}");
            let first = b["t"][0].as_u64().unwrap();
            assert!(first + 60_000 >= snap["now_ms"].as_u64().unwrap());
        }
    }
    assert!(appended > 0, "{events:?}");
}

#[test]
fn bound_beyond_loopback_every_change_needs_the_token() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Sonde::start(
        tmp.path(),
        &[(plugin_file("testing/testbed.wasm"), "echo")],
        &["--set", "api.listen=0.0.0.0:{port}", "--set", "api.token=t0ken"],
    );
    assert!(s.output().contains("0.0.0.0"), "{}", s.output());
    let wasm = testbed();
    let changes: [(&str, &str, &[u8]); 9] = [
        ("PUT", "/api/config", b"{}"),
        ("PATCH", "/api/config", b"{}"),
        ("PUT", "/api/admin/plugins/up", &wasm),
        ("DELETE", "/api/admin/plugins/echo", b""),
        ("POST", "/api/admin/plugins/echo/disable", b""),
        ("POST", "/api/admin/plugins/echo/enable", b""),
        ("POST", "/api/admin/plugins/echo/reload", b""),
        ("PUT", "/api/plugins/echo/state/k", b"v"),
        ("POST", "/api/plugins/echo/decision?kind=a&subject=b", b"{}"),
    ];
    for (m, p, body) in changes {
        let (code, text) = http(&s.api, m, p, body);
        assert_eq!(code, 401, "{m} {p}: {text}");
        let (code, _) = http_with(&s.api, m, p, &[("Authorization", "Bearer nope")], body);
        assert_eq!(code, 401, "{m} {p} with a wrong token");
    }
    assert!(!tmp.path().join("plugins/up.wasm").exists());
    assert_eq!(s.json("/api/plugins/echo")["state"], "running");
    // Reads stay open; secrets stay redacted.
    assert_eq!(s.json("/api/config")["api"]["token"], "<redacted>");
    assert_eq!(s.get("/api/openapi.json").0, 200);
    // With the token, changes go through.
    let auth = [("Authorization", "Bearer t0ken")];
    let (code, body) = http_with(
        &s.api,
        "PATCH",
        "/api/config",
        &auth,
        br#"{"sampler":{"period_ms":50}}"#,
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(http_with(&s.api, "PUT", "/api/admin/plugins/up", &auth, &wasm).0, 201);
    // The token cannot be removed while bound beyond loopback.
    let (code, body) = http_with(&s.api, "PATCH", "/api/config", &auth, br#"{"api":{"token":null}}"#);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("api.token"), "{body}");
}

/// `api.token_file`: the token is the file's; a request without it is
/// refused, one with it taken, and when the file changes (swapped as the
/// kubelet swaps a mounted Secret) the new token works and the old one no
/// longer does, with no restart.
#[test]
fn the_token_file_guards_changes_and_is_read_again_when_it_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("api-token");
    std::fs::write(&file, "first-token\n").unwrap();
    let setting = format!("api.token_file=\"{}\"", file.display());
    let s = Sonde::start(
        &tmp.path().join("sonde"),
        &[],
        &["--set", "api.listen=0.0.0.0:{port}", "--set", &setting],
    );
    let patch = |token: Option<&str>, period: u32| {
        let body = format!("{{\"sampler\":{{\"period_ms\":{period}}}}}");
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        http_with(&s.api, "PATCH", "/api/config", &headers, body.as_bytes())
    };
    assert_eq!(patch(None, 50).0, 401);
    assert_eq!(patch(Some("wrong"), 50).0, 401);
    let (code, body) = patch(Some("first-token"), 50);
    assert_eq!(code, 200, "{body}");
    assert_eq!(period(&s), 50);
    // The JSON ingest wants the same token.
    let report = br#"{"origin": {"job": "j", "rank": 0}, "progress": [{"value": 1}]}"#;
    assert_eq!(http(&s.api, "POST", "/api/ingest", report).0, 401);
    let first = [("Authorization", "Bearer first-token")];
    assert_eq!(http_with(&s.api, "POST", "/api/ingest", &first, report).0, 202);
    // The config names the file and shows no token.
    let cfg = s.json("/api/config");
    assert_eq!(cfg["api"]["token_file"], file.display().to_string(), "{cfg}");
    assert!(cfg["api"]["token"].is_null(), "{cfg}");

    // A new token, written beside the file and renamed over it.
    let next = tmp.path().join("api-token.new");
    std::fs::write(&next, "second-token\n").unwrap();
    std::fs::rename(&next, &file).unwrap();
    let taken = wait_for(Duration::from_secs(10), || patch(Some("second-token"), 60).0 == 200);
    assert!(taken, "the new token was not taken: {}", s.output());
    assert_eq!(period(&s), 60);
    assert_eq!(patch(Some("first-token"), 70).0, 401, "the old token still works");
    assert_eq!(http_with(&s.api, "POST", "/api/ingest", &first, report).0, 401);
    assert!(s.output().contains("api.token_file"), "{}", s.output());
}

/// curl (HTTP/2 or HTTP/1.1 over TLS, certificate not checked) sending
/// `body` with PATCH and no token: (exit status, status code it read).
fn curl_refused(api: &str, http2: bool, body: &std::path::Path) -> (i32, String) {
    let o = std::process::Command::new("curl")
        .args([
            "-sk",
            if http2 { "--http2" } else { "--http1.1" },
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["-X", "PATCH", "-H", "content-type: application/json", "--data-binary"])
        .arg(format!("@{}", body.display()))
        .arg(format!("https://{api}/api/config"))
        .output()
        .expect("running curl");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).to_string(),
    )
}

/// A change refused for want of the token is a 401 that reaches the client
/// over HTTP/2 with TLS as over HTTP/1.1, even while its body is still
/// arriving: the refusal reads the body first, so the stream is not reset
/// (curl's error 92 in 2 of 3 tries before).
#[test]
fn a_refused_change_is_a_401_over_http2_and_tls_with_a_large_body() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki::Pki::make(dir.path());
    let port = free_port();
    let api = format!("127.0.0.1:{port}");
    let out = std::fs::File::create(dir.path().join("sonde.out")).unwrap();
    let child = std::process::Command::new(sonde_bin())
        .args(["--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--plugins-dir"])
        .arg(dir.path().join("plugins"))
        .args(["--listen", &api])
        .args([
            "--set",
            &format!("api.tls.cert={:?}", pki.server_cert.display().to_string()),
        ])
        .args([
            "--set",
            &format!("api.tls.key={:?}", pki.server_key.display().to_string()),
        ])
        .args(["--set", "api.token=\"s3cret\""])
        .args([
            "--set",
            "ingest.otlp_grpc_listen=\"off\"",
            "--set",
            "ingest.otlp_http_listen=\"off\"",
        ])
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("starting sonde");
    let _proc = Proc { child, name: "sonde" };
    let body = dir.path().join("body.json");
    std::fs::write(&body, vec![b' '; 300_000]).unwrap();
    let ready = wait_for(Duration::from_secs(60), || {
        std::process::Command::new("curl")
            .args(["-skf", &format!("https://{api}/api/ready")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(
        ready,
        "{}",
        std::fs::read_to_string(dir.path().join("sonde.out")).unwrap_or_default()
    );
    for http2 in [true, false] {
        for i in 0..8 {
            let (rc, code) = curl_refused(&api, http2, &body);
            assert_eq!(
                (rc, code.as_str()),
                (0, "401"),
                "try {i}, HTTP/{}",
                if http2 { 2 } else { 1 }
            );
        }
    }
}
