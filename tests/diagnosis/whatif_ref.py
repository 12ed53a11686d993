#!/usr/bin/env python3
"""Offline reference of the What-if diagnosis (OSDI '25 "Understanding
Stragglers in Large Model Training Using What-if Analysis"), written from the
method's definition for checking the plugin's online implementation
(plugins/bottleneck/src/whatif.rs). Plain Python, standard library only, and
deliberately simple rather than fast:

- every operation gets its own duration: a pipeline receive counts from when
  it was posted and its send had finished; where a step's sends block (at
  least 90 % of those whose receive was posted after they began were still
  running then, of at least 4 and a fifth of the matched pairs), such a send met its receiver, counts from that posting, and
  waits for what the receiving rank did before it; a collective (all members of one
  group's k-th collective of that kind in the step) counts from its last
  member's arrival to its last member's end; an operation inside which
  collectives of its rank start counts until the last of those starts (the
  rest of it waited for them: DDP's backward and its gradient all-reduce);
- the typical duration of an operation is the median of the same operation
  (kind, stage, position among its kind in its micro-batch, or in the step for
  step-wide operations) over the window;
- each step is replayed from time zero by relaxing start = max(ends of what it
  waits for) in the order of the actual ends until nothing moves;
- slowdown = replayed actual / replayed ideal; the gain of a subset = share of
  actual - ideal that goes when only its operations are typical. Unlike the
  online code, every rank and every node is tried (up to --exhaustive ranks),
  not only the few with the most excess;
- stage imbalance: the ideal replayed with one stage's compute as long as the
  mean of the other stages' (each stage in turn); the best of these is the
  balanced ideal, and stage_slowdown = ideal / balanced;
- the culprit follows the rules documented on `diagnose` in whatif.rs.

Usage: whatif_ref.py TRACE.json [--slowdown-only] -> JSON on stdout.
"""

import argparse
import json
import statistics
import sys

MIN_SLOWDOWN = 1.05
MIN_STAGE_SLOWDOWN = 1.02
EXPLAINS = 0.5
DOMINANCE = 0.5
INPUT_EXPLAINS = 0.5
# A node whose excess is not communication must recover this much: one machine's ranks share its jitter.
NODE_COMPUTE_EXPLAINS = 0.75
COMPUTE = ("forward", "backward")
COMMUNICATION = ("pp_send", "pp_recv", "dp_collective", "tp_collective")
KINDS = ["forward", "backward", "pp_send", "pp_recv", "dp_collective", "tp_collective", "optimizer", "input", "other"]


class Unit:
    """Something the replay times: one operation, or one collective shared by
    its members."""

    __slots__ = ("kind", "stage", "slot", "step", "ranks", "deps", "own", "order_key")

    def __init__(self, kind, stage, slot, step):
        self.kind, self.stage, self.slot, self.step = kind, stage, slot, step
        self.ranks = []
        self.deps = []
        self.own = 0.0
        self.order_key = (0, 0)


