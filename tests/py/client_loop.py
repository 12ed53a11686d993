"""A pure-Python training loop instrumented with `sonde.ProfilerAgent`, as a
user would write it; every setting comes from the environment that
`python -m sonde run` sets (job, endpoint, rank, world size).

    python3 client_loop.py OUT_DIR BATCHES

OUT_DIR/rank-R.json gets this rank's own record: {"rank", "world_size",
"batches": [{"batch_idx", "forward": [start, end], "backward": [start, end]}],
"stats": agent.stats() after end()}.
"""

import json
import os
import sys
import time

import _client_path  # noqa: F401

import sonde


def busy(seconds):
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        sum(i * i for i in range(100))


def main():
    out_dir, batches = sys.argv[1], int(sys.argv[2])
    rows = []
    with sonde.ProfilerAgent() as agent:
        for i in range(batches):
            agent.update_batch_idx(i)
            with agent.timing("forward") as fwd:
                busy(0.01 * (1 + agent.rank))
            bwd = sonde.Timing("backward").start()
            busy(0.02)
            bwd.end()
            agent.record_timing(bwd)
            rows.append({"batch_idx": i, "forward_start": fwd.start_ns, "backward": [bwd.start_ns, bwd.end_ns]})
    record = {"rank": agent.rank, "world_size": agent.world_size, "batches": rows, "stats": agent.stats()}
    with open(os.path.join(out_dir, f"rank-{agent.rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
