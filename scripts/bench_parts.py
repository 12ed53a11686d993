#!/usr/bin/env python3
"""Where an idle host's CPU above the floor goes: three sondes, each beside the floor sampler.

`./dev bench` puts sonde with all its bundled plugins beside the floor sampler (tools/floor-sampler:
the same procfs and sysfs reads, parsed, nothing else). This splits the difference by what runs:

- sonde with no plugins: the sampler thread taking the same ticks, and the host around it (the
  API, the ingest and export machinery, its own metrics), with nothing to hand the ticks to;
- sonde with sysmetrics only: plus turning every 100 ms tick into OpenTelemetry metrics, once a
  second, and the pipeline and the dashboard's live store taking those points in;
- sonde with every bundled plugin: plus the plugins that wait for jobs.

One sonde at a time, as on a node, each in its own window beside a floor sampler started for it
(export off, nothing posting to it, from its own copy of the release binary and of one warm
compile cache). Never two sondes at once: they sample on the same 100 ms grid, and a process
woken at the same instant as another may cost less per wake-up than one woken alone, which would
flatter them against the floor (`--wake-sharing` measures it: on a quiet machine, 2026-11-27,
two floor samplers in step took 159 µs a sample each, one alone 171, two 50 ms apart 186, with
the windows' ranges overlapping; a first try beside a running sonde, on its grid, gave 86 in step
and 136 apart). Per window, after the warm-up: CPU per sample (the process's
CPU-time clock over the samples it took) and the floor's in the same window, RSS at the end, and
each thread's CPU and wake-ups per tick. Rounds rotate the order. Prints each window, the
medians, and the per-thread medians side by side.

The default warm-up (45 s) leaves out the plugins' first calls, which fault their code and memory
in; `--warm-up 15` measures from where `./dev bench` does.

Usage: scripts/bench_parts.py [--seconds 20] [--rounds 3] [--warm-up 45]
       scripts/bench_parts.py --wake-sharing [--seconds 20] [--rounds 3]
(--wake-sharing: floor samplers alone, two in step on sonde's grid, two 50 ms apart, each in its
own window: the measurement behind "one sonde at a time" above)
Needs the release build, the bundled plugins and target/floor-sampler (`./dev bench-parts` builds
them).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import bench_process
from bench_process import PERIOD_S, sampled_files
from harness import (BUNDLED, FLOOR, cpu_seconds, free_port, need_release_build, print_thread_columns, rotated,
                     start_ready, stop)

WARM_UP_S = 45  # past determined's and bottleneck's first two 10 s deliveries, whose calls fault code in


def plugin_sets(root):
    """{label: a directory of .wasm files} for the three sondes."""
    sets = {"none": [], "sysmetrics": ["sysmetrics.wasm"],
            "all": sorted(f for f in os.listdir(BUNDLED) if f.endswith(".wasm"))}
    dirs = {}
    for label, files in sets.items():
        d = os.path.join(root, f"plugins-{label}")
        os.makedirs(d)
        for f in files:
            shutil.copy(os.path.join(BUNDLED, f), d)
        dirs[label] = d
    return dirs


def one_window(label, plugins, seconds, warm_up, cache):
    """One sonde with the plugins in `plugins` beside its floor sampler (bench_process's window):
    (its µs per sample, RSS, per-thread figures, the floor's µs per sample)."""
    r = bench_process.one_window(label, None, seconds, cache, warm_up=warm_up, bundled_from=plugins)
    return (r[f"cpu_{label}_ms"] * 1000, r[f"rss_{label}_mb"], r[f"threads_{label}"], r[f"floor_{label}_ms"] * 1000)


def wake_sharing(rounds, seconds, files):
    """Floor samplers on sonde's 100 ms grid: one alone, two in step, two 50 ms apart, each
    arrangement in its own window. Returns {arrangement: [µs per sample of each window (the mean
    of its samplers)]}."""
    arrangements = {"alone": ["0"], "in step": ["0", "0"], "50 ms apart": ["0", "50"]}
    res = {k: [] for k in arrangements}
    for r in range(rounds):
        for k in rotated(arrangements, r):
            procs = [subprocess.Popen([FLOOR, str(seconds + 3), str(int(PERIOD_S * 1000)), *files],
                                      env={**os.environ, "FLOOR_GRID_OFFSET_MS": off}, stdout=subprocess.DEVNULL)
                     for off in arrangements[k]]
            time.sleep(1)
            c0, t0 = [cpu_seconds(p.pid) for p in procs], time.monotonic()
            time.sleep(seconds)
            c1, t1 = [cpu_seconds(p.pid) for p in procs], time.monotonic()
            for p in procs:
                stop(p)
            res[k].append(statistics.mean((b - a) * 1e6 / ((t1 - t0) / PERIOD_S) for a, b in zip(c0, c1)))
            print(f"round {r + 1}, floor samplers {k}: {res[k][-1]:.1f} µs per sample", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm-up", type=float, default=WARM_UP_S,
                    help="seconds from start to the window (default %(default)s)")
    ap.add_argument("--wake-sharing", action="store_true",
                    help="instead: what a sampler's wake-up costs alone and beside another in step (floor samplers only)")
    a = ap.parse_args()
    need_release_build(FLOOR, recipe="./dev bench-parts")
    if a.wake_sharing:
        tmp = tempfile.mkdtemp(prefix="sonde-parts-files-")
        none = os.path.join(tmp, "no-plugins")
        os.makedirs(none)
        p = start_ready(os.path.join(tmp, "run"), f"127.0.0.1:{free_port()}", bundled_from=none)  # only its files are read
        files = sampled_files(p.pid)
        stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
        res = wake_sharing(a.rounds, a.seconds, files)
        print(f"\nmedians ({time.strftime('%Y-%m-%d %H:%M')}), µs of CPU per sample of each floor sampler "
              f"({' '.join(files)}):")
        for k, v in res.items():
            print(f"  {k:12} {statistics.median(v):7.1f}   (windows {min(v):.1f}–{max(v):.1f})")
        return
    root = tempfile.mkdtemp(prefix="sonde-parts-cache-")
    try:
        dirs = plugin_sets(root)
        # One compile of every bundled plugin, into the cache every sonde starts from.
        prime = os.path.join(root, "prime")
        stop(start_ready(prime, f"127.0.0.1:{free_port()}", seconds=120, bundled_from=dirs["all"]))
        cache = os.path.join(prime, "cache")
        labels = list(dirs)
        res = {k: [] for k in labels}
        print(f"{a.rounds} rounds of {a.seconds:.0f} s, {a.warm_up:.0f} s after start; load average {os.getloadavg()[0]:.2f} at the start", flush=True)
        for r in range(a.rounds):
            for k in rotated(labels, r):
                cpu, rss, per, floor = one_window(k, dirs[k], a.seconds, a.warm_up, cache)
                res[k].append((cpu, rss, per, floor))
                print(f"round {r + 1}, {k}: {cpu:.1f} µs per sample, the floor {floor:.1f} µs ({cpu / floor:.2f}×); "
                      f"RSS {rss:.1f} MB", flush=True)
        print(f"\nmedians ({time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.2f} at the end)")
        print(f"{'plugins':12}{'µs per sample':>15}{'the floor':>11}{'× the floor':>13}{'RSS (MB)':>10}")
        for k in labels:
            ratios = [v[0] / v[3] for v in res[k]]
            print(f"{k:12}{statistics.median(v[0] for v in res[k]):>15.1f}{statistics.median(v[3] for v in res[k]):>11.1f}"
                  f"{statistics.median(ratios):>13.2f}{statistics.median(v[1] for v in res[k]):>10.1f}"
                  f"   (windows {min(ratios):.2f}–{max(ratios):.2f})")
        print_thread_columns([(k, [v[2] for v in res[k]]) for k in labels])
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
