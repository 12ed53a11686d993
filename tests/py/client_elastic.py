"""An elastic worker on the Python client (`sonde.elastic.Worker`): takes
every shard of a dataset from sonde's dlrover plugin, reports heartbeats,
a `step` timing per batch and the global step over OTLP, and each shard done.
Settings come from the environment (`python -m sonde run`).

    python3 client_elastic.py OUT_DIR DATASET_SIZE

OUT_DIR/worker-R.json: {"rank", "samples": [every index taken, in order],
"results": [each shard_done answer], "steps": the last global step, "stats"}.
"""

import json
import os
import sys
import time

import _client_path  # noqa: F401

import sonde.elastic


def start_together(out_dir, rank):
    """Waits until every worker is up. On a loaded machine one Python process can
    start seconds after the other, which would then take every shard alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    open(os.path.join(out_dir, f"up-{rank}"), "w").close()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(out_dir, f"up-{r}")) for r in range(world)):
            return
        time.sleep(0.05)
    sys.exit(f"worker {rank}: the other workers did not start within 120 s")


def main():
    out_dir, size = sys.argv[1], int(sys.argv[2])
    rank = int(os.environ.get("RANK", "0"))
    w = sonde.elastic.Worker(node=f"worker-{rank}", index=rank, metric_interval_ms=200)
    w.agent.start()
    w.start_heartbeats(0.2)
    w.node_event("started", "worker up")
    w.register_dataset("ds", dataset_size=size, batch_size=5, num_minibatches_per_shard=2)
    start_together(out_dir, rank)
    samples, results, step = [], [], 0
    for shard in w.shards("ds"):
        idx = shard.indices()
        for b in range(0, len(idx), 5):
            w.agent.update_batch_idx(step)
            with w.agent.timing("step"):
                time.sleep(0.02)
                samples.extend(idx[b : b + 5])
            step += 1
            w.global_step(step)
        results.append(w.shard_done(shard))
    time.sleep(0.5)  # one more metric export with the last global step
    w.end()
    with open(os.path.join(out_dir, f"worker-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "samples": samples, "results": results, "steps": step, "stats": w.agent.stats()}, f)


if __name__ == "__main__":
    main()
