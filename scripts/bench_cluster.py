"""./dev bench-cluster: one master taking the sampled series of many agents.

For each agent count (default 64 and 256): a release `sonde --role master`
(embedded history on, no plugins) and, in the same window, rotel (blackhole)
as the peer, each fed by `otlp-loadgen --agents N` (the shape of a real
agent's export: 40 series sampled every 100 ms, sent every 5 s). Prints, per
count: the master's CPU per 100 000 points and share of one core, its RSS, the
history's disk bytes per node-hour, and query latency (p50/p99) of a 1-hour
view of 8 nodes' series through `/api/series/data` (once cold, then 200 times with the window
moving on with the clock, as a dashboard redraws it); rotel's CPU and RSS.
Before the measured run, the 8 queried nodes' last hour is backfilled
(`otlp-loadgen --backfill-seconds 3600`, not measured), so the query reads a
full hour of data: the recent window from the live store, the rest from history.

    python3 scripts/bench_cluster.py [--agents 64,256] [--seconds 60]
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
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def loadgen(endpoint, agents, seconds, backfill=0):
    out = subprocess.run([h.LOADGEN, "--endpoint", endpoint, "--agents", str(agents), "--series", "40",
                          "--seconds", str(seconds), "--backfill-seconds", str(backfill), "--backfill-agents", "8"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(proc, run):
    """CPU seconds and peak RSS of `proc` while `run()` runs; returns (result, cpu_s, rss_mb)."""
    cpu0 = h.cpu_seconds(proc.pid)
    result = run()
    return result, h.cpu_seconds(proc.pid) - cpu0, h.rss_mb(proc.pid)


def query_latencies(api, rounds=200):
    """The 1-hour view of 8 nodes (every series of agent-0..7) as a dashboard asks for it: once cold
    (nothing of it read before), then `rounds` times with the window moving on with the clock, as a
    dashboard redrawing the last hour does. Returns (series, cold ms, p50 ms, p99 ms of the rounds)."""
    ids = []
    for n in range(8):
        ids += [s["id"] for s in h.get(api, f"/api/series?node=agent-{n}")["series"]]
    if not ids:
        sys.exit("the master lists no series of agent-0..7")

    def one_query():
        now = int(time.time() * 1000)
        path = f"/api/series/data?ids={','.join(map(str, ids))}&from={now - 3_600_000}&to={now}&max_points=1000"
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://{api}{path}", timeout=30) as r:
            r.read()
        return (time.perf_counter() - t0) * 1000

    cold = one_query()
    times = sorted(one_query() for _ in range(rounds))
    return len(ids), cold, statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def one(agents, seconds):
    work = tempfile.mkdtemp(prefix="sonde-bench-cluster-")
    try:
        h.plugin_dirs(work, bundled=False)
        grpc, api = h.free_port(), f"127.0.0.1:{h.free_port()}"
        master = h.start_sonde(work, api, extra=["--role", "master"], settings=[
            f"ingest.otlp_grpc_listen=127.0.0.1:{grpc}", "ingest.otlp_http_listen=off",
            f"cluster.max_nodes={agents + 16}"])
        h.wait_ready(api, master)
        filled = loadgen(f"http://127.0.0.1:{grpc}", 8, 0.01, backfill=3600)
        res, cpu, rss = measure(master, lambda: loadgen(f"http://127.0.0.1:{grpc}", agents, seconds))
        time.sleep(2)  # the last flush
        disk = dir_bytes(os.path.join(work, "history"))
        nodes = h.get(api, "/api/cluster/nodes")["stats"]
        series, cold, p50, p99 = query_latencies(api)
        h.stop(master)

        rotel, rgrpc = h.start_rotel()
        rres, rcpu, rrss = measure(rotel, lambda: loadgen(f"http://127.0.0.1:{rgrpc}", agents, seconds))
        h.stop(rotel)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    pts = max(res["points_ok"], 1)
    # The backfilled hour of 8 nodes is on disk too: a node-hour is 40 series × 36 000 points.
    node_hours = agents * res["seconds"] / 3600 + filled["backfilled_points"] / (40 * 36_000)
    return {
        "agents": agents,
        "points": res["points_ok"],
        "refused_requests": res["requests_refused"],
        "failed_requests": res["requests_failed"],
        "nodes_seen": nodes["nodes"],
        "master_cpu_ms_per_100k_points": cpu * 1000 / pts * 100_000,
        "master_core_share": cpu / res["seconds"],
        "master_rss_mb": rss,
        "history_disk_bytes_per_node_hour": disk / node_hours,
        "backfilled_points": filled["backfilled_points"],
        "query_series": series,
        "query_cold_ms": cold,
        "query_p50_ms": p50,
        "query_p99_ms": p99,
        "rotel_cpu_ms_per_100k_points": rcpu * 1000 / max(rres["points_ok"], 1) * 100_000,
        "rotel_rss_mb": rrss,
        "cpu_ratio_to_rotel": (cpu / pts) / max(rcpu / max(rres["points_ok"], 1), 1e-12),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", default="64,256")
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    h.need_release_build(h.LOADGEN, recipe="./dev bench-cluster")
    for n in [int(x) for x in a.agents.split(",")]:
        r = one(n, a.seconds)
        print(json.dumps(r))
        print(f"{n} agents: master {r['master_cpu_ms_per_100k_points']:.1f} ms CPU per 100k points "
              f"({r['master_core_share']:.3f} of a core, {r['cpu_ratio_to_rotel']:.2f}x rotel's "
              f"{r['rotel_cpu_ms_per_100k_points']:.1f} ms), RSS {r['master_rss_mb']:.0f} MB (rotel "
              f"{r['rotel_rss_mb']:.0f} MB), history {r['history_disk_bytes_per_node_hour'] / 1e6:.2f} MB "
              f"per node-hour, 1-hour view of 8 nodes ({r['query_series']} series) cold "
              f"{r['query_cold_ms']:.1f} ms, then p50 {r['query_p50_ms']:.1f} ms p99 {r['query_p99_ms']:.1f} ms",
              flush=True)


if __name__ == "__main__":
    main()
