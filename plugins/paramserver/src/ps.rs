//! Every hook's logic, with the host passed in as a [`Host`] so it runs in
//! native tests: events of one batch are sorted by time and fed to each
//! job's failure detector, clocks, checkpoints and incidents; the check
//! timer declares silent processes dead; what changes becomes metric points,
//! decisions and log records.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};
use sonde_plugin_sdk::types::{Attribute, Decision, EventBatch, LogRecord, MetricDesc, NodeEvent, Origin, Severity};
use sonde_plugin_sdk::{Finding, MetricRegistry, PointBuffer};

use crate::consistency::{Clocks, Release};
use crate::detector::{Detection, Detector};
use crate::incidents::{Checkpoints, Incident};
use crate::metrics::{
    BLOCKED, CHECKPOINT_DURATION, CHECKPOINT_SHARE, CLOCK, DETECTION_LATENCY, MetricSpec, PHASE_DURATION,
    RECOVERY_DURATION, STALENESS,
};
use crate::settings::Settings;
use sonde_plugin_sdk::Host;

/// One straggler decision per worker at most this often (BSP names the
/// last worker at nearly every barrier).
pub const STRAGGLER_DECISION_EVERY_NS: u64 = 5_000_000_000;

/// Roles whose clock is the server's (the progress tracker), not a worker's.
pub fn is_server(role: &str) -> bool {
    matches!(role, "server" | "ps" | "parameter-server")
}

/// The name a process goes by: `role-index` (`worker-2`), else
/// `role-r<rank>`, else `role@node`.
pub fn process_key(o: &Origin) -> String {
    let role = if o.role.is_empty() { "process" } else { o.role.as_str() };
    if o.index >= 0 {
        format!("{role}-{}", o.index)
    } else if o.rank >= 0 {
        format!("{role}-r{}", o.rank)
    } else if !o.node.is_empty() {
        format!("{role}@{}", o.node)
    } else {
        role.to_string()
    }
}

#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub heartbeats: u64,
    pub clocks: u64,
    pub node_events: u64,
    /// Node events of kinds this plugin does not use.
    pub ignored_events: u64,
    /// Events of jobs other than the `job` setting names.
    pub ignored_other_job: u64,
    pub detections: u64,
    pub incidents: u64,
    /// Jobs whose every process went silent together: ended, not failed.
    pub jobs_ended: u64,
}

pub struct Job {
    pub name: String,
    pub detector: Detector,
    pub clocks: Clocks,
    /// Server clocks: process -> (clock, time).
    pub servers: BTreeMap<String, (u64, u64)>,
    pub roles: BTreeMap<String, String>,
    pub checkpoints: Checkpoints,
    pub incidents: VecDeque<Incident>,
    /// Processes that reported `no-data`: when.
    pub no_data: BTreeMap<String, u64>,
    pub stragglers: Vec<String>,
    pub(crate) straggler_decided: BTreeMap<String, u64>,
    pub first_ns: u64,
    pub last_ns: u64,
    /// When every process of the job went silent together: the job ended
    /// (see `ParamServer::check`); cleared by the next heartbeat.
    pub ended_ns: Option<u64>,
}

impl Job {
    pub(crate) fn new(name: &str, settings: &Settings, time: u64) -> Job {
        Job {
            name: name.to_string(),
            detector: Detector::default(),
            clocks: Clocks::new(settings.consistency),
            servers: BTreeMap::new(),
            roles: BTreeMap::new(),
            checkpoints: Checkpoints::default(),
            incidents: VecDeque::new(),
            no_data: BTreeMap::new(),
            stragglers: Vec::new(),
            straggler_decided: BTreeMap::new(),
            first_ns: time,
            last_ns: time,
            ended_ns: None,
        }
    }

    /// Training time so far: from the job's first report to its latest.
    pub fn span_ns(&self) -> u64 {
        self.last_ns.saturating_sub(self.first_ns)
    }

    /// Share of training time spent checkpointing (0..1).
    pub fn checkpoint_share(&self) -> Option<f64> {
        let span = self.span_ns();
        (span > 0).then(|| self.checkpoints.total_ns() as f64 / span as f64)
    }

