"""The bottleneck plugin's confusion table and its CPU cost (`./dev bench-verdicts`).

1. Confusion: one sonde with the bundled bottleneck plugin; each scenario of
   tests/py/bottleneck_inject.py runs as its own job (the sleeper on two
   ranks), and, with Open MPI present, tests/mpi/imbalance.c on four ranks
   with the MPI probe. Every step the injector slowed counts in its cause's
   row; every step it left alone counts in the "healthy" row (for the
   burner, only those that waited for a CPU at most 15 % of their time more
   than the least contended quarter of the job's steps before the burner; for the transfers, the steps
   that spent under a tenth of their time on them, and those over half
   count as affected; as in tests/tests/bottleneck.rs). The MPI job's rows are its slow rank 3 and
   its waiting rank 0. Printed as a Markdown table of step counts.
2. Cost: two fresh sondes side by side sampling every 100 ms, one with the
   plugin and one without (the floor), both given the same 8 ranks posting
   10 steps/s each (a step with dataloader, forward, backward and allreduce
   phases, and the process's CPU time) to POST /api/ingest for SECONDS; the
   plugin's cost is the difference of the two processes' CPU time over the
   wall time, in % of one core. The time inside its calls (the host's
   per-plugin call metrics, wall clock, so inflated on a crowded machine) is
   printed beside it.

    python3 scripts/bench_verdicts.py [--seconds 30] [--sonde PATH]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERDICTS = ["input-bound", "compute-bound", "communication-bound", "host-bound", "idle", "unknown"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(api, path):
    with urllib.request.urlopen(f"http://{api}{path}", timeout=10) as r:
        return json.loads(r.read())


def post(api, path, body):
    req = urllib.request.Request(
        f"http://{api}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()


class Sonde:
    def __init__(self, binary, extra=(), plugin=True):
        self.dir = tempfile.mkdtemp(prefix="bench-verdicts-")
        plugins = os.path.join(self.dir, "plugins")
        os.makedirs(plugins)
        # The mpi plugin declares the `mpi_samples` table bottleneck reads MPI stalls from; both
        # sondes of the cost comparison run it, so the difference is bottleneck's alone.
        shutil.copy(os.path.join(ROOT, "target/plugins/bundled/mpi.wasm"), plugins)
        if plugin:
            shutil.copy(os.path.join(ROOT, "target/plugins/bundled/bottleneck.wasm"), plugins)
        self.api = f"127.0.0.1:{free_port()}"
        self.otlp = free_port()
        self.proc = subprocess.Popen(
            [binary, "--data-dir", os.path.join(self.dir, "data"), "--plugins-dir", plugins,
             "--sinks-dir", os.path.join(self.dir, "sinks"), "--listen", self.api,
             "--set", f'ingest.otlp_http_listen="127.0.0.1:{self.otlp}"', "--set", 'ingest.otlp_grpc_listen="off"',
             "--set", "sampler.include_loopback=true", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(300):
            try:
                get(self.api, "/api/ready")
                return
            except Exception:
                time.sleep(0.2)
        sys.exit("sonde did not become ready")

    def cpu_s(self):
        """CPU seconds (user + system) the process has used."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


