#!/usr/bin/env python3
"""Whole-process benchmark: sonde beside the floor sampler, in the same window.

Each round runs, one after the other on the same machine, each beside a floor sampler started
for it in the same window:
- sonde (release build) with every bundled plugin and export off;
- sonde with every bundled plugin exporting over OTLP/gRPC to rotel (blackhole exporter).
The floor sampler (tools/floor-sampler, C) preads and parses every 100 ms the very files that
sonde's sampler keeps open (read from sonde's own descriptors), sleeping to absolute deadlines:
what sampling this machine costs at the least. One sonde at a time, as on a node: two at once
would wake on the same 100 ms grid, which may flatter both (see one_round). Each window gives CPU
per sample (the process's CPU-time clock divided by the samples taken), its ratio to that
window's floor, RSS at the end, and a per-thread breakdown (µs of CPU per tick and wake-ups per
tick, by thread name). Nothing posts to sonde and no dashboard is open: this is the idle host.
Rounds alternate which sonde goes first.

Then the sample period's error with both cores busy (one spinning process per core beside
sonde, export off), and cold start to the first sample (compiling the plugins, then from the
compile cache) with the RSS after the first run.

Medians of ROUNDS rounds; the machine is shared and noisy, so read the ratios, and note the
load average printed with them.

--check compares the fresh run with the ratios in docs/benchmarks.md's headline table (the
rows named in CHECKED below) and prints each one that moved by more than the noise band the row
states (`±N`); it exits 1 when one did. It is a benchmark, not a test: CI does not run it.

Usage: scripts/bench_process.py [--seconds 20] [--rounds 3] [--check] [--no-cold] [--json FILE]
Needs: target/release/sonde, the bundled plugins, target/floor-sampler (`./dev bench` builds
them) and rotel (`./dev setup`).
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import (FLOOR, ROOT, cold_start, cpu_seconds, free_port, get, memory_parts, need_release_build, rss_mb,
                     per_thread, rotated, start_ready, start_rotel, stop, threads, ticks)

PERIOD_S = 0.1
WARM_UP_S = 15  # plugins started, the first export (every 5 s) done, the second code page-out (10 s) past

# Rows of docs/benchmarks.md's headline table checked by --check:
# (result key, a phrase of the row's first cell).
CHECKED = [
    ("cpu_off_ratio", "export off, × the floor sampler"),
    ("cpu_on_ratio", "export to rotel, × the floor sampler"),
    ("rss_off_mb", "RSS 30 s after start"),
    ("busy_p99_us", "sample period error p99, both cores busy"),
]


def sampled_files(pid):
    """The procfs and sysfs files sonde's sampler keeps open, from its descriptors (its
    /proc/PID/net/dev is the floor's /proc/self/net/dev). Where the disks are read from their
    sysfs stat files, /proc/diskstats is left out: sonde reads it only every 50th tick, to
    notice new disks."""
    files = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/proc/{pid}/"):
            target = "/proc/self/" + target[len(f"/proc/{pid}/"):]
        if target.startswith(("/proc/", "/sys/")):
            files.append(target)
    if any(f.startswith("/sys/") and f.endswith("/stat") for f in files):
        files = [f for f in files if f != "/proc/diskstats"]
    return sorted(set(files))


def snapshot(api, pid):
    return {"cpu": cpu_seconds(pid), "ticks": ticks(api), "threads": threads(pid)}


def one_window(k, endpoint, seconds, cache, warm_up=WARM_UP_S, bundled_from=None):
    """One sonde (export off when `endpoint` is None; the bundled plugins, or those in
    `bundled_from`) beside a floor sampler started for it, over one window `warm_up` seconds
    after its start; its figures keyed with `k`, and the floor's."""
    tmp = tempfile.mkdtemp(prefix="sonde-bench-")
    p = None
    try:
        api = f"127.0.0.1:{free_port()}"
        p = start_ready(os.path.join(tmp, k), api, endpoint, cache, bundled_from=bundled_from)
        time.sleep(warm_up)
        files = sampled_files(p.pid)
        floor = subprocess.Popen([FLOOR, str(seconds + 3), str(int(PERIOD_S * 1000)), *files],
                                 stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        f0, t0 = cpu_seconds(floor.pid), time.monotonic()
        s0 = snapshot(api, p.pid)
        time.sleep(seconds)
        s1 = snapshot(api, p.pid)
        f1, t1 = cpu_seconds(floor.pid), time.monotonic()
        floor_rss = rss_mb(floor.pid)
        stop(floor)
        floor.communicate()
        floor_cpu_ms = (f1 - f0) * 1000 / ((t1 - t0) / PERIOD_S)
        n = max(1, s1["ticks"] - s0["ticks"])
        cpu_ms = (s1["cpu"] - s0["cpu"]) * 1000 / n
        st = get(api, "/api/status")
        return {
            f"floor_{k}_ms": floor_cpu_ms, "floor_rss_mb": floor_rss, "files": files,
            f"cpu_{k}_ms": cpu_ms, f"cpu_{k}_ratio": cpu_ms / floor_cpu_ms, f"rss_{k}_mb": rss_mb(p.pid),
            f"memory_{k}": memory_parts(p.pid), f"threads_{k}": per_thread(s0["threads"], s1["threads"], n),
            f"p99_{k}_us": st["sampler"]["period"]["error_p99_us"],
            f"exported_{k}": st["export"]["stats"]["points_exported"],
        }
    finally:
        if p:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def one_round(seconds, endpoint, cache, order):
    """sonde with export off and with export on, in `order`, each in its own
    window beside its own floor sampler. Never both at once: two sondes sample on the same grid,
    and a process woken at the same instant as another may cost less per wake-up than one woken
    alone (`./dev bench-parts --wake-sharing`), which would flatter both against the floor."""
    res = {}
    for k in order:
        res.update(one_window(k, endpoint if k == "on" else None, seconds, cache))
    res["floor_cpu_ms"] = (res["floor_off_ms"] + res["floor_on_ms"]) / 2
    return res


def busy_round(seconds, cache):
    """The period error of sonde (export off) with one spinning process per core beside it."""
    tmp = tempfile.mkdtemp(prefix="sonde-busy-")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        api = f"127.0.0.1:{free_port()}"
        p = start_ready(tmp, api, None, cache)
        try:
            time.sleep(seconds)
            per = get(api, "/api/status")["sampler"]["period"]
            return {"busy_p50_us": per["error_p50_us"], "busy_p99_us": per["error_p99_us"]}
        finally:
            stop(p)
    finally:
        for h in hogs:
            h.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def print_per_thread(rounds):
    names = sorted({n for r in rounds for k in ("off", "on") for n in r[f"threads_{k}"]})
    med = lambda k, n, i: statistics.median(r[f"threads_{k}"].get(n, [0, 0, 0, 0])[i] for r in rounds)
    rows = sorted(names, key=lambda n: -med("on", n, 1))
    print("\nper thread, medians (µs of CPU per tick; wake-ups per tick; involuntary switches per tick)")
    print(f"{'thread':18}{'n':>3} | {'export off: µs':>15}{'wakes':>7}{'invol':>7} | {'export on: µs':>14}{'wakes':>7}{'invol':>7}")
    for n in rows:
        count = max(r[f"threads_{k}"].get(n, [0])[0] for r in rounds for k in ("off", "on"))
        print(f"{n:18}{count:>3} | {med('off', n, 1):>15.1f}{med('off', n, 2):>7.2f}{med('off', n, 3):>7.2f}"
              f" | {med('on', n, 1):>14.1f}{med('on', n, 2):>7.2f}{med('on', n, 3):>7.2f}")
    for k in ("off", "on"):
        listed = statistics.median(sum(v[1] for v in r[f"threads_{k}"].values()) for r in rounds)
        total = statistics.median(r[f"cpu_{k}_ms"] * 1000 for r in rounds)
        print(f"export {k}: threads listed {listed:.1f} µs per tick of {total:.1f} µs "
              f"(the rest: threads that started or ended within the window)")


def check(results):
    """Compares results with docs/benchmarks.md's headline rows; returns the rows that drifted."""
    with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
        lines = f.read().splitlines()
    drifted = []
    for key, phrase in CHECKED:
        row = next((line for line in lines if line.startswith("|") and phrase in line.split("|")[1]), None)
        if row is None:
            print(f"check: no docs/benchmarks.md row with {phrase!r}")
            drifted.append(key)
            continue
        cell = row.split("|")[2]
        value = re.search(r"[-+]?\d[\d ]*\.?\d*", cell)
        band = re.search(r"±\s*([\d.]+)", cell)
        if not value or not band:
            print(f"check: docs/benchmarks.md row {phrase!r} states no value and ±band: {cell.strip()!r}")
            drifted.append(key)
            continue
        was, noise, now = float(value.group().replace(" ", "")), float(band.group(1)), results[key]
        moved = abs(now - was) > noise
        print(f"check: {phrase}: documented {was:g} ±{noise:g}, now {now:.3g}{'   DRIFTED' if moved else ''}")
        if moved:
            drifted.append(key)
    return drifted


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="compare with docs/benchmarks.md's figures (see the module doc)")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-start rounds")
    ap.add_argument("--json", help="also write every round's results to this file")
    a = ap.parse_args()
    need_release_build(FLOOR, recipe="./dev bench")
    load = os.getloadavg()
    col, grpc = start_rotel(settle=1.0)
    endpoint = f"http://127.0.0.1:{grpc}"
    cache_root = tempfile.mkdtemp(prefix="sonde-cache-")
    cache = os.path.join(cache_root, "cache")
    try:
        colds = [cold_start(endpoint, keep_cache=cache if i == 0 else None)
                 for i in range(1 if a.no_cold else a.rounds)]
        rounds = []
        for i in range(a.rounds):
            r = one_round(a.seconds, endpoint, cache, rotated(("off", "on"), i))
            rounds.append(r)
            print(f"round {i + 1}/{a.rounds}: sonde export off {r['cpu_off_ms']:.3f} ms, the floor "
                  f"{r['floor_off_ms']:.3f} ms ({r['cpu_off_ratio']:.2f}x); export on {r['cpu_on_ms']:.3f} ms, the floor "
                  f"{r['floor_on_ms']:.3f} ms ({r['cpu_on_ratio']:.2f}x); RSS {r['rss_off_mb']:.1f} / "
                  f"{r['rss_on_mb']:.1f} MB", flush=True)
        busy = [busy_round(a.seconds, cache) for _ in range(a.rounds)]
    finally:
        stop(col)
        shutil.rmtree(cache_root, ignore_errors=True)
    load_end = os.getloadavg()
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    res = {k: med(rounds, k) for k in rounds[0] if isinstance(rounds[0][k], float)}
    res.update({k: med(busy, k) for k in busy[0]})
    print(f"\nwhole process, {a.rounds} rounds of {a.seconds:.0f} s, medians ({time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.cpu_count()} cores, load average {load[0]:.2f} at the start, {load_end[0]:.2f} at the end)")
    print(f"floor sampler reads: {' '.join(rounds[0]['files'])}")
    print(f"{'':40}{'floor':>10}{'export off':>12}{'export on':>12}")
    print(f"{'CPU per 100 ms sample (ms)':40}{res['floor_cpu_ms']:>10.3f}{res['cpu_off_ms']:>12.3f}{res['cpu_on_ms']:>12.3f}")
    print(f"{'  × the floor sampler in its window':40}{1:>10.2f}{res['cpu_off_ratio']:>12.2f}{res['cpu_on_ratio']:>12.2f}")
    print(f"{'RSS at the end (MB)':40}{res['floor_rss_mb']:>10.1f}{res['rss_off_mb']:>12.1f}{res['rss_on_mb']:>12.1f}")
    print(f"sample period error, idle:        p99 {res['p99_off_us']:.0f} µs (export off), {res['p99_on_us']:.0f} µs (on)")
    print(f"sample period error, cores busy:  p50 {res['busy_p50_us']:.0f} µs, p99 {res['busy_p99_us']:.0f} µs")
    print(f"cold start to first sample:       first run {statistics.median(c[0] for c in colds):.0f} ms, "
          f"with compile cache {statistics.median(c[2] for c in colds):.0f} ms")
    print(f"RSS 2 s after a first run that compiled the plugins: {statistics.median(c[1] for c in colds):.1f} MB")
    print(f"points exported per round, export on (median): {med(rounds, 'exported_on'):.0f}")
    print("RSS of sonde (export off) by where it lives, medians (MB): " + ", ".join(
        f"{k} {statistics.median(r['memory_off'].get(k, 0) for r in rounds):.1f}" for k in rounds[0]["memory_off"]))
    print_per_thread(rounds)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rounds": rounds, "busy": busy, "cold": colds, "medians": res}, f, indent=1)
    if a.check:
        print()
        drifted = check(res)
        print(f"check: {len(drifted)} of {len(CHECKED)} figures drifted beyond their noise band")
        sys.exit(1 if drifted else 0)


if __name__ == "__main__":
    main()
