//! The analysis Clockwork's artifact scripts did offline (reference A.5),
//! live: per model and per window of `window_s` (4 s by default, the SLO
//! experiments' window) goodput, throughput, SLO attainment and violation
//! rate, latency percentiles, cold-start share, mean batch size Σb²/Σb;
//! prediction and completion error distributions; GPU and PCIe utilisation
//! from the actions' worker durations.
//!
//! Beyond Clockwork: each request's latency split into queueing (arrival →
//! its infer action sent), network (send → worker received, plus worker sent
//! → result received), execution (worker received → result sent) and
//! controller (result received → response sent); and a cause for every SLO
//! miss, checked in this order:
//!
//! | cause | when |
//! |---|---|
//! | `error` | the result was neither success nor timeout |
//! | `coldstart` | no copy of the model was loaded when the request arrived |
//! | `late_send` | its action failed with 45 (could not send in time), or the worker received it after the predicted execution start |
//! | `misprediction` | its action finished later than predicted, and finishing as predicted would have met the deadline |
//! | `queueing` | anything else: it waited too long in the controller's queue |

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use crate::rows::{Action, INFER, LOAD_WEIGHTS, NETWORK_SEND_TOO_LATE, Request, SUCCESS, TIMEOUT};
use crate::tsv::{delta_from, goodput_fraction, skew_corrected};

pub const CAUSES: [&str; 5] = ["error", "coldstart", "late_send", "misprediction", "queueing"];
pub const COMPONENTS: [&str; 4] = ["queueing", "network", "execution", "controller"];

/// A request's latency, split (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Split {
    pub queueing: u64,
    pub network: u64,
    pub execution: u64,
    pub controller: u64,
}

impl Split {
    pub fn parts(&self) -> [u64; 4] {
        [self.queueing, self.network, self.execution, self.controller]
    }
}

pub fn split(r: &Request, a: Option<&Action>) -> Split {
    let Some(a) = a.map(skew_corrected) else {
        return Split {
            queueing: r.latency(),
            ..Default::default()
        };
    };
    if a.status == NETWORK_SEND_TOO_LATE || a.action_received == 0 {
        // Never reached the worker: the wait is the controller's.
        return Split {
            queueing: delta_from(a.result_received.min(r.departure), r.arrival),
            controller: delta_from(r.departure, a.result_received),
            ..Default::default()
        };
    }
    Split {
        queueing: delta_from(a.sent, r.arrival),
        network: delta_from(a.action_received, a.sent) + delta_from(a.result_received, a.result_sent),
        execution: delta_from(a.result_sent, a.action_received),
        controller: delta_from(r.departure, a.result_received),
    }
}

/// Why a request missed its SLO; None when it met it.
pub fn miss_cause(r: &Request, a: Option<&Action>) -> Option<&'static str> {
    if r.deadline_met() {
        return None;
    }
    if r.result != SUCCESS && r.result != TIMEOUT {
        return Some("error");
    }
    if r.arrival_copies == 0 {
        return Some("coldstart");
    }
    if let Some(a) = a.map(skew_corrected) {
        let expected_start = a.expected_exec_complete.saturating_sub(a.expected_exec_duration);
        if a.status == NETWORK_SEND_TOO_LATE || (a.action_received > 0 && a.action_received > expected_start) {
            return Some("late_send");
        }
        if a.worker_exec_complete > a.expected_exec_complete && a.expected_exec_complete > 0 {
            let overrun = a.worker_exec_complete - a.expected_exec_complete;
            if r.deadline >= r.arrival && r.departure.saturating_sub(overrun) <= r.deadline {
                return Some("misprediction");
            }
        }
    }
    Some("queueing")
}

/// Quantile of sorted values (nearest rank, linear between): 0 when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// One model's requests in one window.
#[derive(Clone, Debug, Default)]
struct ModelWindow {
    n: u64,
    success: u64,
    good: u64,
    missed: u64,
    cold_success: u64,
    latencies: Vec<f64>,
    split_sum: [u64; 4],
    batch_sum: u64,
    batch_sq_sum: u64,
}

#[derive(Clone, Debug, Default)]
struct GpuWindow {
    infer_ns: u64,
    goodput_ns: u64,
    load_ns: u64,
}

