"""A small training loop instrumented with the Python client
(`sonde.ProfilerAgent`, the official OpenTelemetry SDK underneath), reporting
to sonde the way a real job would: every batch is a timing `train_batch`
carrying its batch index (a span with `sonde.batch_idx`: exact, that index is
current from the span's start), with the data loader's and the backward
pass's timings inside it, and the `sonde.batch_idx` gauge (coarse: as fine as
the metric export interval).

    python3 train_otel.py ENDPOINT grpc|http BATCHES BATCH_S RECORD_JSON
        [--job NAME] [--first-batch N] [--metric-interval-ms MS]

ENDPOINT is sonde's OTLP receiver (http://127.0.0.1:PORT). RECORD_JSON gets this
side's own record: [{"batch_idx", "start_ns", "end_ns"}, ...], the start and end
being exactly the `train_batch` timing's. The metric interval defaults to the
SDK's own default (60 s): the gauge then leaves at shutdown. The spans are
made on the agent's thread (`export_in="thread"`) with a 50 ms schedule, so
each leaves well within the determined test's lag.
"""

import argparse
import json
import time

import _client_path  # noqa: F401

from sonde import ProfilerAgent, Timing


def busy(seconds):
    """Work (not sleep) so the machine's CPU shows the job."""
    t_end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < t_end:
        x += sum(i * i for i in range(200))
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("protocol", choices=["grpc", "http"])
    ap.add_argument("batches", type=int)
    ap.add_argument("batch_s", type=float)
    ap.add_argument("record")
    ap.add_argument("--job", default="mnist-otel")
    ap.add_argument("--first-batch", type=int, default=0)
    ap.add_argument("--metric-interval-ms", type=int, default=60000)
    a = ap.parse_args()
    batch_s = a.batch_s
    agent = ProfilerAgent(
        a.job,
        rank=0,
        local_rank=0,
        node="e2e-node",
        endpoint=a.endpoint,
        protocol="grpc" if a.protocol == "grpc" else "http/protobuf",
        metric_interval_ms=a.metric_interval_ms,
        export_in="thread",
        drain_interval_s=0.01,
        schedule_delay_ms=50,
    ).start()
    rows = []
    for batch_idx in range(a.first_batch, a.first_batch + a.batches):
        start_ns = time.time_ns()
        agent.update_batch_idx(batch_idx)
        load = Timing("dataloader_next").start()
        busy(batch_s * 0.2)
        agent.record_timing(load.end())
        backward = Timing("train_batch.backward").start()
        busy(batch_s * 0.6)
        agent.record_timing(backward.end())
        busy(batch_s * 0.2)
        end_ns = time.time_ns()
        agent.record("train_batch", start_ns, end_ns, batch_idx)
        rows.append({"batch_idx": batch_idx, "start_ns": start_ns, "end_ns": end_ns})

    # Everything queued leaves before the process does.
    stats = agent.end()
    assert stats["exported"] == stats["recorded"] == 3 * a.batches, stats
    with open(a.record, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
