#!/usr/bin/env python3
"""Two sonde builds side by side in the same window: what a change did to the idle host.

This VM's cost per sample moves by ±30 % from one run to the next (other tenants, CPU steal),
more than most changes move it, so a figure from today cannot be held against one from
yesterday. Instead both builds run at once, each with the bundled plugins, a copy of the
compile cache, export off and nothing posting to it, each from its own copy of its binary
(two sondes mapping one file would share its pages; see host/src/footprint.rs). Per round,
after a warm-up: CPU per sample (the process's CPU-time clock over the samples it took), RSS
at the end, and each thread's CPU and wake-ups per tick (as `./dev bench` shows them). Rounds
alternate which build starts first. Prints each round, the medians, the ratio B / A, and the
per-thread medians of A beside B.

Usage: scripts/bench_ab.py A_BINARY B_BINARY [--seconds 20] [--rounds 4]
                           [--plugins-a DIR] [--plugins-b DIR]
(--plugins-a / --plugins-b: that build's bundled plugins, for a change to the plugins; default
target/plugins/bundled for both)
e.g. a build of the previous commit against this one:
    git stash; cargo build --release -p sonde; cp target/release/sonde /tmp/sonde-before
    git stash pop; ./dev bench-ab /tmp/sonde-before target/release/sonde
Needs the bundled plugins (`./dev plugins`).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from harness import (BUNDLED, cpu_seconds, free_port, per_thread, print_thread_columns, rotated, rss_mb, start_ready,
                     stop, threads, ticks)

WARM_UP_S = 15  # plugins started, every plugin timer and delivery going, the second code page-out (10 s) past


def one_round(binaries, plugins, order, seconds, cache):
    tmp = tempfile.mkdtemp(prefix="sonde-ab-")
    procs = {}
    try:
        for k in order:
            api = f"127.0.0.1:{free_port()}"
            procs[k] = (start_ready(os.path.join(tmp, k), api, cache=cache, binary=binaries[k], seconds=120,
                                    bundled_from=plugins[k]), api)
        time.sleep(WARM_UP_S)
        before = {k: (cpu_seconds(p.pid), ticks(api), threads(p.pid)) for k, (p, api) in procs.items()}
        time.sleep(seconds)
        after = {k: (cpu_seconds(p.pid), ticks(api), threads(p.pid)) for k, (p, api) in procs.items()}
        out = {}
        for k, (p, _) in procs.items():
            n = max(1, after[k][1] - before[k][1])
            out[k] = ((after[k][0] - before[k][0]) * 1e6 / n, rss_mb(p.pid), per_thread(before[k][2], after[k][2], n))
        return out
    finally:
        for p, _ in procs.values():
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the build to compare against (a sonde binary)")
    ap.add_argument("b", help="the build under test")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--plugins-a", help="build A's bundled plugins (a directory of .wasm files)")
    ap.add_argument("--plugins-b", help="build B's bundled plugins")
    args = ap.parse_args()
    binaries = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
    plugins = {"A": args.plugins_a, "B": args.plugins_b}
    for k, path in binaries.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"build {k}: {path} is not an executable")
    for k, path in plugins.items():
        if path and not (os.path.isdir(path) and any(f.endswith(".wasm") for f in os.listdir(path))):
            sys.exit(f"plugins of build {k}: {path} is not a directory of .wasm files")
    # The plugins are compiled once, by A, into a cache every round then starts from (a build
    # whose engine differs compiles them again itself, which only lengthens its start).
    root = tempfile.mkdtemp(prefix="sonde-ab-cache-")
    try:
        prime = os.path.join(root, "prime")
        stop(start_ready(prime, f"127.0.0.1:{free_port()}", binary=binaries["A"], seconds=120,
                         bundled_from=plugins["A"]))
        cache = os.path.join(prime, "cache")
        res = {"A": [], "B": []}
        print(f"A = {binaries['A']} (plugins: {plugins['A'] or BUNDLED})\n"
              f"B = {binaries['B']} (plugins: {plugins['B'] or BUNDLED})\n{args.rounds} rounds of {args.seconds:.0f} s; "
              f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
        for r in range(args.rounds):
            order = rotated(["A", "B"], r)
            out = one_round(binaries, plugins, order, args.seconds, cache)
            for k in res:
                res[k].append(out[k])
            print(f"round {r + 1}: A {out['A'][0]:.1f} µs per sample, {out['A'][1]:.1f} MB; "
                  f"B {out['B'][0]:.1f} µs, {out['B'][1]:.1f} MB; B / A {out['B'][0] / out['A'][0]:.2f}", flush=True)
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in res.items()}
        ratios = [b[0] / a[0] for a, b in zip(res["A"], res["B"])]
        print(f"\nmedians ({time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f} at the end)")
        print(f"  CPU per 100 ms sample: A {med['A'][0]:.1f} µs, B {med['B'][0]:.1f} µs; "
              f"B / A per round {min(ratios):.2f}–{max(ratios):.2f}, median {statistics.median(ratios):.2f}")
        print(f"  RSS at the end: A {med['A'][1]:.1f} MB, B {med['B'][1]:.1f} MB")
        print_thread_columns([(k, [r[2] for r in v]) for k, v in res.items()])
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
