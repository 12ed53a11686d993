//! Reading history back from a Prometheus-compatible engine (`storage.query`):
//! a sonde series becomes the label set the writer gave it, that becomes a
//! PromQL selector, and the answer comes back as buckets.
//!
//! ```text
//!  SeriesRef (name, unit, kind, attributes)   ListFilter (node, job, name prefix)
//!     │ names::series_labels + this sonde's        │ label matchers + job="<service>"
//!     │ resource, less `instance`                  ▼
//!     ▼                                        /api/v1/series ─► names::series_from_labels
//!  {__name__="…",host_name="…",job="…"}
//!     │ engine_plan::plan(from, to, bucket)
//!     │ one selector per metric name: the labels its asked series share
//!     ├─ Raw:   /api/v1/query  `sel[span]`  ─► each answer to the series with exactly its labels ─► bucket_raw
//!     └─ Steps: /api/v1/query_range min/max/avg_over_time(sel[step]) ─► the same ─► from_steps
//!  every engine call: counted; a failure keeps its message for /api/status
//! ```
//! `instance` (`service.instance.id`, new at every start) is left out of the
//! selector so that one series reads as one across master restarts; the runs
//! found under several instances are merged.
//!
//! Limits: one request per metric name and PromQL function, one after another
//! (the API layer bounds how many series it asks for at once); a selector
//! brings every series that shares the asked ones' labels (the siblings of
//! one metric name), and what is not asked for is dropped here. Each request
//! is bounded by `storage.query.timeout_ms` and `max_response_bytes`, and so
//! is each read as a whole (however many requests it takes).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use super::engine_plan::{self, Bucketed, Plan};
use crate::export::remote_write::{
    LabelSet, PromQueryClient, QueryError, QueryResult, RangeSeries, RemoteQueryConfig, SeriesFromLabels,
    exact_selector, prometheus_label_name, prometheus_metric_name, series_from_labels, series_labels,
};
use crate::model::{AttrValue, MetricKind};

/// One sonde series, as the reader needs it.
#[derive(Clone, Debug)]
pub struct SeriesRef<'a> {
    pub name: &'a str,
    /// As emitted (a counter's unit without the `/s` the live store adds).
    pub unit: &'a str,
    pub kind: MetricKind,
    pub attributes: &'a [(String, String)],
}

/// Which series to list; every field given must match.
#[derive(Clone, Debug, Default)]
pub struct ListFilter<'a> {
    /// `host.name`.
    pub node: Option<&'a str>,
    /// `sonde.job`.
    pub job: Option<&'a str>,
    /// A metric name prefix, translated like a metric name.
    pub name_prefix: Option<&'a str>,
}

/// Counts for `/api/status` (`storage.query`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct EngineReadStats {
    pub url: String,
    /// Requests sent to the engine.
    pub requests: u64,
    /// Of those, the ones that failed: not reachable, timed out, an error answer or not the API's JSON.
    pub errors: u64,
    /// The last failure's message, naming the URL.
    pub last_error: Option<String>,
}

