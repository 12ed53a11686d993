#!/usr/bin/env python3
"""OTLP pipeline throughput: sonde against rotel, driven by the same load generator.

The load: tools/otlp-loadgen (Rust, OTLP/gRPC, requests of POINTS gauge points
over SERIES series from CONCURRENCY connections, as fast as the receiver
answers) for SECONDS.

- rotel: receive -> blackhole exporter (the floor: sonde must spend no more
  CPU per point than this).
- sonde: receive (its OTLP receiver) -> a pass-through plugin (the testbed in
  `passthrough` mode re-emits every point as its own series) -> OTLP/gRPC
  export to a blackhole receiver (`otlp-loadgen --sink`, which answers without
  decoding). The sysmetrics plugin is not loaded; the sampler still runs (its
  idle CPU is measured first and subtracted).
- rotel again, receive -> OTLP/gRPC export (uncompressed, as sonde sends) to
  the same blackhole: the same work as sonde's minus the plugin.

Reports points/s accepted, CPU per 100 000 points (user+sys of the receiving
process), RSS as the load ends and its peak (VmHWM) over the receiver's life,
and sonde/rotel; checks that what sonde accepted left it again (points
exported), so sonde is not credited for points it dropped. Medians of ROUNDS.

Usage: scripts/bench_otlp.py [--seconds 10] [--rounds 3] [--points 1000] [--series 100] [--concurrency 4]
Needs release builds of sonde and otlp-loadgen and the plugins (`./dev bench-otlp` does all of it).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import (LOADGEN, SONDE, TESTBED, cpu_seconds, free_port, get, plugin_dirs, rss_mb, start_rotel,
                     start_sonde, stop, wait_until)


def load(port, a):
    out = subprocess.check_output([LOADGEN, "--endpoint", f"http://127.0.0.1:{port}", "--seconds", str(a.seconds),
                                   "--points", str(a.points), "--series", str(a.series),
                                   "--concurrency", str(a.concurrency)], text=True)
    return json.loads(out)


def measure(pid, port, a):
    c0 = cpu_seconds(pid)
    res = load(port, a)
    cpu = cpu_seconds(pid) - c0
    return res, cpu


def round_rotel(a, export_to=None):
    p, port = start_rotel(export_to=export_to)
    try:
        res, cpu = measure(p.pid, port, a)
        return {"pps": res["points_per_second"], "points": res["points_ok"], "cpu_s": cpu,
                "cpu_ms_per_100k": cpu * 1000 * 100_000 / max(1, res["points_ok"]), "rss": rss_mb(p.pid),
                "peak": rss_mb(p.pid, "VmHWM"), "refused": res["requests_refused"], "failed": res["requests_failed"]}
    finally:
        stop(p)


def round_sonde(a, sink_port, cache):
    data = tempfile.mkdtemp(prefix="sonde-otlp-bench-")
    try:
        plugin_dirs(data, bundled=False, extra={"passthrough": TESTBED})
        if cache and os.path.isdir(cache):
            shutil.copytree(cache, os.path.join(data, "cache"))
        api, port = f"127.0.0.1:{free_port()}", free_port()
        p = start_sonde(data, api, f"http://127.0.0.1:{sink_port}", settings=[
            f"ingest.otlp_grpc_listen=127.0.0.1:{port}", "ingest.otlp_http_listen=off", "export.interval_ms=1000",
            # 4x the default queue (256 requests of 8 192 points): room for ~3 s
            # of this load while the one request in flight waits for a core.
            "export.queue_capacity=256"])
        try:
            wait_until(lambda: any(pl["name"] == "passthrough" and pl["state"] == "running"
                                   for pl in get(api, "/api/plugins")["plugins"]),
                       p, "sonde did not start the passthrough plugin")
            if cache and not os.path.isdir(cache):
                shutil.copytree(os.path.join(data, "cache"), cache)
            # The idle cost (sampler, timers) over the same time, subtracted below.
            c0 = cpu_seconds(p.pid)
            time.sleep(2)
            idle_per_s = (cpu_seconds(p.pid) - c0) / 2
            x0 = get(api, "/api/status")["export"]["stats"]
            res, cpu = measure(p.pid, port, a)
            rss, peak = rss_mb(p.pid), rss_mb(p.pid, "VmHWM")
            # Let the last export go out, then count what left.
            time.sleep(2.5)
            x1 = get(api, "/api/status")["export"]["stats"]
            exported = x1["points_exported"] - x0["points_exported"]
            dropped = x1["points_dropped"] - x0["points_dropped"]
            plugin = next(pl for pl in get(api, "/api/plugins")["plugins"] if pl["name"] == "passthrough")
            cpu -= idle_per_s * res["seconds"]
            return {"pps": res["points_per_second"], "points": res["points_ok"], "cpu_s": cpu,
                    "cpu_ms_per_100k": cpu * 1000 * 100_000 / max(1, res["points_ok"]), "rss": rss, "peak": peak,
                    "rss_after": rss_mb(p.pid), "refused": res["requests_refused"], "failed": res["requests_failed"], "exported": exported,
                    "export_dropped": dropped, "plugin": plugin, "ingest": get(api, "/api/ingest")}
        finally:
            stop(p)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--series", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--verbose", action="store_true", help="print sonde's plugin and ingest counters each round")
    a = ap.parse_args()
    for what, path in (("sonde", SONDE), ("otlp-loadgen", LOADGEN), ("the testbed plugin", TESTBED)):
        if not os.path.exists(path):
            sys.exit(f"{what} is missing at {path}: run ./dev bench-otlp")
    sink_port = free_port()
    # sonde's export target (and rotel's, in its OTLP-export round): a blackhole
    # that does not decode, so no collector competes for the cores.
    sink = subprocess.Popen([LOADGEN, "--sink", f"127.0.0.1:{sink_port}"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    if sink.poll() is not None:
        sys.exit("the blackhole sink (otlp-loadgen --sink) did not start: rebuild otlp-loadgen (./dev bench-otlp)")
    cache = os.path.join(tempfile.mkdtemp(prefix="sonde-cache-"), "cache")
    rounds = []
    try:
        for i in range(a.rounds):
            r, s, x = round_rotel(a), round_sonde(a, sink_port, cache), round_rotel(a, sink_port)
            rounds.append((r, s, x))
            print(f"round {i + 1}/{a.rounds}: rotel {r['pps']:.0f} pts/s {r['cpu_ms_per_100k']:.1f} ms/100k; "
                  f"sonde {s['pps']:.0f} pts/s {s['cpu_ms_per_100k']:.1f} ms/100k, exported {s['exported']} of {s['points']}, "
                  f"dropped at the export queue {s['export_dropped']}, refused requests {s['refused']}; "
                  f"rotel with OTLP export {x['pps']:.0f} pts/s {x['cpu_ms_per_100k']:.1f} ms/100k", flush=True)
            if a.verbose:
                print(json.dumps({"plugin": s["plugin"], "ingest": s["ingest"]}, indent=1))
    finally:
        stop(sink)
    med = lambda who, k: statistics.median(r[who][k] for r in rounds)
    r_cpu, s_cpu, x_cpu = med(0, "cpu_ms_per_100k"), med(1, "cpu_ms_per_100k"), med(2, "cpu_ms_per_100k")
    r_pps, s_pps = med(0, "pps"), med(1, "pps")
    print(f"\nOTLP/gRPC pipeline, {a.rounds} rounds of {a.seconds:.0f} s, {a.points} points per request over {a.series} series, "
          f"{a.concurrency} connections, medians ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)\n")
    print("| receiver | points/s accepted | CPU per 100 000 points | RSS as the load ends | peak RSS | exported / accepted |")
    print("|---|---|---|---|---|---|")
    rss = lambda who: f"{med(who, 'rss'):.1f} MB | {med(who, 'peak'):.1f} MB"
    print(f"| rotel (receive -> blackhole) | {r_pps:,.0f} | {r_cpu:.1f} ms | {rss(0)} | (blackhole) |")
    print(f"| rotel (receive -> OTLP export, uncompressed) | {med(2, 'pps'):,.0f} | {x_cpu:.1f} ms | {rss(2)} | (not counted) |")
    lost = statistics.median(r[1]["exported"] / max(1, r[1]["points"]) for r in rounds)
    print(f"| sonde (receive -> passthrough plugin -> OTLP export) | {s_pps:,.0f} | {s_cpu:.1f} ms | {rss(1)} | {lost:.4f} |")
    print(f"\nsonde's RSS 2.5 s after the load (its last export sent): {med(1, 'rss_after'):.1f} MB (median)")
    print(f"sonde/rotel RSS as the load ends: {med(1, 'rss') / med(0, 'rss'):.2f}, peak {med(1, 'peak') / med(0, 'peak'):.2f} "
          f"(against the blackhole rotel)")
    print(f"sonde/rotel CPU per point: {s_cpu / r_cpu:.2f} against the blackhole exporter (floor: <= 1.00), "
          f"{s_cpu / x_cpu:.2f} against rotel exporting the same way;   sonde/rotel points/s: {s_pps / r_pps:.2f}")


if __name__ == "__main__":
    main()
