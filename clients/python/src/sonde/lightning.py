"""A PyTorch Lightning callback: `Trainer(callbacks=[sonde.lightning.SondeCallback()])`.

Per training batch (batch indices count every training batch of the fit,
across epochs, from 0): `dataloader_next` (since the previous batch ended),
`forward` (batch start → the loss is ready), `backward`, `optimizer`
(backward done → batch end) and the whole `train_batch`. Rank, local rank
and world size come from the trainer; the agent is started at setup and
ended at teardown (unless one was given, which the caller owns).
"""

from __future__ import annotations

import time
from typing import Any, Optional

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the standalone `pytorch_lightning` distribution
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef]

from ._steps import StepClock
from .agent import ProfilerAgent


class SondeCallback(Callback):  # type: ignore[misc]
    def __init__(self, agent: Optional[ProfilerAgent] = None, job: Optional[str] = None, **agent_args: Any) -> None:
        super().__init__()
        self._given = agent
        self._job, self._agent_args = job, agent_args
        self.agent: Optional[ProfilerAgent] = agent
        self._clock: Optional[StepClock] = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.agent is None:
            args = dict(rank=trainer.global_rank, local_rank=trainer.local_rank, world_size=trainer.world_size)
            args.update(self._agent_args)
            self.agent = ProfilerAgent(self._job, **args)
        self.agent.start()
        self._clock = StepClock(self.agent)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.agent is not None and self._given is None:
            self.agent.end()
            self.agent = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._clock:
            self._clock.loading_from(time.time_ns())

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._clock:
            self._clock.begin()

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._clock:
            self._clock.mark("forward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._clock:
            self._clock.mark("backward")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._clock:
            self._clock.finish("optimizer")
