//! The window as a replay graph: operations placed by rank and step, pipeline
//! sends matched to their receives, a collective's members joined into one
//! node, and the replay over it (see `analyze` for the rules).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::{Op, OpKind};

/// FxHash: the maps here are keyed by small integers on the hot path, and
/// std's SipHash costs several times more for them.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// What a replayed node (one operation, or one collective instance shared
/// by its members) is, for typical durations and for choosing subsets.
#[derive(Clone, Copy)]
pub(super) struct NodeInfo {
    pub(super) kind: OpKind,
    pub(super) stage: u32,
    /// Index of (kind, stage, slot) in `Graph::keys`: the operations that
    /// share a typical duration. The slot, (position among the same kind in
    /// its micro-batch, or in the step on its rank for step-wide operations)
    /// << 1 | has micro-batch, says which operation of the model this is.
    pub(super) key: u32,
}

/// The window as a dependency graph: one node per operation, except that a
/// collective's members share one node (its instance), which starts when the
/// last member arrives and ends for all of them together. Nodes are stored
/// in replay order (each step's in a topological order, step after step), so
/// a replay is one pass over the arrays.
pub(super) struct Graph {
    pub(super) info: Vec<NodeInfo>,
    pub(super) actual: Vec<f64>,
    /// Dense rank indices owning each node (one, or a collective's members).
    pub(super) owner_start: Vec<u32>,
    pub(super) owners: Vec<u32>,
    pub(super) pred_start: Vec<u32>,
    pub(super) preds: Vec<u32>,
    /// Per replayed step: its range of nodes.
    pub(super) step_ranges: Vec<(usize, usize)>,
    /// (kind, stage, slot) of each typical-duration key.
    pub(super) keys: Vec<(OpKind, u32, u32)>,
}

/// The per-rank coordinates of a dense rank index.
#[derive(Clone, Copy)]
pub(super) struct RankInfo {
    pub(super) rank: u32,
    pub(super) node: u32,
    pub(super) dp: u32,
    pub(super) stage: u32,
    pub(super) tp: u32,
}

impl Graph {
    pub(super) fn owners_of(&self, i: usize) -> &[u32] {
        &self.owners[self.owner_start[i] as usize..self.owner_start[i + 1] as usize]
    }

    /// Replays every step from time zero with these durations: a node
    /// starts when all its predecessors have ended. Returns the sum of the
    /// steps' makespans and writes each into `per_step`.
    pub(super) fn replay(&self, dur: &[f64], end: &mut [f64], per_step: &mut [f64]) -> f64 {
        let mut total = 0.0;
        for (s, &(a, b)) in self.step_ranges.iter().enumerate() {
            let mut makespan = 0.0f64;
            for i in a..b {
                let mut start = 0.0f64;
                for &p in &self.preds[self.pred_start[i] as usize..self.pred_start[i + 1] as usize] {
                    // Not f64::max: durations are never NaN, and its NaN
                    // handling costs a tenth of a replay.
                    let e = end[p as usize];
                    if e > start {
                        start = e;
                    }
                }
                let e = start + dur[i];
                end[i] = e;
                if e > makespan {
                    makespan = e;
                }
            }
            per_step[s] = makespan;
            total += makespan;
        }
        total
    }
}

/// Direction of a pipeline transfer: activations go to the next stage,
/// gradients to the previous one.
pub(super) const FWD: u32 = 0;
pub(super) const BWD: u32 = 1;

/// A pipeline transfer's identity: dp rank, tp rank, micro-batch, direction,
/// sending stage, and its position among the same on the rank.
type P2pKey = (u32, u32, u32, u32, u32, u32);

pub(super) type Built = (Graph, Vec<RankInfo>, Vec<u64>, Vec<f64>, Vec<u64>);

/// The part of an [`Op`] the graph is built from, once its rank and step
/// have placed it.
#[derive(Clone, Copy)]
struct Slim {
    start_ns: u64,
    end_ns: u64,
    micro: Option<u32>,
    kind: OpKind,
}

