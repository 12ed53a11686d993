//! Every hook's logic: events in → TSV rows, estimator updates, analysis;
//! timer → metrics. The host is behind the SDK's `Host` trait.

use std::collections::BTreeMap;

use sonde_plugin_sdk::MetricRegistry;
use sonde_plugin_sdk::types::{
    Attribute, Column, EventBatch, MetricDesc, MetricKind, PointBatch, Severity, SinkDir, SinkFormat, SinkMode,
    SinkSpec,
};

use crate::analysis::{Analysis, Metric};
use crate::estimator::ModelEstimator;
use crate::in_time::InTime;
use crate::rows::{self, ACTIONS, Action, INFER, LOAD_WEIGHTS, REQUESTS, Request};
use crate::settings::Settings;
use crate::tsv::{self, Col};
use sonde_plugin_sdk::Host;

/// A TSV log: its handle, or why it is not written.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LogFile {
    pub name: &'static str,
    #[serde(skip)]
    pub handle: Option<u32>,
    pub error: Option<String>,
    pub rows: u64,
}

pub struct Clockwork {
    pub settings: Settings,
    pub analysis: Analysis,
    /// Infer actions without `requests_in_time`, waiting for their requests.
    pub in_time: InTime,
    pub estimators: BTreeMap<u64, ModelEstimator>,
    pub request_log: LogFile,
    pub action_log: LogFile,
    metrics: MetricRegistry,
    pub timer: u64,
    pub requests_seen: u64,
    pub actions_seen: u64,
    /// Rows skipped for failing `Request::check` / `Action::check`, and why the last one was.
    pub invalid_rows: u64,
    pub last_invalid: Option<String>,
    /// Jobs (serving deployments) whose requests were seen, with their
    /// models: a job's page shows those models.
    pub jobs: BTreeMap<String, std::collections::BTreeSet<u64>>,
}

/// Where Clockwork writes its logs: `$CLOCKWORK_LOG_DIR`, else `/local`
/// (unless the config's `[sinks.plugins.clockwork]` says otherwise).
pub fn log_dir() -> SinkDir {
    SinkDir {
        env: "CLOCKWORK_LOG_DIR".into(),
        dir: "/local".into(),
    }
}

fn cols(c: Vec<Col>) -> Vec<Column> {
    c.into_iter()
        .map(|c| match c {
            Col::U(v) => Column::U64s(v),
            Col::S(v) => Column::S64s(v),
            Col::T(v) => Column::Strings(v),
        })
        .collect()
}

fn open(host: &mut dyn Host, name: &'static str, columns: &[&str]) -> LogFile {
    let spec = SinkSpec {
        name: name.into(),
        format: SinkFormat::Tsv,
        mode: SinkMode::Append,
        columns: columns.iter().map(|c| c.to_string()).collect(),
        default_dir: Some(log_dir()),
    };
    match host.open_sink(&spec) {
        Ok(h) => LogFile {
            name,
            handle: Some(h),
            error: None,
            rows: 0,
        },
        Err(e) => {
            host.log(
                Severity::Warn,
                &format!("not writing {name}: {e}; the analysis goes on without the file"),
            );
            LogFile {
                name,
                handle: None,
                error: Some(e),
                rows: 0,
            }
        }
    }
}

impl Clockwork {
    pub fn start(host: &mut dyn Host, settings: Settings) -> Clockwork {
        let (request_log, action_log) = if settings.tsv {
            let r = open(host, tsv::REQUEST_LOG, &tsv::REQUEST_COLUMNS);
            let a = open(host, tsv::ACTION_LOG, &tsv::ACTION_COLUMNS);
            if r.handle.is_some() && a.handle.is_some() {
                host.log(
                    Severity::Info,
                    &format!(
                        "writing {} and {} in the clockwork sink directory (sonde's banner names it)",
                        tsv::REQUEST_LOG,
                        tsv::ACTION_LOG
                    ),
                );
            }
            (r, a)
        } else {
            let off = |name| LogFile {
                name,
                handle: None,
                error: Some("off (settings.tsv = false)".into()),
                rows: 0,
            };
            (off(tsv::REQUEST_LOG), off(tsv::ACTION_LOG))
        };
        Clockwork {
            analysis: Analysis::new(settings.window_ns(), settings.lag_ms * 1_000_000),
            in_time: InTime::new(settings.lag_ms * 1_000_000),
            estimators: BTreeMap::new(),
            request_log,
            action_log,
            metrics: MetricRegistry::new(),
            timer: 0,
            requests_seen: 0,
            actions_seen: 0,
            invalid_rows: 0,
            last_invalid: None,
            jobs: Default::default(),
            settings,
        }
    }

