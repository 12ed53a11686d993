"""Operations with their parallel coordinates: rows of the `ops` table, which
sonde's bottleneck plugin replays to say which worker, pipeline stage, link or
kind of operation holds a job back (docs/ingest.md, "the `ops` table").

A rank says where it sits in the parallelism once, then times its operations:

    ops = sonde.ops.Ops(agent, dp=dp_rank, stage=pp_stage, tp=tp_rank)
    with ops.op("forward", micro=m):        # the step: the agent's batch index
        out = stage_module(x)
    sonde.ops.time_collectives(ops)         # torch.distributed calls become dp_collective ops

Each operation is one span named `sonde.op` carrying the row (`sonde.table` =
"ops"), sent with the agent's other reports. Kinds are the table's labels:
forward, backward, pp_send, pp_recv, dp_collective, tp_collective,
optimizer, input, other.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional

from .agent import ProfilerAgent

TABLE_ATTR = "sonde.table"
KINDS = ("forward", "backward", "pp_send", "pp_recv", "dp_collective", "tp_collective", "optimizer", "input", "other")

# The torch.distributed calls `time_collectives` times, each a collective of
# the kind given (gradients across replicas by default).
COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor", "broadcast", "barrier")


class Ops:
    """One rank's operation reporter: its data-parallel rank, pipeline stage and tensor-parallel rank."""

    def __init__(self, agent: ProfilerAgent, *, dp: int = 0, stage: int = 0, tp: int = 0) -> None:
        for name, v in (("dp", dp), ("stage", stage), ("tp", tp)):
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, not {v!r}")
        self.agent = agent
        self.coords = {"dp": dp, "stage": stage, "tp": tp}
        self._tracer = agent.tracer()
        self.recorded = 0

    def record(self, kind: str, start_ns: int, end_ns: int, *, step: Optional[int] = None, micro: int = -1) -> None:
        """One finished operation; `step` defaults to the agent's current batch index."""
        if kind not in KINDS:
            raise ValueError(f"unknown operation kind {kind!r}; known: {list(KINDS)}")
        if step is None:
            step = self.agent.batch_idx
        if step is None or step < 0:
            raise ValueError("an operation needs its step: pass step= or call agent.update_batch_idx first")
        if end_ns < start_ns:
            raise ValueError(f"an operation ends before it starts ({start_ns} > {end_ns})")
        attrs: Dict[str, Any] = {TABLE_ATTR: "ops", "step": step, "micro": micro, "kind": kind, "start_ns": start_ns, "end_ns": end_ns}
        attrs.update(self.coords)
        self._tracer.start_span("sonde.op", start_time=start_ns, attributes=attrs).end(end_time=end_ns)
        self.recorded += 1

    @contextmanager
    def op(self, kind: str, *, step: Optional[int] = None, micro: int = -1) -> Iterator[None]:
        """Times the block as one operation of `kind`."""
        start = time.time_ns()
        try:
            yield
        finally:
            self.record(kind, start, time.time_ns(), step=step, micro=micro)


def time_collectives(ops: Ops, dist: Any = None, kind: str = "dp_collective") -> Callable[[], None]:
    """Wraps torch.distributed's collectives so each call is an operation of
    `kind` (an async call lasts until its work's `wait()` returns). Returns
    the function that puts the originals back."""
    if dist is None:
        import torch.distributed as dist  # noqa: PLC0415 (torch only when asked for)
    if kind not in KINDS:
        raise ValueError(f"unknown operation kind {kind!r}; known: {list(KINDS)}")
    originals = {}
    for name in COLLECTIVES:
        f = getattr(dist, name, None)
        if f is None or getattr(f, "_sonde_timed", False):
            continue
        originals[name] = f
        setattr(dist, name, _timed(ops, f, kind))

    def restore() -> None:
        for name, f in originals.items():
            setattr(dist, name, f)

    return restore


def _timed(ops: Ops, f: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.time_ns()
        work = f(*args, **kwargs)
        if kwargs.get("async_op") and work is not None and hasattr(work, "wait"):
            wait = work.wait

            def waited(*a: Any, **k: Any) -> Any:
                r = wait(*a, **k)
                ops.record(kind, start, time.time_ns())
                return r

            try:
                work.wait = waited
                return work
            except (AttributeError, TypeError):
                pass  # a work object that takes no attribute: timed to the call's return
            ops.record(kind, start, time.time_ns())
        else:
            ops.record(kind, start, time.time_ns())
        return work

    call._sonde_timed = True  # type: ignore[attr-defined]
    return call
