"""A small parameter server and its workers, as real processes on loopback,
reporting to sonde the way such a system would with no custom logging.

    python3 paramserver_sim.py server --port P --otlp http://127.0.0.1:OTLP_HTTP --workers N
        [--job J] [--staleness S | --asp] [--ckpt-at CLOCK] [--ckpt-s 1.5] [--all-s 0.3] [--hb-s 0.1]
    python3 paramserver_sim.py worker --port P --sonde 127.0.0.1:API --index I
        [--job J] [--step-s 0.1] [--hb-s 0.1] [--start-clock C] [--restarted --recover-s 2] [--no-data]
        [--die-after-clock C]

The server speaks OTLP through the Python client (`sonde.ps`, the official
OpenTelemetry SDK underneath, HTTP/protobuf):
heartbeats are `sonde.heartbeat` log records, checkpoint-begin/-end and
all-recovered are `sonde.node_event` log records, its clock (the slowest
worker's, as its progress tracker sees it) is the `sonde.progress` gauge with
`sonde.progress.name = clock`. Workers use only the standard library and
sonde's JSON ingest (`POST /api/ingest`): heartbeats, `clock` progress, and
node events restarted / recovered / no-data.

Between them, a line protocol over TCP: a worker sends `hello I CLOCK`, then
`clock C` after each iteration and waits for `ok`, which the server sends
once every live worker's clock is >= C - S (SSP; S = 0 is BSP; --asp never
waits) and no checkpoint is running. When the slowest clock first reaches
--ckpt-at the server checkpoints: begin, --ckpt-s of "dumping", end; the
workers wait meanwhile. A killed worker's clock stays where it was, so the
others block on it, as the seed's Clock() did. A restarted worker rolls back
to --start-clock, reports restarted, loads for --recover-s, reports
recovered and tells the server, which reports all-recovered --all-s later.
A worker started with --no-data reports no-data, leaves, and exits 0. One
started with --die-after-clock C SIGKILLs itself once the server took clock C
(logging `worker I: killed at T`).
"""

import time

# The process is up: a restarted worker's "restarted" carries this moment,
# before the imports below (which a loaded machine can stretch).
STARTED_NS = time.time_ns()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import socketserver  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import urllib.request  # noqa: E402

import _client_path  # noqa: E402,F401


def now_ns():
    return time.time_ns()


# --------------------------------------------------------------------------
# server
# --------------------------------------------------------------------------


class Tracker:
    def __init__(self, staleness, ckpt_at, ckpt_s, report):
        self.cond = threading.Condition()
        self.clocks = {}  # worker index -> clock
        self.staleness = staleness  # None = ASP
        self.ckpt_at = ckpt_at
        self.ckpt_s = ckpt_s
        self.checkpointing = False
        self.checkpointed = False
        self.report = report

    def min_clock(self):
        return min(self.clocks.values()) if self.clocks else 0

    def hello(self, index, clock):
        with self.cond:
            self.clocks[index] = clock
            self.cond.notify_all()

    def leave(self, index):
        with self.cond:
            self.clocks.pop(index, None)
            self.cond.notify_all()

    def clock(self, index, c):
        with self.cond:
            self.clocks[index] = c
            self.cond.notify_all()
            self.report.clock(self.min_clock())
            start_ckpt = (
                self.ckpt_at is not None and not self.checkpointed and self.min_clock() >= self.ckpt_at
            )
            if start_ckpt:
                self.checkpointed = True
                self.checkpointing = True
        if start_ckpt:
            threading.Thread(target=self.checkpoint, args=(self.ckpt_at,), daemon=True).start()
        with self.cond:
            while self.checkpointing or (
                self.staleness is not None and self.min_clock() < c - self.staleness
            ):
                self.cond.wait()

    def checkpoint(self, clock):
        self.report.node_event("checkpoint-begin", {"clock": clock})
        time.sleep(self.ckpt_s)  # dumping the parameters
        self.report.node_event("checkpoint-end", {"clock": clock})
        with self.cond:
            self.checkpointing = False
            self.cond.notify_all()


class OtelReport:
    """The server's reports, through the Python client (`sonde.ps`, OTLP/HTTP
    through the official OpenTelemetry SDK)."""

    def __init__(self, endpoint, job, index):
        from sonde.ps import Reporter

        self.rep = Reporter(
            job, role="server", index=index, node="ps-node", endpoint=endpoint, protocol="http/protobuf",
            schedule_delay_ms=50, metric_interval_ms=200,
        )

    def heartbeat(self):
        self.rep.heartbeat()

    def node_event(self, kind, attrs=None):
        if kind == "all-recovered":
            self.rep.recovery(kind, **(attrs or {}))
        elif kind == "checkpoint-begin":
            self.rep.checkpoint_begin(attrs["clock"])
        else:
            self.rep.checkpoint_end(attrs["clock"])
        print(f"server: {kind} at {now_ns()}", flush=True)

    def clock(self, c):
        self.rep.clock(c)

    def shutdown(self):
        self.rep.end()