#[derive(Clone, Debug, Default)]
struct Window {
    models: BTreeMap<u64, ModelWindow>,
    gpus: BTreeMap<(u32, u32), GpuWindow>,
    /// (action type name, prediction error s, completion error s)
    errors: Vec<(&'static str, f64, f64)>,
}

/// A metric value, for the plugin to declare and emit.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub unit: &'static str,
    pub counter: bool,
    pub attrs: Vec<(&'static str, String)>,
    pub time: u64,
    pub value: f64,
}

fn gauge(name: &'static str, unit: &'static str, attrs: Vec<(&'static str, String)>, time: u64, value: f64) -> Metric {
    Metric {
        name,
        unit,
        counter: false,
        attrs,
        time,
        value,
    }
}

/// Cumulative figures per model, for the counters and the summary route.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModelTotals {
    pub requests: u64,
    pub success: u64,
    pub good: u64,
    pub coldstarts: u64,
    pub misses: BTreeMap<&'static str, u64>,
    pub split_sum_ns: [u64; 4],
    pub batch_sum: u64,
    pub batch_sq_sum: u64,
    /// Latest latencies (ns), bounded, for percentiles.
    #[serde(skip)]
    recent_latency: VecDeque<u64>,
    pub last_window: Option<WindowSummary>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct WindowSummary {
    pub end_ns: u64,
    pub goodput_rps: f64,
    pub throughput_rps: f64,
    pub slo_attainment: f64,
    pub latency_p50_s: f64,
    pub latency_p99_s: f64,
    pub latency_max_s: f64,
    pub coldstart_share: f64,
    pub mean_batch: f64,
}

/// One analysed request, for the `/requests` route.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Analysed {
    pub request_id: u64,
    pub model_id: u64,
    pub latency_ns: u64,
    pub deadline_met: bool,
    pub split_ns: Split,
    pub miss_cause: Option<&'static str>,
}

const RECENT_LATENCIES: usize = 2000;
const RECENT_REQUESTS: usize = 500;
const ACTIONS_KEPT: usize = 50_000;

pub struct Analysis {
    window_ns: u64,
    lag_ns: u64,
    windows: BTreeMap<u64, Window>,
    actions: HashMap<u64, Action>,
    action_order: VecDeque<u64>,
    /// Requests waiting for their action: (host time received, request).
    pending: VecDeque<(u64, Request)>,
    pub totals: BTreeMap<u64, ModelTotals>,
    pub recent: VecDeque<Analysed>,
    /// Rows that came after their window was closed (counted, not in a window).
    pub late_rows: u64,
    closed_before: u64,
}

impl Analysis {
    pub fn new(window_ns: u64, lag_ns: u64) -> Self {
        Analysis {
            window_ns: window_ns.max(1),
            lag_ns,
            windows: BTreeMap::new(),
            actions: HashMap::new(),
            action_order: VecDeque::new(),
            pending: VecDeque::new(),
            totals: BTreeMap::new(),
            recent: VecDeque::new(),
            late_rows: 0,
            closed_before: 0,
        }
    }

    fn window(&mut self, t: u64) -> Option<&mut Window> {
        let start = t - t % self.window_ns;
        if start < self.closed_before {
            self.late_rows += 1;
            return None;
        }
        Some(self.windows.entry(start).or_default())
    }

    pub fn add_action(&mut self, a: &Action) {
        let fraction = goodput_fraction(a);
        let duration = if a.status == 0 { a.worker_exec_duration } else { 0 };
        if a.action_type == INFER && a.status == 0 {
            let b = a.batch_size as u64;
            let t = self.totals.entry(a.model_id).or_default();
            t.batch_sum += b;
            t.batch_sq_sum += b * b;
        }
        let c = skew_corrected(a);
        if let Some(w) = self.window(a.result_received) {
            let g = w.gpus.entry((a.worker_id, a.gpu_id)).or_default();
            match a.action_type {
                INFER => {
                    g.infer_ns += duration;
                    g.goodput_ns += (duration as f64 * fraction) as u64;
                    if a.status == 0 {
                        let m = w.models.entry(a.model_id).or_default();
                        m.batch_sum += a.batch_size as u64;
                        m.batch_sq_sum += (a.batch_size as u64).pow(2);
                    }
                }
                LOAD_WEIGHTS => g.load_ns += duration,
                _ => {}
            }
            if a.status == 0 && (a.action_type == INFER || a.action_type == LOAD_WEIGHTS) {
                let kind = if a.action_type == INFER { "infer" } else { "load" };
                let pred = (a.worker_exec_duration as f64 - a.expected_exec_duration as f64) / 1e9;
                let comp = (delta_from(c.worker_exec_complete, c.sent) as f64
                    - delta_from(c.expected_exec_complete, c.sent) as f64)
                    / 1e9;
                w.errors.push((kind, pred, comp));
            }
        }
        if self.actions.insert(a.action_id, a.clone()).is_none() {
            self.action_order.push_back(a.action_id);
            if self.action_order.len() > ACTIONS_KEPT
                && let Some(old) = self.action_order.pop_front()
            {
                self.actions.remove(&old);
            }
        }
    }