def build(rows):
    ops = [dict(rank=r[0], node=r[1], dp=r[2], stage=r[3], tp=r[4], step=r[5], micro=r[6], kind=r[7], start=r[8], end=r[9]) for r in rows]
    coords = {}
    by_step_rank = {}
    for o in ops:
        coords.setdefault(o["rank"], (o["node"], o["dp"], o["stage"], o["tp"]))
        by_step_rank.setdefault(o["step"], {}).setdefault(o["rank"], []).append(o)
    units = []
    steps = sorted(by_step_rank)
    for step in steps:
        per_rank = by_step_rank[step]
        collectives = {}
        sends = {}
        pending_recvs = []
        for rank in sorted(per_rank):
            seq = sorted(per_rank[rank], key=lambda o: (o["start"], o["end"]))
            node, dp, stage, tp = coords[rank]
            seen_kind_micro = {}
            seen_collective = {}
            seen_p2p = {}
            computed = set()  # (micro, kind) already run on this rank
            previous = None
            for o in seq:
                kind, micro = o["kind"], o["micro"]
                pos = seen_kind_micro.get((micro, kind), 0)
                seen_kind_micro[(micro, kind)] = pos + 1
                slot = (micro is not None, pos)
                if kind in ("dp_collective", "tp_collective"):
                    k = seen_collective.get(kind, 0)
                    seen_collective[kind] = k + 1
                    group = (stage, tp) if kind == "dp_collective" else (dp, stage)
                    ckey = (kind, group, k)
                    if ckey not in collectives:
                        u = Unit(kind, stage, slot, step)
                        u.order_key = None
                        collectives[ckey] = (u, [], [])
                        units.append(u)
                    u, starts, ends = collectives[ckey]
                    starts.append(o["start"])
                    ends.append(o["end"])
                    u.ranks.append(rank)
                else:
                    u = Unit(kind, stage, slot, step)
                    u.ranks.append(rank)
                    inner = [c["start"] for c in seq if c["kind"] in ("dp_collective", "tp_collective") and o["start"] < c["start"] < o["end"]]
                    u.own = float((max(inner) if inner else o["end"]) - o["start"])
                    u.order_key = (o["end"], o["start"])
                    units.append(u)
                    if micro is not None and kind in ("forward", "backward"):
                        computed.add((micro, kind))
                    if micro is not None and kind in ("pp_send", "pp_recv"):
                        if kind == "pp_send":
                            direction = "grad" if (micro, "backward") in computed else "act"
                        else:
                            direction = "grad" if (micro, "forward") in computed else "act"
                        n = seen_p2p.get((kind, micro, direction), 0)
                        seen_p2p[(kind, micro, direction)] = n + 1
                        if kind == "pp_send":
                            sends[(dp, tp, micro, direction, stage, n)] = (u, o["start"], o["end"])
                        else:
                            sender = stage - 1 if direction == "act" else stage + 1
                            pending_recvs.append((u, (dp, tp, micro, direction, sender, n), o["start"], o["end"], previous))
                if previous is not None and previous is not u:
                    u.deps.append(previous)
                previous = u
        for u, starts, ends in collectives.values():
            u.own = float(max(0, max(ends) - max(starts)))
            u.order_key = (max(ends), max(starts))
        # blocking sends: at least 90 % of the sends whose receive was posted
        # after they began were still running at that posting, of at least
        # 4 such pairs and a fifth of the matched ones
        matched = [(k, start) for _, k, start, _, _ in pending_recvs if k in sends]
        posted_after = [(k, start) for k, start in matched if start > sends[k][1]]
        met = sum(1 for k, start in posted_after if sends[k][2] > start)
        blocking = len(posted_after) >= 4 and len(posted_after) * 5 >= len(matched) and met * 10 >= len(posted_after) * 9
        for u, key, start, end, before in pending_recvs:
            if key in sends:
                send, send_start, send_end = sends[key]
                u.deps.append(send)
                u.own = float(max(0, end - max(start, send_end)))
                if blocking and send_start < start < send_end:
                    send.own = float(send_end - start)
                    if before is not None:
                        send.deps.append(before)
    return units, steps, coords


def replay(units_by_step, duration):
    """Sum over steps of the replayed makespan with `duration(unit)`."""
    total = 0.0
    per_step = []
    for seq in units_by_step:
        end = {}
        for _ in range(len(seq) + 1):
            moved = False
            for u in seq:
                start = 0.0
                for d in u.deps:
                    e = end.get(id(d), 0.0)
                    if e > start:
                        start = e
                e = start + duration(u)
                if end.get(id(u)) != e:
                    end[id(u)] = e
                    moved = True
            if not moved:
                break
        makespan = max(end.values()) if end else 0.0
        per_step.append(makespan)
        total += makespan
    return total, per_step


