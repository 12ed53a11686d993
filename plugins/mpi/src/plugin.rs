//! Every hook's logic, with the host behind [`Host`]: samples in, profiles per
//! job, metrics on the emit timer, folded-stack files on the write timer.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use sonde_plugin_sdk::MetricRegistry;
use sonde_plugin_sdk::types::{
    Attribute, EventBatch, MetricDesc, MetricKind, PointBatch, Severity, SinkFormat, SinkMode, SinkSpec,
};

use crate::profile::{JobProfile, NOT_IN_MPI, STALL, Sample, WORK, folded_file_name, state_name};
use crate::settings::Settings;
use crate::table::{SAMPLES, check};
use sonde_plugin_sdk::Host;

pub struct Mpi {
    pub settings: Settings,
    pub jobs: BTreeMap<String, JobProfile>,
    metrics: MetricRegistry,
    sinks: HashMap<String, u32>,
    sink_failed: bool,
    /// The emit and write timers (0: not running, see `follow_jobs`).
    emit_timer: u64,
    write_timer: u64,
    pub rows: u64,
    pub dropped_samples: u64,
    pub skipped_rows: u64,
    pub files_written: u64,
    /// Jobs forgotten since the last save: their saved profiles go (`persist.rs`).
    pub forgotten: Vec<String>,
    /// The last save failed (logged once until one succeeds).
    pub save_failed: bool,
}

impl Mpi {
    pub fn start(host: &mut dyn Host, settings: Settings) -> Mpi {
        let mut m = Mpi {
            settings,
            jobs: BTreeMap::new(),
            metrics: MetricRegistry::new(),
            sinks: HashMap::new(),
            sink_failed: false,
            emit_timer: 0,
            write_timer: 0,
            rows: 0,
            dropped_samples: 0,
            skipped_rows: 0,
            files_written: 0,
            forgotten: Vec::new(),
            save_failed: false,
        };
        let restored = m.restore(host);
        if restored > 0 {
            host.log(
                Severity::Info,
                &format!("mpi: {restored} job profile(s) of an earlier run restored"),
            );
        }
        m.follow_jobs(host);
        m
    }

    fn set_timers(&mut self, host: &mut dyn Host) {
        host.cancel_timer(self.emit_timer);
        host.cancel_timer(self.write_timer);
        self.emit_timer = host.set_timer(self.settings.emit_every_ms, true);
        self.write_timer = host.set_timer(self.settings.write_every_ms, true);
    }

    /// No timers without a job: the emit and write timers run only while
    /// some job's profile is held, so the plugin thread of a host that runs
    /// no MPI job never wakes. Call after anything that adds or forgets a job.
    pub fn follow_jobs(&mut self, host: &mut dyn Host) {
        match (self.jobs.is_empty(), self.emit_timer != 0) {
            (false, false) => self.set_timers(host),
            (true, true) => {
                host.cancel_timer(self.emit_timer);
                host.cancel_timer(self.write_timer);
                (self.emit_timer, self.write_timer) = (0, 0);
            }
            _ => {}
        }
    }

    pub fn configure(&mut self, host: &mut dyn Host, settings: Settings) {
        let timers = settings.emit_every_ms != self.settings.emit_every_ms
            || settings.write_every_ms != self.settings.write_every_ms;
        self.settings = settings;
        if timers && self.emit_timer != 0 {
            self.set_timers(host);
        }
    }

    /// Takes the batch's `mpi_samples` rows; `Err` when the table's columns
    /// are not what this plugin declared (never, unless the host changed them).
    pub fn on_events(&mut self, batch: &EventBatch) -> Result<(), String> {
        for t in batch.table(SAMPLES) {
            self.take(batch, &t)?;
        }
        Ok(())
    }

