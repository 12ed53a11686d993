//! INFER5's scheduling model (reference A.3), as functions a serving
//! controller can call through the plugin's routes:
//!
//! * [`Slo`]: a request's SLO, logged deadline, scheduling deadline and
//!   weights deadline;
//! * [`decide_batch`]: one GPU's next infer: drop what cannot finish, take the
//!   largest full batch, and the action's timing window;
//! * [`LoadTracker`]: demand per model and GPU, load priorities, and the
//!   eviction order (idle models least-recently-used first).
//!
//! Clockwork's three bugs are not copied: a model whose load priority is not
//! positive is never loaded (Clockwork compared a pointer, `priority <= 0`);
//! a request leaving the queue removes exactly the load demand it added
//! (Clockwork removed the value after exchanging it to 0); a failed load
//! clears the loading flag only when its version matches (Clockwork wrote
//! `version = instance->version`, an assignment).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::estimator::{DEFAULT_CLOCK, ModelEstimator};

pub const MS: u64 = 1_000_000;
pub const BUFFER: u64 = 5 * MS;
pub const MAX_LOADWEIGHTS_SLO: u64 = 25 * MS;
/// How far ahead of now a GPU counts as free (WorkerTracker's `future`).
pub const FUTURE: u64 = MS;

/// The controller's settings that the formulas use.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Config {
    pub default_slo: u64,
    pub schedule_ahead: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            default_slo: 100 * MS,
            schedule_ahead: 10 * MS,
        }
    }
}

/// `min(slo, slo − x)` in unsigned arithmetic: Clockwork's guard that keeps
/// `slo` when x exceeds it.
fn minus_or_keep(slo: u64, x: u64) -> u64 {
    slo.checked_sub(x).unwrap_or(slo)
}

/// One request's deadlines (`RequestImpl::set_slo`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Slo {
    pub slo: u64,
    /// Absolute deadline sent back and logged: arrival + slo.
    pub response_deadline: u64,
    pub exec_slo: u64,
    /// Absolute scheduling deadline: arrival + exec_slo.
    pub deadline: u64,
    pub weights_slo: u64,
}

impl Slo {
    pub fn new(cfg: &Config, arrival: u64, slo_factor: f64, b1_exec: u64, weights_estimate: u64) -> Slo {
        let slo = if slo_factor > 0.0 {
            (b1_exec as f64 * slo_factor) as u64
        } else {
            cfg.default_slo
        };
        let exec_slo = minus_or_keep(slo, BUFFER).max(cfg.schedule_ahead + BUFFER);
        let weights_slo = MAX_LOADWEIGHTS_SLO
            .min(minus_or_keep(
                slo,
                weights_estimate + b1_exec + BUFFER + cfg.schedule_ahead,
            ))
            .max(cfg.schedule_ahead + BUFFER);
        Slo {
            slo,
            response_deadline: arrival + slo,
            exec_slo,
            deadline: arrival + exec_slo,
            weights_slo,
        }
    }
}

/// A queued request, as the controller hands it in.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Queued {
    pub request_id: u64,
    pub arrival_ns: u64,
    #[serde(default)]
    pub slo_factor: f64,
}

/// What the GPU should do next for one model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchDecision {
    /// Requests that cannot finish before their deadline even alone: answer
    /// them with a timeout.
    pub dropped: Vec<u64>,
    /// The batch to run (empty: nothing to run now).
    pub batch: Vec<u64>,
    pub batch_size: u32,
    pub expected_exec_duration_ns: u64,
    pub exec_start_ns: u64,
    pub expected_exec_complete_ns: u64,
    /// The worker's window: not before `earliest`, not after `latest`.
    pub earliest_ns: u64,
    pub latest_ns: u64,
    /// The controller must have started sending by then (else error 45).
    pub send_by_ns: u64,
    /// When to give up waiting for the result.
    pub report_error_at_ns: u64,
    pub reason: String,
}