/// Builds the replay graph of the window (see [`analyze`] for the rules)
/// in one go.
#[cfg(test)]
pub(super) fn build(ops: &[Op]) -> Built {
    let mut b = Builder::new(ops);
    b.advance(&mut || true);
    b.finish()
}

/// How many ranks' operations [`Builder::advance`] adds between two looks
/// at whether it may go on: a few hundred operations, well under a
/// millisecond.
const RANKS_PER_LOOK: usize = 16;

/// The replay graph being built, a (step, rank) at a time, so that a large
/// window's build can be spread over several hook calls. Linear in the
/// window but for each (rank, step)'s own sort by start.
pub(super) struct Builder {
    ranks: Vec<RankInfo>,
    steps: Vec<u64>,
    /// Ops bucketed by (step, rank), each bucket ordered by start.
    bstart: Vec<u32>,
    sorted: Vec<Slim>,
    g: Graph,
    key_ids: FxMap<(u8, u32, u32), u32>,
    key_cache: Vec<u32>,
    kept_steps: Vec<u64>,
    measured: Vec<f64>,
    skipped: Vec<u64>,
    s: Scratch,
    /// The step and rank to add next.
    si: usize,
    r: usize,
}

/// Per-step scratch, reused.
struct Scratch {
    edges: Vec<(u32, u32)>,       // (node, pred), step-local ids
    owner_pairs: Vec<(u32, u32)>, // (node, dense rank)
    infos: Vec<NodeInfo>,
    durs: Vec<f64>,
    spans: Vec<(u64, u64)>, // an instance's (last arrival, last end)
    instances: FxMap<(u32, u32, u32, u32), u32>,
    sends: FxMap<P2pKey, (u32, u64, u64)>, // (node, start, end)
    // (receive, its key, start, end, what came before it on its rank)
    recvs: Vec<(u32, P2pKey, u64, u64, Option<u32>)>,
    // Position counters per (micro-batch, kind): a table for the usual few
    // micro-batches, a list beyond.
    slot_table: Vec<u32>,
    slot_list: Vec<(u32, OpKind, u32)>,
    p2p_seen: Vec<(u32, u32, OpKind, u32)>,
    fwd_done: Vec<u32>,
    bwd_done: Vec<u32>,
    pos: Vec<u32>,
    /// The step's first start and last end so far.
    first: u64,
    last: u64,
}

/// Micro-batches below this count their positions in a table.
const TABLE_MICROS: u32 = 1024;
/// The usual keys without hashing: (stage, kind, slot) within these bounds.
const KEY_CACHE_SLOTS: usize = 64;
const KEY_CACHE_STAGES: usize = 64;

