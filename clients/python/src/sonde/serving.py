"""Serving in Clockwork's terms: a controller reports each finished request
and each action (load, infer, evict) it sent to a worker. Each becomes a span
named `serving.request` / `serving.action` that carries a row of the event
table `requests` / `actions`, which sonde's clockwork plugin declares: the
attribute `sonde.table` names the table and every other attribute is a column,
by the table's column names (`request_id`, `arrival_ns`, ...: the same as in
`POST /api/ingest` rows). The span's start and end are the arrival and
departure (the send and the result's receipt), for tracing backends; sonde
reads the times from the columns.

    ctl = sonde.serving.Controller("clockwork")
    ctl.request(request_id=1, model_id=3, arrival_ns=a, departure_ns=d, result=0)
    ctl.action(action_id=7, action_type=sonde.serving.INFER, model_id=3, sent_ns=s, result_received_ns=r)
    ctl.end()
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from .agent import ProfilerAgent

LOAD, INFER, EVICT = 1, 2, 3
RESULT_OK, RESULT_TIMEOUT = 0, 4

# The OTLP attribute that makes a record or span a row of the table it names.
TABLE_ATTR = "sonde.table"

# The columns of the clockwork plugin's tables (`plugins/clockwork/src/rows.rs`).
REQUEST_COLUMNS = (
    "request_id",
    "user_id",
    "model_id",
    "slo_factor",
    "arrival_ns",
    "departure_ns",
    "deadline_ns",
    "result",
    "arrival_copies",
    "departure_copies",
    "action_id",
    "client_sent_ns",
    "client_received_ns",
)

ACTION_COLUMNS = (
    "action_id",
    "action_type",
    "status",
    "worker_id",
    "gpu_id",
    "model_id",
    "batch_size",
    "expected_exec_duration_ns",
    "worker_exec_duration_ns",
    "sent_ns",
    "expected_exec_complete_ns",
    "worker_exec_complete_ns",
    "expected_gpu_clock_mhz",
    "gpu_clock_before_mhz",
    "gpu_clock_after_mhz",
    "copy_output_complete_ns",
    "action_received_ns",
    "result_sent_ns",
    "result_received_ns",
    "result_processed_ns",
    "requests_queued",
    "copies_loaded",
    "requests_in_time",
)


def attributes(table: str, row: Mapping[str, Any], columns: Tuple[str, ...]) -> Dict[str, Any]:
    """OTLP attributes of a row of `table`; an unknown field is a ValueError (nothing is silently lost)."""
    unknown = sorted(k for k in row if k not in columns)
    if unknown:
        raise ValueError(f"unknown serving field(s) {unknown}; known: {list(columns)}")
    attrs: Dict[str, Any] = {TABLE_ATTR: table}
    attrs.update({k: v for k, v in row.items() if v is not None})
    return attrs


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
        attrs = attributes("requests", dict(row, arrival_ns=arrival_ns, departure_ns=departure_ns), REQUEST_COLUMNS)
        self._tracer.start_span("serving.request", start_time=arrival_ns, attributes=attrs).end(end_time=departure_ns)

    def action(self, *, sent_ns: int, result_received_ns: int, **row: Any) -> None:
        """A finished action: sent → result received (action_id, action_type, model_id required)."""
        for k in ("action_id", "action_type", "model_id"):
            if k not in row:
                raise ValueError(f"a serving action needs {k}")
        attrs = attributes("actions", dict(row, sent_ns=sent_ns, result_received_ns=result_received_ns), ACTION_COLUMNS)
        self._tracer.start_span("serving.action", start_time=sent_ns, attributes=attrs).end(end_time=result_received_ns)

    def end(self) -> None:
        if self._owned:
            self.agent.end()

    def __enter__(self) -> "Controller":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()
