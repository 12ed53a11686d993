#!/usr/bin/env python3
"""Operation-level traces of simulated dp x pp x tp training jobs, with one
injected cause (or none), for the What-if diagnosis and its benchmark.

Each rank runs its program (1F1B or GPipe over micro-batches; tensor-parallel
collectives inside forward and backward; two data-parallel collectives and the
optimizer at the end of the step) on its own clock. A pipeline receive waits
for its send; with the `gpipe-blocking` schedule a send also waits until its
receive is posted (gloo's `dist.send`: the shape of tests/py/torch_faults.py's
pipeline); a collective ends for its whole group a fixed time after the
last member arrives. Every duration gets a few percent of jitter so that a
healthy run is not exactly its own ideal.

Causes (`--cause`):
  healthy          nothing injected
  slow_worker      one rank's forward and backward x 1.2-3
  slow_link        one node's sends, receives and the collectives it takes part in x 2-5
                   (material and identifiable with tp >= 2: see random_run)
  overlong_stage   one pipeline stage's compute x 1.25-1.6
  seq_imbalance    every (step, replica, micro-batch) scales compute by 0.6-1.6: no culprit
  slow_dataloader  one first-stage rank's input takes 30-100 % of a step
  fail_slow        one rank's compute x 1.5-3 from an onset step on

Output (stdout or --out): JSON {"config", "truth", "nodes", "kinds", "ops"}; each
op is a row [rank, node index, dp, stage, tp, step, micro or null, kind, start_ns, end_ns].
Standard library only.
"""

import argparse
import json
import random
import sys
from collections import deque

SCHEDULES = ["1f1b", "gpipe", "gpipe-blocking"]
CAUSES = ["healthy", "slow_worker", "slow_link", "overlong_stage", "seq_imbalance", "slow_dataloader", "fail_slow"]
GPUS_PER_NODE = 8  # at most; small jobs get smaller nodes, so that they span a few
FWD, BWD = 0, 1

# Shapes the random runs are drawn from: (dp, pp, tp, micro-batches).
SHAPES = [
    (2, 2, 1, 4), (4, 1, 1, 2), (2, 2, 2, 4), (4, 2, 1, 4), (2, 4, 1, 4), (4, 2, 2, 4),
    (8, 2, 2, 4), (4, 4, 2, 4), (8, 4, 2, 4), (4, 2, 8, 4), (16, 4, 2, 4), (8, 4, 8, 4),
    (32, 4, 4, 4), (32, 4, 8, 4), (16, 8, 8, 8), (128, 1, 8, 4), (64, 2, 8, 4),
]


def rank_of(d, s, t, pp, tp):
    return (d * pp + s) * tp + t


def compute_ops(kind, micro, dur, tp):
    """One micro-batch's forward or backward: with tensor parallelism, two
    halves each followed by an all-reduce of the tp group."""
    if tp == 1:
        return [("L", kind, micro, dur)]
    return [("L", kind, micro, dur / 2), ("C", "tp_collective", micro), ("L", kind, micro, dur / 2), ("C", "tp_collective", micro)]


def program(cfg, step, d, s, t, factor):
    """Rank (d, s, t)'s instructions for one step. `factor(kind, micro)`
    scales a compute duration."""
    pp, tp, m_count = cfg["pp"], cfg["tp"], cfg["micro"]
    f = cfg["fwd_ms"] * 1e6
    prog = []
    if s == 0 or s == pp - 1:
        prog.append(("L", "input", None, cfg["input_ms"] * 1e6))

    def fwd(m):
        out = []
        if s > 0:
            out.append(("R", m, FWD))
        out += compute_ops("forward", m, f * factor("forward", m), tp)
        if s < pp - 1:
            out.append(("S", m, FWD))
        return out

    def bwd(m):
        out = []
        if s < pp - 1:
            out.append(("R", m, BWD))
        out += compute_ops("backward", m, 2 * f * factor("backward", m), tp)
        if s > 0:
            out.append(("S", m, BWD))
        return out

    if cfg["schedule"] in ("gpipe", "gpipe-blocking"):
        for m in range(m_count):
            prog += fwd(m)
        for m in reversed(range(m_count)):
            prog += bwd(m)
    else:  # 1F1B
        warm = min(pp - s - 1, m_count)
        for m in range(warm):
            prog += fwd(m)
        for i in range(m_count - warm):
            prog += fwd(warm + i)
            prog += bwd(i)
        for i in range(m_count - warm, m_count):
            prog += bwd(i)
    prog.append(("C", "dp_collective", None))
    prog.append(("C", "dp_collective", None))
    prog.append(("L", "optimizer", None, cfg["opt_ms"] * 1e6))
    return prog