    fn open_incident(&mut self, id: u32, process: &str, max: usize) -> &mut Incident {
        if self.incidents.len() >= max {
            // The oldest complete one goes first; else the oldest.
            let at = self.incidents.iter().position(Incident::complete).unwrap_or(0);
            self.incidents.remove(at);
        }
        self.incidents.push_back(Incident::new(id, &self.name, process));
        self.incidents.back_mut().expect("just pushed")
    }

    /// The latest unfinished incident of `process` that `pred` accepts.
    fn incident_of(&mut self, process: &str, pred: impl Fn(&Incident) -> bool) -> Option<&mut Incident> {
        self.incidents
            .iter_mut()
            .rev()
            .find(|i| i.process == process && !i.complete() && pred(i))
    }
}

/// One event of a batch, for sorting by time.
enum Item<'a> {
    Heartbeat,
    Clock(u64),
    Node(&'a NodeEvent),
}

pub struct ParamServer {
    pub settings: Settings,
    pub jobs: BTreeMap<String, Job>,
    pub counters: Counters,
    timer: Option<u64>,
    metrics: MetricRegistry,
    points: PointBuffer,
    pub(crate) next_incident: u32,
    /// Something changed since the state was last saved (`persist.rs`).
    pub(crate) unsaved: bool,
    /// The last save failed (logged once until one succeeds).
    pub(crate) save_failed: bool,
}

impl ParamServer {
    pub fn start(host: &mut dyn Host, settings: Settings) -> ParamServer {
        let mut p = ParamServer {
            settings,
            jobs: BTreeMap::new(),
            counters: Counters::default(),
            timer: None,
            metrics: MetricRegistry::new(),
            points: PointBuffer::new(),
            next_incident: 1,
            unsaved: false,
            save_failed: false,
        };
        let restored = p.restore(host);
        if restored > 0 {
            host.log(
                Severity::Info,
                &format!("paramserver: {restored} job(s) of an earlier run restored"),
            );
        }
        p.follow_jobs(host);
        p
    }

    /// No check timer without a job: the heartbeat check starts with the
    /// first job's first report (jobs are kept for good), so the plugin
    /// thread of a host that runs no parameter-server job never wakes.
    fn follow_jobs(&mut self, host: &mut dyn Host) {
        if !self.jobs.is_empty() && self.timer.is_none() {
            self.set_timer(host);
        }
    }

    fn set_timer(&mut self, host: &mut dyn Host) {
        if let Some(id) = self.timer.take() {
            host.cancel_timer(id);
        }
        self.timer = Some(host.set_timer(self.settings.check_every_ms, true));
    }

    pub fn configure(&mut self, host: &mut dyn Host, new: Settings) {
        let old = std::mem::replace(&mut self.settings, new);
        if old.check_every_ms != self.settings.check_every_ms && self.timer.is_some() {
            self.set_timer(host);
        }
        if old.consistency != self.settings.consistency {
            for job in self.jobs.values_mut() {
                job.clocks.model = self.settings.consistency;
            }
        }
    }

    // ------------------------------------------------------------------
    // Inputs
    // ------------------------------------------------------------------

