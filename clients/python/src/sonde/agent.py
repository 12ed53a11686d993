"""`ProfilerAgent` and `Timing`: Determined's profiler API, reporting every
rank's timings to sonde over OTLP.

What goes out (read by the host's `ingest/otlp/`):
- a timing is a span named after it, from its start to its end, with the
  span attribute `sonde.batch_idx` = its batch (the timing's own, else the
  batch current when it was recorded);
- `update_batch_idx(i)` sets the `sonde.batch_idx` gauge (coarse progress,
  one point per metric export); the timings' spans carry the exact one;
- the resource names the job, the node, the rank, local rank and world size.

The training loop only appends a tuple to a bounded queue. Every
`drain_interval_s` a background thread hands the queue over in one batch:
by default to an export helper process (`_helper.py`), which makes the SDK
spans and exports them with the SDK's batching processor, so their cost is
not paid under the training loop's GIL; with `export_in="thread"` (or a
`span_exporter` given) the spans are made on that thread instead. A sonde
that is down costs the loop nothing: what the queue, the helper or the
exporter could not take is counted in `stats()`.
"""

from __future__ import annotations

import atexit
import collections
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref
from types import TracebackType
from typing import Any, Deque, Dict, List, Mapping, Optional, Tuple, Type, Union
from urllib.parse import quote

from . import _env, _otel
from ._otel import SpanWriter

# A queued item: (name, start_ns, end_ns, batch_idx or None); name None = a batch-index update.
_Item = Tuple[Optional[str], int, int, Optional[int]]


