//! Series history and the live stream, served from the [`LiveStore`].
//!
//! - `GET /api/series`: every series kept (id, scope, plugin, name, unit, attributes).
//! - `GET /api/series/data`: history of some series, downsampled to at most `max_points` buckets.
//!   A range older than the live store reads the engine (`storage.query`, see
//!   `engine.rs`) or else the embedded history (`history.rs`).
//! - `GET /api/series?from=…`: with `storage.query` set, also series only the engine holds.
//! - `GET /api/stream`: server-sent events. One `snapshot` (the window, downsampled;
//!   what is older than the live store, as on a master that keeps five minutes live,
//!   from the embedded history; with only `storage.query`, the live part alone),
//!   then every `interval_ms` an `append` with only what is new: the buckets from the last
//!   one sent onwards (the first of them replaces the client's last bucket when their
//!   times are equal), metadata of series that appeared, and new plugin decisions.

// Handlers return an axum `Response` as their error: the idiom, and never on a hot path.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::live::{Buckets, LiveStore, SeriesMeta, bucket_width};
use super::{Api, bad_request};
use crate::model::now_ns;
use crate::plugin::DecisionBoard;
use crate::storage::engine_read::ListFilter;

/// Which series a request is about; every given filter must match.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Comma-separated series ids.
    pub ids: Option<String>,
    /// Series emitted by this plugin.
    pub plugin: Option<String>,
    /// Series of this instrumentation scope (e.g. `sonde.host`).
    pub scope: Option<String>,
    /// Series whose metric name starts with this.
    pub name: Option<String>,
    /// Series from this node (`host.name`); series without one are this sonde's own.
    pub node: Option<String>,
    /// Series of this job (`sonde.job`).
    pub job: Option<String>,
}

struct Filter {
    ids: Option<Vec<u32>>,
    sel: Selector,
    /// This sonde's node name, for series that carry none.
    local_node: String,
}

fn attr_is(m: &SeriesMeta, key: &str, want: &str) -> Option<bool> {
    m.attributes.get(key).map(|v| v.as_str() == Some(want))
}

