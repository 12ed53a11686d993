"""DLRover-style elastic workers: heartbeats, node events and the global
step over OTLP, and dynamic data shards from sonde's dlrover plugin through
its routes (`/api/plugins/dlrover/...`, plain HTTP, standard library only).

    w = sonde.elastic.Worker("train", node="node-1", index=1)
    w.register_dataset("ds", dataset_size=1000, batch_size=10)
    for shard in w.shards("ds"):
        for idx in shard.indices(): ...
        w.global_step(step)
        w.shard_done(shard)
    w.end()

Every route call is retried on connection errors and 5xx with DLRover's
backoff (0.2 s doubling to 3 s) until `retry_for_s` passes, with the same
request id, so a worker rides through a restart of sonde.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

from . import _env
from .agent import ProfilerAgent

PLUGIN = "/api/plugins/dlrover"


class Api:
    """JSON over HTTP to sonde's API, retried as DLRover's client retries its master."""

    def __init__(self, base: Optional[str] = None, token: Optional[str] = None) -> None:
        self.base = _env.api_url(given=base)
        self.token = token

    def post(self, path: str, body: Any, retry_for_s: float = 60.0) -> Tuple[int, Any]:
        """(status, decoded body). A 4xx answer returns at once; connection
        errors and 5xx retry until `retry_for_s`, then raise ConnectionError."""
        data = json.dumps(body).encode()
        headers = {"content-type": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        delay, deadline = 0.2, time.time() + retry_for_s
        while True:
            req = urllib.request.Request(self.base + path, data=data, method="POST", headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    return r.status, json.loads(r.read() or b"null")
            except urllib.error.HTTPError as e:
                if e.code < 500:
                    return e.code, json.loads(e.read() or b"null")
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.time() > deadline:
                raise ConnectionError(f"POST {self.base}{path}: sonde did not answer for {retry_for_s} s")
            time.sleep(delay)
            delay = min(delay * 2, 3.0)


@dataclass
class Shard:
    """A data shard the plugin handed out: records [start, end), or explicit indices."""

    dataset: str
    task_id: int
    epoch: int
    start: int
    end: int
    explicit: Optional[List[int]]

    def indices(self) -> List[int]:
        return list(self.explicit) if self.explicit is not None else list(range(self.start, self.end))


class Worker:
    """One elastic worker: its reports (role `worker`, `sonde.index`) and its shards."""

    def __init__(
        self,
        job: Optional[str] = None,
        *,
        node: Optional[str] = None,
        index: int = 0,
        api: Optional[str] = None,
        agent: Optional[ProfilerAgent] = None,
        wait_s: float = 0.05,
        retry_for_s: float = 60.0,
        **agent_args: Any,
    ) -> None:
        if agent is None:
            extra = dict(agent_args.pop("resource_attributes", None) or {})
            extra["sonde.index"] = int(index)
            agent_args.setdefault("rank", int(index))
            agent = ProfilerAgent(job, node=node, role="worker", resource_attributes=extra, **agent_args).start()
            self._owned = True
        else:
            self._owned = False
        self.agent = agent
        self.node = agent.node
        self.api = Api(api, agent_args.get("token"))
        self.wait_s, self.retry_for_s = wait_s, retry_for_s
        self._calls = 0

    # -- reports -----------------------------------------------------------

    def heartbeat(self) -> None:
        self.agent.heartbeat()

    def start_heartbeats(self, every_s: float = 1.0) -> None:
        """Heartbeats from a background thread until `end()`."""
        self.agent.start_heartbeats(every_s)

    def node_event(self, kind: str, reason: str = "", **kw: Any) -> None:
        self.agent.node_event(kind, reason, **kw)

    def global_step(self, step: int) -> None:
        """The job's global step (progress `global_step`) — also its batch index."""
        self.agent.progress("global_step", step)

    # -- shards (the dlrover plugin's routes) -------------------------------

    def register_dataset(
        self,
        dataset_name: str,
        *,
        dataset_size: int,
        batch_size: int,
        num_epochs: int = 1,
        shuffle: bool = False,
        num_minibatches_per_shard: int = 0,
        storage_type: str = "table",
    ) -> Dict[str, Any]:
        """POST /datasets (the first registration wins, so every worker may register)."""
        body = {
            "dataset_name": dataset_name,
            "batch_size": batch_size,
            "num_epochs": num_epochs,
            "dataset_size": dataset_size,
            "shuffle": shuffle,
            "num_minibatches_per_shard": num_minibatches_per_shard,
            "storage_type": storage_type,
        }
        status, r = self.api.post(PLUGIN + "/datasets", body, self.retry_for_s)
        if status != 200:
            raise RuntimeError(f"registering dataset {dataset_name!r}: {status} {r}")
        return r  # type: ignore[no-any-return]

    def next_shard(self, dataset_name: str) -> Optional[Shard]:
        """POST /tasks/next until a shard comes (None: the dataset is done)."""
        while True:
            self._calls += 1
            rid = f"{self.node}-{self._calls}"
            body = {"dataset_name": dataset_name, "node": self.node, "request_id": rid}
            status, t = self.api.post(PLUGIN + "/tasks/next", body, self.retry_for_s)
            if status != 200:
                raise RuntimeError(f"next shard of {dataset_name!r}: {status} {t}")
            if t["type"] == "wait":
                time.sleep(self.wait_s)
                continue
            if t["type"] == "end":
                return None
            s = t["shard"]
            return Shard(dataset_name, t["task_id"], t["epoch"], s.get("start", 0), s.get("end", 0), s.get("indices"))

    def shard_done(self, shard: Shard, err_message: str = "") -> Dict[str, Any]:
        """POST /tasks/report: {accepted, result} (a re-queued shard is not accepted)."""
        body = {"dataset_name": shard.dataset, "task_id": shard.task_id, "node": self.node, "err_message": err_message}
        status, r = self.api.post(PLUGIN + "/tasks/report", body, self.retry_for_s)
        if status != 200:
            return {"accepted": False, "status": status, "answer": r}
        return r  # type: ignore[no-any-return]

    def shards(self, dataset_name: str) -> Iterator[Shard]:
        while True:
            s = self.next_shard(dataset_name)
            if s is None:
                return
            yield s

    def end(self) -> None:
        if self._owned:
            self.agent.end()