def serve(a):
    report = OtelReport(a.otlp, a.job, 0)
    tracker = Tracker(None if a.asp else a.staleness, a.ckpt_at, a.ckpt_s, report)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            index = None
            for line in self.rfile:
                parts = line.decode().split()
                if not parts:
                    continue
                if parts[0] == "hello":
                    index = int(parts[1])
                    tracker.hello(index, int(parts[2]))
                elif parts[0] == "clock":
                    tracker.clock(index, int(parts[1]))
                    self.wfile.write(b"ok\n")
                elif parts[0] == "leave":
                    tracker.leave(index)
                elif parts[0] == "recovered":
                    # The others roll back to the checkpoint too; then everyone is back.
                    def all_back():
                        time.sleep(a.all_s)
                        report.node_event("all-recovered", {"process": f"worker-{index}"})

                    threading.Thread(target=all_back, daemon=True).start()
                    self.wfile.write(b"ok\n")

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", a.port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(f"server: listening on {a.port}", flush=True)
    try:
        while True:
            report.heartbeat()
            time.sleep(a.hb_s)
    except KeyboardInterrupt:
        pass
    finally:
        report.shutdown()


# --------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------


class JsonReport:
    def __init__(self, api, job, index):
        self.url = f"http://{api}/api/ingest"
        self.origin = {"job": job, "node": "ps-node", "role": "worker", "index": index}

    def post(self, **rows):
        body = json.dumps({"origin": self.origin, **rows}).encode()
        req = urllib.request.Request(self.url, body, {"content-type": "application/json"})
        for _ in range(20):
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 202:
                        return
            except Exception as e:  # a full hub answers 429: try again shortly
                err = e
            time.sleep(0.05)
        print(f"worker: ingest failed: {err}", file=sys.stderr, flush=True)

    def node_event(self, kind, reason="", t=None):
        t = t or now_ns()
        self.post(node_events=[{"kind": kind, "time_ns": t, "reason": reason}])
        print(f"worker {self.origin['index']}: {kind} at {t}", flush=True)


def work(a):
    rep = JsonReport(a.sonde, a.job, a.index)
    if a.restarted:
        rep.node_event("restarted", f"rolled back to clock {a.start_clock}", STARTED_NS)

    def beat():
        while True:
            rep.post(heartbeats=[{"time_ns": now_ns()}])
            time.sleep(a.hb_s)

    threading.Thread(target=beat, daemon=True).start()
    conn = socket.create_connection(("127.0.0.1", a.port))
    f = conn.makefile("rwb")

    def send(line):
        f.write(line.encode() + b"\n")
        f.flush()

    if a.no_data:
        # The seed's empty-data node: no block of the training file was left
        # for it. It says so and leaves instead of blocking the barrier.
        rep.node_event("no-data", "no training data allocated")
        send(f"hello {a.index} 0")
        send("leave")
        time.sleep(0.2)
        return
    clock = a.start_clock
    send(f"hello {a.index} {clock}")
    if a.restarted:
        # Loading the checkpoint: --recover-s from the moment it reported restarted.
        time.sleep(max(0.0, STARTED_NS / 1e9 + a.recover_s - time.time()))
        rep.node_event("recovered", f"checkpoint of clock {clock} loaded")
        send("recovered")
        f.readline()
    while True:
        time.sleep(a.step_s)  # one iteration
        clock += 1
        rep.post(progress=[{"name": "clock", "value": clock, "time_ns": now_ns()}])
        send(f"clock {clock}")
        if not f.readline():
            return
        if clock == a.die_after_clock:
            # SIGKILL, at a point where the server and sonde both have this
            # clock: killed from outside between the report and the send,
            # sonde would hold a clock the server never got, and see the
            # others' wait for this worker start one clock late (or not at all).
            print(f"worker {a.index}: killed at {now_ns()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["server", "worker"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--job", default="ps-sim")
    ap.add_argument("--hb-s", type=float, default=0.1)
    ap.add_argument("--otlp")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--staleness", type=int, default=0)
    ap.add_argument("--asp", action="store_true")
    ap.add_argument("--ckpt-at", type=int)
    ap.add_argument("--ckpt-s", type=float, default=1.5)
    ap.add_argument("--all-s", type=float, default=0.3)
    ap.add_argument("--sonde")
    ap.add_argument("--index", type=int)
    ap.add_argument("--step-s", type=float, default=0.1)
    ap.add_argument("--start-clock", type=int, default=0)
    ap.add_argument("--restarted", action="store_true")
    ap.add_argument("--recover-s", type=float, default=2.0)
    ap.add_argument("--no-data", action="store_true")
    ap.add_argument("--die-after-clock", type=int, help="SIGKILL itself once the server took this clock")
    a = ap.parse_args()
    if a.mode == "server":
        serve(a)
    else:
        work(a)


if __name__ == "__main__":
    main()