impl Builder {
    /// Places the window's operations by step and rank: linear in the window.
    pub(super) fn new(ops: &[Op]) -> Builder {
        // Dense ranks in rank order; a table when rank ids are dense enough.
        let max_rank = ops.iter().map(|o| o.rank).max().unwrap_or(0) as usize;
        let rank_ids: Vec<u32> = if max_rank <= 4 * ops.len() + 4096 {
            let mut seen = vec![false; max_rank + 1];
            ops.iter().for_each(|o| seen[o.rank as usize] = true);
            (0..=max_rank as u32).filter(|&r| seen[r as usize]).collect()
        } else {
            let mut v: Vec<u32> = ops.iter().map(|o| o.rank).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let table: Vec<u32> = if max_rank <= 4 * rank_ids.len() + 4096 {
            let mut t = vec![u32::MAX; max_rank + 1];
            for (i, &r) in rank_ids.iter().enumerate() {
                t[r as usize] = i as u32;
            }
            t
        } else {
            Vec::new()
        };
        let dense = |r: u32| -> usize {
            if table.is_empty() {
                rank_ids.binary_search(&r).expect("a rank seen above")
            } else {
                table[r as usize] as usize
            }
        };
        let mut ranks: Vec<Option<RankInfo>> = vec![None; rank_ids.len()];
        // A window holds a few steps: a sorted list, looked up by bisection.
        let mut steps: Vec<u64> = Vec::new();
        let mut last_step = None;
        for o in ops {
            if last_step != Some(o.step) {
                if let Err(at) = steps.binary_search(&o.step) {
                    steps.insert(at, o.step);
                }
                last_step = Some(o.step);
            }
        }
        let nr = ranks.len();
        let mut max_micro = 0u32;
        let buckets: Vec<u32> = ops
            .iter()
            .map(|o| {
                let d = dense(o.rank);
                ranks[d].get_or_insert(RankInfo {
                    rank: o.rank,
                    node: o.node,
                    dp: o.dp,
                    stage: o.stage,
                    tp: o.tp,
                });
                max_micro = max_micro.max(o.micro.unwrap_or(0));
                let si = steps.binary_search(&o.step).expect("a step seen above");
                (si * nr + d) as u32
            })
            .collect();
        let ranks: Vec<RankInfo> = ranks
            .into_iter()
            .map(|r| r.expect("every dense rank has an op"))
            .collect();

        // Ops bucketed by (step, rank) with a counting sort, each bucket by start.
        let mut bstart = vec![0u32; steps.len() * nr + 1];
        for &b in &buckets {
            bstart[b as usize + 1] += 1;
        }
        for i in 1..bstart.len() {
            bstart[i] += bstart[i - 1];
        }
        let mut fill = bstart.clone();
        // What the graph needs of each op, scattered into bucket order once:
        // everything after reads it in sequence instead of jumping about the
        // caller's array (half a million ops do not fit a cache).
        let mut sorted = vec![
            Slim {
                start_ns: 0,
                end_ns: 0,
                micro: None,
                kind: OpKind::Other
            };
            ops.len()
        ];
        for (o, &b) in ops.iter().zip(&buckets) {
            sorted[fill[b as usize] as usize] = Slim {
                start_ns: o.start_ns,
                end_ns: o.end_ns,
                micro: o.micro,
                kind: o.kind,
            };
            fill[b as usize] += 1;
        }
        drop(buckets);
        let by_start = |o: &Slim| (o.start_ns, o.end_ns);
        for b in 0..steps.len() * nr {
            let bucket = &mut sorted[bstart[b] as usize..bstart[b + 1] as usize];
            // Ranks usually report in order: check before sorting.
            if !bucket.is_sorted_by_key(by_start) {
                bucket.sort_by_key(by_start);
            }
        }

        let mut g = Graph {
            info: Vec::with_capacity(ops.len()),
            actual: Vec::with_capacity(ops.len()),
            owner_start: Vec::with_capacity(ops.len() + 1),
            owners: Vec::with_capacity(ops.len()),
            pred_start: Vec::with_capacity(ops.len() + 1),
            preds: Vec::with_capacity(ops.len() + ops.len() / 4),
            step_ranges: Vec::new(),
            keys: Vec::new(),
        };
        g.owner_start.push(0);
        g.pred_start.push(0);
        let stages_seen = ranks
            .iter()
            .map(|r| r.stage as usize + 1)
            .max()
            .unwrap_or(0)
            .min(KEY_CACHE_STAGES);
        let width = (max_micro.min(TABLE_MICROS) as usize + 2) * 9;
        Builder {
            ranks,
            steps,
            bstart,
            sorted,
            g,
            key_ids: FxMap::default(),
            key_cache: vec![u32::MAX; stages_seen * 9 * KEY_CACHE_SLOTS],
            kept_steps: Vec::new(),
            measured: Vec::new(),
            skipped: Vec::new(),
            s: Scratch {
                edges: Vec::new(),
                owner_pairs: Vec::new(),
                infos: Vec::new(),
                durs: Vec::new(),
                spans: Vec::new(),
                instances: FxMap::default(),
                sends: FxMap::default(),
                recvs: Vec::new(),
                slot_table: vec![0u32; width],
                slot_list: Vec::new(),
                p2p_seen: Vec::new(),
                fwd_done: Vec::new(),
                bwd_done: Vec::new(),
                pos: Vec::new(),
                first: u64::MAX,
                last: 0,
            },
            si: 0,
            r: 0,
        }
    }

    /// Adds (step, rank) after (step, rank), asking `more()` every few ranks
    /// and after each step whether to go on. Returns whether the graph is
    /// complete.
    pub(super) fn advance(&mut self, more: &mut dyn FnMut() -> bool) -> bool {
        let nr = self.ranks.len();
        while self.si < self.steps.len() {
            if self.r == 0 {
                self.begin_step();
            }
            while self.r < nr {
                self.add_rank(self.si, self.r);
                self.r += 1;
                if self.r.is_multiple_of(RANKS_PER_LOOK) && self.r < nr && !more() {
                    return false;
                }
            }
            self.end_step(self.si);
            self.si += 1;
            self.r = 0;
            if self.si < self.steps.len() && !more() {
                return false;
            }
        }
        true
    }

    /// Whether every step is in the graph.
    pub(super) fn done(&self) -> bool {
        self.si >= self.steps.len()
    }

    /// The graph, its ranks, the replayed steps, their measured lengths and
    /// the steps left out.
    pub(super) fn finish(self) -> Built {
        (self.g, self.ranks, self.kept_steps, self.measured, self.skipped)
    }

    fn begin_step(&mut self) {
        let s = &mut self.s;
        s.edges.clear();
        s.owner_pairs.clear();
        s.infos.clear();
        s.durs.clear();
        s.spans.clear();
        s.instances.clear();
        s.sends.clear();
        s.recvs.clear();
        (s.first, s.last) = (u64::MAX, 0);
    }

    /// Rank `r`'s operations of step `si` as nodes, edges and matches.
    fn add_rank(&mut self, si: usize, r: usize) {
        let nr = self.ranks.len();
        let ri = self.ranks[r];
        let b = si * nr + r;
        let seq = &self.sorted[self.bstart[b] as usize..self.bstart[b + 1] as usize];
        if seq.is_empty() {
            return;
        }
        let s = &mut self.s;
        let g = &mut self.g;
        s.slot_table.iter_mut().for_each(|x| *x = 0);
        s.slot_list.clear();
        s.p2p_seen.clear();
        s.fwd_done.clear();
        s.bwd_done.clear();
        let mut coll_seen = [0u32; 9];
        let mut prev: Option<u32> = None;
        for (k, o) in seq.iter().enumerate() {
            s.first = s.first.min(o.start_ns);
            s.last = s.last.max(o.end_ns);
            let position = match o.micro {
                Some(m) if m >= TABLE_MICROS => {
                    match s.slot_list.iter_mut().find(|(mm, k, _)| *mm == m && *k == o.kind) {
                        Some(e) => {
                            e.2 += 1;
                            e.2 - 1
                        }
                        None => {
                            s.slot_list.push((m, o.kind, 1));
                            0
                        }
                    }
                }
                micro => {
                    let row = micro.map_or(0, |m| m as usize + 1);
                    let c = &mut s.slot_table[row * 9 + o.kind.index()];
                    *c += 1;
                    *c - 1
                }
            };
            let slot = (position << 1) | o.micro.is_some() as u32;
            let cached = (slot as usize) < KEY_CACHE_SLOTS && (ri.stage as usize) < KEY_CACHE_STAGES;
            let at = (ri.stage as usize * 9 + o.kind.index()) * KEY_CACHE_SLOTS + slot as usize;
            let key = match cached.then(|| self.key_cache[at]).filter(|&k| k != u32::MAX) {
                Some(k) => k,
                None => {
                    let next_key = self.key_ids.len() as u32;
                    let key = *self
                        .key_ids
                        .entry((o.kind.index() as u8, ri.stage, slot))
                        .or_insert(next_key);
                    if key == next_key {
                        g.keys.push((o.kind, ri.stage, slot));
                    }
                    if cached {
                        self.key_cache[at] = key;
                    }
                    key
                }
            };
            let info = NodeInfo {
                kind: o.kind,
                stage: ri.stage,
                key,
            };
            let node = if o.kind.is_collective() {
                let occ = coll_seen[o.kind.index()];
                coll_seen[o.kind.index()] += 1;
                let group = if o.kind == OpKind::DpCollective {
                    (ri.stage, ri.tp)
                } else {
                    (ri.dp, ri.stage)
                };
                let ikey = (o.kind.index() as u32, group.0, group.1, occ);
                let id = *s.instances.entry(ikey).or_insert_with(|| {
                    s.infos.push(info);
                    s.durs.push(0.0);
                    s.spans.push((0, 0));
                    (s.infos.len() - 1) as u32
                });
                let span = &mut s.spans[id as usize];
                span.0 = span.0.max(o.start_ns);
                span.1 = span.1.max(o.end_ns);
                id
            } else {
                s.infos.push(info);
                // A collective of this rank that starts inside the operation
                // (DDP's gradient all-reduce, called from within backward):
                // what came after the last such start was the wait for it.
                let own_end = seq[k + 1..]
                    .iter()
                    .take_while(|c| c.start_ns < o.end_ns)
                    .filter(|c| c.kind.is_collective() && c.start_ns > o.start_ns)
                    .map(|c| c.start_ns)
                    .max()
                    .unwrap_or(o.end_ns);
                s.durs.push(own_end.saturating_sub(o.start_ns) as f64);
                s.spans.push((0, 0));
                let id = (s.infos.len() - 1) as u32;
                if let Some(m) = o.micro {
                    match o.kind {
                        OpKind::Forward if !s.fwd_done.contains(&m) => s.fwd_done.push(m),
                        OpKind::Backward if !s.bwd_done.contains(&m) => s.bwd_done.push(m),
                        OpKind::PpSend | OpKind::PpRecv => {
                            let dir = match o.kind {
                                OpKind::PpSend if s.bwd_done.contains(&m) => BWD,
                                OpKind::PpRecv if s.fwd_done.contains(&m) => BWD,
                                _ => FWD,
                            };
                            let occ = match s.p2p_seen.iter_mut().find(|e| e.0 == m && e.1 == dir && e.2 == o.kind) {
                                Some(e) => {
                                    e.3 += 1;
                                    e.3 - 1
                                }
                                None => {
                                    s.p2p_seen.push((m, dir, o.kind, 1));
                                    0
                                }
                            };
                            if o.kind == OpKind::PpSend {
                                s.sends
                                    .insert((ri.dp, ri.tp, m, dir, ri.stage, occ), (id, o.start_ns, o.end_ns));
                            } else {
                                let from = if dir == FWD {
                                    ri.stage.checked_sub(1)
                                } else {
                                    Some(ri.stage + 1)
                                };
                                if let Some(from) = from {
                                    s.recvs
                                        .push((id, (ri.dp, ri.tp, m, dir, from, occ), o.start_ns, o.end_ns, prev));
                                }
                            }
                        }
                        _ => {}
                    }
                }
                id
            };
            s.owner_pairs.push((node, r as u32));
            if let Some(p) = prev
                && p != node
            {
                s.edges.push((node, p));
            }
            prev = Some(node);
        }
    }

    /// Step `si`'s matches, then its nodes appended in a topological order
    /// (or the step left out when its dependencies form a cycle).
    fn end_step(&mut self, si: usize) {
        let step = self.steps[si];
        let s = &mut self.s;
        let g = &mut self.g;
        if s.infos.is_empty() {
            return;
        }
        for (i, &(max_start, max_end)) in s.spans.iter().enumerate() {
            if s.infos[i].kind.is_collective() {
                s.durs[i] = max_end.saturating_sub(max_start) as f64;
            }
        }
        // Whether this step's sends block until their receive is posted
        // (gloo's send, NCCL's on its stream): then no send whose receive
        // was posted after it began has ended before that posting. Where
        // sends are buffered (isend), most such sends are over by then, and
        // the few a late posting happened to meet did not wait for it.
        // Fewer than four such pairs, or a fifth of the matched pairs, are
        // too few to tell: a step of buffered sends where a couple of late
        // postings met short sends in flight read as blocking otherwise.
        let (mut matched, mut posted_after, mut met) = (0u32, 0u32, 0u32);
        for &(_, key, start, _, _) in &s.recvs {
            if let Some(&(_, send_start, send_end)) = s.sends.get(&key) {
                matched += 1;
                if start > send_start {
                    posted_after += 1;
                    met += (send_end > start) as u32;
                }
            }
        }
        let blocking = posted_after >= 4 && posted_after * 5 >= matched && met * 10 >= posted_after * 9;
        for &(id, key, start, end, before_recv) in &s.recvs {
            if let Some(&(send, send_start, send_end)) = s.sends.get(&key) {
                s.edges.push((id, send));
                s.durs[id as usize] = end.saturating_sub(start.max(send_end)) as f64;
                // A blocking send meets its receiver: it waited for what the
                // receiving rank did before posting, and only the rest of it
                // was the transfer.
                if blocking && start > send_start && send_end > start {
                    s.durs[send as usize] = send_end.saturating_sub(start) as f64;
                    if let Some(p) = before_recv {
                        s.edges.push((send, p));
                    }
                }
            }
        }

        // Step-local CSR of predecessors and successors, then Kahn's order.
        let m = s.infos.len();
        let csr = |pairs: &[(u32, u32)], by_first: bool| -> (Vec<u32>, Vec<u32>) {
            let mut start = vec![0u32; m + 1];
            for &(a, b) in pairs {
                start[if by_first { a } else { b } as usize + 1] += 1;
            }
            for i in 1..=m {
                start[i] += start[i - 1];
            }
            let mut fill = start.clone();
            let mut out = vec![0u32; pairs.len()];
            for &(a, b) in pairs {
                let (at, val) = if by_first { (a, b) } else { (b, a) };
                out[fill[at as usize] as usize] = val;
                fill[at as usize] += 1;
            }
            (start, out)
        };
        let (pstart, local_preds) = csr(&s.edges, true);
        let (sstart, succ) = csr(&s.edges, false);
        let (ostart, local_owners) = csr(&s.owner_pairs, true);
        let mut indeg: Vec<u32> = (0..m).map(|i| pstart[i + 1] - pstart[i]).collect();
        let mut queue: Vec<u32> = (0..m as u32).filter(|&i| indeg[i as usize] == 0).collect();
        let mut head = 0;
        while head < queue.len() {
            let x = queue[head] as usize;
            head += 1;
            for &s in &succ[sstart[x] as usize..sstart[x + 1] as usize] {
                indeg[s as usize] -= 1;
                if indeg[s as usize] == 0 {
                    queue.push(s);
                }
            }
        }
        if queue.len() != m {
            self.skipped.push(step);
            return;
        }

        // Append in replay order, renumbering.
        let base = g.info.len() as u32;
        s.pos.clear();
        s.pos.resize(m, 0);
        for (k, &x) in queue.iter().enumerate() {
            s.pos[x as usize] = base + k as u32;
        }
        for &x in &queue {
            let x = x as usize;
            g.info.push(s.infos[x]);
            g.actual.push(s.durs[x]);
            g.owners
                .extend_from_slice(&local_owners[ostart[x] as usize..ostart[x + 1] as usize]);
            g.owner_start.push(g.owners.len() as u32);
            g.preds.extend(
                local_preds[pstart[x] as usize..pstart[x + 1] as usize]
                    .iter()
                    .map(|&p| s.pos[p as usize]),
            );
            g.pred_start.push(g.preds.len() as u32);
        }
        g.step_ranges.push((base as usize, g.info.len()));
        self.kept_steps.push(step);
        self.measured.push(s.last.saturating_sub(s.first) as f64);
    }
}