    pub fn on_events(&mut self, host: &mut dyn Host, batch: &EventBatch) {
        let mut items: Vec<(u64, u32, Item)> = Vec::new();
        if let Some(h) = &batch.heartbeats {
            for i in 0..h.origin.len() {
                items.push((h.time[i], h.origin[i], Item::Heartbeat));
            }
        }
        if let Some(p) = &batch.progress {
            for i in 0..p.origin.len() {
                if batch.names.get(p.name[i] as usize) == Some(&self.settings.clock_name) {
                    items.push((p.time[i], p.origin[i], Item::Clock(p.value[i])));
                }
            }
        }
        for e in &batch.node_events {
            items.push((e.time, e.origin, Item::Node(e)));
        }
        // Stable: reports of one origin at one time keep their order.
        items.sort_by_key(|(t, _, _)| *t);
        let mut clocked: Vec<String> = Vec::new();
        for (time, origin, item) in items {
            let Some(o) = batch.origins.get(origin as usize) else {
                continue;
            };
            if !self.settings.job.is_empty() && self.settings.job != o.job {
                self.counters.ignored_other_job += 1;
                continue;
            }
            let process = process_key(o);
            let job = self
                .jobs
                .entry(o.job.clone())
                .or_insert_with(|| Job::new(&o.job, &self.settings, time));
            job.first_ns = job.first_ns.min(time);
            job.last_ns = job.last_ns.max(time);
            job.roles.entry(process.clone()).or_insert_with(|| o.role.clone());
            match item {
                Item::Heartbeat => {
                    self.counters.heartbeats += 1;
                    self.heartbeat(host, &o.job, &process, time);
                }
                Item::Clock(c) => {
                    self.counters.clocks += 1;
                    if is_server(&o.role) {
                        job.servers.insert(process.clone(), (c, time));
                        let attrs = proc_attrs(&o.job, &process, &o.role);
                        self.point(host, CLOCK, attrs, time, c as f64);
                    } else {
                        let released = job.clocks.report(&process, time, c);
                        let attrs = proc_attrs(&o.job, &process, &o.role);
                        self.point(host, CLOCK, attrs, time, c as f64);
                        self.released(host, &o.job, released);
                        if !clocked.contains(&o.job) {
                            clocked.push(o.job.clone());
                        }
                    }
                }
                Item::Node(e) => {
                    self.counters.node_events += 1;
                    self.node_event(host, &o.job, &process, e);
                }
            }
        }
        for job in clocked {
            self.after_clocks(host, &job);
        }
        self.unsaved = true;
        self.flush(host);
        self.follow_jobs(host);
    }

    fn heartbeat(&mut self, host: &mut dyn Host, job: &str, process: &str, time: u64) {
        let j = self.jobs.get_mut(job).expect("job exists");
        j.ended_ns = None;
        if j.detector.heartbeat(process, time).is_some() {
            host.log(
                Severity::Info,
                &format!("job {job}: {process} is sending heartbeats again"),
            );
            if let Some(inc) = j.incident_of(process, |i| i.has(3) && !i.has(4)) {
                inc.set(4, time, "heartbeat");
            }
        }
    }