def generate(seed, cause="healthy", dp=4, pp=2, tp=2, micro=4, steps=10, schedule="1f1b", onset_range=None):
    """One run. A fail-slow's onset is drawn from `onset_range` (first, last
    step), by default the middle third of the run."""
    rng = random.Random(seed)
    if cause not in CAUSES:
        raise ValueError(f"unknown cause {cause}")
    n_ranks = dp * pp * tp
    # Nodes hold whole tensor-parallel groups; a job spans at least 4 nodes
    # when it can, so that a node is a place within it.
    gpus_per_node = max(tp, min(GPUS_PER_NODE, n_ranks // 4))
    cfg = {
        "seed": seed, "cause": cause, "dp": dp, "pp": pp, "tp": tp, "micro": micro, "steps": steps,
        "schedule": schedule, "ranks": n_ranks, "gpus_per_node": gpus_per_node,
        "fwd_ms": rng.uniform(4, 12), "input_ms": rng.uniform(0.5, 1.5), "opt_ms": rng.uniform(1, 3),
        "jitter": 0.02,
    }
    f = cfg["fwd_ms"]
    send_ns = 0.1 * f * 1e6
    recv_ns = 20e3
    tp_ns = 0.08 * f * 1e6
    dp_ns = [0.3 * f * micro * 1e6 / 2 * rng.uniform(0.8, 1.2) for _ in range(2)]
    node_of = lambda r: r // gpus_per_node  # noqa: E731
    n_nodes = (n_ranks + gpus_per_node - 1) // gpus_per_node

    truth = {"cause": cause}
    slow_rank = None
    slow_factor = 1.0
    onset = 0
    slow_node = None
    link_factor = 1.0
    long_stage = None
    stage_factor = 1.0
    loader_rank = None
    loader_ns = 0.0
    if cause in ("slow_worker", "fail_slow"):
        slow_rank = rng.randrange(n_ranks)
        slow_factor = rng.uniform(1.2, 3.0) if cause == "slow_worker" else rng.uniform(1.5, 3.0)
        first, last = onset_range or (steps // 3, (2 * steps) // 3)
        onset = rng.randint(first, last) if cause == "fail_slow" else 0
        truth.update(rank=slow_rank, factor=slow_factor, onset_step=onset)
    elif cause == "slow_link":
        slow_node = rng.randrange(n_nodes)
        link_factor = rng.uniform(2.0, 5.0)
        truth.update(node=slow_node, factor=link_factor)
    elif cause == "overlong_stage":
        if pp < 2:
            raise ValueError("an overlong stage needs pp >= 2")
        long_stage = rng.randrange(pp)
        stage_factor = rng.uniform(1.25, 1.6)
        truth.update(stage=long_stage, factor=stage_factor)
    elif cause == "slow_dataloader":
        d, t = rng.randrange(dp), rng.randrange(tp)
        loader_rank = rank_of(d, 0, t, pp, tp)
        # The pipeline's step is about (micro + pp - 1) forward-backward pairs.
        loader_ns = rng.uniform(0.3, 1.0) * (micro + pp - 1) * 3 * f * 1e6
        truth.update(rank=loader_rank, extra_ms=loader_ns / 1e6)
    if "rank" in truth:
        r = truth["rank"]
        truth.update(node=node_of(r), dp=r // (pp * tp), stage=(r // tp) % pp, tp=r % tp)

    seq = {}
    if cause == "seq_imbalance":
        for st in range(steps):
            for d in range(dp):
                for m in range(micro):
                    seq[(st, d, m)] = rng.uniform(0.6, 1.6)

    jit = cfg["jitter"]

    def jitter():
        return max(0.9, min(1.12, rng.gauss(1.0, jit)))

    # Programs for every rank, all steps concatenated.
    ranks = []
    progs = []
    for d in range(dp):
        for s in range(pp):
            for t in range(tp):
                r = rank_of(d, s, t, pp, tp)
                ranks.append((r, node_of(r), d, s, t))
                prog = []
                for st in range(steps):
                    def factor(kind, m, st=st, d=d, s=s, r=r):
                        x = seq.get((st, d, m), 1.0)
                        if s == long_stage:
                            x *= stage_factor
                        if r == slow_rank and st >= onset:
                            x *= slow_factor
                        return x
                    for ins in program(cfg, st, d, s, t, factor):
                        if ins[0] == "L" and ins[1] == "input" and r == loader_rank:
                            ins = ("L", "input", None, ins[3] + loader_ns)
                        prog.append((st,) + ins)
                progs.append(prog)
    ranks_by_index = ranks
    index_of = {r[0]: i for i, r in enumerate(ranks)}

    # Group sizes of collectives.
    group_members = {}
    for i, (r, node, d, s, t) in enumerate(ranks):
        group_members.setdefault(("dp_collective", s, t), []).append(i)
        group_members.setdefault(("tp_collective", d, s), []).append(i)

    clock = [0.0] * len(ranks)
    pc = [0] * len(ranks)
    rows = []
    send_end = {}
    recv_waiters = {}
    blocking = cfg["schedule"].endswith("-blocking")
    recv_posted = {}
    send_waiters = {}
    coll_seen = [dict() for _ in ranks]
    arrivals = {}
    coll_end = {}
    arrived_flag = [False] * len(ranks)
    ready = deque(range(len(ranks)))
    queued = [True] * len(ranks)

    def emit(i, st, micro_, kind, start, end):
        r, node, d, s, t = ranks_by_index[i]
        rows.append([r, node, d, s, t, st, micro_, kind, int(start), int(end)])

    while ready:
        i = ready.popleft()
        queued[i] = False
        r, node, d, s, t = ranks_by_index[i]
        prog = progs[i]
        while pc[i] < len(prog):
            ins = prog[pc[i]]
            st, op = ins[0], ins[1]
            now = clock[i]
            if op == "L":
                kind, m, dur = ins[2], ins[3], ins[4] * jitter()
                emit(i, st, m, kind, now, now + dur)
                clock[i] = now + dur
            elif op == "S":
                m, direction = ins[2], ins[3]
                key = (st, d, t, m, direction, s)
                if blocking and key not in recv_posted:
                    send_waiters.setdefault(key, []).append(i)
                    break
                dur = send_ns * jitter() * (link_factor if node == slow_node else 1.0)
                end = max(now, recv_posted.get(key, now)) + dur
                emit(i, st, m, "pp_send", now, end)
                clock[i] = end
                send_end[key] = end
                for w in recv_waiters.pop(key, []):
                    if not queued[w]:
                        queued[w] = True
                        ready.append(w)
            elif op == "R":
                m, direction = ins[2], ins[3]
                key = (st, d, t, m, direction, s - 1 if direction == FWD else s + 1)
                if key not in recv_posted:
                    recv_posted[key] = now
                    for w in send_waiters.pop(key, []):
                        if not queued[w]:
                            queued[w] = True
                            ready.append(w)
                if key not in send_end:
                    recv_waiters.setdefault(key, []).append(i)
                    break
                own = recv_ns * jitter() * (link_factor if node == slow_node else 1.0)
                end = max(now, send_end[key]) + own
                emit(i, st, m, "pp_recv", now, end)
                clock[i] = end
            else:  # collective
                kind, m = ins[2], ins[3]
                gkey = (kind, s, t) if kind == "dp_collective" else (kind, d, s)
                occ = coll_seen[i].get((st, kind), 0)
                ikey = (st, gkey, occ)
                if not arrived_flag[i]:
                    arrived_flag[i] = True
                    arr = arrivals.setdefault(ikey, [])
                    arr.append((i, now))
                    members = group_members[gkey]
                    if len(arr) == len(members):
                        base = dp_ns[occ % 2] if kind == "dp_collective" else tp_ns
                        slow = slow_node is not None and any(ranks_by_index[j][1] == slow_node for j in members)
                        coll_end[ikey] = max(a for _, a in arr) + base * jitter() * (link_factor if slow else 1.0)
                        for j, _ in arr:
                            if j != i and not queued[j]:
                                queued[j] = True
                                ready.append(j)
                if ikey not in coll_end:
                    break
                emit(i, st, m, kind, now, coll_end[ikey])
                clock[i] = coll_end[ikey]
                arrived_flag[i] = False
                coll_seen[i][(st, kind)] = occ + 1
            pc[i] += 1
    stuck = [ranks_by_index[i][0] for i in range(len(ranks)) if pc[i] < len(progs[i])]
    if stuck:
        raise RuntimeError(f"simulated job deadlocked: ranks {stuck[:8]}")
    del index_of
    return {
        "config": cfg,
        "truth": truth,
        "nodes": [f"node-{n:03d}" for n in range(n_nodes)],
        "ops": rows,
    }


def random_run(seed, max_ranks=1024, cause=None):
    """A run whose shape and cause are drawn from `seed`. An overlong stage
    needs a pipeline. A slow link needs tensor parallelism: without it a
    node's own traffic is its pipeline sends, a few percent of a step even
    5 times slower, and its data-parallel collectives, which are slow for
    its whole stage (every such group has a member there), where the
    per-stage typical duration absorbs them."""
    rng = random.Random(seed * 7919 + 1)
    cause = cause or rng.choice(CAUSES)
    shapes = [sh for sh in SHAPES if sh[0] * sh[1] * sh[2] <= max_ranks]
    if cause == "overlong_stage":
        shapes = [sh for sh in shapes if sh[1] >= 2]
    if cause == "slow_link":
        shapes = [sh for sh in shapes if sh[2] >= 2]
    dp, pp, tp, micro = rng.choice(shapes)
    schedule = rng.choice(SCHEDULES)
    return generate(seed, cause, dp, pp, tp, micro, 10, schedule)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cause", choices=CAUSES)
    ap.add_argument("--dp", type=int)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--schedule", choices=SCHEDULES, default="1f1b")
    ap.add_argument("--max-ranks", type=int, default=1024, help="with --random: the largest job drawn")
    ap.add_argument("--random", action="store_true", help="draw the shape (and the cause, unless given) from the seed")
    ap.add_argument("--out", help="write here instead of stdout")
    a = ap.parse_args()
    if a.random:
        run = random_run(a.seed, a.max_ranks, a.cause)
    else:
        run = generate(a.seed, a.cause or "healthy", a.dp or 4, a.pp, a.tp, a.micro, a.steps, a.schedule)
    text = json.dumps(run, separators=(",", ":"))
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
