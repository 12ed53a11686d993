"""What a restart reads back costs in memory: a standalone sonde is given
BATCHES batches of three timings for each of three ranks over `POST
/api/ingest` (its job registry keeps them, and writes them to the state
store), then killed with SIGKILL and started again on the same data
directory; prints its RSS before the kill and 5 s after the restart, the
time to ready, and the state store's size, as one JSON line.

    python3 scripts/bench_restart_rss.py SONDE_BIN [BATCHES]   (default 20000)

Run it twice with two binaries to compare them (`./dev bench-restart-rss`
runs the debug build)."""
import json, os, signal, subprocess, sys, tempfile, time, urllib.request

import harness as h

sonde, batches = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20000
RANKS = 3
d = tempfile.mkdtemp(prefix="rss-restart-")
os.makedirs(f"{d}/plugins")
port = h.free_port()
def start():
    p = subprocess.Popen([sonde, "--data-dir", f"{d}/data", "--plugins-dir", f"{d}/plugins", "--sinks-dir", d,
                          "--listen", f"127.0.0.1:{port}", "--set", "ingest.otlp_grpc_listen=\"off\"",
                          "--set", "ingest.otlp_http_listen=\"off\"", "--set", "cluster.max_steps_per_rank=40000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/ready", timeout=1); return p, time.time() - t0
        except Exception:
            time.sleep(0.05)
p, _ = start()
t = 1_700_000_000_000_000_000
for r in range(RANKS):
    for b0 in range(0, batches, 500):
        timings = []
        for b in range(b0, min(batches, b0 + 500)):
            s = t + b * 30_000_000
            for i, name in enumerate(("forward", "backward", "optimizer")):
                timings.append({"name": name, "start_ns": s + i * 8_000_000, "end_ns": s + (i + 1) * 8_000_000, "batch_idx": b})
        body = json.dumps({"origin": {"job": "rss", "rank": r, "role": "worker"}, "timings": timings}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/ingest", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).read()
time.sleep(12)  # the flusher writes every second (60 000 steps take it seconds)
before = h.rss_mb(p.pid)
p.send_signal(signal.SIGKILL); p.wait()
p, ready = start()
time.sleep(5)
view = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/jobs/rss?batches=1", timeout=30).read())
after = h.rss_mb(p.pid)
size = os.path.getsize(f"{d}/data/state.redb") / 1e6
p.kill()
print(json.dumps({"batches": batches, "ranks": len(view.get("ranks", [])), "rss_before_kill_mb": round(before, 1),
                  "ready_s": round(ready, 2), "rss_after_restart_mb": round(after, 1), "state_redb_mb": round(size, 1)}))