    fn node_event(&mut self, host: &mut dyn Host, job: &str, origin_process: &str, e: &NodeEvent) {
        // A launcher or master may report for another process (`process` attribute).
        let named = e.attributes.iter().find_map(|a| match (&*a.key, &a.value) {
            ("process", sonde_plugin_sdk::types::Value::Str(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        });
        let process = named.as_deref().unwrap_or(origin_process).to_string();
        let clock = e.attributes.iter().find_map(|a| match (&*a.key, &a.value) {
            ("clock" | "iteration", sonde_plugin_sdk::types::Value::Int(i)) if *i >= 0 => Some(*i as u64),
            _ => None,
        });
        let t = e.time;
        let max_incidents = self.settings.max_incidents;
        let max_ck = self.settings.max_checkpoints;
        let j = self.jobs.get_mut(job).expect("job exists");
        match e.kind.as_str() {
            "killed" | "failed" | "oom" => {
                let id = self.next_incident;
                match j.incident_of(&process, |i| {
                    i.stages[2].is_none_or(|s| s.source != "event") && i.stages[3].is_some_and(|d| d.time_ns >= t)
                }) {
                    Some(inc) => inc.set(2, t, "event"),
                    None => {
                        self.next_incident += 1;
                        self.counters.incidents += 1;
                        j.open_incident(id, &process, max_incidents).set(2, t, "event");
                    }
                }
                host.log(
                    Severity::Warn,
                    &format!(
                        "job {job}: {process} reported {}{}{}",
                        e.kind,
                        e.exit_code.map_or(String::new(), |c| format!(" (exit code {c})")),
                        if e.reason.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", e.reason)
                        }
                    ),
                );
            }
            "started" => j.detector.revive(&process, t),
            "restarted" => {
                j.detector.revive(&process, t);
                let fit = |i: &Incident| {
                    i.failure_time().is_some_and(|f| f <= t) && i.stages[4].is_none_or(|s| s.source != "event")
                };
                if let Some(inc) = j.incident_of(&process, fit) {
                    inc.set(4, t, "event");
                }
            }
            "recovered" => {
                if let Some(inc) = j.incident_of(&process, |i| i.failure_time().is_some_and(|f| f <= t) && !i.has(5)) {
                    inc.set(5, t, "event");
                }
            }
            "all-recovered" => {
                let mut done = Vec::new();
                for inc in j.incidents.iter_mut() {
                    if !inc.complete() && inc.failure_time().is_some_and(|f| f <= t) {
                        inc.set(6, t, "event");
                        done.push(inc.clone());
                    }
                }
                for inc in done {
                    self.completed(host, job, &inc);
                }
            }
            "checkpoint-begin" => j.checkpoints.begin(&process, t, clock),
            "checkpoint-end" => {
                if let Some(ck) = j.checkpoints.end(&process, t, clock, max_ck) {
                    let share = j.checkpoint_share();
                    let total = j.checkpoints.total_ns();
                    let attrs = vec![Attribute::new("sonde.job", job)];
                    self.point(
                        host,
                        CHECKPOINT_DURATION,
                        attrs.clone(),
                        t,
                        ck.duration_ns() as f64 / 1e9,
                    );
                    if let Some(share) = share {
                        self.point(host, CHECKPOINT_SHARE, attrs, t, share);
                    }
                    host.emit_logs(&[LogRecord {
                        time: t,
                        severity: Severity::Info,
                        event_name: "paramserver.checkpoint".into(),
                        body: json!({
                            "job": job, "process": ck.process, "begin_ns": ck.begin_ns, "end_ns": ck.end_ns,
                            "duration_ms": ck.duration_ns() as f64 / 1e6, "clock": ck.clock,
                            "total_ms": total as f64 / 1e6, "share_of_training": share,
                        })
                        .to_string(),
                        attributes: vec![Attribute::new("sonde.job", job)],
                    }]);
                } else {
                    host.log(
                        Severity::Warn,
                        &format!("job {job}: {process} ended a checkpoint it never began; ignored"),
                    );
                }
            }
            "no-data" => {
                let j = self.jobs.get_mut(job).expect("job exists");
                j.no_data.insert(process.clone(), t);
                j.detector.leave(&process, t);
                let released = j.clocks.leave(&process, t);
                let reason = format!(
                    "job {job}: {process} was given no training data{}; it left the job so the barrier does not wait for it",
                    if e.reason.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", e.reason)
                    }
                );
                host.log(Severity::Warn, &reason);
                host.emit_decision(&Decision {
                    kind: "no-data-node".into(),
                    subject: format!("{job}/{process}"),
                    reason,
                    body: json!({"job": job, "process": process, "time_ns": t, "reason": e.reason}).to_string(),
                    attributes: vec![Attribute::new("sonde.job", job)],
                });
                self.released(host, job, released);
                self.after_clocks(host, job);
            }
            "exited" => {
                let j = self.jobs.get_mut(job).expect("job exists");
                j.detector.leave(&process, t);
            }
            "running" | "pending" => {}
            _ => self.counters.ignored_events += 1,
        }
    }

    /// The check timer: declares silent processes dead.
    pub fn on_timer(&mut self, host: &mut dyn Host, id: u64) {
        if Some(id) != self.timer {
            return;
        }
        let now = host.now();
        let before = (
            self.counters.detections,
            self.counters.incidents,
            self.counters.jobs_ended,
        );
        self.check(host, now);
        let c = &self.counters;
        if before != (c.detections, c.incidents, c.jobs_ended) {
            self.unsaved = true;
        }
        self.flush(host);
        self.save(host);
    }

