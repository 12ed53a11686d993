"""The step clock the framework callbacks share: one batch index per
training step, and the phases between the hooks a framework calls.

A step runs `begin` → (`mark`: a phase ends, the next begins)* → `finish`;
the time from the previous step's end to this step's begin is the wait for
data, recorded as `dataloader_next`.
"""

from __future__ import annotations

import time
from typing import Optional

from .agent import ProfilerAgent


class StepClock:
    def __init__(self, agent: ProfilerAgent, step_name: str = "train_batch") -> None:
        self.agent = agent
        self.step_name = step_name
        self.batch = -1
        self.step_start = 0
        self.phase_start = 0
        self.last_end: Optional[int] = None

    def loading_from(self, t: int) -> None:
        """The wait for the first batch starts here (an epoch began)."""
        self.last_end = t

    def begin(self, batch: Optional[int] = None) -> None:
        now = time.time_ns()
        self.batch = self.batch + 1 if batch is None else batch
        self.agent.update_batch_idx(self.batch)
        if self.last_end is not None:
            self.agent.record("dataloader_next", self.last_end, now, self.batch)
        self.step_start = self.phase_start = now

    def mark(self, phase: str) -> None:
        """`phase` ran from the previous mark (or the step's begin) until now."""
        if self.batch < 0:
            return
        now = time.time_ns()
        self.agent.record(phase, self.phase_start, now, self.batch)
        self.phase_start = now

    def finish(self, last_phase: Optional[str] = None) -> None:
        if self.batch < 0:
            return
        if last_phase:
            self.mark(last_phase)
        now = time.time_ns()
        self.agent.record(self.step_name, self.step_start, now, self.batch)
        self.last_end = now
