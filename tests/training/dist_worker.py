"""One rank of tests/training/test_distributed.py (run by torchrun, or alone for the reference):
builds the debug model, shards it with FSDP2 when there is a process group, runs one update on
the groups in GROUPS and saves the (gathered) gradients, weights and metrics to OUT. With `kl`,
the policy at the start is the KL reference, taken through a checkpoint's tensors (gathered, then
loaded and sharded again), and OUT holds the second update's, when the policy has moved from it.

    torchrun --nproc-per-node 2 tests/training/dist_worker.py GROUPS OUT [kl]
    python tests/training/dist_worker.py GROUPS OUT [kl]
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from model.config import ModelConfig
from model.transformer import Transformer
from training.config import debug, replace_in
from training.distributed import end_rank, init_from_env, shard_model
from training.trainer import Trainer


def main(groups_path: str, out: str, kl: bool) -> None:
    torch.set_num_threads(1)
    group = init_from_env()
    model = Transformer(ModelConfig.debug()).init_weights(seed=0)
    if group is not None:
        shard_model(model)
    config = replace_in(debug(), train={"micro_batch_tokens": 64}, optim={"lr": 1e-2, "max_grad_norm": 0.5},
                        loss={"kl_coef": 0.5 if kl else 0.0})
    trainer = Trainer(config, model, group=group)
    groups = pickle.loads(Path(groups_path).read_bytes())
    if kl:
        trainer.take_reference()
        trainer.load_reference(trainer.reference_tensors())
        trainer.update(groups, version=0)
    metrics = trainer.update(groups, version=0)
    full = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
    result = {
        "metrics": metrics,
        "grads": {n: full(p.grad).clone() for n, p in model.named_parameters()},
        "weights": {n: full(p.data).clone() for n, p in model.named_parameters()},
        "local_experts": [tuple(getattr(p, "to_local", lambda p=p: p)().shape)
                          for n, p in model.named_parameters() if n.endswith("w13_EFD")],
    }
    if group is None or torch.distributed.get_rank() == 0:
        torch.save(result, out)
    if group is not None:
        end_rank(group)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], kl=sys.argv[3:] == ["kl"])