    /// Declares silent processes dead, unless the whole job went silent:
    /// when no process of the job has been heard from for half the timeout
    /// and at least two were alive, the job ended (its launcher stopped it,
    /// or it finished); that is an ending, not a failure, and its processes
    /// are no longer watched (a heartbeat watches them again). A crash of
    /// every process at once reads the same: heartbeats cannot tell them apart.
    pub fn check(&mut self, host: &mut dyn Host, now: u64) {
        let timeout = self.settings.timeout_ns();
        let jobs: Vec<String> = self.jobs.keys().cloned().collect();
        for job in jobs {
            let j = self.jobs.get_mut(&job).expect("listed");
            let alive_before = j
                .detector
                .procs
                .values()
                .filter(|w| w.liveness == crate::detector::Liveness::Alive)
                .count();
            let found = j.detector.check(now, timeout);
            if found.is_empty() {
                continue;
            }
            let last_heard = j
                .detector
                .procs
                .values()
                .map(|w| w.last_heartbeat_ns)
                .max()
                .unwrap_or(0);
            let silent_job = now.saturating_sub(last_heard) > timeout / 2;
            if j.ended_ns.is_some() || (silent_job && alive_before >= 2) {
                for d in &found {
                    j.detector.procs.remove(&d.process);
                }
                if j.ended_ns.is_none() {
                    j.ended_ns = Some(now);
                    self.counters.jobs_ended += 1;
                    let d = Finding::new(
                        &job,
                        "job-ended",
                        format!(
                            "every process stopped sending heartbeats within {}: the job ended; no failure declared",
                            secs(now.saturating_sub(last_heard))
                        ),
                    )
                    .during(j.first_ns, now)
                    .ended()
                    .evidence(
                        json!({"processes": found.len() + j.detector.procs.len(), "last_heartbeat_ns": last_heard}),
                    )
                    .decision();
                    host.emit_decision(&d);
                }
                continue;
            }
            for d in found {
                self.detected(host, &job, d);
            }
        }
    }

    fn detected(&mut self, host: &mut dyn Host, job: &str, d: Detection) {
        self.counters.detections += 1;
        let max = self.settings.max_incidents;
        let id = self.next_incident;
        let j = self.jobs.get_mut(job).expect("job exists");
        let inc = match j.incident_of(&d.process, |i| {
            !i.has(3) && i.failure_time().is_some_and(|f| f <= d.detected)
        }) {
            Some(inc) => inc,
            None => {
                self.next_incident += 1;
                self.counters.incidents += 1;
                let inc = j.open_incident(id, &d.process, max);
                inc.set(2, d.last_heartbeat, "last-heartbeat");
                inc
            }
        };
        inc.set(3, d.detected, "detector");
        inc.last_heartbeat_ns = Some(d.last_heartbeat);
        let from_kill = inc.detection_latency_from_kill();
        let inc_id = inc.id;
        let role = j.roles.get(&d.process).cloned().unwrap_or_default();
        let from_hb = d.latency_from_heartbeat();
        let reason = format!(
            "{} missed heartbeats for {} (timeout {} s); declared dead",
            d.process,
            secs(from_hb),
            self.settings.heartbeat_timeout_s
        );
        host.log(Severity::Error, &reason);
        let body = json!({
            "job": job, "process": d.process, "incident": inc_id,
            "last_heartbeat_ns": d.last_heartbeat, "detected_ns": d.detected,
            "detection_latency_ms": from_hb as f64 / 1e6,
            "detection_latency_from_kill_ms": from_kill.map(|ns| ns as f64 / 1e6),
            "heartbeat_timeout_s": self.settings.heartbeat_timeout_s,
        });
        host.emit_decision(
            &Finding::new(job, "node-dead", reason.clone())
                .about("process", &d.process)
                .subject(format!("{job}/{}", d.process))
                .during(d.last_heartbeat, d.detected)
                .headline()
                .evidence(body.clone())
                .decision(),
        );
        host.emit_logs(&[LogRecord {
            time: d.detected,
            severity: Severity::Error,
            event_name: "paramserver.failure".into(),
            body: body.to_string(),
            attributes: vec![Attribute::new("sonde.job", job)],
        }]);
        let mut attrs = proc_attrs(job, &d.process, &role);
        attrs.push(Attribute::new("paramserver.latency.from", "last_heartbeat"));
        self.point(host, DETECTION_LATENCY, attrs, d.detected, from_hb as f64 / 1e9);
        if let Some(k) = from_kill {
            let mut attrs = proc_attrs(job, &d.process, &role);
            attrs.push(Attribute::new("paramserver.latency.from", "kill"));
            self.point(host, DETECTION_LATENCY, attrs, d.detected, k as f64 / 1e9);
        }
    }

