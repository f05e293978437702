"""TRL's side of bench/trainer.py: run under TRL's own interpreter (`.venv-trl`, TRL with the same
torch 2.13.0 CPU build), never imported by the project.

    .venv-trl/bin/python bench/trl_grpo.py SPEC.json OUT.json

SPEC (written by bench/trainer.py) names the checkpoint, the batch (prompt and completion token
ids per sample, advantages), LoRA settings and the repeats. Measured, on `GRPOTrainer` with
loss_type "dapo" (token-level normalisation), beta 0, clip 0.2/0.28, one generation per step:
  update  `compute_loss` + backward (`training_step`'s body after `_prepare_inputs`, which would
          generate) + `optimizer.step` on the spec's batch, as the trainer's own inputs dict:
          seconds per update (median of the repeats after one warm-up)
  e2e     `trainer.train()` on the spec's prompts for `e2e_steps` steps (generation with
          transformers' `generate` at the spec's length, reward, update): seconds per step after
          the first
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import time
from pathlib import Path


def _trainer(spec: dict, prompts: list[str], steps: int):
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    group, length = spec["group_size"], spec["completion_tokens"]
    config = GRPOConfig(
        output_dir=spec["workdir"], per_device_train_batch_size=len(prompts) * group, num_generations=group,
        max_completion_length=length, generation_kwargs={"min_new_tokens": length}, temperature=1.0,
        beta=0.0, loss_type="dapo", scale_rewards="none", epsilon=0.2, epsilon_high=0.28,
        learning_rate=spec["lr"], max_steps=steps, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", gradient_accumulation_steps=1, steps_per_generation=1, seed=0,
        gradient_checkpointing=False,  # TRL's default recomputes activations; ours does not here
        model_init_kwargs={"dtype": "float32"},
    )
    lora = LoraConfig(r=spec["lora_rank"], lora_alpha=spec["lora_alpha"], lora_dropout=0.0,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts] * (steps + 1))
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    def reward(completions, **_):
        return [float(len(str(c)) % 7) for c in completions]  # any reward: the bench times, not learns

    trainer = GRPOTrainer(model=spec["model"], reward_funcs=reward, args=config, train_dataset=dataset,
                          peft_config=lora, callbacks=[Stamp()])
    return trainer, stamps


def update_phase(spec: dict) -> dict:
    import torch

    trainer, _ = _trainer(spec, spec["prompts"], steps=1)
    trainer.create_optimizer_and_scheduler(num_training_steps=100)
    rows = spec["samples"]
    prompt_len = max(len(r["prompt_ids"]) for r in rows)
    comp_len = max(len(r["completion_ids"]) for r in rows)
    pad = 0
    prompt_ids = torch.tensor([[pad] * (prompt_len - len(r["prompt_ids"])) + r["prompt_ids"] for r in rows])
    prompt_mask = torch.tensor([[0] * (prompt_len - len(r["prompt_ids"])) + [1] * len(r["prompt_ids"]) for r in rows])
    completion_ids = torch.tensor([r["completion_ids"] + [pad] * (comp_len - len(r["completion_ids"])) for r in rows])
    completion_mask = torch.tensor([[1] * len(r["completion_ids"]) + [0] * (comp_len - len(r["completion_ids"])) for r in rows])
    inputs = {
        "prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
        "completion_mask": completion_mask, "advantages": torch.tensor([r["advantage"] for r in rows]),
        "num_items_in_batch": completion_mask.sum().float(),
    }
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # what train() sets before its first step
    seconds = []
    for _ in range(spec["repeats"] + 1):
        started = time.perf_counter()
        # training_step's own body after _prepare_inputs (which would generate a new batch)
        trainer.compute_loss(model, inputs, num_items_in_batch=inputs["num_items_in_batch"]).backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - started)
    return {"update_seconds": statistics.median(seconds[1:]), "update_seconds_all": seconds}


def e2e_phase(spec: dict) -> dict:
    steps = spec["e2e_steps"]
    trainer, stamps = _trainer(spec, spec["prompts"], steps=steps)
    started = time.perf_counter()
    trainer.train()
    per_step = [b - a for a, b in itertools.pairwise(stamps)]
    return {"e2e_seconds_per_step": statistics.median(per_step) if per_step else stamps[0] - started,
            "e2e_first_step_seconds": stamps[0] - started}


def main(spec_path: str, out_path: str) -> None:
    import torch
    import trl

    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])
    result = {"trl": trl.__version__, "torch": torch.__version__}
    if "update" in spec["phases"]:
        result |= update_phase(spec)
    if "e2e" in spec["phases"]:
        result |= e2e_phase(spec)
    Path(out_path).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