/// The reading side; cheap to share behind an `Arc`.
pub struct EngineReader {
    client: PromQueryClient,
    url: String,
    /// This sonde's resource as the writer sees it, `service.instance.id` left out.
    resource: Vec<(String, String)>,
    promote: Vec<String>,
    /// Bounds a whole read (`storage.query.timeout_ms`), not only each request.
    timeout: std::time::Duration,
    requests: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for EngineReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineReader")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl EngineReader {
    /// A reader for `cfg`; `promote` and `resource` must be the writer's, so
    /// that a series is looked up under the labels it was written with.
    pub fn new(cfg: &RemoteQueryConfig, promote: &[String], resource: &[(String, AttrValue)]) -> Result<Self, String> {
        let client = PromQueryClient::new(cfg)?;
        Ok(Self {
            client,
            url: cfg.url.clone().unwrap_or_default().trim_end_matches('/').to_string(),
            resource: resource
                .iter()
                .filter(|(k, _)| k != "service.instance.id")
                .map(|(k, v)| (k.clone(), v.text()))
                .collect(),
            promote: promote.to_vec(),
            timeout: std::time::Duration::from_millis(cfg.timeout_ms),
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    /// The engine's base URL, for error messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn stats(&self) -> EngineReadStats {
        EngineReadStats {
            url: self.url.clone(),
            requests: self.requests.load(Relaxed),
            errors: self.errors.load(Relaxed),
            last_error: self.last_error.lock().clone(),
        }
    }

    /// The labels a series was written with, `instance` left out; None when
    /// its name translates to nothing (the writer refused it too).
    pub fn labels_of(&self, s: &SeriesRef) -> Option<Vec<(String, String)>> {
        series_labels(s.name, s.unit, s.kind, s.attributes, &self.resource, &self.promote)
    }

    /// Several series over `[from_ms, to_ms]` in buckets of at least
    /// `bucket_ms` (the width used is returned), in the order asked;
    /// counters as rates per second.
    ///
    /// A PromQL selector also matches series with more labels than it names
    /// (`{__name__="cpu",host_name="a"}` matches every `cpu="…"` sibling), so
    /// the series sharing a metric name are asked for together, with the
    /// labels they all share, and each answer goes to the series whose label
    /// set it has exactly (`instance` aside). The whole read, however many
    /// requests it takes, is bounded by `timeout_ms`.
    pub async fn points(
        &self,
        series: &[SeriesRef<'_>],
        from_ms: u64,
        to_ms: u64,
        bucket_ms: u64,
    ) -> Result<(u64, Vec<Bucketed>), QueryError> {
        self.bounded(self.points_unbounded(series, from_ms, to_ms, bucket_ms))
            .await
    }

    async fn points_unbounded(
        &self,
        series: &[SeriesRef<'_>],
        from_ms: u64,
        to_ms: u64,
        bucket_ms: u64,
    ) -> Result<(u64, Vec<Bucketed>), QueryError> {
        let plan = engine_plan::plan(from_ms, to_ms, bucket_ms);
        let mut out = vec![Bucketed::default(); series.len()];
        // Exact label sets (`instance` is never in them), grouped by metric name.
        let labels: Vec<Option<Vec<(String, String)>>> = series.iter().map(|s| self.labels_of(s)).collect();
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, l) in labels.iter().enumerate() {
            if let Some(name) = l.as_ref().and_then(|l| l.iter().find(|(k, _)| k == "__name__")) {
                groups.entry(name.1.as_str()).or_default().push(i);
            }
        }
        for members in groups.values() {
            let sets: Vec<&Vec<(String, String)>> = members.iter().filter_map(|&i| labels[i].as_ref()).collect();
            let shared: Vec<(&str, &str)> = sets[0]
                .iter()
                .filter(|pair| sets.iter().all(|s| s.contains(pair)))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let sel = exact_selector(shared);
            // Which member an answer belongs to, by its labels less `__name__`
            // (functions drop it) and `instance`.
            let owner = |got: &LabelSet| {
                members.iter().copied().find(|&i| {
                    let want = labels[i].as_deref().unwrap_or_default();
                    let n = got.keys().filter(|k| *k != "__name__" && *k != "instance").count();
                    n == want.len() - 1
                        && want
                            .iter()
                            .filter(|(k, _)| k != "__name__")
                            .all(|(k, v)| got.get(k) == Some(v))
                })
            };
            let runs = |answer: Vec<RangeSeries>| {
                let mut per: Vec<Vec<Vec<(i64, f64)>>> = vec![Vec::new(); series.len()];
                for r in answer {
                    if let Some(i) = owner(&r.labels) {
                        per[i].push(r.samples);
                    }
                }
                per.into_iter().map(engine_plan::merge).collect::<Vec<_>>()
            };
            match plan {
                Plan::Raw {
                    range_ms,
                    at_ms,
                    bucket_ms,
                } => {
                    let answer = self
                        .counted(self.client.query(&format!("{sel}[{range_ms}ms]"), at_ms as i64))
                        .await?;
                    let answer = match answer {
                        QueryResult::Matrix(m) => m,
                        // An engine may answer an empty range with an empty vector.
                        QueryResult::Vector(v) if v.is_empty() => Vec::new(),
                        _ => return Err(self.fail(bad_shape(&self.url, "a raw range read"))),
                    };
                    let per = runs(answer);
                    for &i in members {
                        let samples = if series[i].kind == MetricKind::Counter {
                            engine_plan::rates(&per[i])
                        } else {
                            per[i].clone()
                        };
                        out[i] = engine_plan::bucket_raw(&samples, from_ms, to_ms, bucket_ms);
                    }
                }
                Plan::Steps {
                    start_ms,
                    end_ms,
                    step_ms,
                } => {
                    let range = |f: &str| {
                        let q = format!("{f}({sel}[{step_ms}ms])");
                        async move {
                            let call = self
                                .client
                                .query_range(&q, start_ms as i64, end_ms as i64, step_ms as i64);
                            self.counted(call).await
                        }
                    };
                    let gauges = members.iter().any(|&i| series[i].kind != MetricKind::Counter);
                    let hi = runs(range("max_over_time").await?);
                    let (lo, avg) = if gauges {
                        let (lo, avg) =
                            futures_util::future::try_join(range("min_over_time"), range("avg_over_time")).await?;
                        (runs(lo), runs(avg))
                    } else {
                        (Vec::new(), Vec::new())
                    };
                    for &i in members {
                        out[i] = if series[i].kind == MetricKind::Counter {
                            engine_plan::step_rates(&hi[i], step_ms)
                        } else {
                            engine_plan::from_steps(&lo[i], &hi[i], &avg[i], step_ms)
                        };
                    }
                }
            }
        }
        Ok((plan.bucket_ms(), out))
    }

    /// The series this sonde wrote that match `filter` and have samples in
    /// `[from_ms, to_ms]`, in sonde's terms.
    pub async fn list(
        &self,
        filter: &ListFilter<'_>,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<SeriesFromLabels>, QueryError> {
        let sel = self.list_selector(filter);
        let matchers = [sel.as_str()];
        let call = self.client.series(&matchers, from_ms as i64, to_ms as i64);
        let sets = self.bounded(self.counted(call)).await?;
        let mut out: Vec<SeriesFromLabels> = sets.iter().filter_map(series_from_labels).collect();
        // Series written by several master starts differ only in `instance`.
        out.sort_by(|a, b| (&a.name, &a.attributes).cmp(&(&b.name, &b.attributes)));
        out.dedup_by(|a, b| a.name == b.name && a.attributes == b.attributes);
        Ok(out)
    }

    /// The matcher for a listing: this sonde's `job`, then the filter's labels.
    pub fn list_selector(&self, filter: &ListFilter) -> String {
        let mut m: Vec<String> = Vec::new();
        let job = series_labels("x", "", MetricKind::Gauge, &[], &self.resource, &[])
            .and_then(|l| l.into_iter().find(|(k, _)| k == "job").map(|(_, v)| v));
        let mut exact: Vec<(String, String)> = Vec::new();
        if let Some(j) = job {
            exact.push(("job".into(), j));
        }
        for (key, want) in [("host.name", filter.node), ("sonde.job", filter.job)] {
            if let (Some(w), Some(l)) = (want, prometheus_label_name(key)) {
                exact.push((l, w.to_string()));
            }
        }
        let inner = exact_selector(exact.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        m.push(inner[1..inner.len() - 1].to_string());
        if let Some(p) = filter.name_prefix {
            let t = prometheus_metric_name(p, "", MetricKind::UpDownCounter);
            m.push(format!("__name__=~\"{}.*\"", regex_quote(&t)));
        } else if m[0].is_empty() {
            // The series API needs at least one matcher that is not empty.
            m[0] = "__name__=~\".+\"".into();
        }
        format!(
            "{{{}}}",
            m.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(",")
        )
    }

    /// `read` within `timeout_ms` in all; past it, a counted timeout.
    async fn bounded<T>(
        &self,
        read: impl std::future::Future<Output = Result<T, QueryError>>,
    ) -> Result<T, QueryError> {
        match tokio::time::timeout(self.timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(self.fail(QueryError::Timeout {
                url: self.url.clone(),
                timeout: self.timeout,
            })),
        }
    }

    /// Runs one engine call, counting it and keeping a failure's message.
    async fn counted<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, QueryError>>,
    ) -> Result<T, QueryError> {
        self.requests.fetch_add(1, Relaxed);
        call.await.map_err(|e| self.fail(e))
    }

    fn fail(&self, e: QueryError) -> QueryError {
        self.errors.fetch_add(1, Relaxed);
        *self.last_error.lock() = Some(e.to_string());
        e
    }
}

fn bad_shape(url: &str, what: &str) -> QueryError {
    QueryError::BadAnswer {
        url: url.to_string(),
        message: format!("{what} answered something other than a matrix"),
    }
}

/// A literal for a PromQL (RE2) regular expression inside double quotes.
fn regex_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            // Escaped twice: once for the regex, once for the PromQL string.
            out.push_str("\\\\");
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader() -> EngineReader {
        let cfg = RemoteQueryConfig {
            url: Some("http://127.0.0.1:9/".into()),
            ..Default::default()
        };
        let resource = [
            ("service.name".to_string(), AttrValue::from("sonde")),
            ("service.instance.id".to_string(), AttrValue::from("run-1")),
            ("host.name".to_string(), AttrValue::from("the-master")),
        ];
        EngineReader::new(&cfg, &["host.name".to_string()], &resource).unwrap()
    }

    #[test]
    fn a_series_is_looked_up_under_the_writers_labels_without_instance() {
        let r = reader();
        let attrs = vec![
            ("host.name".to_string(), "node-0".to_string()),
            ("cpu".to_string(), "3".to_string()),
        ];
        let s = SeriesRef {
            name: "system.cpu.utilization",
            unit: "1",
            kind: MetricKind::Gauge,
            attributes: &attrs,
        };
        let labels = r.labels_of(&s).unwrap();
        let sel = exact_selector(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(
            sel,
            r#"{__name__="system_cpu_utilization_ratio",cpu="3",host_name="node-0",job="sonde"}"#
        );
        // This sonde's own series carries its node through the promoted resource.
        let own = SeriesRef {
            name: "sonde.queue",
            unit: "{batch}",
            kind: MetricKind::UpDownCounter,
            attributes: &[],
        };
        assert_eq!(
            r.labels_of(&own).unwrap(),
            vec![
                ("__name__".to_string(), "sonde_queue".to_string()),
                ("host_name".to_string(), "the-master".to_string()),
                ("job".to_string(), "sonde".to_string()),
            ]
        );
        assert_eq!(r.url(), "http://127.0.0.1:9");
    }

    #[test]
    fn listings_match_this_sondes_job_and_the_filters() {
        let r = reader();
        assert_eq!(r.list_selector(&ListFilter::default()), r#"{job="sonde"}"#);
        let f = ListFilter {
            node: Some("node-1"),
            job: Some("train \"9\""),
            name_prefix: Some("system.cpu"),
        };
        assert_eq!(
            r.list_selector(&f),
            r#"{job="sonde",host_name="node-1",sonde_job="train \"9\"",__name__=~"system_cpu.*"}"#
        );
        assert_eq!(regex_quote("a.b"), r"a\\.b");
    }

    /// An engine that answers every request with `status` and `body`, once each.
    async fn canned(answers: Vec<(u16, &'static str)>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move {
            for (status, body) in answers {
                let Ok((mut c, _)) = l.accept().await else { return };
                let mut buf = vec![0u8; 16 << 10];
                let _ = c.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = c.write_all(head.as_bytes()).await;
                let _ = c.write_all(body.as_bytes()).await;
            }
        });
        url
    }

    fn reader_at(url: String) -> EngineReader {
        let cfg = RemoteQueryConfig {
            url: Some(url),
            timeout_ms: 2_000,
            ..Default::default()
        };
        EngineReader::new(&cfg, &[], &[("service.name".to_string(), AttrValue::from("sonde"))]).unwrap()
    }

    #[tokio::test]
    async fn answers_error_bodies_and_garbage_become_errors_naming_the_engine() {
        let ok = r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"g","job":"sonde","instance":"a"},"values":[[10.001,"1.5"],[10.101,"2.5"]]},
            {"metric":{"__name__":"g","job":"sonde","instance":"b"},"values":[[10.201,"4"]]},
            {"metric":{"__name__":"g","job":"sonde","cpu":"1","instance":"b"},"values":[[10.001,"7"]]},
            {"metric":{"__name__":"g","job":"sonde","cpu":"2","instance":"b"},"values":[[10.001,"8"]]}]}}"#;
        let url = canned(vec![
            (200, ok),
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
            ),
            (200, "<html>not the API</html>"),
            (503, "overloaded"),
            (
                200,
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#,
            ),
        ])
        .await;
        let r = reader_at(url.clone());
        let s = SeriesRef {
            name: "g",
            unit: "",
            kind: MetricKind::Gauge,
            attributes: &[],
        };
        let cpu1 = [("cpu".to_string(), "1".to_string())];
        let s1 = SeriesRef {
            attributes: &cpu1,
            ..s.clone()
        };
        // Two starts' runs of one series, merged; 1 ms buckets give the samples
        // back; a sibling (cpu 2) the selector also brought is not taken for either.
        let (w, b) = r.points(&[s.clone(), s1], 10_000, 10_300, 1).await.unwrap();
        assert_eq!(w, 1);
        assert_eq!(b[0].t, vec![10_001, 10_101, 10_201]);
        assert_eq!(b[0].mean, vec![1.5, 2.5, 4.0]);
        assert_eq!((b[1].t.clone(), b[1].mean.clone()), (vec![10_001], vec![7.0]));
        let e = r
            .points(std::slice::from_ref(&s), 10_000, 10_300, 1)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&url) && e.contains("400") && e.contains("parse error"),
            "{e}"
        );
        let e = r
            .points(std::slice::from_ref(&s), 10_000, 10_300, 1)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&url) && e.contains("unexpected answer"), "{e}");
        let e = r
            .points(std::slice::from_ref(&s), 10_000, 10_300, 1)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("503") && e.contains("overloaded"), "{e}");
        let e = r
            .points(std::slice::from_ref(&s), 10_000, 10_300, 1)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("other than a matrix"), "{e}");
        let st = r.stats();
        assert_eq!((st.requests, st.errors), (5, 4));
    }

    #[tokio::test]
    async fn a_read_is_bounded_by_the_timeout_as_a_whole() {
        // Accepts and never answers.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let _hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = l.accept().await {
                held.push(c);
            }
        });
        let cfg = RemoteQueryConfig {
            url: Some(url.clone()),
            timeout_ms: 200,
            ..Default::default()
        };
        let r = EngineReader::new(&cfg, &[], &[]).unwrap();
        let s = SeriesRef {
            name: "g",
            unit: "",
            kind: MetricKind::Gauge,
            attributes: &[],
        };
        let t0 = std::time::Instant::now();
        let e = r.points(&[s], 0, 10_000, 1).await.unwrap_err();
        assert!(matches!(e, QueryError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains(&url));
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        assert!(r.stats().errors >= 1);
    }

    #[tokio::test]
    async fn an_engine_that_is_down_is_an_error_naming_it_and_counted() {
        let r = reader();
        let s = SeriesRef {
            name: "g",
            unit: "",
            kind: MetricKind::Gauge,
            attributes: &[],
        };
        let e = r.points(&[s], 0, 10_000, 1).await.unwrap_err();
        assert!(e.to_string().contains("http://127.0.0.1:9/api/v1/query"), "{e}");
        let st = r.stats();
        assert_eq!((st.requests, st.errors), (1, 1));
        assert!(st.last_error.unwrap().contains("127.0.0.1:9"));
    }
}
