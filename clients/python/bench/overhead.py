"""The client's cost to a training loop: a 10 000-step loop run bare, then
with a `Timing` recorded every step (`record_timing` + `update_batch_idx`)
to a running sonde, then to a sonde that is down (nothing listens). Each
variant runs in its own fresh process, 5 times; medians are printed.

    python3 bench/overhead.py SONDE_BINARY [--steps 10000] [--repeats 5]

Per call = (loop with the calls - bare loop) / steps, three ways:
- the loop thread's own CPU time (`time.thread_time`): what the calls cost
  the training loop's thread, whatever else the machine runs;
- the training process's CPU (all its threads: the loop, plus the drain
  thread pickling the queue to the export helper), through `end()`;
- the export helper process's CPU (the SDK making, encoding and sending the
  spans), which runs beside the training process, on another core when
  there is one;
and the loop's wall time, which on a machine with no idle core also pays
for whatever runs beside it (the helper included).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")

CHILD = r"""
import json, sys, time
sys.path.insert(0, SRC)
mode, steps, endpoint = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import sonde

def work(i):
    # a stand-in for a training step's Python side: a few microseconds
    return sum(range(50))

agent = None
if mode != "bare":
    agent = sonde.ProfilerAgent("bench", endpoint=endpoint, rank=0, export_timeout_s=1.0).start()
cpu0 = time.process_time()
th0 = time.thread_time()
t0 = time.perf_counter()
if agent is None:
    for i in range(steps):
        t = (time.time_ns(), time.time_ns())
        work(i)
else:
    Timing = sonde.Timing
    for i in range(steps):
        agent.update_batch_idx(i)
        t = Timing("step").start()
        work(i)
        t.end()
        agent.record_timing(t)
loop_s = time.perf_counter() - t0
thread_s = time.thread_time() - th0
stats = agent.end(timeout_s=30) if agent is not None else {}
cpu_s = time.process_time() - cpu0
import resource
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"loop_s": loop_s, "thread_s": thread_s, "cpu_s": cpu_s, "helper_s": ch.ru_utime + ch.ru_stime, "stats": stats}))
""".replace("SRC", repr(SRC))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sonde(binary, tmp):
    api, otlp = free_port(), free_port()
    for d in ("plugins", "sinks", "data"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    proc = subprocess.Popen(
        [binary, "--data-dir", os.path.join(tmp, "data"), "--plugins-dir", os.path.join(tmp, "plugins"),
         "--sinks-dir", os.path.join(tmp, "sinks"), "--listen", f"127.0.0.1:{api}",
         "--set", f'ingest.otlp_http_listen="127.0.0.1:{otlp}"', "--set", 'ingest.otlp_grpc_listen="off"'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{api}/api/ready", timeout=1) as r:
                if r.status == 200:
                    return proc, otlp
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("sonde did not become ready")


def run(mode, steps, endpoint):
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(steps), endpoint], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sonde")
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, otlp = start_sonde(a.sonde, tmp)
        down = f"http://127.0.0.1:{free_port()}"
        try:
            results = {m: [] for m in ("bare", "up", "down")}
            for _ in range(a.repeats):
                # interleaved, so machine load hits every variant alike
                results["bare"].append(run("bare", a.steps, "http://127.0.0.1:9"))
                results["up"].append(run("up", a.steps, f"http://127.0.0.1:{otlp}"))
                results["down"].append(run("down", a.steps, down))
        finally:
            proc.terminate()
            proc.wait(10)
    med = lambda m, k: statistics.median(r[k] for r in results[m])  # noqa: E731
    per = lambda m, k: (med(m, k) - med("bare", k)) / a.steps * 1e6  # noqa: E731
    print(f"python client overhead: {a.steps} steps, median of {a.repeats} runs each, {time.strftime('%Y-%m-%d')}")
    print(f"  bare loop: {med('bare', 'loop_s') / a.steps * 1e6:.2f} us per step (wall), "
          f"{med('bare', 'thread_s') / a.steps * 1e6:.2f} us (loop thread CPU)")
    for m, label in (("up", "sonde up"), ("down", "sonde down")):
        last = results[m][-1]["stats"]
        print(f"  {label}: per call (update_batch_idx + Timing + record_timing):"
              f" loop thread CPU {per(m, 'thread_s'):.2f} us, training process CPU {per(m, 'cpu_s'):.2f} us,"
              f" export helper CPU {med(m, 'helper_s') / a.steps * 1e6:.2f} us, loop wall {per(m, 'loop_s'):.2f} us;"
              f" last run: exported {last['exported']}, export_failed {last['export_failed']},"
              f" dropped_queue_full {last['dropped_queue_full']}")

if __name__ == "__main__":
    main()
