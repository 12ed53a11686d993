//! api/: the HTTP API and the dashboard, served by axum.
//!
//! Every route is listed in `openapi.rs` (served at `/api/openapi.json`).
//! Read-only endpoints are open; every state-changing request
//! (any method but GET/HEAD) needs `Authorization: Bearer <api.token>` when a
//! token is configured, and the config refuses to bind beyond loopback
//! without one. Plugin routes (`/api/plugins/<name>/...`) are answered by the
//! plugin itself through its `on-request` hook.
//!
//! - `mod.rs`: the router, and the read endpoints of status, plugins and decisions.
//! - `cluster.rs`: `/api/cluster/nodes` and `/api/jobs`.
//! - `live/`: the live store (`mod.rs` the series and their limits, `points.rs`
//!   one series' raw points, its coarser buckets, and downsampling).
//! - `history.rs`: the live store and the history under one series id;
//!   `engine.rs` the same answered by the engine behind `storage.query`.
//! - `stream.rs`: series, their points and the SSE stream; `cores.rs` the
//!   heavy reads split over the cores.
//! - `config_api.rs`: live config changes; `admin.rs` plugin management and
//!   uploads; `record.rs` `GET /api/record`.
//! - `openapi.rs`: the OpenAPI document; `errors.rs` the one error shape and
//!   the layer that puts axum's own rejections into it.
//! - `prometheus.rs`: `GET /metrics`, the newest reading of every live series
//!   for a Prometheus scraper.
//! - `web.rs`: the embedded dashboard; `config.rs` `[api]`.

pub mod admin;
pub mod cluster;
pub mod config;
pub mod config_api;
pub mod cores;
pub mod engine;
pub mod errors;
pub mod history;
pub mod live;
pub mod openapi;
pub mod prometheus;
pub mod record;
pub mod stream;
pub mod web;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRef, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::json;

use crate::config::Config;
use crate::pipeline::PipelineHandle;
use crate::plugin::PluginManager;
use crate::plugin::bindings::types;
use crate::sample::driver::PeriodStats;

/// Largest request body a plugin route accepts.
pub const MAX_BODY: usize = 4 << 20;

/// The sampler's period statistics, series count, GPU status and scheduling,
/// or None once it has stopped.
pub type SamplerInfo = Arc<dyn Fn() -> Option<(PeriodStats, usize, String, String)> + Send + Sync>;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Mutex<Config>>,
    pub plugins: Arc<PluginManager>,
    pub pipeline: PipelineHandle,
    pub sampler: SamplerInfo,
    pub ready: Arc<AtomicBool>,
    pub started: std::time::Instant,
    /// Roles, nodes and jobs (`crate::cluster`).
    pub cluster: Arc<crate::cluster::Cluster>,
    /// History beyond the live hour (`crate::storage`).
    pub storage: Arc<crate::storage::Storage>,
    /// What jobs report: its counters appear in `/api/status`.
    pub ingest: Arc<crate::ingest::IngestHub>,
}

/// What the handlers share: the host's state plus the live store. Handlers
/// that need only the host's state take `State<AppState>`.
#[derive(Clone)]
pub struct Api {
    pub app: AppState,
    pub live: Arc<live::LiveStore>,
}

impl FromRef<Api> for AppState {
    fn from_ref(api: &Api) -> AppState {
        api.app.clone()
    }
}

/// The whole API and the dashboard. Starts the live store (fed from the
/// pipeline), so call it once, inside the runtime. The result composes with
/// other routers (`.merge(...)`).
pub fn router(state: AppState) -> Router {
    let limits = {
        let cfg = state.config.lock();
        let mut limits = cfg.api.live_limits(cfg.cluster.role == crate::cluster::Role::Master);
        // With a history, a series that ages out of the live store stays
        // listed, so its past (a job that ended an hour ago) can be read.
        if state.storage.history.is_some() {
            limits.max_dormant = limits.max_series;
        }
        limits
    };
    let live = live::LiveStore::spawn(&state.pipeline, limits);
    if let Some(h) = &state.storage.history {
        let n = history::declare_kept(h, &live);
        if n > 0 {
            tracing::info!("{n} series kept in the history from before this start");
        }
    }
    let api = Api {
        live,
        app: state.clone(),
    };
    Router::new()
        .route("/", get(web::index))
        .route("/assets/{*path}", get(web::asset))
        .route("/api/openapi.json", get(|| async { Json(openapi::document()) }))
        .route("/api/health", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/metrics", get(prometheus::metrics))
        .route("/api/ready", get(ready))
        .route("/api/status", get(status))
        .route(
            "/api/config",
            get(config_api::get_config)
                .put(config_api::put_config)
                .patch(config_api::patch_config),
        )
        .route("/api/plugins", get(plugins))
        .route("/api/plugins/{name}", get(plugin))
        .route("/api/plugins/{name}/{*rest}", any(plugin_route))
        .route(
            "/api/admin/plugins/{name}",
            put(admin::upload)
                .delete(admin::remove)
                .layer(DefaultBodyLimit::max(admin::MAX_UPLOAD)),
        )
        .route("/api/admin/plugins/{name}/{action}", post(admin::action))
        .route("/api/decisions", get(decisions))
        .route("/api/record", get(record::record).delete(record::stop))
        .route("/api/tables", get(tables))
        .route("/api/cluster/nodes", get(cluster::nodes))
        .route("/api/jobs", get(cluster::jobs))
        .route("/api/jobs/{job}", get(cluster::job))
        .route("/api/jobs/{job}/end", post(cluster::end))
        .route("/api/series", get(stream::list))
        .route("/api/series/data", get(stream::data))
        .route("/api/stream", get(stream::stream))
        .fallback(|| async { (StatusCode::NOT_FOUND, Json(json!({"error": "no such endpoint"}))) })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(json!({"error": "this endpoint does not take that method; see /api/openapi.json"})),
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(state, require_token))
        .with_state(api)
}