    /// Queues a request until its action is known (or `lag` passes).
    pub fn add_request(&mut self, now: u64, r: Request) {
        self.pending.push_back((now, r));
    }

    /// Analyses the requests whose action is known or who waited long enough.
    pub fn resolve(&mut self, now: u64, force: bool) {
        let mut keep = VecDeque::new();
        while let Some((at, r)) = self.pending.pop_front() {
            let known = r.action_id == 0 || self.actions.contains_key(&r.action_id);
            if known || force || now.saturating_sub(at) >= self.lag_ns {
                self.analyse(r);
            } else {
                keep.push_back((at, r));
            }
        }
        self.pending = keep;
    }

    fn analyse(&mut self, r: Request) {
        let a = if r.action_id == 0 {
            None
        } else {
            self.actions.get(&r.action_id).cloned()
        };
        let s = split(&r, a.as_ref());
        let cause = miss_cause(&r, a.as_ref());
        let met = r.deadline_met();
        let success = r.result == SUCCESS;
        let t = self.totals.entry(r.model_id).or_default();
        t.requests += 1;
        t.success += success as u64;
        t.good += (success && met) as u64;
        t.coldstarts += (success && r.is_coldstart()) as u64;
        if let Some(c) = cause {
            *t.misses.entry(c).or_default() += 1;
        }
        for (i, v) in s.parts().into_iter().enumerate() {
            t.split_sum_ns[i] += v;
        }
        t.recent_latency.push_back(r.latency());
        if t.recent_latency.len() > RECENT_LATENCIES {
            t.recent_latency.pop_front();
        }
        if let Some(w) = self.window(r.departure) {
            let m = w.models.entry(r.model_id).or_default();
            m.n += 1;
            m.success += success as u64;
            m.good += (success && met) as u64;
            m.missed += (!met) as u64;
            m.cold_success += (success && r.is_coldstart()) as u64;
            m.latencies.push(r.latency() as f64 / 1e9);
            for (i, v) in s.parts().into_iter().enumerate() {
                m.split_sum[i] += v;
            }
        }
        self.recent.push_back(Analysed {
            request_id: r.request_id,
            model_id: r.model_id,
            latency_ns: r.latency(),
            deadline_met: met,
            split_ns: s,
            miss_cause: cause,
        });
        if self.recent.len() > RECENT_REQUESTS {
            self.recent.pop_front();
        }
    }