/// `Model::try_dequeue` for one GPU free at `free_at` (absolute ns) running
/// at `clock` MHz, with the requests in FIFO order. Every supported batch
/// size b has its own view of the queue: from the front, requests whose
/// deadline < free_at + estimate(b) are dropped from that view; the batch is
/// the largest b whose view still holds b requests. A request dropped from
/// the batch-1 view cannot finish at all.
pub fn decide_batch(
    cfg: &Config,
    est: &ModelEstimator,
    queue: &[Queued],
    now: u64,
    free_at: u64,
    clock: u32,
) -> BatchDecision {
    let clock = if clock == 0 { DEFAULT_CLOCK as u32 } else { clock };
    let free_at = free_at.max(now + FUTURE);
    let deadlines: Vec<u64> = queue
        .iter()
        .map(|q| Slo::new(cfg, q.arrival_ns, q.slo_factor, est.b1_exec_ns, est.weights_estimate_ns).deadline)
        .collect();
    let front = |b: u32| -> usize {
        let done = free_at + est.predict(b, clock);
        deadlines.iter().take_while(|&&d| d < done).count()
    };
    let dropped_n = front(1);
    let mut best: Option<(u32, usize)> = None;
    for b in est.batch_sizes().into_iter().rev() {
        let start = front(b);
        if queue.len() - start >= b as usize {
            best = Some((b, start));
            break;
        }
    }
    let mut d = BatchDecision {
        dropped: queue[..dropped_n].iter().map(|q| q.request_id).collect(),
        batch: Vec::new(),
        batch_size: 0,
        expected_exec_duration_ns: 0,
        exec_start_ns: free_at,
        expected_exec_complete_ns: 0,
        earliest_ns: 0,
        latest_ns: 0,
        send_by_ns: 0,
        report_error_at_ns: 0,
        reason: String::new(),
    };
    let Some((b, start)) = best else {
        d.reason = if queue.len() == dropped_n {
            "no request can finish in time: nothing to run".into()
        } else {
            "no batch size fits".into()
        };
        return d;
    };
    let duration = est.predict(b, clock);
    let latest_delta = cfg.schedule_ahead;
    let latest = (now + MS + latest_delta).max(free_at + latest_delta);
    d.batch = queue[start..start + b as usize].iter().map(|q| q.request_id).collect();
    d.batch_size = b;
    d.expected_exec_duration_ns = duration;
    d.expected_exec_complete_ns = free_at + duration;
    d.earliest_ns = now;
    d.latest_ns = latest;
    d.send_by_ns = (now + MS).max(latest.saturating_sub(5 * MS));
    d.report_error_at_ns = latest + duration;
    d.reason = format!(
        "batch {b}: the largest supported size with {b} requests that finish by their deadlines at {clock} MHz{}",
        if dropped_n > 0 {
            format!("; {dropped_n} cannot finish even alone")
        } else {
            String::new()
        }
    );
    d
}

/// Demand one request adds (`load_tracker.cpp`): exec work spread over the
/// SLO the scheduler has, and weights work over the load's SLO.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Demand {
    pub model: u64,
    pub exec_size: f64,
    pub loadweights_size: f64,
}