def job_when(sonde, job, done, seconds):
    """The plugin's verdicts of `job` once `done(them)` holds, or as they are after `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            d = get(sonde.api, f"/api/plugins/bottleneck/jobs/{job}?limit=100000")
            if done(d):
                return d
        except Exception:
            pass
        time.sleep(1)
    return get(sonde.api, f"/api/plugins/bottleneck/jobs/{job}?limit=100000")


def rows_of(sonde, job, want):
    return job_when(sonde, job, lambda d: len(d["rows"]) >= want, 60)


def inject(sonde, scenario, job, ranks, args):
    procs, records = [], []
    for r in range(ranks):
        rec = os.path.join(sonde.dir, f"{job}-{r}.json")
        records.append(rec)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests/py/bottleneck_inject.py"), f"http://127.0.0.1:{sonde.otlp}",
             scenario, rec, "--job", job, "--rank", str(r), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"the injector failed ({scenario})")
    truth = []
    for rec in records:
        truth.extend(json.load(open(rec)))
    return truth


def confusion(binary):
    sonde = Sonde(binary)
    table = {}

    def count(cause, verdict):
        table.setdefault(cause, {v: 0 for v in VERDICTS})[verdict] += 1

    scenarios = [
        ("input (dataloader sleeps)", "dataloader", 1, ["--steps", "90", "--from", "30", "--to", "60"]),
        ("host (CPU burner)", "burner", 1, ["--steps", "100", "--from", "40", "--to", "70"]),
        ("communication (loopback transfers)", "network", 1, ["--steps", "70", "--from", "30", "--to", "56"]),
        ("idle (rank sleeps every 10th step)", "sleeper", 2, ["--steps", "60"]),
    ]
    try:
        for label, scenario, ranks, args in scenarios:
            job = f"bench-{scenario}"
            truth = inject(sonde, scenario, job, ranks, args)
            rows = rows_of(sonde, job, len(truth))["rows"]
            verdict = {(r["rank"], r["batch"]): r["verdict"] for r in rows}
            before = sorted(t["runq_s"] / ((t["end_ns"] - t["start_ns"]) / 1e9) for t in truth if 10 <= t["batch"] < 40)
            usual_runq = before[len(before) // 4]
            for t in truth:
                wall = (t["end_ns"] - t["start_ns"]) / 1e9
                affected = t["injected"]
                if scenario == "sleeper":
                    affected = affected and t["rank"] == 1
                    if t["batch"] < 10:
                        continue
                if scenario == "network":
                    share = t["transfer_s"] / wall
                    affected = share >= 0.5
                    if 0.1 <= share < 0.5:
                        continue
                if scenario == "burner" and not affected and (t["batch"] < 10 or t["runq_s"] / wall > usual_runq + 0.15):
                    continue
                v = verdict.get((t["rank"], t["batch"]))
                if v is not None:
                    count(label if affected else "healthy (unaffected steps)", v)
        if shutil.which("mpirun"):
            subprocess.run(["bash", os.path.join(ROOT, "scripts/build-mpi-probe.sh")], check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run(
                ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
                 "-x", f"LD_PRELOAD={ROOT}/target/probes/libsonde_mpi.so", "-x", f"MPI_SONDE_ENDPOINT={sonde.api}",
                 "-x", "MPI_SONDE_JOB=bench-mpi", "-x", "MPI_SONDE_FLUSH_MS=200", "-x", "MPI_SONDE_HZ=200",
                 f"{ROOT}/target/mpi/imbalance", "150", "50"],
                check=True, stdout=subprocess.DEVNULL,
            )
            d = job_when(sonde, "bench-mpi", lambda d: d.get("straggler"), 30)
            for r in d["rows"]:
                if r["rank"] == 3:
                    count("MPI slow rank (rank 3)", r["verdict"])
                elif r["rank"] == 0:
                    count("MPI waiting rank (rank 0)", r["verdict"])
            s = d.get("straggler")
            print(f"MPI job: persistent straggler {s and s['rank']} "
                  f"({s and s['batches']} of {s and s['of']} windows, {s and round(s['late_by_s'] * 1e3)} ms late)")
    finally:
        sonde.stop()
    return table


def cost(binary, seconds, ranks=8, steps_per_s=10):
    """Two sondes side by side on the same load, one with the plugin and one
    without (the floor): the plugin's cost is the difference of their CPU
    time; also the time spent in its calls by the host's own metrics."""
    sonde = Sonde(binary, ["--set", "sampler.period_ms=100"])
    floor = Sonde(binary, ["--set", "sampler.period_ms=100"], plugin=False)
    stop = time.time() + seconds
    job = "bench-cost"

    def rank_loop(rank):
        batch = 0
        cpu = 0.0
        while time.time() < stop:
            t0 = time.time_ns()
            ms = 1_000_000
            step = 100 * ms
            cpu += 0.09
            body = {
                "origin": {"job": job, "node": "bench", "rank": rank, "local_rank": rank},
                "timings": [
                    {"name": "train_batch", "start_ns": t0 - step, "end_ns": t0, "batch_idx": batch},
                    {"name": "dataloader_next", "start_ns": t0 - step, "end_ns": t0 - 90 * ms, "batch_idx": batch},
                    {"name": "forward", "start_ns": t0 - 90 * ms, "end_ns": t0 - 60 * ms, "batch_idx": batch},
                    {"name": "backward", "start_ns": t0 - 60 * ms, "end_ns": t0 - 20 * ms, "batch_idx": batch},
                    {"name": "allreduce", "start_ns": t0 - 20 * ms, "end_ns": t0, "batch_idx": batch},
                ],
                "points": [{"metric": "process.cpu.time", "unit": "s", "time_ns": t0, "value": cpu}],
            }
            post(sonde.api, "/api/ingest", body)
            post(floor.api, "/api/ingest", body)
            batch += 1
            time.sleep(max(0.0, 1 / steps_per_s - (time.time_ns() - t0) / 1e9))

    try:
        time.sleep(3)  # both warm: plugins loaded, first samples taken
        before = plugin_metrics(sonde)
        cpu0 = (sonde.cpu_s(), floor.cpu_s())
        t0 = time.time()
        threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(4)  # the last steps judged after the lag
        wall = time.time() - t0
        cpu1 = (sonde.cpu_s(), floor.cpu_s())
        after = plugin_metrics(sonde)
        busy_us = after["calls"] * after["call_us_mean"] - before["calls"] * before["call_us_mean"]
        judged = get(sonde.api, "/api/plugins/bottleneck/counters")["steps_judged"]
        with_plugin = (cpu1[0] - cpu0[0]) / wall * 100
        without = (cpu1[1] - cpu0[1]) / wall * 100
        return {
            "calls_pct": busy_us / 1e6 / wall * 100,
            "calls": after["calls"] - before["calls"],
            "judged": judged,
            "wall": wall,
            "with": with_plugin,
            "without": without,
        }
    finally:
        sonde.stop()
        floor.stop()


