//! The plugin's HTTP routes (`/api/plugins/clockwork/...`):
//!
//! - `GET /summary`: per model goodput, SLO attainment, latency percentiles,
//!   miss causes, time split, cold-start share, mean batch; the logs' state.
//! - `GET /panel?job=`: the dashboard's view (`panel.rs`).
//! - `GET /requests?limit=N`: the latest analysed requests (split, cause).
//! - `GET /estimates`: the estimator per model (predictions at 1380 MHz).
//! - `POST /batch`: INFER5's batching decision for one model's queue on one GPU.
//! - `POST /placement`: load priorities and eviction order per GPU.

use serde::Deserialize;
use serde_json::{Value, json};
use sonde_plugin_sdk::types::{HttpRequest, HttpResponse};

use crate::analysis::{CAUSES, COMPONENTS};
use crate::estimator::DEFAULT_CLOCK;
use crate::infer5::{Demand, LoadTracker, Queued, Slo, decide_batch};
use crate::plugin::Clockwork;
use sonde_plugin_sdk::Host;

const ROUTES: &str =
    "GET /summary, GET /panel?job=, GET /requests?limit=N, GET /estimates, POST /batch, POST /placement";

pub fn handle(p: &mut Clockwork, host: &mut dyn Host, req: &HttpRequest) -> HttpResponse {
    let path = req.path.trim_end_matches('/');
    match (req.method.as_str(), path) {
        ("GET", "/summary") => HttpResponse::json(200, summary(p).to_string()),
        ("GET", "/panel") => crate::panel::panel(p, req.query_param("job").as_deref()),
        ("GET", "/requests") => {
            let limit = match req.query_param("limit").map(|v| v.parse::<usize>()) {
                None => 100,
                Some(Ok(n)) => n,
                Some(Err(_)) => return HttpResponse::error(400, "query `limit` must be an integer >= 0"),
            };
            let rows: Vec<_> = p.analysis.recent.iter().rev().take(limit).collect();
            HttpResponse::json(200, serde_json::to_string(&rows).expect("rows serialize"))
        }
        ("GET", "/estimates") => HttpResponse::json(200, estimates(p).to_string()),
        ("POST", "/batch") => match serde_json::from_slice::<BatchBody>(&req.body) {
            Err(e) => HttpResponse::error(400, &format!("batch body: {e}")),
            Ok(b) => {
                let now = b.now_ns.unwrap_or_else(|| host.now());
                let cfg = p.settings.config();
                let est = p.estimator(b.model_id).clone();
                let d = decide_batch(
                    &cfg,
                    &est,
                    &b.queue,
                    now,
                    b.free_at_ns.unwrap_or(now),
                    b.gpu_clock_mhz.unwrap_or(DEFAULT_CLOCK as u32),
                );
                HttpResponse::json(200, serde_json::to_string(&d).expect("decision serializes"))
            }
        },
        ("POST", "/placement") => match serde_json::from_slice::<PlacementBody>(&req.body) {
            Err(e) => HttpResponse::error(400, &format!("placement body: {e}")),
            Ok(b) => HttpResponse::json(200, placement(p, &b).to_string()),
        },
        (method, "/summary" | "/requests" | "/estimates" | "/batch" | "/placement") => {
            HttpResponse::error(405, &format!("method {method} not allowed on {path}"))
        }
        (method, _) => HttpResponse::error(404, &format!("no route {method} {}; routes: {ROUTES}", req.path)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    model_id: u64,
    now_ns: Option<u64>,
    free_at_ns: Option<u64>,
    gpu_clock_mhz: Option<u32>,
    queue: Vec<Queued>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementGpu {
    gpu_id: u32,
    /// Loaded models, least recently used first.
    #[serde(default)]
    loaded: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementQueue {
    model_id: u64,
    #[serde(default)]
    slo_factors: Vec<f64>,
    /// Requests at the default SLO (in addition to `slo_factors`).
    #[serde(default)]
    count: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementBody {
    gpus: Vec<PlacementGpu>,
    #[serde(default)]
    queued: Vec<PlacementQueue>,
}

fn placement(p: &mut Clockwork, b: &PlacementBody) -> Value {
    let cfg = p.settings.config();
    let ids: Vec<u32> = b.gpus.iter().map(|g| g.gpu_id).collect();
    let mut t = LoadTracker::new(&cfg, &ids);
    for g in &b.gpus {
        for &m in &g.loaded {
            t.set_loaded(g.gpu_id, m);
        }
    }
    for q in &b.queued {
        let est = p.estimator(q.model_id).clone();
        let factors = q.slo_factors.iter().copied().chain((0..q.count).map(|_| 0.0));
        for f in factors {
            let slo = Slo::new(&cfg, 0, f, est.b1_exec_ns, est.weights_estimate_ns);
            t.add_request(&Demand::new(&cfg, q.model_id, &slo, est.b1_exec_ns));
        }
    }
    let out = t.gpu_outstanding();
    let gpus: Vec<Value> = b
        .gpus
        .iter()
        .map(|g| {
            let load = t.model_to_load(g.gpu_id);
            json!({
                "gpu_id": g.gpu_id,
                "outstanding_ns": out[&g.gpu_id],
                "load": load.map(|(m, pr)| json!({"model_id": m, "priority": pr})),
                "evict_order": t.eviction_order(g.gpu_id),
            })
        })
        .collect();
    let models: Vec<Value> = b
        .queued
        .iter()
        .map(|q| {
            let (e, l) = t.outstanding(q.model_id);
            json!({"model_id": q.model_id, "outstanding_exec": e, "outstanding_loadweights": l,
                   "load_priority": t.load_priority(q.model_id, &out)})
        })
        .collect();
    json!({"gpus": gpus, "models": models})
}

fn estimates(p: &Clockwork) -> Value {
    let models: Vec<Value> = p
        .estimators
        .iter()
        .map(|(m, e)| {
            let sizes: Vec<Value> = e
                .batch_sizes()
                .into_iter()
                .map(|b| json!({"batch_size": b, "predicted_ns": e.predict(b, DEFAULT_CLOCK as u32), "measurements": e.measurements(b)}))
                .collect();
            json!({"model_id": m, "b1_exec_ns": e.b1_exec_ns, "weights_estimate_ns": e.weights_estimate_ns, "batch_sizes": sizes})
        })
        .collect();
    json!({"default_clock_mhz": DEFAULT_CLOCK, "models": models})
}

pub fn summary(p: &Clockwork) -> Value {
    let models: Vec<Value> = p
        .analysis
        .totals
        .iter()
        .map(|(m, t)| {
            let (p50, p99, max) = p.analysis.recent_latency(*m);
            let n = t.requests.max(1) as f64;
            let misses: serde_json::Map<String, Value> = CAUSES
                .iter()
                .map(|c| (c.to_string(), json!(t.misses.get(c).copied().unwrap_or(0))))
                .collect();
            let split: serde_json::Map<String, Value> = COMPONENTS
                .iter()
                .enumerate()
                .map(|(i, c)| (c.to_string(), json!(t.split_sum_ns[i] as f64 / n / 1e9)))
                .collect();
            json!({
                "model_id": m,
                "requests": t.requests,
                "success": t.success,
                "in_time": t.good,
                "slo_attainment": if t.requests > 0 { t.good as f64 / t.requests as f64 } else { 0.0 },
                "coldstart_share": if t.success > 0 { t.coldstarts as f64 / t.success as f64 } else { 0.0 },
                "mean_batch": if t.batch_sum > 0 { t.batch_sq_sum as f64 / t.batch_sum as f64 } else { 0.0 },
                "latency_s": {"p50": p50, "p99": p99, "max": max},
                "misses": misses,
                "time_split_mean_s": split,
                "last_window": t.last_window,
            })
        })
        .collect();
    json!({
        "window_s": p.settings.window_s,
        "requests_seen": p.requests_seen,
        "actions_seen": p.actions_seen,
        "invalid_rows": p.invalid_rows,
        "last_invalid": p.last_invalid,
        "pending": p.analysis.pending(),
        "late_rows": p.analysis.late_rows,
        "in_time_derived": p.in_time.derived,
        "logs": [&p.request_log, &p.action_log],
        "models": models,
    })
}
