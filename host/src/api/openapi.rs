//! The OpenAPI 3.1 document the host serves at `GET /api/openapi.json`,
//! written by hand in one place. To document a new route, add one `op(...)`
//! line to [`document`]; a unit test below fails when a route the router
//! serves (any `.route(...)` in `api/`) is missing here, and the end-to-end
//! test `tests/tests/http_api.rs` calls every documented operation against the
//! real binary and fails on a 404 or 405.

use serde_json::{Map, Value, json};

/// Path parameters: (name, description, example used by the tests).
type Param = (&'static str, &'static str, &'static str);

const NAME: Param = ("name", "plugin name: ^[a-z0-9][a-z0-9_-]{0,63}$", "echo");

struct Op {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    params: Vec<Param>,
    query: Vec<(&'static str, &'static str, &'static str)>,
    body: Option<(&'static str, &'static str)>,
    responses: Vec<(u16, &'static str)>,
    /// Needs `Authorization: Bearer <api.token>` when a token is set.
    changes_state: bool,
}

fn op(method: &'static str, path: &'static str, summary: &'static str) -> Op {
    Op {
        method,
        path,
        summary,
        params: Vec::new(),
        query: Vec::new(),
        body: None,
        responses: vec![(200, "OK")],
        changes_state: !matches!(method, "get" | "head"),
    }
}

impl Op {
    fn param(mut self, p: Param) -> Self {
        self.params.push(p);
        self
    }
    fn query(mut self, name: &'static str, ty: &'static str, desc: &'static str) -> Self {
        self.query.push((name, ty, desc));
        self
    }
    fn body(mut self, content_type: &'static str, desc: &'static str) -> Self {
        self.body = Some((content_type, desc));
        self
    }
    fn responses(mut self, r: &[(u16, &'static str)]) -> Self {
        self.responses = r.to_vec();
        self
    }
}

fn operations() -> Vec<Op> {
    let cfg_errors: &[(u16, &str)] = &[
        (
            200,
            "applied: the new config (redacted), what was applied, plugins reloaded",
        ),
        (400, "the body is not JSON"),
        (401, "missing or wrong bearer token (when a token is set)"),
        (409, "a key that is read only at startup changed: needs a restart"),
        (413, "body over 4 MiB"),
        (
            422,
            "invalid (unknown key, wrong type, out of range) or refused by a plugin or the exporter; nothing changed",
        ),
    ];
    let selector = |o: Op| {
        o.query("ids", "string", "comma-separated series ids")
            .query("plugin", "string", "series emitted by this plugin")
            .query("scope", "string", "series of this instrumentation scope")
            .query("name", "string", "metric name prefix")
            .query(
                "node",
                "string",
                "series from this node (host.name); series without one are this sonde's own",
            )
            .query("job", "string", "series of this job (sonde.job)")
    };
    vec![
        op("get", "/", "the dashboard page"),
        op("get", "/assets/{path}", "a dashboard file (script, style)")
            .param(("path", "file under web/dist/assets/", "app.js"))
            .responses(&[(200, "the file"), (404, "no such file")]),
        op("get", "/api/openapi.json", "this document"),
        op(
            "post",
            "/api/ingest",
            "what a job reports, as JSON: origin, progress (batch index), timings, points, events, heartbeats, node events, and rows of the event tables plugins declared, each under its table's name (see GET /api/tables and host/src/ingest/json/mod.rs); OTLP goes to the receivers on ingest.otlp_grpc_listen / ingest.otlp_http_listen",
        )
        .body(
            "application/json",
            "{origin, progress[], timings[], points[], events[], heartbeats[], node_events[], <table>[]...}",
        )
        .responses(&[
            (202, "accepted: {\"accepted\": rows}"),
            (400, "malformed JSON or an unknown field of a fixed list (with line and column)"),
            (401, "missing or wrong bearer token (when a token is set)"),
            (413, "body over ingest.max_body_bytes"),
            (415, "not application/json"),
            (422, "an invalid value, or a name or attribute over its ingest.max_* limit: key names the row and field, reason the limit; rows of tables are refused one by one ({accepted, refused_rows, refused[{key, reason}]}: the accepted rows were kept)"),
            (429, "the ingest queue is full; retry after a second"),
        ]),
        op(
            "get",
            "/api/ingest",
            "ingest counters per source (otlp, json, agent; `unauthorized`: refused for a missing or wrong bearer token), TLS handshakes the listeners refused (`tls_refused`), the hub's queue, re-sent OTLP requests dropped (`dedup`) and the state store's group commit (`durable`)",
        ),
        op(
            "get",
            "/api/health",
            "liveness: always {\"status\":\"ok\"} while the process serves",
        ),
        op(
            "get",
            "/metrics",
            "the newest reading of every series read in the last 5 minutes, in Prometheus' text format 0.0.4 (names as remote-write gives them; counters cumulative, with _total)",
        )
        .responses(&[(200, "text/plain; version=0.0.4")]),
        op("get", "/api/ready", "readiness").responses(&[(200, "ready"), (503, "still loading plugins")]),
        op(
            "get",
            "/api/status",
            "version, sampling period and its error, export counters, ingest counters per source (with truncated), plugins in brief, the recording running (GET /api/record) or null, plugin_state (plugins' state writes not yet on disk: changes, bytes, commits, longest_commit_ms, last_error), cluster, storage (history, remote_write, query: requests, errors, last_error)",
        ),
        op(
            "get",
            "/api/config",
            "the running configuration; secrets read as \"<redacted>\"",
        ),
        op(
            "put",
            "/api/config",
            "replace the whole configuration (validated, applied atomically)",
        )
        .body(
            "application/json",
            "the whole config; \"<redacted>\" keeps a secret's running value",
        )
        .responses(cfg_errors),
        op(
            "patch",
            "/api/config",
            "change part of the configuration with a JSON merge patch (RFC 7396)",
        )
        .body("application/merge-patch+json", "e.g. {\"sampler\":{\"period_ms\":50}}")
        .responses(cfg_errors),
        op(
            "get",
            "/api/plugins",
            "every plugin: state, reason, version, traps, restarts, self-metrics",
        ),
        op("get", "/api/plugins/{name}", "one plugin")
            .param(NAME)
            .responses(&[(200, "the plugin's status"), (404, "no such plugin")]),
        op(
            "get",
            "/api/plugins/{name}/{rest}",
            "a route of the plugin, answered by its on-request hook",
        )
        .param(NAME)
        .param(("rest", "the plugin's own path", "restarts"))
        .responses(&[
            (200, "the plugin's answer (any status)"),
            (503, "the plugin is not running"),
        ]),
        op(
            "post",
            "/api/plugins/{name}/{rest}",
            "a route of the plugin, answered by its on-request hook",
        )
        .param(NAME)
        .param(("rest", "the plugin's own path", "echo"))
        .body("application/octet-stream", "passed to the plugin")
        .responses(&[(200, "the plugin's answer (any status)"), (401, "no token")]),
        op(
            "put",
            "/api/plugins/{name}/{rest}",
            "a route of the plugin, answered by its on-request hook",
        )
        .param(NAME)
        .param(("rest", "the plugin's own path", "state/k"))
        .body("application/octet-stream", "passed to the plugin")
        .responses(&[(200, "the plugin's answer (any status)"), (401, "no token")]),
        op(
            "delete",
            "/api/plugins/{name}/{rest}",
            "a route of the plugin, answered by its on-request hook",
        )
        .param(NAME)
        .param(("rest", "the plugin's own path", "state/k"))
        .responses(&[(200, "the plugin's answer (any status)"), (401, "no token")]),
        op(
            "patch",
            "/api/plugins/{name}/{rest}",
            "a route of the plugin, answered by its on-request hook",
        )
        .param(NAME)
        .param(("rest", "the plugin's own path", "x"))
        .responses(&[(200, "the plugin's answer (any status)"), (401, "no token")]),
        op(
            "put",
            "/api/admin/plugins/{name}",
            "upload a plugin component (written atomically into the plugins directory and loaded)",
        )
        .param(("name", "plugin name: ^[a-z0-9][a-z0-9_-]{0,63}$", "uploaded"))
        .body("application/wasm", "the component's bytes, at most 32 MiB")
        .responses(&[
            (201, "a new plugin, loaded (the body has its status)"),
            (200, "a plugin replaced"),
            (400, "invalid name"),
            (401, "no token"),
            (413, "over 32 MiB"),
            (
                422,
                "not a WebAssembly file, or it failed to load (the reason is in the status)",
            ),
        ]),
        op(
            "delete",
            "/api/admin/plugins/{name}",
            "remove a plugin's file (it is unloaded)",
        )
        .param(("name", "plugin name", "uploaded"))
        .responses(&[
            (204, "removed"),
            (400, "invalid name"),
            (401, "no token"),
            (404, "no such file"),
        ]),
        op(
            "post",
            "/api/admin/plugins/{name}/{action}",
            "enable, disable (config plugin.<name>.enabled) or reload a plugin",
        )
        .param(NAME)
        .param(("action", "enable | disable | reload", "reload"))
        .responses(&[
            (200, "done: the plugin's status"),
            (400, "invalid name"),
            (401, "no token"),
            (404, "no such plugin file or action"),
        ]),
        op(
            "get",
            "/api/decisions",
            "the latest decision per plugin, kind and subject",
        )
        .query("plugin", "string", "only this plugin's"),
        op(
            "get",
            "/api/record",
            "record for `seconds` exactly what the host hands its plugins (sampling ticks with their series, event batches) and answer with the recording: JSON lines (application/x-ndjson), format sonde-recording version 2 (docs/plugins.md), which `sonde plugin test FILE.wasm --events RECORDING` replays",
        )
        .query("seconds", "integer", "how long to record, 1..=600 (required)")
        .query(
            "max_bytes",
            "integer",
            "the largest recording, 4096..=268435456 (default 67108864); a recording that passes it is dropped",
        )
        .responses(&[
            (200, "the recording, after `seconds` or once stopped (DELETE /api/record)"),
            (400, "a bad or missing parameter"),
            (409, "a recording is already running (one at a time)"),
            (413, "the recording passed max_bytes before `seconds` were over; nothing is returned"),
        ]),
        op(
            "delete",
            "/api/record",
            "end the running recording now: its GET answers with what it holds (`sonde record` sends this on Ctrl-C)",
        )
        .responses(&[
            (200, "stopped: {\"stopped\": true}"),
            (401, "no token"),
            (404, "no recording is running"),
        ]),
        op(
            "get",
            "/api/tables",
            "the event tables running plugins declared: name, description, columns (name, type, default), declared_by",
        ),
        op(
            "get",
            "/api/cluster/nodes",
            "a master's nodes: state (up / lost), last seen, version, plugins, health, clock skew, duplicate names",
        )
        .responses(&[
            (200, "{role, nodes: [...], stats: {nodes, up, lost, nodes_refused}}"),
            (404, "this sonde is not a master"),
        ]),
        op(
            "get",
            "/api/jobs",
            "every job reported to this sonde (or, on a master, to any of its agents): kinds, nodes, ranks, first and last report",
        ),
        op(
            "get",
            "/api/jobs/{job}",
            "one job: its nodes, ranks, and per batch index every rank's phases with the slowest rank",
        )
        .param(("job", "job name (origin.job / sonde.job)", "train-1"))
        .query("batches", "integer", "the last N batch indices, 1..=50000 (default 200)")
        .responses(&[
            (200, "{job, kinds, nodes, ranks, steps: [{batch, ranks: [{rank, start_ns, end_ns, total_s, phases, span}]}], findings}"),
            (400, "a bad parameter"),
            (404, "no such job"),
        ]),
        op(
            "post",
            "/api/jobs/{job}/end",
            "ends a job this sonde knows (a scheduler's epilog): it reads as ended, not failed, is kept so across restarts, and an agent passes the end on to its master",
        )
        .param(("job", "job name (origin.job / sonde.job)", "train-1"))
        .body("application/json", "optional: {reason?: string, attributes?: {key: string}}")
        .responses(&[
            (200, "the job's summary, state \"ended\""),
            (400, "a bad body"),
            (401, "no token"),
            (404, "no such job"),
            (503, "the ingest queue is full"),
        ]),
        selector(op(
            "get",
            "/api/series",
            "series in the live store (the last hour of every metric plugins emit); with storage.query set and `from` older than the live store, also the series only the engine holds in [from, to] (matched by node, job and name; they get ids like any other series)",
        ))
        .query(
            "from",
            "integer",
            "ms since the Unix epoch: also list what the engine (storage.query) holds from here",
        )
        .query("to", "integer", "end of that range, ms since the Unix epoch (default now)")
        .responses(&[
            (
                200,
                "{series: [{id, scope, plugin, name, unit, kind, rate, attributes, last_ms}], store, engine: null | {url, series_only_there}}",
            ),
            (400, "a bad parameter"),
            (502, "storage.query: the engine failed or answered something else than its API's JSON: {error (naming the engine's URL), engine}"),
            (504, "storage.query: the engine did not answer within storage.query.timeout_ms: {error, engine}"),
        ]),
        selector(op(
            "get",
            "/api/series/data",
            "history of series, downsampled to min/max/mean per bucket; a range older than the live store is read from the engine (storage.query) or else the embedded history, in the same shape",
        ))
        .query(
            "from",
            "integer",
            "start, ms since the Unix epoch (default to - window_s)",
        )
        .query("to", "integer", "end, ms since the Unix epoch (default now)")
        .query(
            "window_s",
            "integer",
            "window when from is absent, 1..=3600 (default 300)",
        )
        .query(
            "max_points",
            "integer",
            "most buckets per series, 1..=10000 (default 1000)",
        )
        .responses(&[
            (200, "{from, to, bucket_ms, data: [{id, t, min, max, mean}]}; bucket_ms is the width used (an engine read may widen it to stay within 11 000 points per series)"),
            (400, "a bad parameter, or more than 256 series for one engine read"),
            (502, "storage.query: the engine failed or answered something else than its API's JSON: {error (naming the engine's URL), engine}"),
            (504, "storage.query: the engine did not answer within storage.query.timeout_ms: {error, engine}"),
        ]),
        selector(op(
            "get",
            "/api/stream",
            "live metrics and plugin decisions as server-sent events",
        ))
        .query("window_s", "integer", "the window shown, 1..=3600 (default 300)")
        .query(
            "max_points",
            "integer",
            "buckets per series over the window (default 1000)",
        )
        .query(
            "interval_ms",
            "integer",
            "time between increments, 100..=60000 (default 1000)",
        )
        .responses(&[
            (
                200,
                "text/event-stream: one `snapshot` event, then `append` events with only new buckets",
            ),
            (400, "a bad parameter"),
        ]),
    ]
}

/// The shape of every error body (`api/errors.rs`).
fn error_schema() -> Value {
    let key_reason = json!({
        "key": {"type": "string", "description": "the parameter, field or setting at fault, e.g. origin.job, window_s, ingest.max_body_bytes"},
        "reason": {"type": "string", "description": "what is wrong with it, e.g. the limit it is over"},
    });
    let mut props = json!({"error": {"type": "string", "description": "what went wrong, for a person to read"}});
    props
        .as_object_mut()
        .unwrap()
        .extend(key_reason.as_object().unwrap().clone());
    props["errors"] = json!({
        "type": "array",
        "description": "configuration changes only: every key at fault",
        "items": {"type": "object", "required": ["key", "reason"], "properties": key_reason},
    });
    json!({"type": "object", "required": ["error"], "properties": props})
}

/// The whole document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for o in operations() {
        let mut params: Vec<Value> = o
            .params
            .iter()
            .map(|(n, d, ex)| json!({"name": n, "in": "path", "required": true, "description": d, "schema": {"type": "string"}, "example": ex}))
            .collect();
        params.extend(o.query.iter().map(
            |(n, t, d)| json!({"name": n, "in": "query", "required": false, "description": d, "schema": {"type": t}}),
        ));
        let mut responses = Map::new();
        for (code, d) in &o.responses {
            let mut r = json!({"description": d});
            if *code >= 400 {
                r["content"] = json!({"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}});
            }
            responses.insert(code.to_string(), r);
        }
        let mut v = json!({"summary": o.summary, "responses": responses});
        if !params.is_empty() {
            v["parameters"] = params.into();
        }
        if let Some((ct, d)) = o.body {
            v["requestBody"] = json!({"description": d, "content": {ct: {}}});
        }
        if o.changes_state {
            v["security"] = json!([{"bearer": []}]);
        }
        let entry = paths.entry(o.path.to_string()).or_insert_with(|| json!({}));
        entry[o.method] = v;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "sonde",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of the sonde host. Binds to loopback by default; when api.token is set \
                (required beyond loopback) every request but GET/HEAD needs Authorization: Bearer <token> \
                and is refused with 401 without it. Every error, including a body over its limit (413), an \
                unknown route (404) or method (405) and malformed JSON (400), is JSON in the Error shape; \
                routes a plugin answers are the plugin's own.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": error_schema()},
        },
        "paths": paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (method, path) of every `.route(...)` call in the API's router.
    fn served() -> Vec<(String, String)> {
        // The API's own routes and the JSON ingest merged onto it in run.rs.
        let src = concat!(include_str!("mod.rs"), include_str!("../ingest/json/mod.rs"));
        let mut out = Vec::new();
        for (at, _) in src.match_indices(".route(") {
            let rest = src[at + 7..].trim_start();
            let Some(rest) = rest.strip_prefix('"') else { continue };
            let (path, rest) = rest.split_once('"').unwrap();
            // The handler expression: up to the `)` closing `.route(`.
            let mut depth = 1;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map(|(i, _)| i)
                .unwrap();
            let expr = &rest[..end];
            let path = path.replace("{*rest}", "{rest}").replace("{*path}", "{path}");
            for m in ["get", "post", "put", "patch", "delete", "any"] {
                for (pos, _) in expr.match_indices(&format!("{m}(")) {
                    let before = expr[..pos].chars().last().unwrap_or(' ');
                    if before.is_alphanumeric() || before == '_' || before == ':' {
                        continue;
                    }
                    let methods: &[&str] = if m == "any" {
                        &["get", "post", "put", "delete", "patch"]
                    } else {
                        &[m]
                    };
                    out.extend(methods.iter().map(|mm| (mm.to_string(), path.clone())));
                }
            }
        }
        out
    }

    #[test]
    fn every_error_response_points_at_the_one_error_shape() {
        let doc = document();
        assert_eq!(doc["components"]["schemas"]["Error"]["required"], json!(["error"]));
        let mut errors = 0;
        for ops in doc["paths"].as_object().unwrap().values() {
            for op in ops.as_object().unwrap().values() {
                for (code, r) in op["responses"].as_object().unwrap() {
                    let schema = &r["content"]["application/json"]["schema"]["$ref"];
                    if code.parse::<u16>().unwrap() >= 400 {
                        errors += 1;
                        assert_eq!(schema, "#/components/schemas/Error", "{code}: {r}");
                    }
                }
            }
        }
        assert!(errors > 20, "{errors}");
    }

    #[test]
    fn every_served_route_is_documented() {
        let doc = document();
        let served = served();
        assert!(served.len() >= 20, "{served:?}");
        for (m, p) in &served {
            assert!(
                doc["paths"][p][m].is_object(),
                "{} {p} is served but not in the OpenAPI document",
                m.to_uppercase()
            );
        }
        // And nothing is documented that is not served.
        for (p, ops) in doc["paths"].as_object().unwrap() {
            for m in ops.as_object().unwrap().keys() {
                assert!(
                    served.iter().any(|(sm, sp)| sm == m && sp == p),
                    "{} {p} is documented but not served",
                    m.to_uppercase()
                );
            }
        }
    }
}
