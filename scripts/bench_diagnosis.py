#!/usr/bin/env python3
"""bench-diagnosis, simulated jobs: the What-if diagnosis (the bottleneck
plugin's src/whatif.rs, through its native example binary) on simulated
dp x pp x tp jobs of up to 1 024 ranks with one injected cause each (or
none), against the injected truth and the offline reference
(tests/diagnosis/whatif_ref.py).

Prints a confusion table (injected cause x diagnosed culprit), the share of
injected runs with the right culprit (target >= 95 %), the share of healthy
and random-imbalance runs with no culprit (target >= 98 %), the slowdown's
agreement with the reference (target within 5 %), the time per window at
the largest size, the fail-slow onset's time to detect, and the same targets
over two windows through the plugin's confirmation rule (a rank, node or
kind of operation named only once two windows of different steps name it).
Standard library only.

  python3 scripts/bench_diagnosis.py [--runs 210] [--jobs 2] [--ref-max-ranks 128] [--onset-runs 40]
      [--confirm-runs 140] [--json out.json]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "diagnosis"))
import simulate  # noqa: E402
import whatif_ref  # noqa: E402

BINARY = os.path.join(ROOT, "plugins", "target", "release", "examples", "whatif")
INJECTED = ["slow_worker", "slow_link", "overlong_stage", "slow_dataloader", "fail_slow"]
NO_CULPRIT = ["healthy", "seq_imbalance"]
COLUMNS = ["none", "input_imbalance", "worker", "link", "stage", "op_kind"]

# Sizes: mostly small and middling jobs, one run in eight at 1 024 ranks.
SMALL = [(2, 2, 1, 4), (4, 1, 1, 2), (2, 2, 2, 4), (4, 2, 1, 4), (2, 4, 1, 4), (4, 2, 2, 4), (8, 2, 2, 4), (4, 4, 2, 4)]
MIDDLE = [(8, 4, 2, 4), (4, 2, 8, 4), (16, 4, 2, 4), (8, 4, 8, 4), (32, 4, 4, 4)]
LARGE = [(32, 4, 8, 4), (16, 8, 8, 8), (64, 2, 8, 4), (128, 1, 8, 4)]


def plan(runs, seed0, max_ranks):
    """(seed, cause, shape, schedule) per run: causes in turn, shapes drawn."""
    out = []
    causes = INJECTED + NO_CULPRIT
    for i in range(runs):
        seed = seed0 + i
        rng = random.Random(seed * 104729 + 7)
        cause = causes[i % len(causes)]
        pool = LARGE if i % 8 == 7 else (MIDDLE if i % 8 in (3, 5) else SMALL)
        shapes = [s for s in pool if s[0] * s[1] * s[2] <= max_ranks] or SMALL
        if cause == "overlong_stage":
            shapes = [s for s in shapes if s[1] >= 2]
        if cause == "slow_link":
            shapes = [s for s in shapes if s[2] >= 2]  # why: simulate.random_run
        out.append((seed, cause, rng.choice(shapes), rng.choice(simulate.SCHEDULES)))
    return out


def expected(truth):
    c = truth["cause"]
    if c in ("slow_worker", "fail_slow"):
        return {"culprit": "worker", "rank": truth["rank"], "cause": ("forward", "backward")}
    if c == "slow_dataloader":
        return {"culprit": "worker", "rank": truth["rank"], "cause": ("input",)}
    if c == "slow_link":
        return {"culprit": "link", "node": truth["node"]}
    if c == "overlong_stage":
        return {"culprit": "stage", "stage": truth["stage"]}
    return None


def right(diag, truth):
    want = expected(truth)
    if want is None:
        return diag["culprit"] in ("none", "input_imbalance")
    if diag["culprit"] != want["culprit"]:
        return False
    for k, v in want.items():
        if k == "culprit":
            continue
        if isinstance(v, tuple):
            if diag.get(k) not in v:
                return False
        elif diag.get(k) != v:
            return False
    return True


def one(job):
    seed, cause, (dp, pp, tp, micro), schedule, full_ref_ranks, ref_max_ranks, repeat = job
    t0 = time.monotonic()
    run = simulate.generate(seed, cause, dp, pp, tp, micro, 10, schedule)
    text = json.dumps(run, separators=(",", ":"))
    ranks = dp * pp * tp
    reps = repeat if ranks >= 1024 else 1
    p = subprocess.run([BINARY, "--repeat", str(reps)], input=text.encode(), capture_output=True, check=True)
    online = json.loads(p.stdout)
    ref = whatif_ref.analyse(run, slowdown_only=ranks > full_ref_ranks) if ranks <= ref_max_ranks else {}
    return {
        "seed": seed, "cause": cause, "shape": [dp, pp, tp, micro], "schedule": schedule, "ranks": ranks,
        "ops": online["ops"], "truth": run["truth"], "diagnosis": online["diagnosis"]["culprit"],
        "sentence": online["diagnosis"]["sentence"], "slowdown": online["slowdown"],
        "stage_slowdown": online["stage_slowdown"], "ref_slowdown": ref.get("slowdown"),
        "ref_stage_slowdown": ref.get("stage_slowdown"), "ref_diagnosis": ref.get("diagnosis"),
        "analyze_ms": online["analyze_ms"], "analyze_cpu_ms": online.get("analyze_cpu_ms"),
        "seconds": time.monotonic() - t0,
    }


def confirm_one(job):
    """A run of two windows of 10 steps, diagnosed window by window through
    the plugin's confirmation rule (a rank, node or kind is named only when
    the window before names it too). A fail-slow starts in the first
    window's first steps, so that both windows hold it."""
    seed, cause, (dp, pp, tp, micro), schedule = job
    onset = (1, 4) if cause == "fail_slow" else None
    run = simulate.generate(seed, cause, dp, pp, tp, micro, 20, schedule, onset_range=onset)
    p = subprocess.run([BINARY, "--windows", "2"], input=json.dumps(run, separators=(",", ":")).encode(),
                       capture_output=True, check=True)
    online = json.loads(p.stdout)
    return {"seed": seed, "cause": cause, "ranks": dp * pp * tp, "truth": run["truth"],
            "alone": online["windows"][-1]["alone"], "confirmed": online["confirmed"]["culprit"],
            "first": online["windows"][0]["confirmed"], "sentence": online["confirmed"]["sentence"]}


