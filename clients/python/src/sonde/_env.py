"""Where a process stands in its job, read from the launcher's environment,
and where sonde is. Pure functions of a mapping (the process environment by
default) so tests need no monkeypatching.

Launchers, in the order they are tried (the first that sets a rank wins):

| launcher | rank | local rank | world size |
|---|---|---|---|
| torchrun, Lightning, accelerate, DeepSpeed | `RANK` | `LOCAL_RANK` | `WORLD_SIZE` |
| Open MPI's mpirun | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_LOCAL_RANK` | `OMPI_COMM_WORLD_SIZE` |
| Slurm's srun | `SLURM_PROCID` | `SLURM_LOCALID` | `SLURM_NTASKS` |

The client's own variables all start with `SONDE_CLIENT_`, a prefix the host
never reads as configuration (see the host's `config/mod.rs`).
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

#: The job's name, shared by all its ranks (else `OTEL_SERVICE_NAME`, else the script's name).
ENV_JOB = "SONDE_CLIENT_JOB"
#: sonde's HTTP API, for the dashboard link and the plugins' routes (default http://127.0.0.1:7878).
ENV_API = "SONDE_CLIENT_API"
#: The node name reported as `host.name` (default: this machine's hostname).
ENV_NODE = "SONDE_CLIENT_NODE"
#: `0` turns every agent into a no-op (nothing is sent, nothing is started).
ENV_ENABLED = "SONDE_CLIENT_ENABLED"

DEFAULT_API = "http://127.0.0.1:7878"
DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"

# (rank, local rank, world size) per launcher, in the order they are tried.
LAUNCHERS = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)


@dataclass(frozen=True)
class Placement:
    """This process's place in its job."""

    rank: int
    local_rank: int
    world_size: int


def _int(env: Mapping[str, str], name: str) -> Optional[int]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None
    if v < 0:
        raise ValueError(f"environment variable {name}={raw!r} is negative")
    return v


def placement(
    env: Optional[Mapping[str, str]] = None,
    *,
    rank: Optional[int] = None,
    local_rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> Placement:
    """Rank, local rank and world size: the arguments where given, else the
    first launcher whose rank variable is set, else a single process (0, 0, 1).
    A variable that is not a non-negative integer is a ValueError naming it."""
    env = os.environ if env is None else env
    found = (None, None, None)
    for r, lr, ws in LAUNCHERS:
        v = _int(env, r)
        if v is not None:
            found = (v, _int(env, lr), _int(env, ws))
            break
    out_rank = rank if rank is not None else (found[0] if found[0] is not None else 0)
    # Without a local-rank variable the launcher ran one node: local = global.
    out_local = local_rank if local_rank is not None else (found[1] if found[1] is not None else out_rank)
    out_world = world_size if world_size is not None else (found[2] if found[2] is not None else out_rank + 1)
    for name, v in (("rank", out_rank), ("local_rank", out_local), ("world_size", out_world)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    if out_world < 1:
        raise ValueError(f"world_size must be >= 1, got {out_world}")
    if out_rank >= out_world:
        raise ValueError(f"rank {out_rank} is not below world_size {out_world}")
    return Placement(out_rank, out_local, out_world)


def job_name(env: Optional[Mapping[str, str]] = None, argv0: Optional[str] = None) -> str:
    """`SONDE_CLIENT_JOB`, else `OTEL_SERVICE_NAME`, else the script's name."""
    env = os.environ if env is None else env
    for k in (ENV_JOB, "OTEL_SERVICE_NAME"):
        v = env.get(k, "").strip()
        if v:
            return v
    script = os.path.basename(argv0 if argv0 is not None else (sys.argv[0] if sys.argv and sys.argv[0] else ""))
    stem = script[:-3] if script.endswith(".py") else script
    return stem if stem and stem not in ("-c", "-m") else "python-job"


def node_name(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    return env.get(ENV_NODE, "").strip() or socket.gethostname()


def protocol(env: Optional[Mapping[str, str]] = None, given: Optional[str] = None) -> str:
    """`grpc` or `http/protobuf` (the default, as in the OTLP specification),
    from the argument or `OTEL_EXPORTER_OTLP_PROTOCOL`."""
    env = os.environ if env is None else env
    p = (given or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "") or "http/protobuf").strip().lower()
    if p in ("http", "http/protobuf"):
        return "http/protobuf"
    if p == "grpc":
        return "grpc"
    raise ValueError(f"OTLP protocol must be grpc or http/protobuf, got {p!r}")


def endpoint(env: Optional[Mapping[str, str]] = None, given: Optional[str] = None, proto: str = "http/protobuf") -> str:
    """sonde's OTLP receiver: the argument, else `OTEL_EXPORTER_OTLP_ENDPOINT`,
    else sonde's default port for the protocol on this machine."""
    env = os.environ if env is None else env
    e = (given or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")).strip()
    if not e:
        return DEFAULT_GRPC_ENDPOINT if proto == "grpc" else DEFAULT_HTTP_ENDPOINT
    if not (e.startswith("http://") or e.startswith("https://")):
        raise ValueError(f"OTLP endpoint must start with http:// or https://, got {e!r}")
    return e.rstrip("/")


def api_url(env: Optional[Mapping[str, str]] = None, given: Optional[str] = None) -> str:
    env = os.environ if env is None else env
    u = (given or env.get(ENV_API, "") or DEFAULT_API).strip()
    if not (u.startswith("http://") or u.startswith("https://")):
        raise ValueError(f"sonde API URL must start with http:// or https://, got {u!r}")
    return u.rstrip("/")


def enabled(env: Optional[Mapping[str, str]] = None) -> bool:
    env = os.environ if env is None else env
    return env.get(ENV_ENABLED, "1").strip().lower() not in ("0", "false", "no", "off")