    fn completed(&mut self, host: &mut dyn Host, job: &str, inc: &Incident) {
        let j = &self.jobs[job];
        let mut body = inc.to_json(&j.checkpoints);
        // The phases are in the body as fields; the markdown table is the route's.
        if let Some(o) = body.as_object_mut() {
            o.remove("table_markdown");
        }
        let phases = inc.phases(&j.checkpoints);
        let t = inc.stages[6].map_or(0, |s| s.time_ns);
        let total: Option<u64> = phases.iter().map(|p| p.map(|(ns, _)| ns)).sum();
        let reason = format!(
            "{} recovered; phases {}",
            inc.process,
            phases
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{}={}", i + 1, p.map_or("?".into(), |(ns, _)| secs(ns))))
                .collect::<Vec<_>>()
                .join(" ")
        );
        host.log(Severity::Info, &format!("{reason}\n{}", inc.markdown(&j.checkpoints)));
        host.emit_decision(&Decision {
            kind: "recovery".into(),
            subject: format!("{job}/{}", inc.process),
            reason,
            body: body.to_string(),
            attributes: vec![Attribute::new("sonde.job", job)],
        });
        host.emit_logs(&[LogRecord {
            time: t,
            severity: Severity::Info,
            event_name: "paramserver.incident".into(),
            body: body.to_string(),
            attributes: vec![Attribute::new("sonde.job", job)],
        }]);
        for (i, p) in phases.iter().enumerate() {
            if let Some((ns, _)) = p {
                let attrs = vec![
                    Attribute::new("sonde.job", job),
                    Attribute::new("paramserver.phase", (i as i64) + 1),
                ];
                self.point(host, PHASE_DURATION, attrs, t, *ns as f64 / 1e9);
            }
        }
        if let Some(total) = total {
            self.point(
                host,
                RECOVERY_DURATION,
                vec![Attribute::new("sonde.job", job)],
                t,
                total as f64 / 1e9,
            );
        }
    }

    fn released(&mut self, host: &mut dyn Host, job: &str, released: Vec<Release>) {
        for r in released {
            let j = &self.jobs[job];
            let blocked = j.clocks.workers.get(&r.worker).map_or(0, |w| w.blocked_ns);
            let role = j.roles.get(&r.worker).cloned().unwrap_or_default();
            self.point(
                host,
                BLOCKED,
                proc_attrs(job, &r.worker, &role),
                r.until,
                blocked as f64 / 1e9,
            );
        }
    }

    /// After a batch's clocks: staleness of every worker, straggler changes.
    fn after_clocks(&mut self, host: &mut dyn Host, job: &str) {
        let threshold = self.settings.straggler_threshold();
        let model = self.settings.consistency;
        let j = self.jobs.get_mut(job).expect("job exists");
        let now = j.clocks.workers.values().map(|w| w.time).max().unwrap_or(0);
        let stale: Vec<(String, String, u64)> = j
            .clocks
            .workers
            .keys()
            .filter_map(|k| {
                Some((
                    k.clone(),
                    j.roles.get(k).cloned().unwrap_or_default(),
                    j.clocks.staleness(k)?,
                ))
            })
            .collect();
        let stragglers = j.clocks.stragglers(threshold);
        let mut decide = Vec::new();
        for s in &stragglers {
            let last = j.straggler_decided.get(s).copied();
            if !j.stragglers.contains(s) && last.is_none_or(|l| now >= l + STRAGGLER_DECISION_EVERY_NS) {
                j.straggler_decided.insert(s.clone(), now);
                let w = &j.clocks.workers[s];
                decide.push(json!({
                    "job": job, "worker": s, "clock": w.clock, "max_clock": j.clocks.max_clock(),
                    "staleness": j.clocks.staleness(s), "threshold": threshold, "model": model.name(),
                    "staleness_bound": model.bound(), "caused_blocked_ms": w.caused_ns as f64 / 1e6,
                }));
            }
        }
        j.stragglers = stragglers;
        for (k, role, s) in stale {
            self.point(host, STALENESS, proc_attrs(job, &k, &role), now, s as f64);
        }
        for body in decide {
            let behind = body["staleness"].as_u64().unwrap_or(0);
            let reason = format!(
                "{} is {behind} clock{} behind the fastest worker (straggler threshold {threshold}, {})",
                body["worker"].as_str().unwrap_or(""),
                if behind == 1 { "" } else { "s" },
                model.name()
            );
            host.emit_decision(&Decision {
                kind: "straggler".into(),
                subject: format!("{job}/{}", body["worker"].as_str().unwrap_or("")),
                reason,
                body: body.to_string(),
                attributes: vec![Attribute::new("sonde.job", job)],
            });
        }
    }

