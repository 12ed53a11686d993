"""A serving controller reporting finished requests and actions to sonde with
the official OpenTelemetry Python SDK (OTLP/HTTP): each action is a span named
`serving.action` (start = sent, end = result received), each request a span
named `serving.request` (start = arrival, end = departure), with the
`serving.*` attributes of host/src/ingest/otlp_serving.rs.

usage: clockwork_otel.py ENDPOINT ROWS.json
ROWS.json: {"requests": [...], "actions": [...]} in sonde's JSON ingest form.
"""

import json
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

REQUEST_ATTRS = {
    "request_id": "serving.request.id",
    "user_id": "serving.user.id",
    "model_id": "serving.model.id",
    "slo_factor": "serving.slo_factor",
    "deadline_ns": "serving.deadline",
    "result": "serving.result",
    "arrival_copies": "serving.copies.arrival",
    "departure_copies": "serving.copies.departure",
    "action_id": "serving.action.id",
}

ACTION_ATTRS = {
    "action_id": "serving.action.id",
    "action_type": "serving.action.type",
    "status": "serving.action.status",
    "worker_id": "serving.worker.id",
    "gpu_id": "serving.gpu.id",
    "model_id": "serving.model.id",
    "batch_size": "serving.batch_size",
    "expected_exec_duration_ns": "serving.expected.duration",
    "worker_exec_duration_ns": "serving.worker.duration",
    "expected_exec_complete_ns": "serving.expected.complete",
    "worker_exec_complete_ns": "serving.worker.complete",
    "expected_gpu_clock_mhz": "serving.gpu_clock.expected",
    "gpu_clock_before_mhz": "serving.gpu_clock.before",
    "gpu_clock_after_mhz": "serving.gpu_clock.after",
    "copy_output_complete_ns": "serving.worker.copy_output_complete",
    "action_received_ns": "serving.worker.action_received",
    "result_sent_ns": "serving.worker.result_sent",
    "result_processed_ns": "serving.result_processed",
    "requests_queued": "serving.requests_queued",
    "copies_loaded": "serving.copies_loaded",
    "requests_in_time": "serving.requests_in_time",
}


def attrs(row, mapping):
    return {mapping[k]: v for k, v in row.items() if k in mapping}


def main():
    endpoint, rows_file = sys.argv[1], sys.argv[2]
    rows = json.load(open(rows_file))
    provider = TracerProvider(resource=Resource.create({"service.name": "clockwork-controller", "sonde.role": "controller"}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces"), max_export_batch_size=512)
    )
    tracer = provider.get_tracer("clockwork.controller")
    for a in rows["actions"]:
        span = tracer.start_span("serving.action", start_time=a["sent_ns"], attributes=attrs(a, ACTION_ATTRS))
        span.end(end_time=a["result_received_ns"])
    for r in rows["requests"]:
        span = tracer.start_span("serving.request", start_time=r["arrival_ns"], attributes=attrs(r, REQUEST_ATTRS))
        span.end(end_time=r["departure_ns"])
    provider.force_flush()
    provider.shutdown()
    print(json.dumps({"requests": len(rows["requests"]), "actions": len(rows["actions"])}))


if __name__ == "__main__":
    main()
