//! `--ops-ranks N`: a training job of N ranks reporting its operations, the
//! load a cluster master's What-if diagnosis takes (docs/ingest.md, "the
//! `ops` table").
//!
//! The job is dp × pp × tp ranks (pp and tp from `--ops-pp`, `--ops-tp`)
//! running GPipe over `--ops-micro` micro-batches, the shape of
//! `tests/diagnosis/simulate.py`'s jobs: input on the first and last stage,
//! per micro-batch a forward and a backward in two halves each followed by
//! a tensor-parallel all-reduce, pipeline sends and receives between them,
//! two data-parallel collectives and the optimizer at the end (about 47
//! operations per rank and step at pp 4, 4 micro-batches). A step starts
//! every `--step-ms`; its operations are timed by replaying their
//! dependencies (a receive waits for its send, a collective for its last
//! member) with 2 % jitter, so the trace is one a real job could produce.
//!
//! Every operation is one span with `sonde.table = "ops"` and the row as
//! attributes, as the Python client's `sonde.ops` sends it; each rank is a
//! resource (`sonde.job`, `sonde.rank`, `host.name` = its node, `--ranks-per-node`
//! to a node). Once a step has ended, each node sends its ranks' operations
//! in one request, the nodes spread over the next step as agents drift apart.
//!
//! `--slow-rank R` makes rank R's forward and backward `--slow-factor` (2)
//! times longer in the steps that start `--slow-after-s` seconds or more into
//! the run: the injected slow worker the diagnosis should name.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use tokio::sync::mpsc;

/// What `--ops-ranks` runs.
pub struct OpsArgs {
    pub endpoint: String,
    pub ranks: u32,
    pub pp: u32,
    pub tp: u32,
    pub micro: u32,
    pub ranks_per_node: u32,
    pub job: String,
    pub step_ms: u64,
    pub seconds: f64,
    pub slow_rank: Option<u32>,
    pub slow_after_s: f64,
    pub slow_factor: f64,
}

/// Durations of the model's operations, ms. A healthy step is about 0.55 s
/// of a 1 s period, so a rank twice as slow still ends within its second.
const INPUT_MS: f64 = 10.0;
const FORWARD_MS: f64 = 20.0;
const BACKWARD_MS: f64 = 40.0;
const TP_MS: f64 = 1.5;
const SEND_MS: f64 = 1.0;
const TRANSFER_MS: f64 = 0.5;
const DP_MS: f64 = 15.0;
const OPTIMIZER_MS: f64 = 10.0;
const JITTER: f64 = 0.02;

const FWD: u8 = 0;
const BWD: u8 = 1;

#[derive(Clone, Copy)]
enum Ins {
    /// Local work: kind, micro-batch, ms.
    Work(&'static str, i32, f64),
    Recv(u32, u8),
    Send(u32, u8),
    /// A collective: kind, micro-batch, its position among its kind in the step.
    Coll(&'static str, i32, u32),
}

/// A collective instance of a step, by (kind, group, position): members
/// arrived, the last arrival, and its end once all are in.
type Instance = (u32, f64, Option<f64>);

/// One reported operation.
pub struct Op {
    pub micro: i32,
    pub kind: &'static str,
    pub start: u64,
    pub end: u64,
}

struct Coords {
    dp: u32,
    stage: u32,
    tp: u32,
}

fn coords(rank: u32, pp: u32, tp: u32) -> Coords {
    Coords {
        dp: rank / (pp * tp),
        stage: rank / tp % pp,
        tp: rank % tp,
    }
}

/// Rank `c`'s instructions for one step (GPipe: every forward, then every backward).
fn program(c: &Coords, pp: u32, micro: u32, compute: f64) -> Vec<Ins> {
    let mut p = Vec::new();
    let last = pp - 1;
    if c.stage == 0 || c.stage == last {
        p.push(Ins::Work("input", -1, INPUT_MS));
    }
    let mut tp_seq = 0;
    let mut half = |p: &mut Vec<Ins>, kind, m: u32, ms: f64| {
        for _ in 0..2 {
            p.push(Ins::Work(kind, m as i32, ms / 2.0 * compute));
            p.push(Ins::Coll("tp_collective", m as i32, tp_seq));
            tp_seq += 1;
        }
    };
    for m in 0..micro {
        if c.stage > 0 {
            p.push(Ins::Recv(m, FWD));
        }
        half(&mut p, "forward", m, FORWARD_MS);
        if c.stage < last {
            p.push(Ins::Send(m, FWD));
        }
    }
    for m in 0..micro {
        if c.stage < last {
            p.push(Ins::Recv(m, BWD));
        }
        half(&mut p, "backward", m, BACKWARD_MS);
        if c.stage > 0 {
            p.push(Ins::Send(m, BWD));
        }
    }
    p.push(Ins::Coll("dp_collective", -1, 0));
    p.push(Ins::Coll("dp_collective", -1, 1));
    p.push(Ins::Work("optimizer", -1, OPTIMIZER_MS));
    p
}

/// A small deterministic generator (splitmix64): the same run every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `ms` with ±`JITTER` of noise, in ns.
    fn ns(&mut self, ms: f64) -> f64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ms * 1e6 * (1.0 + JITTER * (2.0 * u - 1.0))
    }
}

