"""Parameter-server jobs: clocks, checkpoints and recovery, in the terms the
paramserver plugin reads (heartbeats, node events, `clock` progress).

    srv = sonde.ps.Reporter("ps-job", role="server", index=0)
    srv.start_heartbeats(0.1)
    srv.clock(12)                      # the slowest worker's clock
    with srv.checkpoint(clock=12): dump()
    srv.recovery("all-recovered", process="worker-2")

A worker uses `role="worker"` and reports `restarted` / `recovered` /
`no-data` with `recovery(...)`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional

from .agent import ProfilerAgent

#: The recovery stages the paramserver plugin follows, in order.
RECOVERY_STAGES = ("restarted", "recovered", "all-recovered")


class Reporter:
    def __init__(
        self,
        job: Optional[str] = None,
        *,
        role: str = "worker",
        index: int = 0,
        agent: Optional[ProfilerAgent] = None,
        **agent_args: Any,
    ) -> None:
        if agent is None:
            extra = dict(agent_args.pop("resource_attributes", None) or {})
            extra["sonde.index"] = int(index)
            agent = ProfilerAgent(job, role=role, resource_attributes=extra, **agent_args)
            self._owned = True
        else:
            self._owned = False
        self.agent = agent

    def heartbeat(self) -> None:
        self.agent.heartbeat()

    def start_heartbeats(self, every_s: float = 1.0) -> None:
        """Heartbeats from a background thread until `end()`."""
        self.agent.start_heartbeats(every_s)

    def clock(self, value: int) -> None:
        """This process's clock (a server reports the slowest worker's)."""
        self.agent.progress("clock", value)

    def checkpoint_begin(self, clock: int) -> None:
        self.agent.node_event("checkpoint-begin", clock=int(clock))

    def checkpoint_end(self, clock: int) -> None:
        self.agent.node_event("checkpoint-end", clock=int(clock))

    @contextmanager
    def checkpoint(self, clock: int) -> Iterator[None]:
        """checkpoint-begin, the block, checkpoint-end (also when it raises)."""
        self.checkpoint_begin(clock)
        try:
            yield
        finally:
            self.checkpoint_end(clock)

    def recovery(self, stage: str, reason: str = "", *, time_ns: Optional[int] = None, **attributes: Any) -> None:
        """A recovery stage (`restarted`, `recovered`, `all-recovered`) or
        `no-data` (a worker given no data leaves instead of blocking)."""
        if stage not in RECOVERY_STAGES + ("no-data",):
            raise ValueError(f"unknown recovery stage {stage!r}; known: {RECOVERY_STAGES + ('no-data',)}")
        self.agent.node_event(stage, reason, time_ns=time_ns, **attributes)

    def end(self) -> None:
        if self._owned:
            self.agent.end()