    /// No emit timer before the first rows: every metric it emits is per
    /// model, so it starts with the first request or action seen (and then
    /// runs for good), and the plugin thread of a host that serves nothing
    /// never wakes. Call after `on_events`.
    pub fn follow_rows(&mut self, host: &mut dyn Host) {
        if self.timer == 0 && self.requests_seen + self.actions_seen > 0 {
            self.timer = host.set_timer(self.settings.emit_every_ms, true);
        }
    }

    /// New settings: the estimators are re-seeded from the new profiles.
    pub fn configure(&mut self, settings: Settings) {
        if settings.profiles != self.settings.profiles
            || settings.max_batch_size != self.settings.max_batch_size
            || settings.max_exec_time_ms != self.settings.max_exec_time_ms
        {
            self.estimators.clear();
        }
        self.settings = settings;
    }

    pub fn estimator(&mut self, model: u64) -> &mut ModelEstimator {
        let profile = self.settings.profiles.get(&model).cloned().unwrap_or_default();
        let limits = self.settings.limits();
        self.estimators
            .entry(model)
            .or_insert_with(|| ModelEstimator::new(&profile, limits))
    }

    /// The rows that pass `check`; the others are counted and the last reason kept.
    fn keep_valid<T>(&mut self, rows: Vec<T>, check: impl Fn(&T) -> Result<(), String>) -> Vec<T> {
        rows.into_iter()
            .filter(|r| match check(r) {
                Ok(()) => true,
                Err(e) => {
                    self.invalid_rows += 1;
                    self.last_invalid = Some(e);
                    false
                }
            })
            .collect()
    }