    fn take(&mut self, batch: &EventBatch, t: &sonde_plugin_sdk::Table) -> Result<(), String> {
        let (thread, time, state) = (t.u32s("thread")?, t.timestamps("time_ns")?, t.u8s("state")?);
        let (function, callsite) = (t.strings("function")?, t.strings("callsite")?);
        let (count, period_ns) = (t.u32s("count")?, t.u64s("period_ns")?);
        for (i, &origin) in t.origin().iter().enumerate() {
            let Some(o) = batch.origins.get(origin as usize) else {
                self.skipped_rows += 1;
                continue;
            };
            if !self.settings.job.is_empty() && o.job != self.settings.job {
                continue;
            }
            let world_size = o
                .attributes
                .iter()
                .find(|a| a.key == "mpi.world_size")
                .and_then(|a| match &a.value {
                    sonde_plugin_sdk::types::Value::Str(s) => s.parse().ok(),
                    sonde_plugin_sdk::types::Value::Int(n) => u32::try_from(*n).ok(),
                    _ => None,
                });
            let s = Sample {
                rank: o.rank,
                node: &o.node,
                world_size,
                thread: thread[i],
                time: time[i],
                state: state[i],
                function: function[i],
                callsite: callsite[i],
                count: count[i],
                period_ns: period_ns[i],
            };
            if check(s.state, s.function, s.count, s.period_ns).is_err() {
                self.skipped_rows += 1;
                continue;
            }
            self.rows += 1;
            let job = if o.job.is_empty() { "unnamed" } else { o.job.as_str() };
            if !self.jobs.contains_key(job) {
                self.make_room();
            }
            let p = self.jobs.entry(job.to_string()).or_default();
            if !p.add(&s, self.settings.max_bins) {
                self.dropped_samples += u64::from(s.count);
            }
        }
        Ok(())
    }

    /// Forgets the job seen longest ago when a new one would pass `max_jobs`.
    fn make_room(&mut self) {
        while self.jobs.len() >= self.settings.max_jobs {
            let Some(oldest) = self.jobs.iter().min_by_key(|(_, p)| p.last_ns).map(|(j, _)| j.clone()) else {
                return;
            };
            self.jobs.remove(&oldest);
            self.sinks.remove(&oldest);
            self.forgotten.push(oldest);
        }
    }

    pub fn on_timer(&mut self, host: &mut dyn Host, id: u64) -> Result<(), String> {
        let done = if id == self.emit_timer {
            self.emit_metrics(host)
        } else if id == self.write_timer {
            self.write_files(host);
            self.save(host);
            Ok(())
        } else {
            Ok(())
        };
        // A job forgotten through `POST /reset` stops the timers here.
        self.follow_jobs(host);
        done
    }

    fn declare(&mut self, host: &mut dyn Host, desc: MetricDesc) -> Result<u32, String> {
        self.metrics.declare_with(&desc, |d| host.declare_metric(d))
    }