impl Filter {
    fn new(sel: Selector, local_node: &str) -> Result<Self, String> {
        let ids = match &sel.ids {
            Some(s) if !s.trim().is_empty() => Some(
                s.split(',')
                    .map(|x| {
                        x.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("ids: {x:?} is not a series id"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            _ => None,
        };
        Ok(Filter {
            ids,
            sel,
            local_node: local_node.to_string(),
        })
    }

    fn matches(&self, m: &SeriesMeta) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.contains(&m.id))
            && self
                .sel
                .plugin
                .as_ref()
                .is_none_or(|p| m.plugin.as_deref() == Some(p.as_str()))
            && self.sel.scope.as_ref().is_none_or(|s| &m.scope == s)
            && self.sel.name.as_ref().is_none_or(|n| m.name.starts_with(n.as_str()))
            && self
                .sel
                .node
                .as_ref()
                .is_none_or(|n| attr_is(m, "host.name", n).unwrap_or(*n == self.local_node))
            && self
                .sel
                .job
                .as_ref()
                .is_none_or(|j| attr_is(m, "sonde.job", j).unwrap_or(false))
    }

    /// For a series only the engine holds: its name is the stored one, so the
    /// name prefix is compared translated; node and job as for any series.
    fn matches_engine(&self, m: &SeriesMeta) -> bool {
        use crate::export::remote_write::prometheus_metric_name;
        let name_ok = self.sel.name.as_ref().is_none_or(|n| {
            m.name
                .starts_with(&prometheus_metric_name(n, "", crate::model::MetricKind::UpDownCounter))
        });
        let rest = Filter {
            ids: self.ids.clone(),
            sel: Selector {
                name: None,
                ..self.sel.clone()
            },
            local_node: self.local_node.clone(),
        };
        name_ok && rest.matches(m)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(flatten)]
    sel: Selector,
    /// With `storage.query` set and `from` older than the live store's
    /// coverage, series the engine holds in `[from, to]` are listed too.
    /// ms since the Unix epoch.
    from: Option<u64>,
    /// End of that range (default now).
    to: Option<u64>,
}

pub async fn list(State(api): State<Api>, q: Result<Query<ListQuery>, QueryRejection>) -> Response {
    let q = match parse(q) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let f = match Filter::new(q.sel, &api.app.cluster.node) {
        Ok(f) => f,
        Err(e) => return bad_request("ids", e),
    };
    let mut engine = serde_json::Value::Null;
    if let (Some(reader), Some(from)) = (&api.app.storage.query, q.from)
        && from < api.live.covers_from_ms()
        // The engine keeps no ids, plugins or scopes: those filters are the live store's alone.
        && f.ids.is_none()
        && f.sel.plugin.is_none()
        && f.sel.scope.is_none()
    {
        let to = q.to.unwrap_or(now_ns() / 1_000_000);
        let lf = ListFilter {
            node: f.sel.node.as_deref(),
            job: f.sel.job.as_deref(),
            name_prefix: f.sel.name.as_deref(),
        };
        match super::engine::list_more(reader, &api.live, &lf, from, to).await {
            Ok(more) => engine = json!({"url": reader.url(), "series_only_there": more.len()}),
            Err(r) => return r,
        }
    }
    let engine_only = |m: &SeriesMeta| m.scope == super::engine::ENGINE_SCOPE;
    let series: Vec<_> = api
        .live
        .list()
        .into_iter()
        // Series only the engine holds match by what the engine was asked.
        .filter(|m| f.matches(m) || (engine_only(m) && f.matches_engine(m)))
        .map(|m| {
            let last = api.live.last_ms(m.id);
            let mut v = serde_json::to_value(m).unwrap_or_default();
            v["last_ms"] = json!(last);
            v
        })
        .collect();
    axum::Json(json!({"series": series, "store": api.live.stats(), "engine": engine})).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataQuery {
    #[serde(flatten)]
    sel: Selector,
    /// Start, ms since the Unix epoch (default: `to - window_s`).
    from: Option<u64>,
    /// End, ms since the Unix epoch (default: now).
    to: Option<u64>,
    /// Window length when `from` is not given (default 300).
    window_s: Option<u64>,
    /// Most buckets per series (default 1000, at most 10 000).
    max_points: Option<usize>,
}

/// The query string, or 400 naming what is wrong with it.
fn parse<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, Response> {
    q.map(|Query(q)| q).map_err(|e| bad_request("query", e.body_text()))
}

/// (most buckets per series, window in ms), checked.
fn check_window(max_points: Option<usize>, window_s: Option<u64>) -> Result<(usize, u64), Response> {
    let n = max_points.unwrap_or(1000);
    if !(1..=super::live::MAX_BUCKETS).contains(&n) {
        let reason = format!("{n} is out of range 1..={}", super::live::MAX_BUCKETS);
        return Err(bad_request("max_points", reason));
    }
    match window_s.unwrap_or(300) {
        w @ 1..=3600 => Ok((n, w * 1000)),
        w => Err(bad_request("window_s", format!("{w} is out of range 1..=3600"))),
    }
}

pub async fn data(State(api): State<Api>, q: Result<Query<DataQuery>, QueryRejection>) -> Response {
    match data_of(&api, q).await {
        Ok(r) | Err(r) => r,
    }
}

async fn data_of(api: &Api, q: Result<Query<DataQuery>, QueryRejection>) -> Result<Response, Response> {
    let q = parse(q)?;
    let (max_points, window) = check_window(q.max_points, q.window_s)?;
    let to = q.to.unwrap_or(now_ns() / 1_000_000);
    let from = q.from.unwrap_or(to.saturating_sub(window));
    if from > to {
        return Err(bad_request("from", "must not be after `to`"));
    }
    let f = Filter::new(q.sel, &api.app.cluster.node).map_err(|e| bad_request("ids", e))?;
    let metas: Vec<SeriesMeta> = api.live.list().into_iter().filter(|m| f.matches(m)).collect();
    let mut w = bucket_width(from, to, max_points);
    let older = from < api.live.covers_from_ms();
    let data = match (&api.app.storage.query, &api.app.storage.history) {
        // Older than what the live store holds: the engine serves it when
        // `storage.query` is set, else the embedded history.
        (Some(reader), _) if older => {
            let live_from = api.live.covers_from_ms();
            let (width, data) = super::engine::data(reader, &api.live, &metas, (from, to), live_from, w).await?;
            w = width;
            data
        }
        (None, Some(h)) if older => {
            let (h, metas) = (h.clone(), metas.clone());
            tokio::task::spawn_blocking(move || super::history::query_many(&h, &metas, from, to, w))
                .await
                .unwrap_or_default()
        }
        _ => {
            let ids: Vec<u32> = metas.iter().map(|m| m.id).collect();
            api.live.query(&ids, from, to, w)
        }
    };
    // An hour of hundreds of series is megabytes of JSON: each series encoded
    // on some core, then joined once into a body of the exact size.
    let body = tokio::task::spawn_blocking(move || data_body(from, to, w, &data))
        .await
        .unwrap_or_default();
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// `{"from":…,"to":…,"bucket_ms":…,"data":[<series>,…]}`. Written by hand
/// around serde's per-series text: the body is copied once, where
/// serializing a list of raw values would copy it through growing buffers
/// several times (a tenth of an hour-long query's time).
fn data_body(from: u64, to: u64, bucket_ms: u64, data: &[Buckets]) -> Vec<u8> {
    let buckets: usize = data.iter().map(|b| b.t.len()).sum();
    // A thread per 20 000 buckets at least: below that it costs more than it saves.
    let parts = super::cores::map_on_cores(data, buckets / 20_000, |b| {
        // About 30 bytes a bucket: a 13-digit time and three short numbers.
        let mut out = Vec::with_capacity(64 + b.t.len() * 32);
        serde_json::to_writer(&mut out, b).ok().map(|()| out)
    });
    let head = format!("{{\"from\":{from},\"to\":{to},\"bucket_ms\":{bucket_ms},\"data\":[");
    let mut body = Vec::with_capacity(head.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
    body.extend_from_slice(head.as_bytes());
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(p);
    }
    body.extend_from_slice(b"]}");
    body
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    #[serde(flatten)]
    sel: Selector,
    /// The window the client shows (default 300 s, at most 3600).
    window_s: Option<u64>,
    /// Most buckets per series over the window (default 1000).
    max_points: Option<usize>,
    /// How often increments are sent (default 1000 ms, 100..=60000).
    interval_ms: Option<u64>,
}

pub async fn stream(State(api): State<Api>, q: Result<Query<StreamQuery>, QueryRejection>) -> Response {
    stream_of(&api, q).unwrap_or_else(|r| r)
}

fn stream_of(api: &Api, q: Result<Query<StreamQuery>, QueryRejection>) -> Result<Response, Response> {
    let q = parse(q)?;
    let (max_points, window) = check_window(q.max_points, q.window_s)?;
    let interval = q.interval_ms.unwrap_or(1000);
    if !(100..=60_000).contains(&interval) {
        let reason = format!("{interval} is out of range 100..=60000");
        return Err(bad_request("interval_ms", reason));
    }
    let plugin = q.sel.plugin.clone();
    let filter = Filter::new(q.sel, &api.app.cluster.node).map_err(|e| bad_request("ids", e))?;
    let state = Feed {
        live: api.live.clone(),
        history: api.app.storage.history.clone(),
        decisions: api.app.plugins.decisions().clone(),
        plugin,
        filter,
        window,
        bucket: bucket_width(0, window, max_points),
        cursors: HashMap::new(),
        last_decision_ns: 0,
        tick: None,
        interval: Duration::from_millis(interval),
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        let ev = st.next().await;
        Some((Ok::<_, Infallible>(ev), st))
    });
    Ok((
        StatusCode::OK,
        [("x-accel-buffering", "no")],
        Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))),
    )
        .into_response())
}