impl Demand {
    pub fn new(cfg: &Config, model: u64, slo: &Slo, b1_exec: u64) -> Demand {
        let capacity = cfg.default_slo as f64;
        Demand {
            model,
            exec_size: b1_exec as f64 * capacity / slo.exec_slo.max(1) as f64,
            loadweights_size: b1_exec as f64 * capacity / slo.weights_slo.max(1) as f64,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
struct Instance {
    loaded: bool,
    loading: bool,
    version: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
struct ModelDemand {
    outstanding_exec: f64,
    outstanding_loadweights: f64,
    /// Global sequence number of its last use (LRU).
    last_used: u64,
}

/// Demand per model, copies per GPU, and what to load or evict.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LoadTracker {
    capacity: f64,
    gpus: Vec<u32>,
    models: BTreeMap<u64, ModelDemand>,
    instances: BTreeMap<(u32, u64), Instance>,
    seqno: u64,
}

/// A GPU's starting outstanding work: 1 ms.
const INITIAL_OUTSTANDING: f64 = MS as f64;

impl LoadTracker {
    pub fn new(cfg: &Config, gpus: &[u32]) -> Self {
        LoadTracker {
            capacity: cfg.default_slo as f64,
            gpus: gpus.to_vec(),
            ..Default::default()
        }
    }

    fn touch(&mut self, model: u64) {
        self.seqno += 1;
        self.models.entry(model).or_default().last_used = self.seqno;
    }

    pub fn add_request(&mut self, d: &Demand) {
        self.touch(d.model);
        let m = self.models.get_mut(&d.model).expect("touched");
        m.outstanding_exec += d.exec_size;
        m.outstanding_loadweights += d.loadweights_size;
    }

    /// A request left the queue (served, timed out, cancelled): exactly its
    /// own demand goes.
    pub fn remove_request(&mut self, d: &Demand) {
        if let Some(m) = self.models.get_mut(&d.model) {
            m.outstanding_exec = (m.outstanding_exec - d.exec_size).max(0.0);
            m.outstanding_loadweights = (m.outstanding_loadweights - d.loadweights_size).max(0.0);
        }
    }

    pub fn set_loaded(&mut self, gpu: u32, model: u64) {
        let i = self.instances.entry((gpu, model)).or_default();
        i.loaded = true;
        i.loading = false;
        self.touch(model);
    }

    /// A load starts: returns its version (a later evict or load bumps it).
    pub fn start_load(&mut self, gpu: u32, model: u64) -> u64 {
        let i = self.instances.entry((gpu, model)).or_default();
        i.version += 1;
        i.loading = true;
        i.version
    }

    /// A load failed: only the load of this version stops loading.
    pub fn load_error(&mut self, gpu: u32, model: u64, version: u64) -> bool {
        match self.instances.get_mut(&(gpu, model)) {
            Some(i) if i.version == version => {
                i.loading = false;
                i.loaded = false;
                true
            }
            _ => false,
        }
    }

    pub fn evicted(&mut self, gpu: u32, model: u64) {
        if let Some(i) = self.instances.get_mut(&(gpu, model)) {
            i.loaded = false;
            i.loading = false;
            i.version += 1;
        }
    }

    fn holders(&self, model: u64) -> Vec<u32> {
        self.gpus
            .iter()
            .copied()
            .filter(|g| self.instances.get(&(*g, model)).is_some_and(|i| i.loaded || i.loading))
            .collect()
    }

    /// Outstanding work per GPU: 1 ms plus its share of every model it holds,
    /// each model split over its holders in proportion to their weight
    /// (capacity / outstanding). Solved by a few rounds from equal weights.
    pub fn gpu_outstanding(&self) -> BTreeMap<u32, f64> {
        let mut out: BTreeMap<u32, f64> = self.gpus.iter().map(|&g| (g, INITIAL_OUTSTANDING)).collect();
        for _ in 0..4 {
            let mut next: BTreeMap<u32, f64> = self.gpus.iter().map(|&g| (g, INITIAL_OUTSTANDING)).collect();
            for (&m, d) in &self.models {
                let hs = self.holders(m);
                let total_w: f64 = hs.iter().map(|g| self.capacity / out[g]).sum();
                for g in hs {
                    *next.get_mut(&g).expect("known gpu") += d.outstanding_exec * (self.capacity / out[&g]) / total_w;
                }
            }
            out = next;
        }
        out
    }

    /// Load priority of `model` on a GPU that does not hold it: the weights
    /// demand not already served by the GPUs that do.
    pub fn load_priority(&self, model: u64, outstanding: &BTreeMap<u32, f64>) -> f64 {
        let Some(d) = self.models.get(&model) else {
            return 0.0;
        };
        let hs = self.holders(model);
        let total_w: f64 = hs.iter().map(|g| self.capacity / outstanding[g]).sum();
        let served: f64 = hs
            .iter()
            .map(|g| {
                let w = self.capacity / outstanding[g];
                self.capacity * (d.outstanding_loadweights * w / total_w) / outstanding[g]
            })
            .sum();
        d.outstanding_loadweights - served
    }

    /// The model to load on `gpu`: the highest positive priority among
    /// models it does not hold. None when every model's demand is met.
    pub fn model_to_load(&self, gpu: u32) -> Option<(u64, f64)> {
        let out = self.gpu_outstanding();
        self.models
            .keys()
            .filter(|&&m| !self.instances.get(&(gpu, m)).is_some_and(|i| i.loaded || i.loading))
            .map(|&m| (m, self.load_priority(m, &out)))
            .filter(|&(_, p)| p > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// The order to evict `gpu`'s loaded models in: those with no
    /// outstanding demand first, least recently used first; then the rest,
    /// lowest priority first.
    pub fn eviction_order(&self, gpu: u32) -> Vec<u64> {
        let out = self.gpu_outstanding();
        let mut idle = Vec::new();
        let mut busy = Vec::new();
        for (&(g, m), i) in &self.instances {
            if g != gpu || !i.loaded {
                continue;
            }
            let d = self.models.get(&m).cloned().unwrap_or_default();
            if d.outstanding_exec <= 0.0 && d.outstanding_loadweights <= 0.0 {
                idle.push((d.last_used, m));
            } else {
                busy.push((self.load_priority(m, &out), m));
            }
        }
        idle.sort_by_key(|&(used, m)| (used, m));
        busy.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        idle.into_iter()
            .map(|(_, m)| m)
            .chain(busy.into_iter().map(|(_, m)| m))
            .collect()
    }

    pub fn outstanding(&self, model: u64) -> (f64, f64) {
        self.models
            .get(&model)
            .map_or((0.0, 0.0), |d| (d.outstanding_exec, d.outstanding_loadweights))
    }
}

#[cfg(test)]
mod tests;