    /// Emits the metrics of every job that changed since the last call.
    pub fn emit_metrics(&mut self, host: &mut dyn Host) -> Result<(), String> {
        let now = host.now();
        let mut points = PointBatch::default();
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, p)| p.dirty_metrics)
            .map(|(j, _)| j.clone())
            .collect();
        for job in jobs {
            let p = &self.jobs[&job];
            let ranks = p.rank_times();
            let functions: Vec<((String, u8), f64)> = p
                .function_times()
                .into_iter()
                .map(|((f, s), t)| ((f.to_string(), s), t))
                .collect();
            let imb = p.imbalance();
            let mut push = |h: u32, v: f64| {
                points.series.push(h);
                points.time.push(now);
                points.value.push(v);
            };
            for (rank, t) in &ranks {
                let rank_attrs = || {
                    vec![
                        Attribute::new("sonde.job", job.as_str()),
                        Attribute::new("mpi.rank", i64::from(*rank)),
                    ]
                };
                for (state, v) in [(NOT_IN_MPI, t.not_in_mpi_s), (WORK, t.work_s), (STALL, t.stall_s)] {
                    let mut attrs = rank_attrs();
                    attrs.push(Attribute::new("mpi.state", state_name(state)));
                    let h = self.declare(
                        host,
                        MetricDesc::new(
                            "mpi.state.time",
                            MetricKind::Counter,
                            "s",
                            "Sampled wall-clock time per MPI state",
                        )
                        .with_attributes(attrs),
                    )?;
                    push(h, v);
                }
                let h = self.declare(
                    host,
                    MetricDesc::new(
                        "mpi.stall.share",
                        MetricKind::Gauge,
                        "1",
                        "Share of sampled time stalled in MPI",
                    )
                    .with_attributes(rank_attrs()),
                )?;
                push(h, t.share(t.stall_s));
                let h = self.declare(
                    host,
                    MetricDesc::new(
                        "mpi.work.share",
                        MetricKind::Gauge,
                        "1",
                        "Share of sampled time working in MPI",
                    )
                    .with_attributes(rank_attrs()),
                )?;
                push(h, t.share(t.work_s));
            }
            for ((function, state), v) in functions {
                let h = self.declare(
                    host,
                    MetricDesc::new(
                        "mpi.function.time",
                        MetricKind::Counter,
                        "s",
                        "Sampled time in an MPI function, Work or Stall",
                    )
                    .with_attributes(vec![
                        Attribute::new("sonde.job", job.as_str()),
                        Attribute::new("mpi.function", function.as_str()),
                        Attribute::new("mpi.state", state_name(state)),
                    ]),
                )?;
                push(h, v);
            }
            let job_attrs = vec![Attribute::new("sonde.job", job.as_str())];
            let h = self.declare(
                host,
                MetricDesc::new(
                    "mpi.stall.imbalance",
                    MetricKind::Gauge,
                    "1",
                    "Largest over mean MPI stall time across ranks",
                )
                .with_attributes(job_attrs.clone()),
            )?;
            push(h, imb.stall_max_over_mean);
            let h = self.declare(
                host,
                MetricDesc::new(
                    "mpi.load_balance",
                    MetricKind::Gauge,
                    "1",
                    "Mean over largest time outside MPI across ranks",
                )
                .with_attributes(job_attrs),
            )?;
            push(h, imb.load_balance);
            self.jobs.get_mut(&job).unwrap().dirty_metrics = false;
        }
        if !points.series.is_empty() {
            host.emit_points(&points);
        }
        Ok(())
    }

    /// Rewrites the folded-stack file of every job that changed.
    pub fn write_files(&mut self, host: &mut dyn Host) {
        if !self.settings.folded_file || self.sink_failed {
            return;
        }
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, p)| p.dirty_file)
            .map(|(j, _)| j.clone())
            .collect();
        for job in jobs {
            let handle = match self.sinks.get(&job) {
                Some(&h) => h,
                None => {
                    let spec = SinkSpec {
                        name: folded_file_name(&job),
                        format: SinkFormat::Raw,
                        mode: SinkMode::Replace,
                        columns: Vec::new(),
                        default_dir: None,
                    };
                    match host.open_sink(&spec) {
                        Ok(h) => {
                            self.sinks.insert(job.clone(), h);
                            h
                        }
                        Err(e) => {
                            // Logged once; the routes still serve the profile.
                            host.log(
                                Severity::Warn,
                                &format!("mpi: no folded-stack files: open-sink {}: {e}", spec.name),
                            );
                            self.sink_failed = true;
                            return;
                        }
                    }
                }
            };
            let text = self.jobs[&job].folded();
            match host.write_bytes(handle, text.as_bytes()) {
                Ok(()) => {
                    self.files_written += 1;
                    self.jobs.get_mut(&job).unwrap().dirty_file = false;
                }
                Err(e) => host.log(Severity::Warn, &format!("mpi: writing {}: {e}", folded_file_name(&job))),
            }
        }
    }

    pub fn stop(&mut self, host: &mut dyn Host) {
        let _ = self.emit_metrics(host);
        self.write_files(host);
        self.save(host);
    }

    /// The job a request means: `?job=` or, without it, the one updated last.
    pub fn pick_job(&self, asked: Option<&str>) -> Option<String> {
        match asked.filter(|j| !j.is_empty()) {
            Some(j) => self.jobs.contains_key(j).then(|| j.to_string()),
            None => self.jobs.iter().max_by_key(|(_, p)| p.last_ns).map(|(j, _)| j.clone()),
        }
    }

    pub fn counters(&self) -> Value {
        json!({
            "rows": self.rows,
            "dropped_samples": self.dropped_samples,
            "skipped_rows": self.skipped_rows,
            "files_written": self.files_written,
            "jobs": self.jobs.len(),
        })
    }
}