/// One event's data.
#[derive(serde::Serialize)]
struct Frame {
    now_ms: u64,
    window_ms: u64,
    bucket_ms: u64,
    /// Series not announced before (all of them in the snapshot).
    series: Vec<SeriesMeta>,
    data: Vec<Buckets>,
    /// Decisions made since the last event.
    decisions: Vec<crate::plugin::DecisionEntry>,
}

/// One client's position in the stream.
struct Feed {
    live: Arc<LiveStore>,
    /// The embedded history: the snapshot's part older than the live store
    /// (a master keeps five minutes live) comes from it.
    history: Option<Arc<crate::history::History>>,
    decisions: DecisionBoard,
    plugin: Option<String>,
    filter: Filter,
    window: u64,
    bucket: u64,
    /// Per series: (start of the last bucket sent, time of the newest point sent).
    cursors: HashMap<u32, (u64, u64)>,
    last_decision_ns: u64,
    tick: Option<tokio::time::Interval>,
    interval: Duration,
}

impl Feed {
    async fn next(&mut self) -> Event {
        let first = self.tick.is_none();
        match &mut self.tick {
            None => {
                let mut t = tokio::time::interval(self.interval);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t.tick().await;
                self.tick = Some(t);
            }
            Some(t) => {
                t.tick().await;
            }
        }
        let now = now_ns() / 1_000_000;
        let from = now.saturating_sub(self.window);
        // Series seen for the first time (all of them in the snapshot).
        let new_meta: Vec<SeriesMeta> = self
            .live
            .list()
            .into_iter()
            .filter(|m| !self.cursors.contains_key(&m.id) && self.filter.matches(m))
            .collect();
        for m in &new_meta {
            self.cursors.insert(m.id, (from / self.bucket * self.bucket, 0));
        }
        let mut data: Vec<Buckets> = Vec::new();
        for (&id, cur) in self.cursors.iter_mut() {
            let Some(last) = self.live.last_ms(id) else { continue };
            if last <= cur.1 {
                continue;
            }
            let b = self.live.query(&[id], cur.0.max(from), now, self.bucket).pop();
            if let Some(b) = b
                && let Some(&t) = b.t.last()
            {
                *cur = (t, last);
                data.push(b);
            }
        }
        if first {
            self.older_from_history(&new_meta, from, &mut data);
        }
        data.sort_by_key(|b| b.id);
        let decisions: Vec<_> = self
            .decisions
            .list(self.plugin.as_deref())
            .into_iter()
            .filter(|d| d.time_ns > self.last_decision_ns)
            .collect();
        if let Some(t) = decisions.iter().map(|d| d.time_ns).max() {
            self.last_decision_ns = t;
        }
        let frame = Frame {
            now_ms: now,
            window_ms: self.window,
            bucket_ms: self.bucket,
            series: new_meta,
            data,
            decisions,
        };
        Event::default()
            .event(if first { "snapshot" } else { "append" })
            .data(serde_json::to_string(&frame).unwrap_or_default())
    }