def onset_one(job):
    """A fail-slow run of 30 steps, analysed as one window: the step at
    which onset.rs declares the episode against the injected onset."""
    seed, (dp, pp, tp, micro), schedule = job
    run = simulate.generate(seed, "fail_slow", dp, pp, tp, micro, 30, schedule, onset_range=(10, 20))
    p = subprocess.run([BINARY], input=json.dumps(run).encode(), capture_output=True, check=True)
    online = json.loads(p.stdout)
    onset = run["truth"]["onset_step"]
    eps = online["episodes"]
    first = eps[0] if eps else None
    return {"seed": seed, "shape": [dp, pp, tp, micro], "factor": run["truth"]["factor"], "onset": onset,
            "found_onset": first["onset"] if first else None, "detected": first["detected"] if first else None,
            "episodes": len(eps), "slowdowns": online["step_slowdowns"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=210)
    ap.add_argument("--seed0", type=int, default=1000)
    ap.add_argument("--max-ranks", type=int, default=1024)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--full-ref-ranks", type=int, default=32,
                    help="the reference's full attribution (every rank and node) up to this many ranks; slowdown only above")
    ap.add_argument("--ref-max-ranks", type=int, default=128,
                    help="the reference's slowdown up to this many ranks (a 1 024-rank window takes it 12-33 s and 0.5 GB)")
    ap.add_argument("--repeat", type=int, default=3, help="analyze runs per 1 024-rank window, the fastest counted")
    ap.add_argument("--onset-runs", type=int, default=40,
                    help="fail-slow runs of 30 steps (onset at step 10-20) for the time to detect; 0 to skip")
    ap.add_argument("--confirm-runs", type=int, default=140,
                    help="runs of two 10-step windows diagnosed through the confirmation rule; 0 to skip")
    ap.add_argument("--json", help="write every run's record here")
    a = ap.parse_args()
    if not os.path.exists(BINARY):
        sys.exit(f"{BINARY} is missing: cargo build --release --example whatif --manifest-path plugins/Cargo.toml -p sonde-bottleneck")

    jobs = [(s, c, sh, sc, a.full_ref_ranks, a.ref_max_ranks, a.repeat) for s, c, sh, sc in plan(a.runs, a.seed0, a.max_ranks)]
    start = time.monotonic()
    results = []
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for r in pool.map(one, jobs):
            results.append(r)
            ok = "ok " if right(r["diagnosis"], r["truth"]) else "MISS"
            print(f"{ok} seed {r['seed']} {r['cause']:<15} {r['ranks']:>5} ranks {r['schedule']:<5} "
                  f"slowdown {r['slowdown']:.3f} (ref {r['ref_slowdown'] or 0:.3f}) -> {r['diagnosis']}", file=sys.stderr, flush=True)
    wall = time.monotonic() - start
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)

    print(f"\n{len(results)} simulated runs, {wall:.0f} s\n")
    print("| injected cause \\ diagnosed | runs | ranks | " + " | ".join(COLUMNS) + " | right culprit |")
    print("|---|---:|---|" + "---:|" * (len(COLUMNS) + 1))
    for cause in INJECTED + NO_CULPRIT:
        rs = [r for r in results if r["cause"] == cause]
        if not rs:
            continue
        counts = {c: sum(1 for r in rs if r["diagnosis"]["culprit"] == c) for c in COLUMNS}
        ok = sum(1 for r in rs if right(r["diagnosis"], r["truth"]))
        sizes = f"{min(r['ranks'] for r in rs)}-{max(r['ranks'] for r in rs)}"
        print(f"| {cause} | {len(rs)} | {sizes} | " + " | ".join(str(counts[c]) for c in COLUMNS) + f" | **{ok}** |")

    injected = [r for r in results if r["cause"] in INJECTED]
    clean = [r for r in results if r["cause"] in NO_CULPRIT]
    inj_ok = sum(1 for r in injected if right(r["diagnosis"], r["truth"]))
    clean_ok = sum(1 for r in clean if right(r["diagnosis"], r["truth"]))
    print()
    if injected:
        print(f"- right culprit among injected runs: {inj_ok} / {len(injected)} = {100 * inj_ok / len(injected):.1f} % (target >= 95 %)")
    if clean:
        print(f"- no culprit among healthy and random-imbalance runs: {clean_ok} / {len(clean)} = {100 * clean_ok / len(clean):.1f} % (target >= 98 %)")
    compared = [r for r in results if r["ref_slowdown"] is not None]
    dev = [abs(r["slowdown"] / r["ref_slowdown"] - 1) for r in compared]
    sdev = [abs(r["stage_slowdown"] / r["ref_stage_slowdown"] - 1) for r in compared]
    within = sum(1 for d in dev if d <= 0.05)
    if dev:
        print(f"- slowdown vs the offline reference (runs up to {max(r['ranks'] for r in compared)} ranks): "
              f"{within} / {len(dev)} within 5 % (target: all); "
              f"largest difference {100 * max(dev):.4f} %, median {100 * statistics.median(dev):.4f} %; "
              f"stage slowdown largest difference {100 * max(sdev):.4f} %")
    full = [r for r in results if r["ref_diagnosis"] is not None]
    if full:
        same = sum(1 for r in full if all(r["diagnosis"].get(k) == v for k, v in r["ref_diagnosis"].items()))
        print(f"- same culprit as the reference (which tries every rank and node; runs up to "
              f"{a.full_ref_ranks} ranks): {same} / {len(full)}")
    largest = max((r["ranks"] for r in results), default=0)
    big = [r for r in results if r["ranks"] == largest]
    for shape in sorted({tuple(r["shape"]) for r in big}):
        rs = [r for r in big if tuple(r["shape"]) == shape]
        wall_ms = statistics.median(r["analyze_ms"] for r in rs)
        cpu = [r["analyze_cpu_ms"] for r in rs if r["analyze_cpu_ms"] is not None]
        cpu_txt = f", on-CPU {statistics.median(cpu):.0f} ms" if cpu else ""
        ops = statistics.median(r["ops"] for r in rs)
        print(f"- time per window at {largest} ranks x 10 steps, dp {shape[0]} x pp {shape[1]} x tp {shape[2]}, "
              f"{shape[3]} micro-batches ({ops:.0f} ops, {ops / largest / 10:.0f} per rank and step; {len(rs)} runs, "
              f"best of {a.repeat} each): analyze + diagnose median {wall_ms:.0f} ms wall{cpu_txt}")
    if a.onset_runs:
        rng = random.Random(a.seed0)
        ojobs = [(a.seed0 + 5000 + i, rng.choice(SMALL + MIDDLE[:2]), rng.choice(simulate.SCHEDULES)) for i in range(a.onset_runs)]
        with ProcessPoolExecutor(max_workers=a.jobs) as pool:
            onsets = list(pool.map(onset_one, ojobs))
        found = [o for o in onsets if o["detected"] is not None]
        in5 = [o for o in found if 0 <= o["detected"] - o["onset"] <= 5]
        dated = [o for o in found if abs(o["found_onset"] - o["onset"]) <= 1]
        delays = [o["detected"] - o["onset"] for o in found]
        print(f"- fail-slow onset ({len(onsets)} runs of 30 steps, x 1.5-3 from step 10-20, up to "
              f"{max(o['shape'][0] * o['shape'][1] * o['shape'][2] for o in onsets)} ranks): detected within 5 steps "
              f"in {len(in5)} / {len(onsets)} (target: all), dated within one step in {len(dated)}; "
              f"steps to detect median {statistics.median(delays) if delays else float('nan'):.0f}, "
              f"max {max(delays) if delays else float('nan')}; runs with more than one episode: "
              f"{sum(1 for o in onsets if o['episodes'] > 1)}")
        if a.json:
            with open(a.json + ".onset.json", "w") as fh:
                json.dump(onsets, fh, indent=1)

    if a.confirm_runs:
        cjobs = plan(a.confirm_runs, a.seed0 + 20000, a.max_ranks)
        with ProcessPoolExecutor(max_workers=a.jobs) as pool:
            confirmed = list(pool.map(confirm_one, cjobs))
        c_inj = [r for r in confirmed if r["cause"] in INJECTED]
        c_clean = [r for r in confirmed if r["cause"] in NO_CULPRIT]
        ok = lambda rs, k: sum(1 for r in rs if right(r[k], r["truth"]))  # noqa: E731
        held = sum(1 for r in confirmed if r["first"]["culprit"] in ("none", "input_imbalance")
                   and r["cause"] in INJECTED and expected(r["truth"])["culprit"] != "stage")
        print(f"- with the confirmation rule ({len(confirmed)} runs of two 10-step windows, up to "
              f"{max(r['ranks'] for r in confirmed)} ranks; the second window's answer): right culprit in "
              f"{ok(c_inj, 'confirmed')} / {len(c_inj)} injected runs (that window alone: {ok(c_inj, 'alone')}); "
              f"no culprit in {ok(c_clean, 'confirmed')} / {len(c_clean)} healthy and random-imbalance runs "
              f"(alone: {ok(c_clean, 'alone')}); a worker, link or kind held back in the first window in {held} "
              f"injected runs")
        for r in confirmed:
            if not right(r["confirmed"], r["truth"]):
                print(f"  - rule miss: seed {r['seed']} {r['cause']} {r['ranks']} ranks: truth {r['truth']} -> "
                      f"{r['confirmed']} ({r['sentence']})")
        if a.json:
            with open(a.json + ".confirm.json", "w") as fh:
                json.dump(confirmed, fh, indent=1)

    misses = [r for r in results if not right(r["diagnosis"], r["truth"])]
    if misses:
        print("\nmisses:")
        for r in misses:
            print(f"- seed {r['seed']} {r['cause']} {r['ranks']} ranks {r['shape']} {r['schedule']}: "
                  f"truth {r['truth']} -> {r['diagnosis']} ({r['sentence']})")


if __name__ == "__main__":
    main()
