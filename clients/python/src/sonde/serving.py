"""Serving in Clockwork's terms: a controller reports each finished request
and each action (load, infer, evict) it sent to a worker. Each becomes a span
named `serving.request` / `serving.action` with the `serving.*` attributes
the host's `ingest/otlp/serving.rs` reads; rows use the field names of the
JSON ingest's serving rows (`request_id`, `arrival_ns`, ...).

    ctl = sonde.serving.Controller("clockwork")
    ctl.request(request_id=1, model_id=3, arrival_ns=a, departure_ns=d, result=0)
    ctl.action(action_id=7, action_type=sonde.serving.INFER, model_id=3, sent_ns=s, result_received_ns=r)
    ctl.end()
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from .agent import ProfilerAgent

LOAD, INFER, EVICT = 1, 2, 3
RESULT_OK, RESULT_TIMEOUT = 0, 4

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
    "client_sent_ns": "serving.client.sent",
    "client_received_ns": "serving.client.received",
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

# The span's own start and end carry these; they are not attributes.
_REQUEST_TIMES = ("arrival_ns", "departure_ns")
_ACTION_TIMES = ("sent_ns", "result_received_ns")


def attributes(row: Mapping[str, Any], mapping: Mapping[str, str], times: tuple) -> Dict[str, Any]:
    """OTLP attributes of a row; an unknown field is a ValueError (nothing is silently lost)."""
    unknown = sorted(k for k in row if k not in mapping and k not in times)
    if unknown:
        raise ValueError(f"unknown serving field(s) {unknown}; known: {sorted(mapping) + list(times)}")
    return {mapping[k]: v for k, v in row.items() if k in mapping and v is not None}


class Controller:
    """A serving controller's reporter (role `controller`)."""

    def __init__(self, job: Optional[str] = None, *, agent: Optional[ProfilerAgent] = None, **agent_args: Any) -> None:
        agent_args.setdefault("role", "controller")
        self.agent = agent or ProfilerAgent(job, **agent_args)
        self._owned = agent is None
        self._tracer = self.agent.tracer()

    def request(self, *, arrival_ns: int, departure_ns: int, **row: Any) -> None:
        """A finished request: arrival → departure, with its fields (request_id and model_id required)."""
        for k in ("request_id", "model_id"):
            if k not in row:
                raise ValueError(f"a serving request needs {k}")
        attrs = attributes(row, REQUEST_ATTRS, _REQUEST_TIMES)
        self._tracer.start_span("serving.request", start_time=arrival_ns, attributes=attrs).end(end_time=departure_ns)

    def action(self, *, sent_ns: int, result_received_ns: int, **row: Any) -> None:
        """A finished action: sent → result received (action_id, action_type, model_id required)."""
        for k in ("action_id", "action_type", "model_id"):
            if k not in row:
                raise ValueError(f"a serving action needs {k}")
        attrs = attributes(row, ACTION_ATTRS, _ACTION_TIMES)
        self._tracer.start_span("serving.action", start_time=sent_ns, attributes=attrs).end(end_time=result_received_ns)

    def end(self) -> None:
        if self._owned:
            self.agent.end()

    def __enter__(self) -> "Controller":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()
