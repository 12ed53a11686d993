"""`python -m sonde run [OPTIONS] -- COMMAND...`: runs a job with the
environment the client reads, and prints the job's dashboard link.

Sets `SONDE_CLIENT_JOB` (default: the script's name), `SONDE_CLIENT_API`,
and, when given, `OTEL_EXPORTER_OTLP_ENDPOINT` / `_PROTOCOL`. With
`--ranks N` it starts N copies on this machine with `RANK`, `LOCAL_RANK`
and `WORLD_SIZE` set, as torchrun does. Exits with the command's status
(the first non-zero one of the ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from typing import Dict, List, Optional

from . import _env
from .agent import job_url


def _script_job(cmd: List[str]) -> str:
    for a in cmd[1:] if len(cmd) > 1 and os.path.basename(cmd[0]).startswith("python") else cmd:
        if not a.startswith("-"):
            return _env.job_name({}, a)
    return "python-job"


def _reachable(api: str) -> Optional[str]:
    try:
        with urllib.request.urlopen(api + "/api/health", timeout=2) as r:
            json.loads(r.read())
        return None
    except Exception as e:  # noqa: BLE001 - any failure means "not reachable", said once
        return str(e)


def run(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m sonde run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", help="job name (default: the script's name)")
    ap.add_argument("--api", help=f"sonde's HTTP API (default {_env.DEFAULT_API})")
    ap.add_argument("--endpoint", help="sonde's OTLP receiver (default http://127.0.0.1:4318)")
    ap.add_argument("--protocol", choices=["http/protobuf", "grpc"])
    ap.add_argument("--ranks", type=int, default=1, help="start N ranks on this machine (RANK, LOCAL_RANK, WORLD_SIZE)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command given: python -m sonde run -- python train.py")
    if a.ranks < 1:
        ap.error(f"--ranks must be >= 1, got {a.ranks}")
    env: Dict[str, str] = dict(os.environ)
    job = a.job or env.get(_env.ENV_JOB) or _script_job(cmd)
    api = _env.api_url(env, a.api)
    env[_env.ENV_JOB], env[_env.ENV_API] = job, api
    if a.endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = _env.endpoint({}, a.endpoint)
    if a.protocol:
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = a.protocol
    print(f"sonde: job {job!r}: {job_url(job, api)}", file=sys.stderr, flush=True)
    problem = _reachable(api)
    if problem:
        print(f"sonde: warning: {api} does not answer ({problem}); the job runs, its reports are dropped and counted",
              file=sys.stderr, flush=True)
    procs = []
    for r in range(a.ranks):
        e = dict(env)
        if a.ranks > 1:
            e.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(a.ranks))
        procs.append(subprocess.Popen(cmd, env=e))
    codes = [p.wait() for p in procs]
    return next((c for c in codes if c != 0), 0)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "run":
        print("usage: python -m sonde run [--job NAME] [--ranks N] [--api URL] [--endpoint URL] -- COMMAND...",
              file=sys.stderr)
        return 2
    return run(argv[1:])
