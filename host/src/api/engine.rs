//! `/api/series` and `/api/series/data` answered by the engine behind
//! `storage.query` for what the live store does not cover.
//!
//! ```text
//!  /api/series/data, from < live.covers_from_ms()
//!     │ ids → SeriesMeta (live store) → SeriesRef (name, emitted unit, kind, attributes)
//!     ▼
//!  [from, the bucket holding live_from]  EngineReader::points ─► Buckets (f32, the live shape)
//!  (that bucket, to]                     the live store, in the engine's bucket width
//!
//!  /api/series?from=…, from < live.covers_from_ms()
//!     │ node/job/name → EngineReader::list ─► series only the engine holds
//!     ▼
//!  declared in the live store (an id that stays, like the history's series)
//! ```
//! Any engine failure answers 502 (504 for a timeout) with `error` naming
//! the engine's URL and `engine` holding it; the reader counts it for
//! `/api/status`. Nothing here touches the live window's answers.
//!
//! Limits: at most [`MAX_SERIES_PER_READ`] series per data request (the
//! engine is asked once per metric name, in turn); series only the engine lists
//! take live-store places like any other (they age out after an idle hour).

// Handlers return an axum `Response` as their error: the idiom, and never on a hot path.
#![allow(clippy::result_large_err)]

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::history::{attribute_texts, emitted_unit};
use super::live::{Buckets, LiveStore, SeriesMeta};
use crate::export::remote_write::QueryError;
use crate::model::{AttrValue, MetricKind, MetricSeries};
use crate::storage::engine_plan;
use crate::storage::engine_read::{EngineReader, ListFilter, SeriesRef};

/// Most series one `/api/series/data` request may read from the engine.
pub const MAX_SERIES_PER_READ: usize = 256;
/// The scope series only the engine lists are kept under (the engine has no scope).
pub const ENGINE_SCOPE: &str = "sonde.engine";

fn kind_of(m: &SeriesMeta) -> MetricKind {
    match m.kind {
        "counter" => MetricKind::Counter,
        "updowncounter" => MetricKind::UpDownCounter,
        _ => MetricKind::Gauge,
    }
}

/// The engine's failure as the API's answer.
pub fn failure(reader: &EngineReader, e: &QueryError) -> Response {
    let status = match e {
        QueryError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    let msg = format!("storage.query engine {}: {e}", reader.url());
    (status, Json(json!({"error": msg, "engine": reader.url()}))).into_response()
}

/// Buckets of `metas` over `[from, to]`: from the engine up to the bucket
/// that holds the live store's first moment (`live_from`), from the live store
/// after it, in one width (the engine's, which may be wider than asked).
/// Returns that width. The engine serves the boundary bucket because the live
/// store holds only its later part; the live store serves the rest because an
/// engine shows the newest seconds late (remote-write's flush interval,
/// VictoriaMetrics' 30 s `search.latencyOffset`).
pub async fn data(
    reader: &EngineReader,
    live: &LiveStore,
    metas: &[SeriesMeta],
    (from, to): (u64, u64),
    live_from: u64,
    bucket_ms: u64,
) -> Result<(u64, Vec<Buckets>), Response> {
    if metas.len() > MAX_SERIES_PER_READ {
        return Err(super::bad_request(
            "ids",
            format!(
                "{} series match; the engine is read for at most {MAX_SERIES_PER_READ} at once (narrow with ids, node, job or name)",
                metas.len()
            ),
        ));
    }
    let attrs: Vec<Vec<(String, String)>> = metas.iter().map(|m| attribute_texts(m).collect()).collect();
    let refs: Vec<SeriesRef> = metas
        .iter()
        .zip(&attrs)
        .map(|(m, a)| SeriesRef {
            name: &m.name,
            unit: emitted_unit(m),
            kind: kind_of(m),
            attributes: a,
        })
        .collect();
    let plan = engine_plan::plan(from, to, bucket_ms);
    let w = plan.bucket_ms();
    // The last bucket the engine answers: the one `live_from` falls in.
    let split = live_from / w * w;
    let engine_to = to.min(split + w - 1);
    let (w, old) = reader
        .points(&refs, from, engine_to, bucket_ms)
        .await
        .map_err(|e| failure(reader, &e))?;
    let mut out = Vec::with_capacity(metas.len());
    for (m, b) in metas.iter().zip(old) {
        let mut buckets = Buckets {
            id: m.id,
            t: b.t,
            min: b.min.iter().map(|v| *v as f32).collect(),
            max: b.max.iter().map(|v| *v as f32).collect(),
            mean: b.mean.iter().map(|v| *v as f32).collect(),
        };
        if to > engine_to
            && let Some(recent) = live.query(&[m.id], engine_to + 1, to, w).pop()
        {
            buckets.t.extend(recent.t);
            buckets.min.extend(recent.min);
            buckets.max.extend(recent.max);
            buckets.mean.extend(recent.mean);
        }
        out.push(buckets);
    }
    Ok((w, out))
}

/// Series the engine holds for `filter` over `[from, to]` that the live store
/// does not list under the same labels, declared there so they have ids.
/// Returns their listing.
pub async fn list_more(
    reader: &EngineReader,
    live: &LiveStore,
    filter: &ListFilter<'_>,
    from: u64,
    to: u64,
) -> Result<Vec<SeriesMeta>, Response> {
    let found = reader.list(filter, from, to).await.map_err(|e| failure(reader, &e))?;
    let known = live.list();
    let labels_of = |m: &SeriesMeta| {
        let attrs: Vec<(String, String)> = attribute_texts(m).collect();
        reader.labels_of(&SeriesRef {
            name: &m.name,
            unit: emitted_unit(m),
            kind: kind_of(m),
            attributes: &attrs,
        })
    };
    let taken: std::collections::HashSet<Vec<(String, String)>> = known.iter().filter_map(labels_of).collect();
    let mut ids = Vec::new();
    for f in found {
        let series = MetricSeries {
            name: f.name,
            description: String::new(),
            unit: String::new(),
            kind: f.kind,
            attributes: f.attributes.into_iter().map(|(k, v)| (k, AttrValue::Str(v))).collect(),
            start_time_ns: 0,
        };
        let attrs: Vec<(String, String)> = series.attributes.iter().map(|(k, v)| (k.clone(), v.text())).collect();
        let labels = reader.labels_of(&SeriesRef {
            name: &series.name,
            unit: "",
            kind: series.kind,
            attributes: &attrs,
        });
        if labels.is_some_and(|l| taken.contains(&l)) {
            continue;
        }
        if let Some(id) = live.declare(ENGINE_SCOPE, &series) {
            ids.push(id);
        }
    }
    Ok(live.list().into_iter().filter(|m| ids.contains(&m.id)).collect())
}
