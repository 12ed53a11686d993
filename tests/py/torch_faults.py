"""Real PyTorch jobs on CPU (gloo) for the diagnosis benchmark's real half
(`./dev bench-diagnosis-real`), each rank reporting its operations with
`sonde.ops`: the input, forward, backward and optimizer timed by hand, the
communication by the client's hooks. One process per rank; the launcher
sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the client's variables.

    python3 torch_faults.py ddp      --steps N [--slow-loader-rank R --loader-ms MS]
                                     [--pause-at STEP --pause-dir DIR]
    python3 torch_faults.py pipeline --steps N --micro M --blocks A,B

ddp:       DistributedDataParallel over all ranks; its gradient all-reduce
           timed by `sonde.ops.ddp_comm_hook`. A rank's dataloader can be
           slowed (it waits MS per batch, as on slow storage).
pipeline:  two stages (ranks 0..W/2-1 are stage 0, the rest stage 1; data-
           parallel rank = rank mod W/2), GPipe over M micro-batches: stage 0
           sends activations to its stage-1 twin with dist.send, which sends
           the gradients back; `sonde.ops.time_p2p` times both; then each
           stage all-reduces its gradients across its replicas (timed by
           `sonde.ops.time_collectives`). Stage s runs blocks[s] blocks of
           layers, so an uneven split makes one stage longer.

--pause-at: before step STEP each rank writes DIR/at-RANK and waits for
DIR/go, so that a fault injected from outside (a throttled link) begins at
that step exactly, however fast or slow the steps run.

Compute is matrix arithmetic sized so a block takes a few milliseconds; a
CPU quota or a busy neighbour makes it last longer, as in a real job.
Prints one JSON line when done: {"rank", "steps", "ops"}.
"""

import argparse
import json
import os
import time

import _client_path  # noqa: F401

import torch
import torch.distributed as dist

import sonde
import sonde.ops

WIDTH = 256


def block():
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH))


def batches(rank, slow_rank, loader_ms, n=64):
    """An endless loader: a fresh batch each time, `loader_ms` late on the slow rank."""
    g = torch.Generator().manual_seed(rank)
    while True:
        if rank == slow_rank:
            time.sleep(loader_ms / 1000)
        yield torch.randn(n, WIDTH, generator=g)


def pause(a, rank, step):
    """At `--pause-at`: says so, then waits for the injector's go."""
    if step != a.pause_at or not a.pause_dir:
        return
    open(os.path.join(a.pause_dir, f"at-{rank}"), "w").close()
    deadline = time.monotonic() + 300
    while not os.path.exists(os.path.join(a.pause_dir, "go")):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: no go at step {step} within 300 s")
        time.sleep(0.01)


def ddp(a, rank, world):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[block() for _ in range(4)])
    net = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    loader = batches(rank, a.slow_loader_rank, a.loader_ms)
    with sonde.ProfilerAgent() as agent:
        ops = sonde.ops.Ops.from_env(agent)
        net.register_comm_hook(None, sonde.ops.ddp_comm_hook(ops))
        for step in range(a.steps):
            pause(a, rank, step)
            agent.update_batch_idx(step)
            with ops.op("input"):
                x = next(loader)
            with ops.op("forward"):
                loss = net(x).pow(2).mean()
            with ops.op("backward"):
                opt.zero_grad()
                loss.backward()  # the hook's all-reduce rows overlap it, as DDP overlaps them
            with ops.op("optimizer"):
                opt.step()
        return ops.recorded


def pipeline(a, rank, world):
    half = world // 2
    stage, dp = rank // half, rank % half
    peer = rank + half if stage == 0 else rank - half
    # Each stage's replicas reduce their gradients together.
    groups = [dist.new_group(list(range(s * half, (s + 1) * half))) for s in (0, 1)]
    torch.manual_seed(stage)
    blocks = [int(b) for b in a.blocks.split(",")]
    model = torch.nn.Sequential(*[block() for _ in range(blocks[stage])])
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loader = batches(dp, -1, 0, n=64 // a.micro)
    with sonde.ProfilerAgent() as agent:
        ops = sonde.ops.Ops(agent, dp=dp, stage=stage)
        restore_p2p = sonde.ops.time_p2p(ops)
        restore_coll = sonde.ops.time_collectives(ops)
        for step in range(a.steps):
            agent.update_batch_idx(step)
            opt.zero_grad()
            kept = []
            for m in range(a.micro):  # forwards of every micro-batch, then their backwards (GPipe)
                with ops.micro_batch(m):
                    if stage == 0:
                        with ops.op("input"):
                            x = next(loader)
                        with ops.op("forward"):
                            y = model(x)
                        dist.send(y.detach(), peer)
                        kept.append(y)
                    else:
                        x = torch.empty(64 // a.micro, WIDTH)
                        dist.recv(x, peer)
                        x.requires_grad_()
                        with ops.op("forward"):
                            loss = model(x).pow(2).mean()
                        kept.append((x, loss))
            for m in range(a.micro):
                with ops.micro_batch(m):
                    if stage == 1:
                        x, loss = kept[m]
                        with ops.op("backward"):
                            loss.backward()
                        dist.send(x.grad, peer)
                    else:
                        g = torch.empty(64 // a.micro, WIDTH)
                        dist.recv(g, peer)
                        with ops.op("backward"):
                            kept[m].backward(g)
            for p in model.parameters():
                dist.all_reduce(p.grad, group=groups[stage])
                p.grad /= half
            with ops.op("optimizer"):
                opt.step()
        restore_p2p()
        restore_coll()
        return ops.recorded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ddp", "pipeline"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--slow-loader-rank", type=int, default=-1)
    ap.add_argument("--loader-ms", type=float, default=0.0)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--blocks", default="2,2", help="blocks of layers per stage, stage 0 first")
    ap.add_argument("--pause-at", type=int, default=-1, help="wait for DIR/go before this step (ddp)")
    ap.add_argument("--pause-dir", default="")
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    recorded = ddp(a, rank, world) if a.mode == "ddp" else pipeline(a, rank, world)
    dist.barrier()
    dist.destroy_process_group()
    # One write of the whole line: the ranks share the launcher's stdout, and
    # print() (unbuffered under PYTHONUNBUFFERED) writes the newline apart,
    # so two ranks ending together ran their lines into one.
    os.write(1, (json.dumps({"rank": rank, "steps": a.steps, "ops": recorded}) + "\n").encode())


if __name__ == "__main__":
    main()
