"""Operations with their parallel coordinates: rows of the `ops` table, which
sonde's bottleneck plugin replays to say which worker, pipeline stage, link or
kind of operation holds a job back (docs/ingest.md, "the `ops` table").

A rank says where it sits in the parallelism once, then times its operations:

    ops = sonde.ops.Ops(agent, dp=dp_rank, stage=pp_stage, tp=tp_rank)
    with ops.op("forward", micro=m):        # the step: the agent's batch index
        out = stage_module(x)
    sonde.ops.time_collectives(ops)         # torch.distributed calls become dp_collective ops

Where the framework does the communication, hooks time it:

    ddp.register_comm_hook(None, sonde.ops.ddp_comm_hook(ops))  # DDP's gradient all-reduce
    sonde.ops.time_p2p(ops)                 # dist.send/recv/isend/irecv become pp_send/pp_recv
    with ops.micro_batch(m):                # ... of this micro-batch, as the schedule runs it
        ...

The coordinates can come from the environment (`Ops.from_env`:
`SONDE_CLIENT_DP_RANK`, `SONDE_CLIENT_PP_STAGE`, `SONDE_CLIENT_TP_RANK`) or
from the job's process groups (`Ops.from_groups`).

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
# Point-to-point calls `time_p2p` times, and the kind each becomes.
P2P = {"send": "pp_send", "isend": "pp_send", "recv": "pp_recv", "irecv": "pp_recv"}
# The environment variables `Ops.from_env` reads.
ENV_COORDS = {"dp": "SONDE_CLIENT_DP_RANK", "stage": "SONDE_CLIENT_PP_STAGE", "tp": "SONDE_CLIENT_TP_RANK"}


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
        # The micro-batch the schedule is running (`micro_batch`), -1 outside one.
        self.micro = -1

    @classmethod
    def from_env(cls, agent: ProfilerAgent, env: Optional[Dict[str, str]] = None) -> "Ops":
        """Coordinates from `SONDE_CLIENT_DP_RANK`, `SONDE_CLIENT_PP_STAGE` and
        `SONDE_CLIENT_TP_RANK`; an unset data-parallel rank is the agent's
        rank (a job with data parallelism only), the others 0."""
        import os  # noqa: PLC0415

        env = os.environ if env is None else env
        coords: Dict[str, int] = {}
        for name, var in ENV_COORDS.items():
            raw = env.get(var)
            if raw is None or raw == "":
                coords[name] = max(agent.rank, 0) if name == "dp" and agent.rank is not None else 0
                continue
            try:
                coords[name] = int(raw)
            except ValueError:
                raise ValueError(f"environment variable {var}={raw!r} is not an integer") from None
        return cls(agent, **coords)

    @classmethod
    def from_groups(cls, agent: ProfilerAgent, *, dp_group: Any = None, pp_group: Any = None, tp_group: Any = None, dist: Any = None) -> "Ops":
        """Coordinates from the job's process groups: this process's rank in
        each group given (the pipeline group's rank is its stage); a group
        not given counts as 0."""
        if dist is None:
            import torch.distributed as dist  # noqa: PLC0415
        rank = lambda g: 0 if g is None else int(dist.get_rank(group=g))  # noqa: E731
        return cls(agent, dp=rank(dp_group), stage=rank(pp_group), tp=rank(tp_group))

    @contextmanager
    def micro_batch(self, micro: int) -> Iterator[None]:
        """Operations recorded inside (by hand or by the hooks) belong to `micro`."""
        if not isinstance(micro, int) or micro < 0:
            raise ValueError(f"a micro-batch is an integer >= 0, not {micro!r}")
        before, self.micro = self.micro, micro
        try:
            yield
        finally:
            self.micro = before

    def record(self, kind: str, start_ns: int, end_ns: int, *, step: Optional[int] = None, micro: Optional[int] = None) -> None:
        """One finished operation; `step` defaults to the agent's current batch
        index, `micro` to the current `micro_batch` (-1: the whole step)."""
        if kind not in KINDS:
            raise ValueError(f"unknown operation kind {kind!r}; known: {list(KINDS)}")
        if step is None:
            step = self.agent.batch_idx
        if step is None or step < 0:
            raise ValueError("an operation needs its step: pass step= or call agent.update_batch_idx first")
        if end_ns < start_ns:
            raise ValueError(f"an operation ends before it starts ({start_ns} > {end_ns})")
        if micro is None:
            micro = self.micro
        attrs: Dict[str, Any] = {TABLE_ATTR: "ops", "step": step, "micro": micro, "kind": kind, "start_ns": start_ns, "end_ns": end_ns}
        attrs.update(self.coords)
        self._tracer.start_span("sonde.op", start_time=start_ns, attributes=attrs).end(end_time=end_ns)
        self.recorded += 1

    @contextmanager
    def op(self, kind: str, *, step: Optional[int] = None, micro: Optional[int] = None) -> Iterator[None]:
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


def time_p2p(ops: Ops, dist: Any = None) -> Callable[[], None]:
    """Wraps torch.distributed's point-to-point calls (`send`, `recv` and
    their async `isend`, `irecv`, whose work lasts until `wait()` returns)
    as `pp_send` and `pp_recv` operations of the current micro-batch.
    Returns the function that puts the originals back."""
    if dist is None:
        import torch.distributed as dist  # noqa: PLC0415
    originals = {}
    for name, kind in P2P.items():
        f = getattr(dist, name, None)
        if f is None or getattr(f, "_sonde_timed", False):
            continue
        originals[name] = f
        setattr(dist, name, _timed(ops, f, kind, asynchronous=name.startswith("i")))

    def restore() -> None:
        for name, f in originals.items():
            setattr(dist, name, f)

    return restore


def ddp_comm_hook(ops: Ops, kind: str = "dp_collective") -> Callable[[Any, Any], Any]:
    """A communication hook for `DistributedDataParallel.register_comm_hook`:
    DDP's own all-reduce of each gradient bucket (sum, then divided by the
    group's size, as DDP's default does), each bucket one operation of
    `kind` from the hook's call to the reduction's end. `state` is the
    process group (None: the default group)."""
    import torch.distributed as dist  # noqa: PLC0415

    # Unannotated: torch refuses a hook whose bucket is annotated other than dist.GradBucket.
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        group = state if state is not None else dist.group.WORLD
        world = dist.get_world_size(group=group)
        step = ops.agent.batch_idx
        micro = ops.micro
        start = time.time_ns()
        # The original all_reduce, not one time_collectives wrapped: one row per bucket.
        all_reduce = getattr(dist.all_reduce, "__wrapped__", dist.all_reduce)
        fut = all_reduce(bucket.buffer(), group=group, async_op=True).get_future()

        def reduced(f: Any) -> Any:
            ops.record(kind, start, time.time_ns(), step=step, micro=micro)
            return f.value()[0].div_(world)

        return fut.then(reduced)

    return hook


def _timed(ops: Ops, f: Callable[..., Any], kind: str, asynchronous: bool = False) -> Callable[..., Any]:
    @functools.wraps(f)
    def call(*args: Any, **kwargs: Any) -> Any:
        # The step and micro-batch of the call, not of the wait's return.
        step, micro = ops.agent.batch_idx, ops.micro
        start = time.time_ns()
        work = f(*args, **kwargs)
        if (asynchronous or kwargs.get("async_op")) and work is not None and hasattr(work, "wait"):
            wait = work.wait

            def waited(*a: Any, **k: Any) -> Any:
                r = wait(*a, **k)
                ops.record(kind, start, time.time_ns(), step=step, micro=micro)
                return r

            try:
                work.wait = waited
                return work
            except (AttributeError, TypeError):
                pass  # a work object that takes no attribute: timed to the call's return
            ops.record(kind, start, time.time_ns(), step=step, micro=micro)
        else:
            ops.record(kind, start, time.time_ns(), step=step, micro=micro)
        return work

    call._sonde_timed = True  # type: ignore[attr-defined]
    return call
