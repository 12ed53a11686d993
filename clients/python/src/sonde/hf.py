"""A Hugging Face `transformers` callback: `Trainer(..., callbacks=[sonde.hf.SondeCallback()])`.

Per optimizer step (batch index = the trainer's `global_step` when the step
begins, so 0, 1, 2, ...): `dataloader_next` (since the previous step ended),
`forward_backward` (step begin → just before the optimizer step), `optimizer`
and the whole `train_batch`. Rank, local rank and world size come from the
`TrainingArguments`; the agent starts with training and ends with it
(unless one was given, which the caller owns).
"""

from __future__ import annotations

import time
from typing import Any, Optional

from transformers import TrainerCallback

from ._steps import StepClock
from .agent import ProfilerAgent


class SondeCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(self, agent: Optional[ProfilerAgent] = None, job: Optional[str] = None, **agent_args: Any) -> None:
        self._given = agent
        self._job, self._agent_args = job, agent_args
        self.agent: Optional[ProfilerAgent] = agent
        self._clock: Optional[StepClock] = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.agent is None:
            a = dict(rank=args.process_index, local_rank=max(0, args.local_process_index), world_size=args.world_size)
            a.update(self._agent_args)
            self.agent = ProfilerAgent(self._job, **a)
        self.agent.start()
        self._clock = StepClock(self.agent)
        self._clock.loading_from(time.time_ns())

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.agent is not None and self._given is None:
            self.agent.end()
            self.agent = None
        self._clock = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock:
            self._clock.begin(state.global_step)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock:
            self._clock.mark("forward_backward")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock:
            self._clock.finish("optimizer")