/// One step of the whole job from `t0` (ns): each rank's operations, by
/// replaying every rank's program over its dependencies.
pub fn step(a: &OpsArgs, index: u64, t0: u64, slow: bool) -> Vec<Vec<Op>> {
    let n = a.ranks as usize;
    let mut rng = Rng(index.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5eed);
    let cs: Vec<Coords> = (0..a.ranks).map(|r| coords(r, a.pp, a.tp)).collect();
    let progs: Vec<Vec<Ins>> = (0..a.ranks)
        .map(|r| {
            let factor = if slow && a.slow_rank == Some(r) {
                a.slow_factor
            } else {
                1.0
            };
            program(&cs[r as usize], a.pp, a.micro, factor)
        })
        .collect();
    let mut out: Vec<Vec<Op>> = (0..n).map(|_| Vec::new()).collect();
    let mut pc = vec![0usize; n];
    let mut clock = vec![0.0f64; n];
    let mut arrived = vec![false; n];
    // (dp, tp, receiving stage, micro, direction) -> when the send ended.
    let mut sent: HashMap<(u32, u32, u32, u32, u8), f64> = HashMap::new();
    let mut colls: HashMap<(&str, u32, u32), Instance> = HashMap::new();
    let (dp_size, tp_size) = (a.ranks / (a.pp * a.tp), a.tp);
    loop {
        let mut moved = false;
        for r in 0..n {
            let c = &cs[r];
            while let Some(&ins) = progs[r].get(pc[r]) {
                let now = clock[r];
                let (kind, micro, end) = match ins {
                    Ins::Work(kind, micro, ms) => (kind, micro, now + rng.ns(ms)),
                    Ins::Send(m, dir) => {
                        let to = if dir == FWD { c.stage + 1 } else { c.stage - 1 };
                        let end = now + rng.ns(SEND_MS);
                        sent.insert((c.dp, c.tp, to, m, dir), end);
                        ("pp_send", m as i32, end)
                    }
                    Ins::Recv(m, dir) => {
                        let Some(&s) = sent.get(&(c.dp, c.tp, c.stage, m, dir)) else {
                            break;
                        };
                        ("pp_recv", m as i32, now.max(s) + rng.ns(TRANSFER_MS))
                    }
                    Ins::Coll(kind, micro, seq) => {
                        let (group, size) = if kind == "tp_collective" {
                            (c.dp * a.pp + c.stage, tp_size)
                        } else {
                            (c.stage * a.tp + c.tp, dp_size)
                        };
                        let ms = if kind == "tp_collective" { TP_MS } else { DP_MS };
                        let e = colls.entry((kind, group, seq)).or_insert((0, 0.0, None));
                        if !arrived[r] {
                            arrived[r] = true;
                            e.0 += 1;
                            e.1 = e.1.max(now);
                            if e.0 == size {
                                e.2 = Some(e.1 + rng.ns(ms));
                            }
                        }
                        let Some(end) = e.2 else { break };
                        arrived[r] = false;
                        (kind, micro, end)
                    }
                };
                out[r].push(Op {
                    micro,
                    kind,
                    start: t0 + now as u64,
                    end: t0 + end as u64,
                });
                clock[r] = end;
                pc[r] += 1;
                moved = true;
            }
        }
        if pc.iter().zip(&progs).all(|(&p, prog)| p == prog.len()) {
            return out;
        }
        assert!(moved, "the step's programs deadlock: a bug in program()");
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
    }
}

