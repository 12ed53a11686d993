"""Data-parallel training on CPU with real torch.distributed (gloo), each
rank reporting its operations with `sonde.ops`: forward and backward timed
by hand, the gradient all-reduce by `sonde.ops.time_collectives`. Rank 1's
forward takes three times as long, so rank 0 waits in the all-reduce: the
operations say which worker holds the job back. Settings come from the
environment (`python -m sonde run --ranks 2`).

    python3 client_torch_ops.py OUT_DIR STEPS

OUT_DIR/rank-R.json: {"rank", "steps", "ops": recorded, "stats"}.
"""

import json
import os
import sys
import time
import zlib

import _client_path  # noqa: F401

import torch
import torch.distributed as dist

import sonde
import sonde.ops

FORWARD_MS = {0: 20, 1: 60}
BACKWARD_MS = 20


def busy(seconds):
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        sum(i * i for i in range(100))


def main():
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Both ranks get the same rendezvous port from the shared output folder.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + zlib.crc32(out_dir.encode()) % 20000))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with sonde.ProfilerAgent() as agent:
        ops = sonde.ops.Ops(agent, dp=rank)
        restore = sonde.ops.time_collectives(ops)
        for step in range(steps):
            agent.update_batch_idx(step)
            x = torch.randn(32, 16)
            with ops.op("forward"):
                loss = model(x).pow(2).mean()
                busy(FORWARD_MS[rank] / 1000)
            with ops.op("backward"):
                opt.zero_grad()
                loss.backward()
                busy(BACKWARD_MS / 1000)
            for p in model.parameters():
                dist.all_reduce(p.grad)  # timed: a dp_collective op
                p.grad /= world
            with ops.op("optimizer"):
                opt.step()
        restore()
        record = {"rank": rank, "steps": steps, "ops": ops.recorded, "stats": agent.stats()}
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
