"""A tiny Hugging Face model (GPT-2 architecture, made from a config: no hub
download) trained by `transformers.Trainer` on token sequences made here,
on CPU, with `sonde.hf.SondeCallback`. Settings come from the environment.

    python3 client_hf.py OUT_DIR STEPS

OUT_DIR/rank-R.json: {"rank", "steps": the trainer's global_step at the end}.
"""

import json
import os
import sys
import tempfile
import warnings

import _client_path  # noqa: F401

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import sonde.hf

warnings.filterwarnings("ignore")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, length, vocab):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=4, max_steps=steps, report_to=[],
            save_strategy="no", logging_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(64, 16, 64), callbacks=[sonde.hf.SondeCallback()])
        trainer.train()
    rank = int(os.environ.get("RANK", "0"))
    with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "steps": trainer.state.global_step}, f)


if __name__ == "__main__":
    main()
