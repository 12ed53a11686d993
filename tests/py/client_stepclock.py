"""A training loop timed by the Python client's `StepClock`, the clock
behind its Lightning and Hugging Face callbacks: `dataloader_next` is
reported beside the step (from the last step's end to this step's begin),
not inside it. The dataloader waits `LOAD_MS` per batch and the step
computes for `COMPUTE_MS`, so every step is input-bound.

    python3 client_stepclock.py OUT_DIR BATCHES

OUT_DIR/rank-R.json gets this rank's record: {"rank", "batches": [{"batch",
"load": [start, end], "step": [start, end]}]}.
"""

import json
import os
import sys
import time

import _client_path  # noqa: F401

import sonde
from sonde._steps import StepClock

LOAD_MS = 150
COMPUTE_MS = 80


def busy(seconds):
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        sum(i * i for i in range(100))


def main():
    out_dir, batches = sys.argv[1], int(sys.argv[2])
    rows = []
    with sonde.ProfilerAgent() as agent:
        clock = StepClock(agent)
        clock.loading_from(time.time_ns())
        for i in range(batches):
            load_start = time.time_ns()
            time.sleep(LOAD_MS / 1000)  # the dataloader, waiting on I/O
            clock.begin(i)
            step_start = time.time_ns()
            busy(COMPUTE_MS / 1000)
            clock.finish()
            rows.append({"batch": i, "load": [load_start, step_start], "step": [step_start, time.time_ns()]})
    with open(os.path.join(out_dir, f"rank-{agent.rank}.json"), "w") as f:
        json.dump({"rank": agent.rank, "batches": rows}, f)


if __name__ == "__main__":
    main()