    pub fn on_events(&mut self, host: &mut dyn Host, batch: &EventBatch) -> Result<(), String> {
        let now = host.now();
        let mut problems = Vec::new();
        let mut actions = Vec::new();
        for t in batch.table(ACTIONS) {
            actions.extend(rows::actions(&t)?);
        }
        let mut requests = Vec::new();
        for t in batch.table(REQUESTS) {
            let rows = rows::requests(&t)?;
            for (&o, r) in t.origin().iter().zip(&rows) {
                if let Some(job) = batch.origins.get(o as usize).map(|o| &o.job).filter(|j| !j.is_empty()) {
                    if !self.jobs.contains_key(job) {
                        self.jobs.insert(job.clone(), Default::default());
                    }
                    if let Some(models) = self.jobs.get_mut(job) {
                        models.insert(r.model_id);
                    }
                }
            }
            requests.extend(rows);
        }
        self.actions_seen += actions.len() as u64;
        self.requests_seen += requests.len() as u64;
        let actions = self.keep_valid(actions, Action::check);
        let requests = self.keep_valid(requests, Request::check);
        if !actions.is_empty() {
            for a in &actions {
                if a.status == 0 {
                    match a.action_type {
                        INFER => {
                            self.estimator(a.model_id).add_measurement(
                                a.batch_size,
                                a.worker_exec_duration,
                                a.gpu_clock_before,
                                a.gpu_clock_after,
                            );
                        }
                        LOAD_WEIGHTS => self
                            .estimator(a.model_id)
                            .add_weights_measurement(a.worker_exec_duration),
                        _ => {}
                    }
                }
            }
            // Goodput needs the in-time count: an action without one waits
            // for its requests (`in_time.rs`); the rest go on now.
            let (held, complete): (Vec<Action>, Vec<Action>) = actions.into_iter().partition(InTime::needs);
            for a in held {
                self.in_time.hold(now, a);
            }
            self.take_actions(host, &complete, &mut problems);
        }
        if !requests.is_empty() {
            if let Some(h) = self.request_log.handle {
                let rows: Vec<_> = requests.iter().map(tsv::request_row).collect();
                match host.write_rows(h, &cols(tsv::request_columns(&rows))) {
                    Ok(()) => self.request_log.rows += rows.len() as u64,
                    Err(e) => problems.push(format!("{}: {e}", tsv::REQUEST_LOG)),
                }
            }
            for r in requests {
                self.in_time.request(&r);
                self.analysis.add_request(now, r);
            }
        }
        let ready = self.in_time.ready(now, false);
        self.take_actions(host, &ready, &mut problems);
        self.analysis.resolve(now, false);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// Actions whose goodput is known: into the analysis and the action log.
    fn take_actions(&mut self, host: &mut dyn Host, actions: &[Action], problems: &mut Vec<String>) {
        if actions.is_empty() {
            return;
        }
        for a in actions {
            self.analysis.add_action(a);
        }
        if let Some(h) = self.action_log.handle {
            let rows: Vec<_> = actions.iter().map(tsv::action_row).collect();
            match host.write_rows(h, &cols(tsv::action_columns(&rows))) {
                Ok(()) => self.action_log.rows += rows.len() as u64,
                Err(e) => problems.push(format!("{}: {e}", tsv::ACTION_LOG)),
            }
        }
    }

    /// Held actions that are ready (all of them when `force`) are taken.
    fn take_ready(&mut self, host: &mut dyn Host, now: u64, force: bool) -> Result<(), String> {
        let ready = self.in_time.ready(now, force);
        let mut problems = Vec::new();
        self.take_actions(host, &ready, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    pub fn on_timer(&mut self, host: &mut dyn Host) -> Result<(), String> {
        let now = host.now();
        // Released actions first, so that the requests resolved next find them.
        let taken = self.take_ready(host, now, false);
        self.analysis.resolve(now, false);
        let mut m = self.analysis.close(now, false);
        m.extend(self.analysis.counters(now));
        self.emit(host, &m).and(taken)
    }

    pub fn stop(&mut self, host: &mut dyn Host) {
        let now = host.now();
        let _ = self.take_ready(host, now, true);
        self.analysis.resolve(now, true);
        let mut m = self.analysis.close(now, true);
        m.extend(self.analysis.counters(now));
        let _ = self.emit(host, &m);
    }

    fn emit(&mut self, host: &mut dyn Host, metrics: &[Metric]) -> Result<(), String> {
        let mut batch = PointBatch::default();
        for m in metrics {
            let desc = MetricDesc::new(
                m.name,
                if m.counter {
                    MetricKind::Counter
                } else {
                    MetricKind::Gauge
                },
                m.unit,
                describe(m.name),
            )
            .with_attributes(m.attrs.iter().map(|(k, v)| Attribute::new(*k, v.as_str())).collect());
            let h = self.metrics.declare_with(&desc, |d| host.declare_metric(d))?;
            batch.series.push(h);
            batch.time.push(m.time);
            batch.value.push(m.value);
        }
        if !batch.series.is_empty() {
            host.emit_points(&batch);
        }
        Ok(())
    }
}

fn describe(name: &str) -> &'static str {
    match name {
        "clockwork.requests" => "Requests finished, per model",
        "clockwork.slo.misses" => "Requests that missed their SLO, per model and cause",
        "clockwork.goodput" => "Successful requests within their deadline per second, per window",
        "clockwork.throughput" => "Successful requests per second, per window",
        "clockwork.slo.attainment" => "Share of requests that met their SLO, per window",
        "clockwork.slo.violation_rate" => "Share of requests that missed their SLO, per window",
        "clockwork.coldstart.share" => "Share of successful requests that were cold starts, per window",
        "clockwork.latency" => "Request latency quantiles, per window",
        "clockwork.request.time" => "Mean request time per component (queueing, network, execution, controller)",
        "clockwork.batch_size.mean" => "Request-weighted mean infer batch size (sum b^2 / sum b)",
        "clockwork.gpu.utilization" => "Share of the window the GPU spent on infer actions",
        "clockwork.gpu.goodput_utilization" => "Share of the window spent on infer work that met deadlines",
        "clockwork.pcie.utilization" => "Share of the window spent loading weights",
        "clockwork.prediction.error" => "Worker exec duration minus the predicted duration, quantiles",
        "clockwork.completion.error" => "Worker completion minus the predicted completion, quantiles",
        "clockwork.prediction.over_share" => "Share of actions whose duration was over-predicted",
        _ => "clockwork",
    }
}
