//! The statistical MPI state profile: bins of sampled time keyed by (rank,
//! thread, state, MPI function, call site), per job, and what is derived from
//! them: time per state per rank and thread, Work and Stall per function and
//! call site, the imbalance across ranks, the folded-stack text, the flame
//! graph tree of the panel, and the per-rank state timeline (`trace.rs` writes
//! it as a Chrome trace, `pprof.rs` the bins as a pprof profile).
//!
//! The call site is the whole call stack when the probe sent one (the host
//! names it: frames outermost first, separated by `;`), else one frame.
//! Time is kept in integer nanoseconds (ticks x period), so bins from ranks
//! sampling at different frequencies add up exactly.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

pub const NOT_IN_MPI: u8 = 0;
pub const WORK: u8 = 1;
pub const STALL: u8 = 2;

pub fn state_name(state: u8) -> &'static str {
    match state {
        NOT_IN_MPI => "not_in_mpi",
        WORK => "work",
        STALL => "stall",
        _ => "unknown",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BinKey {
    pub rank: i32,
    pub thread: u32,
    pub state: u8,
    pub function: String,
    pub callsite: String,
}

impl BinKey {
    /// The call stack's frames, outermost first.
    pub fn frames(&self) -> impl DoubleEndedIterator<Item = &str> {
        let site = if self.callsite.is_empty() {
            "(unknown call site)"
        } else {
            self.callsite.as_str()
        };
        site.split(';')
    }
}

/// Intervals kept per rank and thread for the timeline; older ones are dropped.
pub const MAX_TIMELINE: usize = 20_000;

/// One job's profile.
#[derive(Debug, Default, Clone)]
pub struct JobProfile {
    pub bins: BTreeMap<BinKey, u64>,
    /// rank -> node it reported from.
    pub nodes: BTreeMap<i32, String>,
    pub world_size: Option<u32>,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Samples of new bins refused beyond `max_bins`.
    pub dropped_samples: u64,
    pub rows: u64,
    /// Changed since the folded file was last written / metrics last emitted.
    pub dirty_file: bool,
    pub dirty_metrics: bool,
    /// Changed since it was last saved in the state store (`persist.rs`).
    pub dirty_state: bool,
    /// (rank, thread) -> end of each probe interval -> ns per state in it.
    pub timeline: BTreeMap<(i32, u32), BTreeMap<u64, [u64; 3]>>,
}

/// One sampled bin as it arrives (a row of `mpi-sample-columns`).
#[derive(Debug, Clone)]
pub struct Sample<'a> {
    pub rank: i32,
    pub node: &'a str,
    pub world_size: Option<u32>,
    pub thread: u32,
    pub time: u64,
    pub state: u8,
    pub function: &'a str,
    pub callsite: &'a str,
    pub count: u32,
    pub period_ns: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StateTimes {
    pub not_in_mpi_s: f64,
    pub work_s: f64,
    pub stall_s: f64,
}

impl StateTimes {
    fn add(&mut self, state: u8, s: f64) {
        match state {
            NOT_IN_MPI => self.not_in_mpi_s += s,
            WORK => self.work_s += s,
            _ => self.stall_s += s,
        }
    }
    pub fn total_s(&self) -> f64 {
        self.not_in_mpi_s + self.work_s + self.stall_s
    }
    pub fn share(&self, x: f64) -> f64 {
        let t = self.total_s();
        if t > 0.0 { x / t } else { 0.0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadSummary {
    pub thread: u32,
    #[serde(flatten)]
    pub times: StateTimes,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankSummary {
    pub rank: i32,
    pub node: String,
    #[serde(flatten)]
    pub times: StateTimes,
    pub work_share: f64,
    pub stall_share: f64,
    pub threads: Vec<ThreadSummary>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteSummary {
    pub function: String,
    pub callsite: String,
    pub work_s: f64,
    pub stall_s: f64,
    /// Ranks this call site was sampled on.
    pub ranks: usize,
    /// The rank with the most Stall here, and how much.
    pub max_stall_rank: i32,
    pub max_stall_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionSummary {
    pub function: String,
    pub work_s: f64,
    pub stall_s: f64,
}

/// How evenly the ranks shared the work.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Imbalance {
    pub ranks: usize,
    /// Largest / mean MPI stall time across ranks (1 = even; 0 when no rank stalled).
    pub stall_max_over_mean: f64,
    pub stall_max_s: f64,
    pub stall_mean_s: f64,
    pub stall_max_rank: i32,
    /// Mean / largest time outside MPI (POP's load balance: 1 = even).
    pub load_balance: f64,
    /// Stall shares from largest to smallest, as ranks: who waited most.
    pub ranks_by_stall: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSummary {
    pub job: String,
    pub world_size: Option<u32>,
    pub first_ns: u64,
    pub last_ns: u64,
    pub rows: u64,
    pub bins: usize,
    pub dropped_samples: u64,
    #[serde(flatten)]
    pub times: StateTimes,
    pub ranks: Vec<RankSummary>,
    pub functions: Vec<FunctionSummary>,
    pub callsites: Vec<SiteSummary>,
    pub imbalance: Imbalance,
}

type SiteAcc = (StateTimes, BTreeMap<i32, f64>);

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl JobProfile {
    /// Adds one row; false when it was dropped (a new bin beyond `max_bins`).
    pub fn add(&mut self, s: &Sample, max_bins: usize) -> bool {
        let ns = u64::from(s.count).saturating_mul(s.period_ns);
        self.rows += 1;
        if self.first_ns == 0 || s.time < self.first_ns {
            self.first_ns = s.time;
        }
        self.last_ns = self.last_ns.max(s.time);
        if !s.node.is_empty() && !self.nodes.contains_key(&s.rank) {
            self.nodes.insert(s.rank, s.node.to_string());
        }
        if s.world_size.is_some() {
            self.world_size = s.world_size;
        }
        let line = self.timeline.entry((s.rank, s.thread)).or_default();
        line.entry(s.time).or_default()[usize::from(s.state.min(STALL))] += ns;
        if line.len() > MAX_TIMELINE {
            line.pop_first();
        }
        let key = BinKey {
            rank: s.rank,
            thread: s.thread,
            state: s.state,
            // Not-in-MPI has no function; anything the probe sent there is noise.
            function: if s.state == NOT_IN_MPI {
                String::new()
            } else {
                s.function.to_string()
            },
            callsite: if s.state == NOT_IN_MPI {
                String::new()
            } else {
                s.callsite.to_string()
            },
        };
        if let Some(v) = self.bins.get_mut(&key) {
            *v = v.saturating_add(ns);
        } else if self.bins.len() >= max_bins {
            self.dropped_samples += u64::from(s.count);
            return false;
        } else {
            self.bins.insert(key, ns);
        }
        self.dirty_file = true;
        self.dirty_metrics = true;
        self.dirty_state = true;
        true
    }

    pub fn rank_times(&self) -> BTreeMap<i32, StateTimes> {
        let mut out: BTreeMap<i32, StateTimes> = BTreeMap::new();
        for (k, &ns) in &self.bins {
            out.entry(k.rank).or_default().add(k.state, secs(ns));
        }
        out
    }

    /// (function, state) -> seconds, for Work and Stall.
    pub fn function_times(&self) -> BTreeMap<(&str, u8), f64> {
        let mut out = BTreeMap::new();
        for (k, &ns) in self.bins.iter().filter(|(k, _)| k.state != NOT_IN_MPI) {
            *out.entry((k.function.as_str(), k.state)).or_insert(0.0) += secs(ns);
        }
        out
    }

    pub fn imbalance(&self) -> Imbalance {
        let ranks = self.rank_times();
        if ranks.is_empty() {
            return Imbalance::default();
        }
        let n = ranks.len() as f64;
        let stall_mean = ranks.values().map(|t| t.stall_s).sum::<f64>() / n;
        let (max_rank, max_t) = ranks
            .iter()
            .max_by(|a, b| a.1.stall_s.total_cmp(&b.1.stall_s))
            .map(|(r, t)| (*r, *t))
            .unwrap();
        let out_max = ranks.values().map(|t| t.not_in_mpi_s).fold(0.0, f64::max);
        let out_mean = ranks.values().map(|t| t.not_in_mpi_s).sum::<f64>() / n;
        let mut by_stall: Vec<(i32, f64)> = ranks.iter().map(|(r, t)| (*r, t.share(t.stall_s))).collect();
        by_stall.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Imbalance {
            ranks: ranks.len(),
            stall_max_over_mean: if stall_mean > 0.0 {
                max_t.stall_s / stall_mean
            } else {
                0.0
            },
            stall_max_s: max_t.stall_s,
            stall_mean_s: stall_mean,
            stall_max_rank: max_rank,
            load_balance: if out_max > 0.0 { out_mean / out_max } else { 1.0 },
            ranks_by_stall: by_stall.into_iter().map(|(r, _)| r).collect(),
        }
    }

    pub fn summary(&self, job: &str) -> JobSummary {
        let mut threads: BTreeMap<(i32, u32), StateTimes> = BTreeMap::new();
        // (function, call site) -> its times, and stall seconds per rank
        let mut sites: BTreeMap<(&str, &str), SiteAcc> = BTreeMap::new();
        let mut all = StateTimes::default();
        for (k, &ns) in &self.bins {
            let s = secs(ns);
            all.add(k.state, s);
            threads.entry((k.rank, k.thread)).or_default().add(k.state, s);
            if k.state != NOT_IN_MPI {
                let e = sites.entry((k.function.as_str(), k.callsite.as_str())).or_default();
                e.0.add(k.state, s);
                let r = e.1.entry(k.rank).or_insert(0.0);
                if k.state == STALL {
                    *r += s;
                }
            }
        }
        let ranks = self
            .rank_times()
            .into_iter()
            .map(|(rank, times)| RankSummary {
                rank,
                node: self.nodes.get(&rank).cloned().unwrap_or_default(),
                work_share: times.share(times.work_s),
                stall_share: times.share(times.stall_s),
                times,
                threads: threads
                    .range((rank, 0)..=(rank, u32::MAX))
                    .map(|(&(_, thread), &times)| ThreadSummary { thread, times })
                    .collect(),
            })
            .collect();
        let mut callsites: Vec<SiteSummary> = sites
            .into_iter()
            .map(|((function, callsite), (t, per_rank))| {
                let (max_stall_rank, max_stall_s) = per_rank
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(r, s)| (*r, *s))
                    .unwrap_or((-1, 0.0));
                SiteSummary {
                    function: function.to_string(),
                    callsite: callsite.to_string(),
                    work_s: t.work_s,
                    stall_s: t.stall_s,
                    ranks: per_rank.len(),
                    max_stall_rank,
                    max_stall_s,
                }
            })
            .collect();
        callsites.sort_by(|a, b| (b.work_s + b.stall_s).total_cmp(&(a.work_s + a.stall_s)));
        let mut functions: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for ((f, state), s) in self.function_times() {
            let e = functions.entry(f).or_default();
            if state == WORK { e.0 += s } else { e.1 += s }
        }
        let mut functions: Vec<FunctionSummary> = functions
            .into_iter()
            .map(|(f, (w, s))| FunctionSummary {
                function: f.to_string(),
                work_s: w,
                stall_s: s,
            })
            .collect();
        functions.sort_by(|a, b| (b.work_s + b.stall_s).total_cmp(&(a.work_s + a.stall_s)));
        JobSummary {
            job: job.to_string(),
            world_size: self.world_size,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            rows: self.rows,
            bins: self.bins.len(),
            dropped_samples: self.dropped_samples,
            times: all,
            ranks,
            functions,
            callsites,
            imbalance: self.imbalance(),
        }
    }

    /// The profile as folded stacks (one line per bin, weight in microseconds):
    /// `rank 0;thread 0;stall;main;solve (app.c:52);exchange (app.c:40);MPI_Sendrecv 2001000`,
    /// or `rank 0;thread 0;not_in_mpi 1024000`. speedscope, flamegraph.pl and
    /// inferno read it as is.
    pub fn folded(&self) -> String {
        let mut out = String::new();
        for (k, &ns) in &self.bins {
            let us = ns / 1000;
            if us == 0 {
                continue;
            }
            out.push_str(&format!("rank {};thread {};{}", k.rank, k.thread, state_name(k.state)));
            if k.state != NOT_IN_MPI {
                for f in k.frames() {
                    out.push(';');
                    out.push_str(&frame(f));
                }
                out.push(';');
                out.push_str(&frame(&k.function));
            }
            out.push_str(&format!(" {us}\n"));
        }
        out
    }

    /// The flame graph of one state's time (`stall` or `work`): a tree of
    /// frames, root first, the MPI function as the leaf; `rank` picks one
    /// rank, `None` adds all. Values in seconds.
    pub fn flame(&self, state: u8, rank: Option<i32>) -> FlameNode {
        let mut root = FlameNode {
            name: "all".into(),
            value: 0.0,
            children: Vec::new(),
        };
        for (k, &ns) in &self.bins {
            if k.state != state || rank.is_some_and(|r| r != k.rank) {
                continue;
            }
            let s = secs(ns);
            root.value += s;
            let mut node = &mut root;
            for f in k.frames().chain(std::iter::once(k.function.as_str())) {
                let i = match node.children.iter().position(|c| c.name == f) {
                    Some(i) => i,
                    None => {
                        node.children.push(FlameNode {
                            name: f.to_string(),
                            value: 0.0,
                            children: Vec::new(),
                        });
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[i];
                node.value += s;
            }
        }
        root.sort();
        root
    }

    pub fn ranks(&self) -> BTreeSet<i32> {
        self.bins.keys().map(|k| k.rank).collect()
    }
}

/// A node of the flame graph: a frame, the seconds under it, its callees.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlameNode {
    pub name: String,
    pub value: f64,
    pub children: Vec<FlameNode>,
}

impl FlameNode {
    /// Callees by name, so the graph is the same however the bins arrived.
    fn sort(&mut self) {
        self.children.sort_by(|a, b| a.name.cmp(&b.name));
        for c in &mut self.children {
            c.sort();
        }
    }
}

/// A frame name safe in a folded line: no ';' (frame separator) or newline.
fn frame(s: &str) -> String {
    s.chars()
        .map(|c| if c == ';' || c == '\n' || c == '\r' { '_' } else { c })
        .collect()
}

/// File name of a job's folded-stack sink: `mpi-<job>.folded`.
pub fn folded_file_name(job: &str) -> String {
    format!("mpi-{}.folded", safe_job_name(job))
}

/// A job's name as part of a file name: [A-Za-z0-9._-] only, at most 100
/// characters, `unnamed` when nothing is left.
pub fn safe_job_name(job: &str) -> String {
    let safe: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if safe.is_empty() { "unnamed".into() } else { safe }
}
