#!/usr/bin/env python3
"""Whole-process benchmark of sonde, side by side with a peer in one run.

Runs the release `sonde` with its bundled plugins and OTLP export on (to a
rotel collector with a blackhole exporter), and at the same time a psutil
sampler doing the equivalent reads at the same 100 ms period. Reports, for
each, CPU per sample (user+sys of the whole process divided by samples taken)
and RSS, the ratio sonde/peer, sonde's sample-period error (idle and with both
cores busy), and cold start to the first sample, without and with the compile
cache. Medians of ROUNDS rounds; the machine is shared and noisy.

Usage: scripts/bench_process.py [--seconds 20] [--rounds 3]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import (PSUTIL_PEER, cold_start, cpu_seconds, free_port, get, need_release_build, rss_mb, start_rotel,
                     start_sonde_timed, stop)


def one_round(seconds, endpoint, busy, cache):
    data = tempfile.mkdtemp(prefix="sonde-bench-")
    # Steady state: a restart with the plugins already compiled (the cold case is measured apart).
    shutil.copytree(cache, os.path.join(data, "cache"))
    api = f"127.0.0.1:{free_port()}"
    hogs = []
    if busy:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        p, _ = start_sonde_timed(data, api, endpoint)
        time.sleep(2)  # warm-up: plugin loaded, first export done
        peer = None if busy else subprocess.Popen([sys.executable, "-c", PSUTIL_PEER, str(seconds)], stdout=subprocess.PIPE, text=True)
        c0, t0 = cpu_seconds(p.pid), get(api, "/api/status")["sampler"]["period"]["ticks"]
        pc0 = cpu_seconds(peer.pid) if peer else 0
        time.sleep(seconds)
        st = get(api, "/api/status")
        c1, t1 = cpu_seconds(p.pid), st["sampler"]["period"]["ticks"]
        res = {
            "sonde_cpu_ms_per_sample": (c1 - c0) * 1000 / max(1, t1 - t0),
            "sonde_rss_mb": rss_mb(p.pid),
            "period_p50_us": st["sampler"]["period"]["error_p50_us"],
            "period_p99_us": st["sampler"]["period"]["error_p99_us"],
            "points_exported": st["export"]["stats"]["points_exported"],
        }
        if peer:
            pc1, prss = cpu_seconds(peer.pid), rss_mb(peer.pid)
            n = int(peer.communicate()[0].strip() or 1)
            res["peer_cpu_ms_per_sample"] = (pc1 - pc0) * 1000 / max(1, n)
            res["peer_rss_mb"] = prss
        stop(p)
        return res
    finally:
        for h in hogs:
            h.kill()
        shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    need_release_build(recipe="./dev bench")
    try:
        import psutil  # noqa: F401
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "psutil"])
    col, grpc = start_rotel(settle=0)
    endpoint = f"http://127.0.0.1:{grpc}"
    try:
        time.sleep(1)
        cache = os.path.join(tempfile.mkdtemp(prefix="sonde-cache-"), "cache")
        colds = [cold_start(endpoint, keep_cache=cache if i == 0 else None) for i in range(a.rounds)]
        idle = [one_round(a.seconds, endpoint, False, cache) for _ in range(a.rounds)]
        busy = [one_round(a.seconds, endpoint, True, cache) for _ in range(a.rounds)]
    finally:
        col.kill()
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    s_cpu, p_cpu = med(idle, "sonde_cpu_ms_per_sample"), med(idle, "peer_cpu_ms_per_sample")
    s_rss, p_rss = med(idle, "sonde_rss_mb"), med(idle, "peer_rss_mb")
    print(f"\nwhole process, {a.rounds} rounds of {a.seconds:.0f} s, medians ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)")
    print(f"{'':34}{'sonde':>10}{'psutil peer':>14}{'sonde/peer':>12}")
    print(f"{'CPU per 100 ms sample (ms)':34}{s_cpu:>10.3f}{p_cpu:>14.3f}{s_cpu / p_cpu:>12.2f}")
    print(f"{'RSS (MB)':34}{s_rss:>10.1f}{p_rss:>14.1f}{s_rss / p_rss:>12.2f}")
    print(f"sample period error, idle:        p50 {med(idle, 'period_p50_us'):.0f} us, p99 {med(idle, 'period_p99_us'):.0f} us")
    print(f"sample period error, cores busy:  p50 {med(busy, 'period_p50_us'):.0f} us, p99 {med(busy, 'period_p99_us'):.0f} us")
    print(f"cold start to first sample:       first run {statistics.median(c[0] for c in colds):.0f} ms, "
          f"with compile cache {statistics.median(c[2] for c in colds):.0f} ms")
    print(f"RSS after a first run that compiled the plugins: {statistics.median(c[1] for c in colds):.1f} MB")
    print(f"points exported per round (median): {med(idle, 'points_exported'):.0f}")


if __name__ == "__main__":
    main()
