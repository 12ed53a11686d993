"""A training loop that injects one bottleneck, reporting to sonde through the
official OpenTelemetry Python SDK (OTLP over HTTP), for the bottleneck plugin's
end-to-end tests and `./dev bench-verdicts`.

    python3 bottleneck_inject.py ENDPOINT SCENARIO RECORD_JSON
        [--job NAME] [--rank R] [--steps N] [--from A] [--to B] [--wait-s S]

Every step is a span `train_batch` (attribute `sonde.batch_idx`) with child
spans `dataloader_next`, `forward` and `backward`; the process reports its own
CPU time as the semantic-convention counter `process.cpu.time` (per
`cpu.mode`) every 100 ms. Compute is a fixed amount of arithmetic, so a CPU
taken away by a neighbour makes it last longer, as it would in a real job.

SCENARIO, applied to steps A <= step < B (the others are the healthy loop):
  dataloader  the dataloader sleeps --wait-s (1 s) (waiting on storage) instead of 8 ms of work
  burner      busy processes (2 per core) run beside the job
  network     after compute, a loopback TCP transfer whose size doubles each step
              from 64 KiB up to 512 MiB (the other steps transfer nothing)
  sleeper     rank --sleepy-rank (1) sleeps --wait-s (1 s) outside its phases on every
              10th step (step % 10 == 9), A and B ignored
  none        the healthy loop throughout

RECORD_JSON gets the ground truth, one row per step: batch, rank, start_ns,
end_ns, injected (bool), transfer_s (network), runq_s (time the main thread
waited for a CPU during the step, from /proc/self/schedstat: the machine's
own contention, whatever caused it).
"""

import argparse
import json
import multiprocessing
import os
import socket
import threading
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

_sink = 0.0


def spin(n):
    """n units of arithmetic (fixed work, not fixed time)."""
    global _sink
    x = 1.0
    for _ in range(n):
        x = x * 1.0000001 + 1e-9
    _sink = x


def calibrate():
    """Units per millisecond on this machine, the best of a few tries (so a
    busy moment during calibration does not make every step short)."""
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        spin(20000)
        best = max(best, 20000 / ((time.perf_counter() - t) * 1000))
    return best


def runq_wait_s():
    """Seconds this thread has waited on a run queue (Linux schedstat)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


def burn(stop):
    global _sink
    x = 1.0
    while not stop.is_set():
        for _ in range(10000):
            x = x * 1.0000001 + 1e-9
    _sink = x


def drain(listener):
    """The far end of the loopback link: reads each transfer, acknowledges it."""
    conn, _ = listener.accept()
    with conn:
        while True:
            head = conn.recv(8, socket.MSG_WAITALL)
            if len(head) < 8:
                return
            left = int.from_bytes(head, "big")
            while left:
                chunk = conn.recv(min(left, 1 << 20))
                if not chunk:
                    return
                left -= len(chunk)
            conn.sendall(b"k")


class Link:
    def __init__(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        threading.Thread(target=drain, args=(listener,), daemon=True).start()
        self.sock = socket.create_connection(listener.getsockname())
        self.buf = bytes(1 << 20)

    def send(self, size):
        self.sock.sendall(size.to_bytes(8, "big"))
        left = size
        while left:
            n = min(left, len(self.buf))
            self.sock.sendall(memoryview(self.buf)[:n])
            left -= n
        self.sock.recv(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("scenario", choices=["dataloader", "burner", "network", "sleeper", "none"])
    ap.add_argument("record")
    ap.add_argument("--job", default="inject")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--from", dest="first", type=int, default=40)
    ap.add_argument("--to", dest="last", type=int, default=80)
    ap.add_argument("--sleepy-rank", type=int, default=1)
    ap.add_argument("--wait-s", type=float, default=1.0, help="the dataloader's or the sleeper's wait")
    a = ap.parse_args()

    resource = Resource.create(
        {
            "service.name": a.job,
            "host.name": socket.gethostname(),
            "sonde.rank": a.rank,
            "sonde.local_rank": a.rank,
        }
    )
    base = a.endpoint.rstrip("/")
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=base + "/v1/traces"), schedule_delay_millis=100)
    )

    def cpu_time(_options: CallbackOptions):
        t = os.times()
        yield Observation(t.user, {"cpu.mode": "user"})
        yield Observation(t.system, {"cpu.mode": "system"})

    meter_provider = MeterProvider(
        resource=resource,
        metric_readers=[
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=base + "/v1/metrics"), export_interval_millis=100
            )
        ],
    )
    meter_provider.get_meter("bottleneck_inject").create_observable_counter(
        "process.cpu.time", callbacks=[cpu_time], unit="s", description="CPU seconds of this process"
    )
    tracer = tracer_provider.get_tracer("bottleneck_inject")

    per_ms = calibrate()
    link = Link() if a.scenario == "network" else None
    spawn = multiprocessing.get_context("spawn")
    stop_burn = spawn.Event()
    burners = []
    rows = []
    size = 64 << 10
    for batch in range(a.steps):
        injected = a.scenario != "none" and a.first <= batch < a.last
        if a.scenario == "sleeper":
            injected = batch % 10 == 9 and a.rank == a.sleepy_rank
        if a.scenario == "burner" and batch == a.first:
            for _ in range(2 * (os.cpu_count() or 1)):
                # Spawned, not forked: a forked child would restart the SDK's
                # exporters (they re-arm at fork) and report its own CPU time
                # as this rank's.
                p = spawn.Process(target=burn, args=(stop_burn,), daemon=True)
                p.start()
                burners.append(p)
            time.sleep(0.5)  # every burner running before the first affected step
        if a.scenario == "burner" and batch == a.last:
            stop_burn.set()
            for p in burners:
                p.join()
            time.sleep(0.5)
        attrs = {"sonde.batch_idx": batch}
        wait0 = runq_wait_s()
        start = time.time_ns()
        step = tracer.start_span("train_batch", attributes=attrs, start_time=start)
        ctx = trace.set_span_in_context(step)
        with tracer.start_as_current_span("dataloader_next", context=ctx, attributes=attrs):
            if a.scenario == "dataloader" and injected:
                time.sleep(a.wait_s)
            else:
                spin(int(8 * per_ms))
        with tracer.start_as_current_span("forward", context=ctx, attributes=attrs):
            spin(int(30 * per_ms))
        with tracer.start_as_current_span("backward", context=ctx, attributes=attrs):
            spin(int(50 * per_ms))
        transfer_s = 0.0
        if link is not None and a.first <= batch < a.last:
            t = time.perf_counter()
            link.send(size)
            transfer_s = time.perf_counter() - t
            size = min(size * 2, 512 << 20)
        if a.scenario == "sleeper" and injected:
            time.sleep(a.wait_s)
        end = time.time_ns()
        step.end(end_time=end)
        rows.append(
            {
                "batch": batch,
                "rank": a.rank,
                "start_ns": start,
                "end_ns": end,
                "injected": injected,
                "transfer_s": transfer_s,
                "runq_s": runq_wait_s() - wait0,
            }
        )
    stop_burn.set()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    with open(a.record, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