    /// The snapshot's buckets older than the live store's coverage, read
    /// from the embedded history and put in front of the live ones (buckets
    /// aligned alike, the history's ending where the live store's first
    /// bucket starts), so a window longer than the live store's still draws
    /// whole. Without a history, or within coverage, nothing changes.
    fn older_from_history(&self, metas: &[SeriesMeta], from: u64, data: &mut Vec<Buckets>) {
        let Some(h) = &self.history else { return };
        let covers = self.live.covers_from_ms();
        if from >= covers {
            return;
        }
        // The last bucket wholly before the live store's coverage ends here.
        let until = (covers / self.bucket * self.bucket).saturating_sub(1);
        for m in metas {
            let Some(hid) = h.id_of(&super::history::key_of(m)) else {
                continue;
            };
            let old = super::history::as_live(m, h.query(hid, from, until, self.bucket));
            if old.t.is_empty() {
                continue;
            }
            match data.iter_mut().find(|b| b.id == m.id) {
                Some(b) => {
                    let older = b.t.partition_point(|&t| t <= until);
                    let join = |old: &[f32], new: &mut Vec<f32>| {
                        let tail = new.split_off(older);
                        *new = old.iter().copied().chain(tail).collect();
                    };
                    join(&old.min, &mut b.min);
                    join(&old.max, &mut b.max);
                    join(&old.mean, &mut b.mean);
                    let tail = b.t.split_off(older);
                    b.t = old.t.iter().copied().chain(tail).collect();
                }
                None => data.push(old),
            }
        }
        data.sort_by_key(|b| b.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_joined_body_is_the_json_serde_would_write() {
        let series = |id: u32, n: usize| Buckets {
            id,
            t: (0..n as u64).map(|i| 1_700_000_000_000 + i * 3_600).collect(),
            min: (0..n).map(|i| i as f32 * 0.25).collect(),
            max: (0..n).map(|i| i as f32 + 1.0).collect(),
            mean: (0..n).map(|i| i as f32 + 0.5).collect(),
        };
        for data in [
            vec![],
            vec![series(3, 0)],
            vec![series(1, 5), series(2, 30_000), series(9, 1)],
        ] {
            let got: serde_json::Value = serde_json::from_slice(&data_body(10, 20, 3_600, &data)).expect("valid JSON");
            let want = json!({ "from": 10, "to": 20, "bucket_ms": 3_600, "data": data });
            assert_eq!(got, want);
        }
    }
}
