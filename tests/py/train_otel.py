"""A small training loop instrumented with the official OpenTelemetry Python SDK,
reporting to sonde the way a real job would: every batch is a span `train_batch`
carrying `sonde.batch_idx` (exact: that index is current from the span's start),
with child spans for the data loader and the backward pass, and a `sonde.batch_idx`
gauge (coarse: as fine as the metric export interval).

    python3 train_otel.py ENDPOINT grpc|http BATCHES BATCH_S RECORD_JSON
        [--job NAME] [--first-batch N] [--metric-interval-ms MS]

ENDPOINT is sonde's OTLP receiver (http://127.0.0.1:PORT). RECORD_JSON gets this
side's own record: [{"batch_idx", "start_ns", "end_ns"}, ...], the start and end
being exactly the `train_batch` span's. The metric interval defaults to the
SDK's own default (60 s): the gauge then leaves at shutdown.
"""

import argparse
import json
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def exporters(endpoint, protocol):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return (
            OTLPSpanExporter(endpoint=endpoint, insecure=True),
            OTLPMetricExporter(endpoint=endpoint, insecure=True),
        )
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return (
            OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces"),
            OTLPMetricExporter(endpoint=endpoint.rstrip("/") + "/v1/metrics"),
        )
    raise SystemExit(f"protocol must be grpc or http, not {protocol!r}")


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
    endpoint, protocol, batch_s, job = a.endpoint, a.protocol, a.batch_s, a.job
    resource = Resource.create(
        {"service.name": job, "host.name": "e2e-node", "sonde.rank": 0, "sonde.local_rank": 0}
    )
    span_exporter, metric_exporter = exporters(endpoint, protocol)
    tracer_provider = TracerProvider(resource=resource)
    # Spans leave when they end; a short delay keeps the batch-index reports
    # well within the plugin's lag_ms.
    tracer_provider.add_span_processor(
        BatchSpanProcessor(span_exporter, schedule_delay_millis=50, max_export_batch_size=64)
    )
    meter_provider = MeterProvider(
        resource=resource,
        metric_readers=[PeriodicExportingMetricReader(metric_exporter, export_interval_millis=a.metric_interval_ms)],
    )
    tracer = tracer_provider.get_tracer("train_otel")
    meter = meter_provider.get_meter("train_otel")
    batch_gauge = meter.create_gauge("sonde.batch_idx", unit="{batch}", description="current batch index")

    rows = []
    for batch_idx in range(a.first_batch, a.first_batch + a.batches):
        start_ns = time.time_ns()
        # The gauge moves before the span starts: a collection in between
        # reports the new index a little early, never the old one late.
        batch_gauge.set(batch_idx)
        span = tracer.start_span(
            "train_batch", attributes={"sonde.batch_idx": batch_idx}, start_time=start_ns
        )
        with _child(tracer, span, "dataloader_next"):
            busy(batch_s * 0.2)
        with _child(tracer, span, "train_batch.backward"):
            busy(batch_s * 0.6)
        busy(batch_s * 0.2)
        end_ns = time.time_ns()
        span.end(end_time=end_ns)
        rows.append({"batch_idx": batch_idx, "start_ns": start_ns, "end_ns": end_ns})

    # Everything buffered leaves before the process does.
    tracer_provider.shutdown()
    meter_provider.shutdown()
    with open(a.record, "w") as f:
        json.dump(rows, f)


def _child(tracer, parent, name):
    from opentelemetry import trace

    return tracer.start_as_current_span(name, context=trace.set_span_in_context(parent))


if __name__ == "__main__":
    main()
