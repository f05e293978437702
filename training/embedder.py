"""Tunes the codebase-search embedder: a LoRA adapter for all-MiniLM-L6-v2, trained on
docstring -> code pairs mined from the installed packages (training/docpairs.py), so that a
description of what code does lands near the code. The adapter is merged into the model when
it loads (agent/retrieval/adapter.py); the bundled one is agent/retrieval/adapters/.

    python -m training.embedder --steps 300 --out agent/retrieval/adapters/minilm-code.safetensors

The packages bench/retrieval.py measures on (requests, urllib3; `--exclude`) and every vendored
copy are left out of the training data. The loss is symmetric InfoNCE over a batch of pairs from
one package (its other definitions are the hard negatives). Checkpoints every `--save-every`
steps (the adapter, plus optimizer state beside it); `--resume` continues a killed run from the
last one. About 5 s a step on the 2-core dev box; 300 steps take ~25 minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from agent.retrieval.adapter import BASE_MODEL, DEFAULT_ADAPTER, save_adapter
from training.docpairs import Pair, mine_pairs

ADAPTED = ("attention.self.query", "attention.self.key", "attention.self.value",
           "attention.output.dense", "intermediate.dense", "output.dense")
"""The linear layers of each BERT layer that get low-rank deltas."""


def add_lora(bert, rank: int) -> dict[str, object]:
    """Freezes `bert` and wraps the ADAPTED linears of every layer with trainable factors;
    returns name -> wrapper."""
    import torch

    class LoraLinear(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.lora_A = torch.nn.Parameter(torch.randn(rank, base.in_features) / base.in_features ** 0.5)
            self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x):
            return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T

    for p in bert.parameters():
        p.requires_grad_(False)
    wrappers = {}
    for i, layer in enumerate(bert.encoder.layer):
        for path in ADAPTED:
            *owner, leaf = path.split(".")
            parent = layer
            for part in owner:
                parent = getattr(parent, part)
            wrapper = LoraLinear(getattr(parent, leaf))
            setattr(parent, leaf, wrapper)
            wrappers[f"encoder.layer.{i}.{path}"] = wrapper
    return wrappers


def deltas(wrappers: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {name: (w.lora_A.detach().numpy(), w.lora_B.detach().numpy()) for name, w in wrappers.items()}


def train(pairs: list[Pair], out: Path, *, steps: int, batch: int = 32, rank: int = 8, lr: float = 2e-4,
          temperature: float = 0.05, seed: int = 0, save_every: int = 50, resume: bool = False,
          log=print) -> None:
    import torch

    from agent.retrieval.embedder import MiniLMEmbedder

    torch.manual_seed(seed)
    groups: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        groups.setdefault(pair.package, []).append(i)
    groups = {g: ix for g, ix in groups.items() if len(ix) >= batch}
    if not groups:
        raise SystemExit(f"no package has {batch} pairs; lower --batch")
    model = MiniLMEmbedder(adapter=None).load()
    tokenizer, bert = model.tokenizer, model[0].auto_model
    wrappers = add_lora(bert, rank)
    params = [p for w in wrappers.values() for p in (w.lora_A, w.lora_B)]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    state_path = out.with_name(out.name + ".state.pt")
    start = 0
    if resume and state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        for name, w in wrappers.items():
            w.lora_A.data.copy_(state["lora"][name][0])
            w.lora_B.data.copy_(state["lora"][name][1])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        log(f"resumed at step {start}")

    def encode(texts: list[str], max_length: int):
        enc = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        hidden = bert(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    names = sorted(groups)
    metadata = {"rank": str(rank), "pairs": str(len(pairs)), "packages": ",".join(names),
                "batch": str(batch), "lr": str(lr), "temperature": str(temperature), "seed": str(seed)}
    bert.train()
    started, losses = time.perf_counter(), []
    for step in range(start, steps):
        rng = np.random.default_rng([seed, step])  # a resumed run draws the same batches
        members = groups[names[rng.integers(len(names))]]
        chosen = rng.choice(members, batch, replace=False)
        queries = encode([pairs[i].query for i in chosen], 64)
        codes = encode([pairs[i].code for i in chosen], 256)
        logits = queries @ codes.T / temperature
        labels = torch.arange(batch)
        loss = (torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.T, labels)) / 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        done = step + 1
        if done % 10 == 0:
            log(f"step {done}/{steps} loss {np.mean(losses[-10:]):.3f} ({time.perf_counter() - started:.0f} s)")
        if done % save_every == 0 or done == steps:
            save_adapter(out, deltas(wrappers), {**metadata, "steps": str(done)})
            tmp = state_path.with_name(state_path.name + ".tmp")
            torch.save({"step": done, "optimizer": optimizer.state_dict(),
                        "lora": {n: (w.lora_A.detach().clone(), w.lora_B.detach().clone()) for n, w in wrappers.items()}}, tmp)
            os.replace(tmp, state_path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_ADAPTER, help="the adapter file to write")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32, help="pairs per step, all from one package")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--resume", action="store_true", help="continue from the checkpoint beside --out")
    ap.add_argument("--site", type=Path, default=Path(sysconfig.get_path("purelib")), help="where to mine pairs")
    ap.add_argument("--exclude", default="requests,urllib3,pip", help="packages kept out of training")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    pairs = mine_pairs(args.site, exclude=set(filter(None, args.exclude.split(","))))
    print(f"{len(pairs)} pairs from {len({p.package for p in pairs})} packages under {args.site}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    train(pairs, args.out, steps=args.steps, batch=args.batch, rank=args.rank, lr=args.lr, seed=args.seed,
          save_every=args.save_every, resume=args.resume, log=lambda line: print(line, flush=True))
    print(f"wrote {args.out} ({BASE_MODEL} + LoRA rank {args.rank}, {args.steps} steps)")


if __name__ == "__main__":
    sys.exit(main())
