"""A tiny PyTorch Lightning model on a dataset made here, on CPU, with
`sonde.lightning.SondeCallback`. Settings come from the environment.

    python3 client_lightning.py OUT_DIR EPOCHS

OUT_DIR/rank-R.json: {"rank", "batches": batches the trainer ran}.
"""

import json
import os
import sys
import warnings

import _client_path  # noqa: F401

import pytorch_lightning as pl
import torch

import sonde.lightning

warnings.filterwarnings("ignore")


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.batches = 0

    def training_step(self, batch, batch_idx):
        self.batches += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    out_dir, epochs = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    x = torch.randn(32, 8)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    cb = sonde.lightning.SondeCallback()
    model = Tiny()
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb],
    )
    trainer.fit(model, data)
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "batches": model.batches}, f)


if __name__ == "__main__":
    main()