fn int(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

fn text(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

/// One node's request: a resource per rank, a span per operation.
fn node_request(a: &OpsArgs, node: u32, step: u64, ops: &[Vec<Op>], ids: &mut u64) -> ExportTraceServiceRequest {
    let first = node * a.ranks_per_node;
    let resource_spans = (first..(first + a.ranks_per_node).min(a.ranks))
        .map(|rank| {
            let c = coords(rank, a.pp, a.tp);
            let spans = ops[rank as usize]
                .iter()
                .map(|op| {
                    *ids += 1;
                    Span {
                        trace_id: (*ids as u128 | 1 << 64).to_be_bytes().to_vec(),
                        span_id: ids.to_be_bytes().to_vec(),
                        name: "sonde.op".into(),
                        start_time_unix_nano: op.start,
                        end_time_unix_nano: op.end,
                        attributes: vec![
                            text("sonde.table", "ops"),
                            int("step", step as i64),
                            int("micro", op.micro as i64),
                            text("kind", op.kind),
                            int("start_ns", op.start as i64),
                            int("end_ns", op.end as i64),
                            int("dp", c.dp as i64),
                            int("stage", c.stage as i64),
                            int("tp", c.tp as i64),
                        ],
                        ..Default::default()
                    }
                })
                .collect();
            ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        text("service.name", &a.job),
                        text("sonde.job", &a.job),
                        text("host.name", &format!("node-{node}")),
                        int("sonde.rank", rank as i64),
                        int("sonde.local_rank", (rank % a.ranks_per_node) as i64),
                        int("sonde.world_size", a.ranks as i64),
                    ],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "sonde.agent".into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest { resource_spans }
}

#[derive(Default)]
struct Counts {
    requests_ok: AtomicU64,
    ops_ok: AtomicU64,
    ops_rejected: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

/// Runs the job for `a.seconds` and prints one JSON line of what was sent.
pub async fn run(a: OpsArgs) {
    let a = Arc::new(a);
    let nodes = a.ranks.div_ceil(a.ranks_per_node);
    let counts = Arc::new(Counts::default());
    let period = Duration::from_millis(a.step_ms);
    let mut senders = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..nodes {
        let (tx, mut rx) = mpsc::channel::<(Instant, ExportTraceServiceRequest, u64)>(4);
        senders.push(tx);
        let (endpoint, counts) = (a.endpoint.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            let Ok(client) = TraceServiceClient::connect(endpoint.clone()).await else {
                eprintln!("otlp-loadgen: cannot connect to {endpoint}");
                counts.failed.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let mut client = client.max_decoding_message_size(64 << 20);
            while let Some((at, req, n)) = rx.recv().await {
                tokio::time::sleep_until(at.into()).await;
                match client.export(req).await {
                    Ok(resp) => {
                        let rejected = resp.into_inner().partial_success.map_or(0, |p| p.rejected_spans as u64);
                        counts.requests_ok.fetch_add(1, Ordering::Relaxed);
                        counts.ops_ok.fetch_add(n - rejected, Ordering::Relaxed);
                        counts.ops_rejected.fetch_add(rejected, Ordering::Relaxed);
                    }
                    Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(status) => {
                        if counts.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("otlp-loadgen: export failed: {status}");
                        }
                    }
                }
            }
        }));
    }
    let wall0 = crate::now_ns();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(a.seconds);
    let (mut ops_sent, mut steps, mut ids, mut slow_from) = (0u64, 0u64, 0u64, None);
    for k in 0u64.. {
        // Step k runs from t0 + k periods; it is reported once it ended, a period later.
        let report_at = t0 + period * (k as u32 + 1);
        if report_at >= deadline {
            break;
        }
        tokio::time::sleep_until(report_at.into()).await;
        let slow = a.slow_rank.is_some() && (k * a.step_ms) as f64 >= a.slow_after_s * 1000.0;
        if slow && slow_from.is_none() {
            slow_from = Some(k);
        }
        let ops = step(&a, k, wall0 + k * a.step_ms * 1_000_000, slow);
        for (node, tx) in senders.iter().enumerate() {
            let req = node_request(&a, node as u32, k, &ops, &mut ids);
            let n: u64 = req
                .resource_spans
                .iter()
                .map(|r| r.scope_spans[0].spans.len() as u64)
                .sum();
            ops_sent += n;
            let at = report_at + period * node as u32 / nodes;
            // A node still sending its last request (a master too slow to take it) drops this one.
            if tx.try_send((at, req, n)).is_err() {
                counts.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        steps += 1;
    }
    drop(senders);
    for t in tasks {
        let _ = t.await;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "ops_ranks": a.ranks,
            "dp": a.ranks / (a.pp * a.tp),
            "pp": a.pp,
            "tp": a.tp,
            "micro": a.micro,
            "nodes": nodes,
            "job": a.job,
            "steps": steps,
            "seconds": secs,
            "ops_sent": ops_sent,
            "ops_ok": counts.ops_ok.load(Ordering::Relaxed),
            "ops_rejected": counts.ops_rejected.load(Ordering::Relaxed),
            "requests_ok": counts.requests_ok.load(Ordering::Relaxed),
            "requests_refused": counts.refused.load(Ordering::Relaxed),
            "requests_failed": counts.failed.load(Ordering::Relaxed),
            "slow_rank": a.slow_rank,
            "slow_from_step": slow_from,
            "slow_factor": a.slow_factor,
        })
    );
}