class Timing:
    """One measured interval: `Timing("forward").start()`, work, `.end()`,
    then `agent.record_timing(t)`. Times are ns since the Unix epoch."""

    __slots__ = ("name", "start_ns", "end_ns", "batch_idx")

    def __init__(self, name: str, batch_idx: Optional[int] = None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a timing needs a non-empty name, got {name!r}")
        self.name = name
        self.start_ns = 0
        self.end_ns = 0
        self.batch_idx = batch_idx

    def start(self) -> "Timing":
        self.start_ns = time.time_ns()
        return self

    def end(self) -> "Timing":
        self.end_ns = time.time_ns()
        return self

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def __repr__(self) -> str:
        return f"Timing({self.name!r}, start_ns={self.start_ns}, end_ns={self.end_ns}, batch_idx={self.batch_idx})"


class _Scope:
    """`with agent.timing("forward"):` — measures the block and records it."""

    __slots__ = ("agent", "name", "batch_idx", "start_ns")

    def __init__(self, agent: "ProfilerAgent", name: str, batch_idx: Optional[int]) -> None:
        self.agent, self.name, self.batch_idx, self.start_ns = agent, name, batch_idx, 0

    def __enter__(self) -> "_Scope":
        self.start_ns = time.time_ns()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.agent.record(self.name, self.start_ns, time.time_ns(), self.batch_idx)


def _check_index(i: Any) -> int:
    if isinstance(i, bool) or not hasattr(i, "__index__"):
        raise TypeError(f"a batch index must be an integer, got {i!r}")
    v = i.__index__()
    if v < 0:
        raise ValueError(f"a batch index must be >= 0, got {v}")
    return v


class ProfilerAgent:
    """Reports one process's batch indices and timings to sonde.

    Everything not given is read from the environment (see `sonde._env`):
    the job from `SONDE_CLIENT_JOB`, rank / local rank / world size from the
    launcher's variables, the endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT` and
    `OTEL_EXPORTER_OTLP_PROTOCOL` (default: OTLP/HTTP to 127.0.0.1:4318).
    """

    def __init__(
        self,
        job: Optional[str] = None,
        *,
        rank: Optional[int] = None,
        local_rank: Optional[int] = None,
        world_size: Optional[int] = None,
        node: Optional[str] = None,
        endpoint: Optional[str] = None,
        protocol: Optional[str] = None,
        token: Optional[str] = None,
        role: str = "worker",
        enabled: Optional[bool] = None,
        queue_capacity: int = 65536,
        drain_interval_s: float = 0.05,
        metric_interval_ms: int = 1000,
        export_timeout_s: float = 5.0,
        schedule_delay_ms: int = 100,
        resource_attributes: Optional[Mapping[str, Any]] = None,
        env: Optional[Mapping[str, str]] = None,
        span_exporter: Any = None,
        export_in: str = "process",
    ) -> None:
        if queue_capacity < 1:
            raise ValueError(f"queue_capacity must be >= 1, got {queue_capacity}")
        if export_in not in ("process", "thread"):
            raise ValueError(f"export_in must be 'process' or 'thread', got {export_in!r}")
        if drain_interval_s <= 0:
            raise ValueError(f"drain_interval_s must be > 0, got {drain_interval_s}")
        self.job = job or _env.job_name(env)
        p = _env.placement(env, rank=rank, local_rank=local_rank, world_size=world_size)
        self.rank, self.local_rank, self.world_size = p.rank, p.local_rank, p.world_size
        self.node = node or _env.node_name(env)
        self.protocol = _env.protocol(env, protocol)
        self.endpoint = _env.endpoint(env, endpoint, self.protocol)
        self.enabled = _env.enabled(env) if enabled is None else bool(enabled)
        self._pipeline = _otel.Pipeline(
            _otel.resource(
                self.job,
                self.node,
                role=role,
                rank=self.rank,
                local_rank=self.local_rank,
                world_size=self.world_size,
                extra=resource_attributes,
            ),
            self.endpoint,
            self.protocol,
            token=token,
            export_timeout_s=export_timeout_s,
            schedule_delay_ms=schedule_delay_ms,
            metric_interval_ms=metric_interval_ms,
            span_exporter_override=span_exporter,
        )
        self._helper_cfg = {
            "job": self.job,
            "node": self.node,
            "resource": dict(role=role, rank=self.rank, local_rank=self.local_rank,
                             world_size=self.world_size, extra=dict(resource_attributes or {})),
            "endpoint": self.endpoint,
            "protocol": self.protocol,
            "token": token,
            "export_timeout_s": export_timeout_s,
            "schedule_delay_ms": schedule_delay_ms,
            "metric_interval_ms": metric_interval_ms,
        }
        self._in_process = export_in == "thread" or span_exporter is not None
        self._writer = SpanWriter(self._pipeline)
        self._helper: Optional[subprocess.Popen] = None
        self._helper_sent = 0  # timings handed to the helper
        self._helper_lost = 0  # timings the helper never took (it died or never started)
        self._helper_counts: Optional[Dict[str, int]] = None
        self._queue: Deque[_Item] = collections.deque()
        self._capacity = queue_capacity
        self._interval = drain_interval_s
        self._batch_idx: Optional[int] = None
        self._dropped_full = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._ended = False
        self._lock = threading.Lock()
        self._beats_stop = threading.Event()
        self._beats: Optional[threading.Thread] = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> "ProfilerAgent":
        """Starts the background thread (idempotent). Timings recorded before
        are kept and leave with the first drain."""
        with self._lock:
            if self._thread is not None or self._ended or not self.enabled:
                return self
            if not self._in_process:
                self._helper = self._spawn_helper()
            self._thread = threading.Thread(target=self._run, name="sonde-profiler", daemon=True)
            self._thread.start()
            # A script that forgets end() still delivers what it recorded.
            ref = weakref.ref(self)
            atexit.register(lambda: (a := ref()) is not None and a.end())
        return self

    def end(self, timeout_s: float = 10.0) -> Dict[str, int]:
        """Drains the queue, exports what is left (waiting up to `timeout_s`)
        and shuts the SDK down. Returns `stats()`. Safe to call twice."""
        with self._lock:
            if self._ended:
                return self.stats()
            self._ended = True
            thread = self._thread
            if thread is None:
                # Never started: what was queued is exported from here.
                self._in_process = True
        if thread is not None:
            self._stop.set()
            thread.join(timeout_s)
        if self._beats is not None:
            self._beats_stop.set()
            self._beats.join(timeout_s)
        if self.enabled:
            self._drain()
            if self._helper is not None:
                self._end_helper(timeout_s)
            self._pipeline.flush(timeout_s)
            self._pipeline.shutdown()
        return self.stats()

    def __enter__(self) -> "ProfilerAgent":
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.end()

    # -- the loop's calls (cheap: an append) -------------------------------

    @property
    def batch_idx(self) -> Optional[int]:
        return self._batch_idx

    def update_batch_idx(self, batch_idx: int) -> None:
        """The batch now running; timings recorded from here on belong to it."""
        i = _check_index(batch_idx)
        self._batch_idx = i
        if self.enabled:
            self._put((None, 0, 0, i))

    def record_timing(self, timing: Timing) -> None:
        """Queues a finished `Timing` (its own batch index, else the current one)."""
        if not timing.end_ns:
            raise ValueError(f"{timing!r} was not ended: call .end() before recording it")
        if self.enabled:
            b = timing.batch_idx
            self._put((timing.name, timing.start_ns, timing.end_ns, self._batch_idx if b is None else b))

    def record(self, name: str, start_ns: int, end_ns: int, batch_idx: Optional[int] = None) -> None:
        """Queues a timing given by its times (ns since the Unix epoch)."""
        if self.enabled:
            self._put((name, start_ns, end_ns, self._batch_idx if batch_idx is None else batch_idx))

    def timing(self, name: str, batch_idx: Optional[int] = None) -> _Scope:
        """`with agent.timing("forward"): ...` records the block."""
        return _Scope(self, name, batch_idx)

    def _put(self, item: _Item) -> None:
        # deque.append is atomic; the length check may let a racing thread
        # go a few items over the capacity, never unboundedly.
        if len(self._queue) >= self._capacity:
            self._dropped_full += 1
            return
        self._queue.append(item)

    # -- the background side -----------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._drain()

    def _drain(self) -> None:
        q = self._queue
        if not q:
            return
        items: List[_Item] = []
        while q:
            try:
                items.append(q.popleft())
            except IndexError:
                break
        if self._in_process:
            self._writer.write(items)
            return
        timings = sum(1 for it in items if it[0] is not None)
        helper = self._helper
        if helper is None or helper.stdin is None:
            self._helper_lost += timings
            return
        try:
            pickle.dump(items, helper.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            helper.stdin.flush()
            self._helper_sent += timings
        except (OSError, ValueError):  # the helper died: what it was sent is lost
            self._helper_lost += timings
            self._helper = None

    def _spawn_helper(self) -> Optional[subprocess.Popen]:
        env = dict(os.environ)
        # The helper imports this very package, wherever it was imported from.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            p = subprocess.Popen(
                [sys.executable, "-m", "sonde._helper"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
            )
            assert p.stdin is not None
            pickle.dump(("config", self._helper_cfg), p.stdin)
            p.stdin.flush()
            return p
        except OSError:
            return None

    def _end_helper(self, timeout_s: float) -> None:
        helper, self._helper = self._helper, None
        if helper is None:
            return
        try:
            assert helper.stdin is not None
            pickle.dump(("end", timeout_s), helper.stdin)
            helper.stdin.flush()
            out, _ = helper.communicate(timeout=timeout_s + 10)
            self._helper_counts = pickle.loads(out) if out else None
        except (OSError, ValueError, subprocess.TimeoutExpired, pickle.UnpicklingError, EOFError):
            helper.kill()
            helper.wait()

    # -- liveness, lifecycle, named progress (not on the hot path) ----------

    def heartbeat(self, time_ns: Optional[int] = None) -> None:
        """A `sonde.heartbeat` log record: this process is alive."""
        if self.enabled:
            t = time.time_ns() if time_ns is None else time_ns
            self._pipeline.logger("sonde.agent").emit(timestamp=t, event_name=_otel.HEARTBEAT, body="alive")

    def start_heartbeats(self, every_s: float) -> None:
        """Heartbeats from a background thread, every `every_s`, until `end()`."""
        if every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")

        def beat() -> None:
            while not self._beats_stop.is_set():
                self.heartbeat()
                self._beats_stop.wait(every_s)

        self._beats = threading.Thread(target=beat, name="sonde-heartbeat", daemon=True)
        self._beats.start()

    def node_event(
        self,
        kind: str,
        reason: str = "",
        *,
        exit_code: Optional[int] = None,
        time_ns: Optional[int] = None,
        **attributes: Union[str, int, float, bool],
    ) -> None:
        """A `sonde.node_event` log record (e.g. started, restarted, recovered,
        checkpoint-begin); extra keyword attributes are kept with it."""
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError(f"a node event needs a non-empty kind, got {kind!r}")
        if not self.enabled:
            return
        attrs: Dict[str, Any] = dict(attributes)
        attrs[_otel.NODE_EVENT_KIND] = kind
        if reason:
            attrs[_otel.NODE_EVENT_REASON] = reason
        if exit_code is not None:
            attrs[_otel.NODE_EVENT_EXIT_CODE] = int(exit_code)
        t = time.time_ns() if time_ns is None else time_ns
        self._pipeline.logger("sonde.agent").emit(
            timestamp=t, event_name=_otel.NODE_EVENT, attributes=attrs, body=reason or kind
        )

    def progress(self, name: str, value: int) -> None:
        """Named progress (`global_step`, `clock`, ...): the `sonde.progress`
        gauge, exported every `metric_interval_ms`."""
        v = _check_index(value)
        if not self.enabled:
            return
        g = getattr(self, "_progress_gauge", None)
        if g is None:
            g = self._pipeline.meter_provider().get_meter("sonde.agent").create_gauge(_otel.PROGRESS)
            self._progress_gauge = g
        g.set(v, {_otel.PROGRESS_NAME: name})

    def tracer(self) -> Any:
        """The SDK tracer this agent's spans go through (for rows of other kinds)."""
        return self._pipeline.tracer_provider().get_tracer("sonde.agent")

    # -- what happened -----------------------------------------------------

    def stats(self) -> Dict[str, int]:
        """`recorded`: timings turned into SDK spans; `exported`: delivered
        to sonde; `export_failed`: the exporter gave up on them (sonde down
        or refusing); `dropped_queue_full`: never queued (the queue was
        full); `helper_lost`: the export helper died or never started;
        `pending`: still queued here. With the helper process (the default)
        recorded / exported / export_failed come back from it at `end()`."""
        if self._in_process:
            c = self._pipeline.span_counts
            counts = {"recorded": self._writer.recorded, "exported": c.exported, "export_failed": c.failed}
        else:
            counts = dict(self._helper_counts or {"recorded": 0, "exported": 0, "export_failed": 0})
        counts.update(
            dropped_queue_full=self._dropped_full,
            helper_lost=self._helper_lost,
            pending=len(self._queue),
        )
        return counts

    def dropped(self) -> int:
        """Timings known so far never to reach sonde (after `end()`: all of them)."""
        s = self.stats()
        lost = s["dropped_queue_full"] + s["helper_lost"] + s["export_failed"]
        if self._ended:
            handed = s["recorded"] if self._in_process else self._helper_sent
            lost += max(0, handed - s["exported"] - s["export_failed"])
        return lost

    def dashboard_url(self, api: Optional[str] = None) -> str:
        """The job's page on sonde's dashboard."""
        return job_url(self.job, api)


def job_url(job: str, api: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """The dashboard's page of `job` (the web app's `#/jobs/NAME` route)."""
    return f"{_env.api_url(env, api)}/#/jobs/{quote(job, safe='')}"
