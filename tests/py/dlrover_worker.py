"""A data-parallel training worker that takes its data from sonde's dlrover
plugin the way a DLRover worker takes it from its master: dynamic data shards
over plain HTTP (stdlib only).

    python3 dlrover_worker.py API NODE INDEX LOG [--dataset NAME] [--size N]
        [--batch B] [--minibatches M] [--epochs E] [--sample-ms MS]
        [--shuffle] [--storage table|text] [--report-steps]

API is sonde's base URL (http://127.0.0.1:PORT). The worker:

- registers the dataset (the first registration wins, so every worker may);
- pulls a shard (POST /tasks/next with a request id reused on retries, so a
  retried call after a lost answer gets the same shard), waits on WAIT and
  stops on END;
- "trains" on it batch by batch (sleeps MS per sample), crediting each batch
  to the oldest pending shard (R9.6 batch_done) and reporting a shard when all
  its records are done (POST /tasks/report, retried with the same body);
- sends heartbeats, a `step` timing per batch and (with --report-steps) the
  `global_step` progress to sonde's JSON ingest from a background thread.

Every call is retried until it succeeds (`sonde.elastic.Api`, the Python
client's retrying JSON client), so the worker rides through a restart of sonde. LOG gets one JSON object per line, flushed at once:
  {"event": "start", "task": id, "epoch": e, "n": len}
  {"event": "sample", "task": id, "epoch": e, "index": i, "pos": k}
  {"event": "commit", "task": id, "epoch": e, "result": "done"|"duplicate"}
  {"event": "discard", "task": id, "epoch": e}   (the shard was re-queued: not ours)
  {"event": "end"}
A sample counts as consumed when its shard's commit line is in the log.
"""

import argparse
import json
import threading
import time

import _client_path  # noqa: F401

from sonde.elastic import Api


class Reporter(threading.Thread):
    """Heartbeats, step timings and the global step, batched to /api/ingest."""

    def __init__(self, api, origin, every=0.3):
        super().__init__(daemon=True)
        self.api, self.origin, self.every = api, origin, every
        self.lock = threading.Lock()
        self.timings, self.progress = [], []
        self.stopped = threading.Event()

    def timing(self, start_ns, end_ns):
        with self.lock:
            self.timings.append({"name": "step", "start_ns": start_ns, "end_ns": end_ns})

    def step(self, value):
        with self.lock:
            self.progress.append({"name": "global_step", "value": value, "time_ns": time.time_ns()})

    def flush(self):
        with self.lock:
            t, p = self.timings, self.progress
            self.timings, self.progress = [], []
        body = {"origin": self.origin, "heartbeats": [{}], "timings": t, "progress": p}
        try:
            self.api.post("/api/ingest", body, retry_for_s=1.0)
        except ConnectionError:
            pass  # sonde is down: these are lost, as heartbeats to a dead master are

    def run(self):
        while not self.stopped.wait(self.every):
            self.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("api")
    ap.add_argument("node")
    ap.add_argument("index", type=int)
    ap.add_argument("log")
    ap.add_argument("--dataset", default="ds")
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--sample-ms", type=float, default=2.0)
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--storage", default="table")
    ap.add_argument("--report-steps", action="store_true")
    a = ap.parse_args()

    api = Api(a.api)
    plugin = "/api/plugins/dlrover"
    log = open(a.log, "a", buffering=1)

    def note(**kv):
        log.write(json.dumps(kv) + "\n")

    origin = {"job": "train", "node": a.node, "role": "worker", "index": a.index, "rank": a.index}
    reporter = Reporter(api, origin)
    reporter.start()
    status, reg = api.post(
        plugin + "/datasets",
        {
            "dataset_name": a.dataset,
            "batch_size": a.batch,
            "num_epochs": a.epochs,
            "dataset_size": a.size,
            "shuffle": a.shuffle,
            "num_minibatches_per_shard": a.minibatches,
            "storage_type": a.storage,
        },
    )
    assert status == 200, (status, reg)

    calls = 0
    global_step = 0
    while True:
        calls += 1
        rid = f"{a.node}-{calls}"
        status, t = api.post(plugin + "/tasks/next", {"dataset_name": a.dataset, "node": a.node, "request_id": rid})
        assert status == 200, (status, t)
        if t["type"] == "wait":
            time.sleep(0.05)
            continue
        if t["type"] == "end":
            note(event="end")
            break
        shard = t["shard"]
        indices = shard["indices"] if shard["indices"] is not None else list(range(shard["start"], shard["end"]))
        task, epoch = t["task_id"], t["epoch"]
        note(event="start", task=task, epoch=epoch, n=len(indices))
        # batch_done accounting (R9.6): one pending shard at a time here.
        pending = [task, len(indices), 0]
        for b in range(0, len(indices), a.batch):
            batch = indices[b : b + a.batch]
            t0 = time.time_ns()
            for k, idx in enumerate(batch):
                time.sleep(a.sample_ms / 1000.0)
                note(event="sample", task=task, epoch=epoch, index=idx, pos=b + k)
            reporter.timing(t0, time.time_ns())
            pending[2] += len(batch)
            global_step += 1
            if a.report_steps:
                reporter.step(global_step)
        assert pending[2] == pending[1]
        status, r = api.post(
            plugin + "/tasks/report", {"dataset_name": a.dataset, "task_id": task, "node": a.node, "err_message": ""}
        )
        if status == 200 and r.get("accepted"):
            note(event="commit", task=task, epoch=epoch, result=r["result"])
        else:
            note(event="discard", task=task, epoch=epoch, status=status)
    reporter.stopped.set()
    reporter.flush()


if __name__ == "__main__":
    main()