/// 400 with the offending parameter and why.
pub fn bad_request(key: &str, reason: impl Into<String>) -> Response {
    let reason = reason.into();
    errors::error(
        StatusCode::BAD_REQUEST,
        format!("{key}: {reason}"),
        Some(key),
        Some(&reason),
    )
}

/// How much of a refused request's body is read, and for how long, so the
/// refusal reaches the client on HTTP/2 too; past either, the stream is reset.
const REFUSED_BODY_LIMIT: usize = 16 << 20;
const REFUSED_BODY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let token = st.config.lock().api.token();
    if let (true, Some(token)) = (changes_state, token) {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(token.as_str()) {
            // Read what the client is still sending (bounded) before answering:
            // an HTTP/2 stream answered while its body is arriving is reset, and
            // the client then sees a stream error instead of this 401.
            let _ = tokio::time::timeout(
                REFUSED_BODY_WAIT,
                axum::body::to_bytes(req.into_body(), REFUSED_BODY_LIMIT),
            )
            .await;
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                Json(json!({"error": "this request changes state: send Authorization: Bearer <api.token>"})),
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn ready(State(st): State<AppState>) -> Response {
    if st.ready.load(Ordering::Relaxed) {
        Json(json!({"ready": true})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false, "error": "not ready", "reason": "still starting (plugins, receivers)"})),
        )
            .into_response()
    }
}

async fn status(State(st): State<AppState>) -> Json<serde_json::Value> {
    let sampler = (st.sampler)().map(|(s, series, gpu, scheduling)| {
        json!({
            "period": {
                "ticks": s.ticks, "late_ticks": s.late_ticks, "skipped": s.skipped,
                "error_p50_us": s.error_p50_us, "error_p99_us": s.error_p99_us, "error_max_us": s.error_max_us,
                "sample_cost_p50_us": s.sample_cost_p50_us, "sample_cost_p99_us": s.sample_cost_p99_us,
                "cpu_per_tick_us": s.cpu_per_tick_us,
            },
            "series": series,
            "gpu": gpu,
            "scheduling": scheduling,
        })
    });
    let cfg = st.config.lock().clone();
    let plugins: Vec<_> = st
        .plugins
        .statuses()
        .into_iter()
        .map(|p| json!({"name": p.name, "state": p.state, "reason": p.reason, "tables": p.tables, "reads": p.reads}))
        .collect();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "contract": crate::plugin::engine::CONTRACT_VERSION,
        "uptime_s": st.started.elapsed().as_secs_f64(),
        "sampling_period_ms": st.plugins.sample_plan().period_ms.load(Ordering::Relaxed),
        "sampler": sampler,
        "export": {
            "endpoint": cfg.export.endpoint,
            "protocol": cfg.export.protocol,
            "stats": st.pipeline.stats(),
        },
        "plugins": plugins,
        "recording": st.plugins.recorder().running(),
        "plugin_state": st.plugins.state().backlog(),
        "cluster": {
            "role": st.cluster.role,
            "node": st.cluster.node,
            "master": cfg.cluster.master,
            "nodes": st.cluster.nodes.as_ref().map(|n| n.stats()),
            "jobs": st.cluster.jobs.stats(),
            "rows_forwarded": st.cluster.forwarder.as_ref().map(|f| f.rows_forwarded.load(Ordering::Relaxed)),
        },
        "storage": st.storage.stats(),
        "ingest": st.ingest.stats(),
        "plugins_dir": st.plugins.dir().display().to_string(),
        "sinks_dir": cfg.sinks.dir.display().to_string(),
    }))
}

async fn plugins(State(st): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({"plugins": st.plugins.statuses()}))
}

async fn plugin(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    match st.plugins.status(&name) {
        Some(s) => Json(s).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no plugin named {name:?}")})),
        )
            .into_response(),
    }
}

#[derive(serde::Deserialize)]
struct DecisionQuery {
    plugin: Option<String>,
    /// Only this job's decisions (its findings first).
    job: Option<String>,
}

async fn decisions(State(st): State<AppState>, Query(q): Query<DecisionQuery>) -> Json<serde_json::Value> {
    let board = st.plugins.decisions();
    let list = match &q.job {
        Some(job) => board
            .of_job(job)
            .into_iter()
            .filter(|e| q.plugin.as_deref().is_none_or(|p| e.plugin == p))
            .collect(),
        None => board.list(q.plugin.as_deref()),
    };
    Json(json!({"decisions": list}))
}

/// The event tables running plugins declared: what `POST /api/ingest` and
/// OTLP take rows of, with their columns.
async fn tables(State(st): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({"tables": st.plugins.tables().list()}))
}

async fn plugin_route(
    State(st): State<AppState>,
    Path((name, rest)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Bytes,
) -> Response {
    let req = types::HttpRequest {
        method: method.as_str().to_string(),
        path: format!("/{rest}"),
        query: uri.query().unwrap_or("").to_string(),
        headers: headers
            .iter()
            .filter(|(k, _)| *k != header::AUTHORIZATION)
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_string(), v.to_string())))
            .collect(),
        body: body.to_vec(),
    };
    let resp = st.plugins.request(&name, req).await;
    let mut builder = Response::builder().status(StatusCode::from_u16(resp.status).unwrap_or(StatusCode::BAD_GATEWAY));
    for (k, v) in resp.headers {
        if let (Ok(k), Ok(v)) = (header::HeaderName::try_from(k), header::HeaderValue::try_from(v)) {
            builder = builder.header(k, v);
        }
    }
    builder
        .body(Body::from(resp.body))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