def analyse(trace, slowdown_only=False, exhaustive=128, candidates=16):
    units, steps, coords = build(trace["ops"])
    units_by_step = {}
    for u in units:
        units_by_step.setdefault(u.step, []).append(u)
    ordered = [sorted(units_by_step[s], key=lambda u: u.order_key) for s in steps]

    samples = {}
    for u in units:
        samples.setdefault((u.kind, u.stage, u.slot), []).append(u.own)
    typical_of = {k: statistics.median(v) for k, v in samples.items()}
    typical = {id(u): typical_of[(u.kind, u.stage, u.slot)] for u in units}
    # The same compute operation on the other stages: what a stage would take
    # if it were like them.
    like_others = {}
    for u in units:
        if u.kind in COMPUTE:
            elsewhere = [v for (k, st, sl), v in typical_of.items() if k == u.kind and sl == u.slot and st != u.stage]
            like_others[id(u)] = statistics.fmean(elsewhere) if elsewhere else typical[id(u)]

    actual, actual_steps = replay(ordered, lambda u: u.own)
    ideal, ideal_steps = replay(ordered, lambda u: typical[id(u)])
    stages = sorted({u.stage for u in units})
    stage_costs = []
    bal = ideal
    for s in stages:
        moved = {id(u) for u in units if u.stage == s and u.kind in COMPUTE}
        t, _ = replay(ordered, lambda u: like_others[id(u)] if id(u) in moved else typical[id(u)])
        bal = min(bal, t)
        stage_costs.append({"stage": s, "cost": ideal / t - 1 if t > 0 else 0.0})
    stage_costs.sort(key=lambda c: -c["cost"])
    out = {
        "slowdown": actual / ideal if ideal > 0 else 1.0,
        "stage_slowdown": ideal / bal if bal > 0 else 1.0,
        "actual_ns": actual,
        "ideal_ns": ideal,
        "balanced_ns": bal,
        "stage_costs": stage_costs,
        "step_slowdowns": [a / i if i > 0 else 1.0 for a, i in zip(actual_steps, ideal_steps)],
    }
    if slowdown_only:
        return out

    gap = actual - ideal
    n_steps = len(steps)

    def gain_of(chosen):
        if gap <= n_steps:
            return 0.0
        fixed, _ = replay(ordered, lambda u: typical[id(u)] if id(u) in chosen else u.own)
        return (actual - fixed) / gap

    def cause_of(members):
        excess = {}
        for u in members:
            excess[u.kind] = excess.get(u.kind, 0.0) + u.own - typical[id(u)]
        return max(KINDS, key=lambda k: (excess.get(k, float("-inf")), -KINDS.index(k)))

    by_rank = {}
    by_node = {}
    for u in units:
        for r in u.ranks:
            by_rank.setdefault(r, []).append(u)
        for node in sorted({coords[r][0] for r in u.ranks}):
            by_node.setdefault(node, []).append(u)

    def shortlist(groups, share):
        keys = sorted(groups)
        if len(coords) <= exhaustive:
            return keys
        score = {k: sum((u.own - typical[id(u)]) / share(u) for u in groups[k]) for k in keys}
        return sorted(keys, key=lambda k: -score[k])[:candidates]

    def whole_stage(node):
        """The stage `node` holds whole and alone, else None."""
        stages = {c[2] for c in coords.values() if c[0] == node}
        if len(stages) != 1:
            return None
        (s,) = stages
        return s if all(c[0] == node for c in coords.values() if c[2] == s) else None

    workers = []
    for r in shortlist(by_rank, lambda u: len(u.ranks)):
        node, dp, stage, tp = coords[r]
        workers.append({"rank": r, "node": node, "node_ranks": sum(1 for c in coords.values() if c[0] == node),
                        "node_whole_stage": whole_stage(node),
                        "dp": dp, "stage": stage, "tp": tp,
                        "gain": gain_of({id(u) for u in by_rank[r]}), "cause": cause_of(by_rank[r])})
    workers.sort(key=lambda w: -w["gain"])
    nodes = []
    for n in shortlist(by_node, lambda u: len({coords[r][0] for r in u.ranks})):
        nodes.append({"node": n, "ranks": sum(1 for c in coords.values() if c[0] == n), "whole_stage": whole_stage(n),
                      "gain": gain_of({id(u) for u in by_node[n]}), "cause": cause_of(by_node[n])})
    nodes.sort(key=lambda g: -g["gain"])
    kinds = []
    for k in KINDS:
        members = {id(u) for u in units if u.kind == k}
        if members:
            kinds.append({"kind": k, "gain": gain_of(members)})
    kinds.sort(key=lambda g: -g["gain"])
    compute_gain = gain_of({id(u) for u in units if u.kind in COMPUTE})

    # Per stage: typical compute per (rank, step), against the other stages' mean.
    per_stage = {}
    for u in units:
        if u.kind in COMPUTE:
            tot, pairs = per_stage.setdefault(u.stage, [0.0, set()])
            per_stage[u.stage][0] = tot + typical[id(u)]
            pairs.add((u.ranks[0], u.step))
    mean_compute = {s: v[0] / len(v[1]) for s, v in per_stage.items()}
    excess = {}
    for s in mean_compute:
        others = [v for o, v in mean_compute.items() if o != s]
        excess[s] = mean_compute[s] / statistics.fmean(others) - 1 if others else 0.0

    out.update(ranks=len(coords), workers=workers, nodes=nodes, kinds=kinds, compute_gain=compute_gain,
               stage_excess=excess, worker_share=workers[0]["gain"] if workers else 0.0,
               stage_share=(ideal - bal) / (actual - bal) if actual - bal > n_steps else 0.0)
    out["diagnosis"] = decide(out)
    return out


