"""sonde's Python client: report a training or serving job to sonde over
plain OTLP, through the official OpenTelemetry SDK.

    import sonde
    with sonde.ProfilerAgent() as agent:
        for batch in sonde.torch.profile_loop(loader, agent):
            with agent.timing("forward"):
                ...

Modules: `agent` (ProfilerAgent, Timing), `torch` (profile_loop, step_timer),
`lightning` and `hf` (framework callbacks), `elastic`, `serving`, `ps` (the
other job kinds), `cli` (`python -m sonde run -- CMD`). The framework modules
import their framework only when used.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, Optional

from .agent import ProfilerAgent, Timing, job_url

__version__ = "0.1.0"
__all__ = ["ProfilerAgent", "Timing", "job_url", "default_agent", "__version__"]

_default: Optional[ProfilerAgent] = None
_default_lock = threading.Lock()


def default_agent() -> ProfilerAgent:
    """The process's agent, made from the environment and started on first use
    (the hooks use it when given no agent); ended at exit."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ProfilerAgent().start()
        return _default


def __getattr__(name: str) -> Any:
    # `sonde.torch`, `sonde.hf`, ... load on first access so `import sonde`
    # never imports a framework.
    if name in ("torch", "lightning", "hf", "elastic", "serving", "ps", "cli"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'sonde' has no attribute {name!r}")