    /// Closes every window that ended at least `2 × lag` before `now` (all of
    /// them when `force`), returning its metrics, stamped at the window's end.
    pub fn close(&mut self, now: u64, force: bool) -> Vec<Metric> {
        let mut out = Vec::new();
        let secs = self.window_ns as f64 / 1e9;
        let ready: Vec<u64> = self
            .windows
            .keys()
            .copied()
            .filter(|&s| force || s + self.window_ns + 2 * self.lag_ns <= now)
            .collect();
        for start in ready {
            let w = self.windows.remove(&start).expect("listed");
            let end = start + self.window_ns;
            self.closed_before = self.closed_before.max(end);
            for (model, m) in &w.models {
                let ma = || vec![("clockwork.model.id", model.to_string())];
                let mut summary = WindowSummary {
                    end_ns: end,
                    ..Default::default()
                };
                if m.batch_sum > 0 {
                    summary.mean_batch = m.batch_sq_sum as f64 / m.batch_sum as f64;
                    out.push(gauge(
                        "clockwork.batch_size.mean",
                        "{request}",
                        ma(),
                        end,
                        summary.mean_batch,
                    ));
                }
                if m.n > 0 {
                    let mut lat = m.latencies.clone();
                    lat.sort_by(f64::total_cmp);
                    summary.goodput_rps = m.good as f64 / secs;
                    summary.throughput_rps = m.success as f64 / secs;
                    summary.slo_attainment = 1.0 - m.missed as f64 / m.n as f64;
                    summary.latency_p50_s = quantile(&lat, 0.5);
                    summary.latency_p99_s = quantile(&lat, 0.99);
                    summary.latency_max_s = *lat.last().expect("n > 0");
                    summary.coldstart_share = if m.success > 0 {
                        m.cold_success as f64 / m.success as f64
                    } else {
                        0.0
                    };
                    out.push(gauge(
                        "clockwork.goodput",
                        "{request}/s",
                        ma(),
                        end,
                        summary.goodput_rps,
                    ));
                    out.push(gauge(
                        "clockwork.throughput",
                        "{request}/s",
                        ma(),
                        end,
                        summary.throughput_rps,
                    ));
                    out.push(gauge(
                        "clockwork.slo.attainment",
                        "1",
                        ma(),
                        end,
                        summary.slo_attainment,
                    ));
                    out.push(gauge(
                        "clockwork.slo.violation_rate",
                        "1",
                        ma(),
                        end,
                        1.0 - summary.slo_attainment,
                    ));
                    out.push(gauge(
                        "clockwork.coldstart.share",
                        "1",
                        ma(),
                        end,
                        summary.coldstart_share,
                    ));
                    for (q, v) in [
                        ("0.5", summary.latency_p50_s),
                        ("0.99", summary.latency_p99_s),
                        ("1", summary.latency_max_s),
                    ] {
                        let mut a = ma();
                        a.push(("quantile", q.to_string()));
                        out.push(gauge("clockwork.latency", "s", a, end, v));
                    }
                    for (i, c) in COMPONENTS.iter().enumerate() {
                        let mut a = ma();
                        a.push(("clockwork.time.component", c.to_string()));
                        out.push(gauge(
                            "clockwork.request.time",
                            "s",
                            a,
                            end,
                            m.split_sum[i] as f64 / m.n as f64 / 1e9,
                        ));
                    }
                }
                if let Some(t) = self.totals.get_mut(model)
                    && m.n > 0
                {
                    t.last_window = Some(summary);
                }
            }
            for ((worker, gpu), g) in &w.gpus {
                let ga = || {
                    vec![
                        ("clockwork.worker.id", worker.to_string()),
                        ("clockwork.gpu.id", gpu.to_string()),
                    ]
                };
                let span = self.window_ns as f64;
                out.push(gauge(
                    "clockwork.gpu.utilization",
                    "1",
                    ga(),
                    end,
                    g.infer_ns as f64 / span,
                ));
                out.push(gauge(
                    "clockwork.gpu.goodput_utilization",
                    "1",
                    ga(),
                    end,
                    g.goodput_ns as f64 / span,
                ));
                out.push(gauge(
                    "clockwork.pcie.utilization",
                    "1",
                    ga(),
                    end,
                    g.load_ns as f64 / span,
                ));
            }
            for kind in ["infer", "load"] {
                let mut pred: Vec<f64> = w.errors.iter().filter(|e| e.0 == kind).map(|e| e.1).collect();
                let mut comp: Vec<f64> = w.errors.iter().filter(|e| e.0 == kind).map(|e| e.2).collect();
                if pred.is_empty() {
                    continue;
                }
                pred.sort_by(f64::total_cmp);
                comp.sort_by(f64::total_cmp);
                for q in [0.01, 0.5, 0.99] {
                    let a = || vec![("clockwork.action.type", kind.to_string()), ("quantile", q.to_string())];
                    out.push(gauge("clockwork.prediction.error", "s", a(), end, quantile(&pred, q)));
                    out.push(gauge("clockwork.completion.error", "s", a(), end, quantile(&comp, q)));
                }
                let over = pred.iter().filter(|&&e| e < 0.0).count() as f64 / pred.len() as f64;
                out.push(gauge(
                    "clockwork.prediction.over_share",
                    "1",
                    vec![("clockwork.action.type", kind.to_string())],
                    end,
                    over,
                ));
            }
        }
        out
    }

    /// The cumulative counters, stamped `now`.
    pub fn counters(&self, now: u64) -> Vec<Metric> {
        let mut out = Vec::new();
        for (model, t) in &self.totals {
            out.push(Metric {
                name: "clockwork.requests",
                unit: "{request}",
                counter: true,
                attrs: vec![("clockwork.model.id", model.to_string())],
                time: now,
                value: t.requests as f64,
            });
            for c in CAUSES {
                out.push(Metric {
                    name: "clockwork.slo.misses",
                    unit: "{request}",
                    counter: true,
                    attrs: vec![
                        ("clockwork.model.id", model.to_string()),
                        ("clockwork.miss.cause", c.to_string()),
                    ],
                    time: now,
                    value: t.misses.get(c).copied().unwrap_or(0) as f64,
                });
            }
        }
        out
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Latency percentiles over a model's latest requests (s).
    pub fn recent_latency(&self, model: u64) -> (f64, f64, f64) {
        let Some(t) = self.totals.get(&model) else {
            return (0.0, 0.0, 0.0);
        };
        let mut v: Vec<f64> = t.recent_latency.iter().map(|&x| x as f64 / 1e9).collect();
        v.sort_by(f64::total_cmp);
        (quantile(&v, 0.5), quantile(&v, 0.99), v.last().copied().unwrap_or(0.0))
    }
}

#[cfg(test)]
mod tests;
