"""PyTorch hooks: the wait for the next batch, and forward / backward.

- `profile_loop(loader)` wraps any iterable: each `next()` is timed as
  `dataloader_next` and the batch it returns becomes the current batch
  (batch indices count from `start`).
- `step_timer(model)` times every forward of `model` (module hooks) and the
  backward pass that follows it (from the moment the gradient reaches the
  model's output until autograd finishes the pass). On a GPU it times with
  `torch.cuda.Event`s instead of the host clock, read without blocking once
  the GPU has passed them.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator, List, Optional, Tuple, TypeVar

import torch

from .agent import ProfilerAgent

T = TypeVar("T")


def _agent(agent: Optional[ProfilerAgent]) -> ProfilerAgent:
    if agent is not None:
        return agent
    from . import default_agent

    return default_agent()


def profile_loop(
    loader: Iterable[T], agent: Optional[ProfilerAgent] = None, *, start: int = 0, name: str = "dataloader_next"
) -> Iterator[T]:
    """Yields what `loader` yields; batch `start + k` becomes current when
    the k-th item is asked for, and the wait for it is recorded as `name`."""
    a = _agent(agent)
    it = iter(loader)
    i = start
    while True:
        t0 = time.time_ns()
        try:
            item = next(it)
        except StopIteration:
            return
        a.update_batch_idx(i)
        a.record(name, t0, time.time_ns(), i)
        yield item
        i += 1


def _first_grad_tensor(out: Any) -> Optional["torch.Tensor"]:
    if isinstance(out, torch.Tensor):
        return out if out.requires_grad else None
    if isinstance(out, dict):
        out = list(out.values())
    elif hasattr(out, "to_tuple"):  # Hugging Face ModelOutput
        out = list(out.to_tuple())
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_grad_tensor(o)
            if t is not None:
                return t
    return None


class StepTimer:
    """The hooks `step_timer` put on a model; `.remove()` takes them off."""

    def __init__(self, model: "torch.nn.Module", agent: ProfilerAgent, use_cuda_events: bool) -> None:
        self.model, self.agent, self.cuda = model, agent, use_cuda_events
        self._fwd: Tuple[int, Any] = (0, None)
        # CUDA: (name, host ns when the start event was queued, start event, end event, batch)
        self._pending: List[Tuple[str, int, Any, Any, Optional[int]]] = []
        self._handles = [
            model.register_forward_pre_hook(self._pre_forward),
            model.register_forward_hook(self._post_forward),
        ]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.flush()

    # The host clock reads as the module hooks run; with CUDA events the GPU
    # stamps its own stream, and the host time only anchors the start.
    def _mark(self) -> Tuple[int, Any]:
        if not self.cuda:
            return time.time_ns(), None
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return time.time_ns(), e

    def _done(self, name: str, start: Tuple[int, Any]) -> None:
        host_start, ev_start = start
        if ev_start is None:
            self.agent.record(name, host_start, time.time_ns())
            return
        _, ev_end = self._mark()
        self._pending.append((name, host_start, ev_start, ev_end, self.agent.batch_idx))
        self.flush(block=False)

    def flush(self, block: bool = True) -> None:
        """Records the CUDA-timed intervals the GPU has finished (all of them with block)."""
        keep = []
        for name, host_start, s, e, b in self._pending:
            if block:
                e.synchronize()
            elif not e.query():
                keep.append((name, host_start, s, e, b))
                continue
            dur_ns = int(s.elapsed_time(e) * 1e6)
            self.agent.record(name, host_start, host_start + dur_ns, b)
        self._pending = keep

    def _pre_forward(self, module: Any, args: Any) -> None:
        self._fwd = self._mark()

    def _post_forward(self, module: Any, args: Any, out: Any) -> None:
        self._done("forward", self._fwd)
        t = _first_grad_tensor(out)
        if t is None:
            return  # no backward will follow (eval, no_grad)
        fired = [False]

        def on_grad(grad: Any) -> None:
            if fired[0]:
                return
            fired[0] = True
            start = self._mark()
            # Runs when autograd has finished this whole backward pass (as DDP's reducer does).
            torch.autograd.Variable._execution_engine.queue_callback(lambda: self._done("backward", start))

        t.register_hook(on_grad)


def step_timer(
    model: "torch.nn.Module", agent: Optional[ProfilerAgent] = None, *, use_cuda_events: Optional[bool] = None
) -> StepTimer:
    """Records `forward` and `backward` of `model` for every step. CUDA events
    are used when the model's parameters are on a GPU (unless told)."""
    if use_cuda_events is None:
        p = next(model.parameters(), None)
        use_cuda_events = p is not None and p.is_cuda
    return StepTimer(model, _agent(agent), bool(use_cuda_events))
