#!/usr/bin/env python3
"""Soak: sonde for MINUTES with every bundled plugin, 10 Hz sampling and EVENTS/s of ingest.

The release sonde runs with all bundled plugins (sysmetrics, determined,
dlrover, clockwork, mpi, paramserver) exporting to a rotel collector (blackhole
exporter). A load thread posts to `POST /api/ingest` every 100 ms, for five
kinds of job at once (a training loop's progress and timings, a DLRover
worker's global step and heartbeats, a parameter server's clocks and
heartbeats, a serving controller's requests and actions, MPI probe samples),
EVENTS rows a second in all.

At HOSTILE_AT minutes three hostile plugins are dropped into the plugins
directory for HOSTILE_FOR minutes (copies of the testbed named spin.wasm,
membomb.wasm and trap.wasm: an infinite loop, a memory bomb, a trap on every
call), then removed.

Every 10 s it records RSS, open file descriptors, threads, the sampler's
ticks and late ticks (more than 2 ms late), and the ingest and export
counters, into soak.csv beside the summary. The summary gives RSS growth after
warm-up, fd and thread ranges, the sample period's p99 and late-tick share
during the hostile window and outside it, and what was lost (rows refused,
points dropped or failed).

Usage: scripts/soak.py [--minutes 30] [--events 10000] [--hostile-at 20] [--hostile-for 5] [--out target/soak]
Needs the release sonde and the plugins (`./dev soak` builds them).
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_process import BUNDLED, ROOT, SONDE, free_port, get, rss_mb, stop  # noqa: E402

TESTBED = os.path.join(ROOT, "target/plugins/testing/testbed.wasm")
HOSTILE = ("spin", "membomb", "trap")


def post(api, body):
    req = urllib.request.Request(f"http://{api}/api/ingest", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())["accepted"]


class Load(threading.Thread):
    """EVENTS rows a second, in five bodies every 100 ms."""

    def __init__(self, api, events):
        super().__init__(daemon=True)
        self.api, self.per_kind = api, max(1, events // 10 // 5)
        self.sent = self.accepted = self.failed_posts = 0
        self.stop_flag = threading.Event()

    def bodies(self, step, now):
        n = self.per_kind
        t0 = now - 100_000_000
        ts = [t0 + i * (100_000_000 // n) for i in range(n)]
        return [
            {"origin": {"job": "soak-train", "rank": 0, "local_rank": 0},
             "progress": [{"name": "batch_idx", "value": step, "time_ns": t0}],
             "timings": [{"name": "train_batch", "start_ns": t, "end_ns": t + 1_000_000, "batch_idx": step}
                         for t in ts[: n - 1]]},
            {"origin": {"job": "soak-dlrover", "node": "w0", "role": "worker", "index": 0, "rank": 0},
             "progress": [{"name": "global_step", "value": step * n + i, "time_ns": t} for i, t in enumerate(ts[: n - 1])],
             "heartbeats": [{"time_ns": now}]},
            {"origin": {"job": "soak-ps", "node": "w1", "role": "worker", "index": 1},
             "progress": [{"name": "clock", "value": step * n + i, "time_ns": t} for i, t in enumerate(ts[: n - 1])],
             "heartbeats": [{"time_ns": now}]},
            {"origin": {"job": "soak-serving", "role": "controller"},
             "requests": [{"request_id": step * n + i, "model_id": i % 3, "arrival_ns": t, "departure_ns": t + 5_000_000,
                           "deadline_ns": t + 20_000_000, "result": 0, "arrival_copies": 1, "departure_copies": 1,
                           "action_id": step * n + i} for i, t in enumerate(ts[: n // 2])],
             "actions": [{"action_id": step * n + i, "action_type": 2, "model_id": i % 3, "batch_size": 1,
                          "expected_exec_duration_ns": 4_000_000, "worker_exec_duration_ns": 4_100_000,
                          "sent_ns": t, "expected_exec_complete_ns": t + 4_500_000, "worker_exec_complete_ns": t + 4_600_000,
                          "action_received_ns": t + 100_000, "result_sent_ns": t + 4_700_000,
                          "result_received_ns": t + 4_800_000} for i, t in enumerate(ts[: n - n // 2])]},
            {"origin": {"job": "soak-mpi", "rank": step % 4},
             "mpi_samples": [{"thread": 0, "state": ("work", "stall", "not_in_mpi")[i % 3], "function": "MPI_Allreduce",
                              "callsite": f"app+0x{i % 16:x}", "count": 10, "period_ns": 1_000_000, "time_ns": t}
                             for i, t in enumerate(ts)]},
        ]

    def run(self):
        step, next_t = 0, time.monotonic()
        while not self.stop_flag.is_set():
            for b in self.bodies(step, time.time_ns()):
                rows = sum(len(v) for k, v in b.items() if isinstance(v, list))
                self.sent += rows
                try:
                    self.accepted += post(self.api, b)
                except Exception:
                    self.failed_posts += 1
            step += 1
            next_t += 0.1
            time.sleep(max(0.0, next_t - time.monotonic()))


def proc_counts(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/status") as f:
        threads = next(int(l.split()[1]) for l in f if l.startswith("Threads:"))
    return fds, threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--hostile-at", type=float, default=20)
    ap.add_argument("--hostile-for", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=3, help="minutes before RSS growth is measured")
    ap.add_argument("--out", default=os.path.join(ROOT, "target/soak"))
    a = ap.parse_args()
    for what, p in (("sonde", SONDE), ("the testbed plugin", TESTBED)):
        if not os.path.exists(p):
            sys.exit(f"{what} is missing at {p}: run ./dev soak")
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sonde-soak-")
    plugins = os.path.join(work, "plugins")
    os.makedirs(plugins)
    os.makedirs(os.path.join(work, "sinks"))
    for f in os.listdir(BUNDLED):
        shutil.copy(os.path.join(BUNDLED, f), plugins)
    rotel_bin = subprocess.check_output([sys.executable, "-c",
        "import rotel,os;print(os.path.join(os.path.dirname(rotel.__file__),'rotel-agent'))"], text=True).strip()
    grpc = free_port()
    rotel = subprocess.Popen([rotel_bin, "start", "--exporter", "blackhole", "--otlp-grpc-endpoint", f"127.0.0.1:{grpc}",
                              "--otlp-http-endpoint", f"127.0.0.1:{free_port()}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"127.0.0.1:{free_port()}"
    log = open(os.path.join(a.out, "sonde.log"), "w")
    sonde = subprocess.Popen([SONDE, "--data-dir", os.path.join(work, "data"), "--plugins-dir", plugins,
                              "--sinks-dir", os.path.join(work, "sinks"), "--listen", api,
                              "--export-endpoint", f"http://127.0.0.1:{grpc}",
                              "--set", "ingest.otlp_grpc_listen=off", "--set", "ingest.otlp_http_listen=off"],
                             stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        for _ in range(1200):
            try:
                st = get(api, "/api/status")
                if st["sampler"] and all(p["state"] == "running" for p in get(api, "/api/plugins")["plugins"]):
                    break
            except Exception:
                pass
            time.sleep(0.1)
        else:
            sys.exit("sonde did not start every plugin; see " + os.path.join(a.out, "sonde.log"))
        load = Load(api, a.events)
        load.start()
        t0 = time.monotonic()
        hostile_on = hostile_off = None
        while (m := (time.monotonic() - t0) / 60) < a.minutes:
            if hostile_on is None and m >= a.hostile_at:
                for name in HOSTILE:
                    shutil.copy(TESTBED, os.path.join(plugins, f"{name}.wasm"))
                hostile_on = m
            if hostile_on is not None and hostile_off is None and m >= a.hostile_at + a.hostile_for:
                for name in HOSTILE:
                    os.remove(os.path.join(plugins, f"{name}.wasm"))
                hostile_off = m
            st = get(api, "/api/status")
            ing = get(api, "/api/ingest")
            pl = {p["name"]: p for p in get(api, "/api/plugins")["plugins"]}
            fds, threads = proc_counts(sonde.pid)
            per = st["sampler"]["period"]
            ex = st["export"]["stats"]
            rows.append({
                "minute": round(m, 2), "rss_mb": round(rss_mb(sonde.pid), 1), "fds": fds, "threads": threads,
                "ticks": per["ticks"], "late_ticks": per["late_ticks"], "period_p99_us": per["error_p99_us"],
                "rows_sent": load.sent, "rows_accepted": load.accepted, "failed_posts": load.failed_posts,
                "json_refused_rows": ing["json"]["refused_rows"], "rows_published": ing["rows_published"],
                "points_exported": ex["points_exported"], "points_dropped": ex["points_dropped"],
                "points_failed": ex["points_failed"],
                "bundled_running": sum(1 for n, p in pl.items() if n not in HOSTILE and p["state"] == "running"),
                "hostile_states": " ".join(f"{n}={pl[n]['state']}" for n in HOSTILE if n in pl),
            })
            print(json.dumps(rows[-1]), flush=True)
            time.sleep(10)
        load.stop_flag.set()
        load.join(5)
    finally:
        stop(sonde)
        rotel.kill()
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(a.out, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    warm = [r for r in rows if r["minute"] >= a.warmup]
    hostile = [r for r in rows if hostile_on is not None and hostile_on <= r["minute"] <= (hostile_off or 1e9)]
    def late_share(rs):
        if len(rs) < 2:
            return float("nan")
        return (rs[-1]["late_ticks"] - rs[0]["late_ticks"]) / max(1, rs[-1]["ticks"] - rs[0]["ticks"])
    last = rows[-1]
    print(f"\nsoak: {a.minutes:.0f} min, {a.events} ingest rows/s, every bundled plugin, 100 ms sampling "
          f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores); timeline in {a.out}/soak.csv")
    print(f"RSS after {a.warmup:.0f} min warm-up {warm[0]['rss_mb']} MB -> end {last['rss_mb']} MB "
          f"(growth {last['rss_mb'] - warm[0]['rss_mb']:+.1f} MB; max {max(r['rss_mb'] for r in rows)} MB)")
    print(f"file descriptors {min(r['fds'] for r in warm)}-{max(r['fds'] for r in warm)}, "
          f"threads {min(r['threads'] for r in warm)}-{max(r['threads'] for r in warm)} after warm-up")
    print(f"ingest: {last['rows_sent']} rows sent, {last['rows_accepted']} accepted, {last['json_refused_rows']} refused, "
          f"{last['failed_posts']} posts failed; export: {last['points_exported']} points exported, "
          f"{last['points_dropped']} dropped, {last['points_failed']} failed")
    if hostile:
        print(f"hostile plugins from minute {hostile_on:.1f} to {hostile_off or a.minutes:.1f}: "
              f"late ticks (> 2 ms) {late_share(hostile) * 100:.3f} % of ticks, period p99 at its end "
              f"{hostile[-1]['period_p99_us']:.0f} us; bundled plugins running throughout: "
              f"{min(r['bundled_running'] for r in hostile)} of {len(os.listdir(BUNDLED))}; states {hostile[-1]['hostile_states']}")
    print(f"outside the hostile window: late ticks {late_share(warm[: max(2, len(warm) - len(hostile))]) * 100:.3f} %")


if __name__ == "__main__":
    main()