def plugin_metrics(sonde):
    d = get(sonde.api, "/api/plugins")
    plugins = d["plugins"] if isinstance(d, dict) else d
    for p in plugins:
        if p["name"] == "bottleneck":
            return p["metrics"]
    sys.exit("the bottleneck plugin is not loaded")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--sonde", default=None)
    a = ap.parse_args()
    binary = a.sonde or next(
        (p for p in (os.path.join(ROOT, "target/release/sonde"), os.path.join(ROOT, "target/debug/sonde")) if os.path.exists(p)),
        None,
    )
    if binary is None:
        sys.exit("no sonde binary: cargo build -p sonde")
    print(f"sonde: {os.path.relpath(binary, ROOT)}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}\n")
    table = confusion(binary)
    print("\n| injected cause \\ verdict | " + " | ".join(VERDICTS) + " |")
    print("|---|" + "---:|" * len(VERDICTS))
    for cause, counts in table.items():
        print(f"| {cause} | " + " | ".join(str(counts[v]) for v in VERDICTS) + " |")
    c = cost(binary, a.seconds)
    print(f"\ncost: 8 ranks x 10 steps/s, 100 ms sampling, {c['wall']:.0f} s, {c['judged']} steps judged in "
          f"{c['calls']} calls: sonde with the plugin {c['with']:.2f} % of one core, the same load without it "
          f"{c['without']:.2f} %: the plugin {c['with'] - c['without']:.2f} % "
          f"(time inside its calls, wall clock: {c['calls_pct']:.2f} %)")


if __name__ == "__main__":
    main()