def decide(a):
    straggling = a["slowdown"] >= MIN_SLOWDOWN
    split = a["stage_slowdown"] >= MIN_STAGE_SLOWDOWN
    costliest = a["stage_costs"][0] if a["stage_costs"] else None
    if not straggling and not split:
        return {"culprit": "none"}
    stage_first = not straggling or a["ideal_ns"] - a["balanced_ns"] >= a["actual_ns"] - a["ideal_ns"]
    if split and stage_first and costliest:
        return {"culprit": "stage", "stage": costliest["stage"]}
    if straggling:
        def leader(candidates):
            # Recovers EXPLAINS, and the runner-up at most DOMINANCE of that.
            if not candidates or candidates[0]["gain"] < EXPLAINS:
                return None
            if len(candidates) > 1 and candidates[1]["gain"] > DOMINANCE * candidates[0]["gain"]:
                return None
            return candidates[0]

        w = leader(a["workers"])
        if w and w["cause"] not in COMMUNICATION:
            return {"culprit": "worker", "rank": w["rank"], "dp": w["dp"], "stage": w["stage"], "cause": w["cause"]}
        n = leader(a["nodes"])
        if n and 2 * n["ranks"] > a["ranks"]:
            n = None  # a node holding most of the job is not a place
        link = (n["node"], n["whole_stage"], n["gain"], n["cause"]) if n else None
        if not link and w and 2 * w["node_ranks"] <= a["ranks"]:
            link = (w["node"], w["node_whole_stage"], w["gain"], w["cause"])
        if link:
            # A node holding one whole stage alone is that stage: with a costly split, the stage.
            if split and costliest and link[1] is not None and link[1] == costliest["stage"]:
                return {"culprit": "stage", "stage": costliest["stage"]}
            if link[3] in COMMUNICATION or link[2] >= NODE_COMPUTE_EXPLAINS:
                return {"culprit": "link", "node": link[0]}
        if a["compute_gain"] >= INPUT_EXPLAINS:
            return {"culprit": "input_imbalance"}
        for k in a["kinds"]:
            if k["kind"] not in COMPUTE and k["gain"] >= EXPLAINS:
                return {"culprit": "op_kind", "kind": k["kind"]}
    if split and costliest:
        return {"culprit": "stage", "stage": costliest["stage"]}
    return {"culprit": "none"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="a trace from simulate.py ('-' for stdin)")
    ap.add_argument("--slowdown-only", action="store_true", help="only the replays, no attribution")
    ap.add_argument("--exhaustive", type=int, default=128, help="try every rank and node up to this many ranks")
    a = ap.parse_args()
    trace = json.load(sys.stdin if a.trace == "-" else open(a.trace))
    print(json.dumps(analyse(trace, a.slowdown_only, a.exhaustive)))


if __name__ == "__main__":
    main()