    // ------------------------------------------------------------------
    // Outputs
    // ------------------------------------------------------------------

    fn point(&mut self, host: &mut dyn Host, m: MetricSpec, attrs: Vec<Attribute>, time: u64, value: f64) {
        let desc = MetricDesc::new(m.name, m.kind, m.unit, m.description).with_attributes(attrs);
        match self.metrics.declare_with(&desc, |d| host.declare_metric(d)) {
            Ok(h) => self.points.push(h, time, value),
            Err(e) => host.log(Severity::Warn, &e),
        }
    }

    fn flush(&mut self, host: &mut dyn Host) {
        if !self.points.is_empty() {
            host.emit_points(&self.points.take());
        }
    }

    // ------------------------------------------------------------------
    // Views for the routes
    // ------------------------------------------------------------------

    pub fn job_filter<'a>(&'a self, job: Option<&'a str>) -> impl Iterator<Item = &'a Job> {
        self.jobs.values().filter(move |j| job.is_none_or(|n| j.name == n))
    }

    pub fn clocks_json(&self, j: &Job, now: u64) -> Value {
        let c = &j.clocks;
        json!({
            "job": j.name,
            "model": self.settings.consistency.name(),
            "staleness_bound": self.settings.consistency.bound(),
            "straggler_threshold": self.settings.straggler_threshold(),
            "min_clock": c.min_clock(),
            "max_clock": c.max_clock(),
            "workers": c.workers.iter().map(|(k, w)| json!({
                "worker": k,
                "clock": w.clock,
                "time_ns": w.time,
                "reports": w.reports,
                "staleness": c.staleness(k),
                "blocked_ms": w.blocked_at(now) as f64 / 1e6,
                "blocked_closed_ms": w.blocked_ns as f64 / 1e6,
                "blocks": w.blocks,
                "waiting_since_ns": w.waiting_since(),
                "caused_blocked_ms": w.caused_ns as f64 / 1e6,
                "overtaken": w.overtaken,
                "left": w.left,
                "dead": j.detector.is_dead(k),
                "straggler": j.stragglers.contains(k),
            })).collect::<Vec<_>>(),
            "servers": j.servers.iter().map(|(k, (c, t))| json!({"server": k, "clock": c, "time_ns": t})).collect::<Vec<_>>(),
            "stragglers": j.stragglers,
            "no_data": j.no_data.iter().map(|(k, t)| json!({"process": k, "time_ns": t})).collect::<Vec<_>>(),
        })
    }

    pub fn checkpoints_json(&self, j: &Job) -> Value {
        json!({
            "job": j.name,
            "checkpoints": j.checkpoints.done.iter().map(|c| json!({
                "process": c.process, "begin_ns": c.begin_ns, "end_ns": c.end_ns,
                "duration_ms": c.duration_ns() as f64 / 1e6, "clock": c.clock,
            })).collect::<Vec<_>>(),
            "in_progress": j.checkpoints.in_progress().iter().map(|(p, t)| json!({"process": p, "begin_ns": t})).collect::<Vec<_>>(),
            "total_ms": j.checkpoints.total_ns() as f64 / 1e6,
            "training_ms": j.span_ns() as f64 / 1e6,
            "share_of_training": j.checkpoint_share(),
            "dropped": j.checkpoints.dropped,
            "unmatched_ends": j.checkpoints.unmatched,
        })
    }
}

fn proc_attrs(job: &str, process: &str, role: &str) -> Vec<Attribute> {
    let mut v = vec![
        Attribute::new("sonde.job", job),
        Attribute::new("paramserver.process", process),
    ];
    if !role.is_empty() {
        v.push(Attribute::new("paramserver.role", role));
    }
    v
}

/// "2.05 s" without float formatting machinery beyond integers.
fn secs(ns: u64) -> String {
    let cs = (ns + 5_000_000) / 10_000_000;
    format!("{}.{:02} s", cs / 100, cs % 100)
}
