"""A real PyTorch model trained on CPU with the client's hooks:
`sonde.torch.profile_loop` around the DataLoader and `sonde.torch.step_timer`
on the model. Settings come from the environment (`python -m sonde run`).

    python3 client_torch.py OUT_DIR EPOCHS

OUT_DIR/rank-R.json: {"rank", "world_size", "batches": N, "loss": [first, last], "stats"}.
"""

import json
import os
import sys

import _client_path  # noqa: F401

import torch

import sonde
import sonde.torch


def main():
    out_dir, epochs = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    n = 0
    with sonde.ProfilerAgent() as agent:
        timer = sonde.torch.step_timer(model, agent)
        for epoch in range(epochs):
            for xb, yb in sonde.torch.profile_loop(loader, agent, start=n):
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                with agent.timing("optimizer"):
                    opt.step()
                losses.append(loss.item())
                n += 1
        timer.remove()
    record = {"rank": agent.rank, "world_size": agent.world_size, "batches": n,
              "loss": [losses[0], losses[-1]], "stats": agent.stats()}
    with open(os.path.join(out_dir, f"rank-{agent.rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
