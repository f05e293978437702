"""The trainer: one update of the policy from groups of samples (training/loss.py's objective),
LoRA or full fine-tuning, gradient accumulation over micro-batches, and its state for
checkpoints. Rollouts, the buffer and weight sync are other modules (training/rl.py joins them).

    model = load_policy(cfg.model, seed)              # composer-mini, a checkpoint, or "debug"
    trainer = Trainer(cfg, model)
    metrics = trainer.update(groups, version)         # forward, backward, optimizer step
    trainer.take_reference()                          # the policy now is the KL reference

The KL reference (`loss.kl_coef`) is a policy the run took on purpose, the one its RL phase
starts from (training/rl.py), not the model it loaded: after a warm start, the pretrained model
is the policy that made no tool call, and pulling towards it would undo the warm start. Under
LoRA it is a copy of the adapter's factors swapped in for the reference's forward; otherwise a
copy of the model.

Under torch.distributed (training/distributed.py) each rank updates on its share of the
samples; the loss's token counts and the metrics are summed over ranks first, so the gradient
equals one process's on the whole batch.

Tests: .venv/bin/python -m pytest tests/training/test_trainer_replay.py tests/training/test_lora.py
    tests/training/test_distributed.py tests/training/test_rl.py
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from model.config import ModelConfig
from model.layers import GradPositions, PackedRows
from model.transformer import Transformer
from training.batch import MicroBatch, PreparedBatch, micro_batches, prepare, shard
from training.buffer import Group
from training.checkpoint import full_tensors
from training.config import RLConfig, TrainModelConfig
from training.lora import adapters_replaced, add_lora, clone_factors, lora_state_dict
from training.loss import METRIC_COUNTS, LossCounts, LossInputs, policy_loss, selected_logprobs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_model_path(path: str) -> Path | None:
    """None for "debug"; composer-mini's directory (built on first use); else the path."""
    if path == "debug":
        return None
    if path == "composer-mini":
        from model.home import ensure_default_model

        return ensure_default_model()
    return Path(path).expanduser()


def load_policy(config: TrainModelConfig, seed: int = 0, vocab_size: int | None = None) -> Transformer:
    """The model to train, in its master dtype (LoRA is added by the Trainer); "debug" is
    `ModelConfig.debug()` with the tokenizer's vocabulary, randomly initialised from `seed`."""
    from model.hf import load_model

    path = resolve_model_path(config.path)
    if path is None:
        debug = ModelConfig.debug(vocab_size=vocab_size or 256, max_position_embeddings=1024)
        model = Transformer(debug).init_weights(seed=seed)
    else:
        model = load_model(path)
    return model.to(DTYPES[config.dtype])


class Trainer:
    def __init__(self, config: RLConfig, model: Transformer, group: dist.ProcessGroup | None = None,
                 user_turn_opening: list[int] | None = None) -> None:
        """`user_turn_opening`: the tokenizer's ids for it (model/tokenizer.py), which mark where a
        sample's instructions end under `--model.no-instructions-gradient`."""
        if not config.model.instructions_gradient and config.model.context_gradient and not user_turn_opening:
            raise ValueError("--model.no-instructions-gradient needs the chat template's user turn opening "
                             "(a tokenizer with a chat template)")
        self.user_turn_opening = user_turn_opening
        self.config = config
        self.model = model.train()
        self.group = group
        mc = config.model
        if mc.lora_rank > 0:
            add_lora(model, mc.lora_rank, mc.lora_alpha, mc.lora_targets, seed=config.train.seed)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("nothing to train: every parameter is frozen")
        self.lora = mc.lora_rank > 0
        self.reference: Transformer | dict[str, torch.Tensor] | None = None  # a model, or LoRA factors
        o = config.optim
        self.optimizer = torch.optim.AdamW(self.params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
        self.step = 0

    # ---- the update -----------------------------------------------------------------------------

    def lr_at(self, step: int) -> float:
        """The rate of update `step` (0-based): the warm start's own rate during its steps, linear
        warmup over the first `optim.warmup_steps` updates."""
        o, t = self.config.optim, self.config.train
        lr = t.warm_start_lr if t.warm_start_lr and step < t.warm_start_steps else o.lr
        return lr * min(1.0, (step + 1) / o.warmup_steps) if o.warmup_steps else lr

    def update(self, groups: list[Group], version: int) -> dict[str, float]:
        """One optimizer step on these groups (each rank trains its share of the samples)."""
        started = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        metrics = self.accumulate(groups, version)
        grad_norm = self._clip()
        self.optimizer.step()
        self.step += 1
        metrics.update(grad_norm=grad_norm, lr=self.lr_at(self.step - 1),
                       update_seconds=time.perf_counter() - started)
        return metrics

    def accumulate(self, groups: list[Group], version: int) -> dict[str, float]:
        """Zeroes the gradients and runs forward and backward over this rank's micro-batches;
        every rank runs as many as the busiest (FSDP's collectives must pair up)."""
        cfg = self.config
        batch = prepare(groups, cfg.loss, cfg.buffer, version)
        if self.group is not None:
            batch = shard(batch, dist.get_rank(self.group), dist.get_world_size(self.group))
        counts = self._all_reduce([batch.policy_tokens, batch.sft_tokens])
        loss_counts = LossCounts(int(counts[0]), int(counts[1]))
        self.optimizer.zero_grad(set_to_none=True)
        mbs = micro_batches(batch, cfg.train.micro_batch_tokens)
        rounds = int(self._all_reduce([len(mbs)], op=dist.ReduceOp.MAX)[0]) if self.group is not None else len(mbs)
        # FSDP averages gradients over ranks; the loss is already a sum over the whole batch.
        scale = dist.get_world_size(self.group) if self.group is not None else 1
        sums: dict[str, float] = {}
        tokens = 0
        for mb in mbs:
            out = policy_loss(self._loss_inputs(mb), cfg.loss, loss_counts)
            (out.loss * scale).backward()
            tokens += mb.num_tokens
            for name, value in out.metrics.items():
                sums[name] = sums.get(name, 0.0) + float(value)
        for _ in range(rounds - len(mbs)):
            self._empty_backward()
        metrics = self._metrics(batch, sums, loss_counts) | rollout_metrics(groups)
        metrics["train_tokens"] = self._all_reduce([float(tokens)])[0]
        return metrics

    def _loss_inputs(self, mb: MicroBatch) -> LossInputs:
        logp = self.token_logprobs(self.model, mb)
        v = mb.valid_BP
        ref = None
        if self._kl_active():
            with torch.no_grad(), self._reference_model() as reference:
                ref = self.token_logprobs(reference, mb)[v]
        return LossInputs(
            logprobs=logp[v], old_logprobs=logp.detach()[v], behaviour_logprobs=mb.behaviour_BP[v],
            advantages=mb.advantages_BP[v], mask=mb.mask_BP[v], sft_mask=mb.sft_mask_BP[v], ref_logprobs=ref,
        )

    def token_logprobs(self, model: Transformer, mb: MicroBatch) -> torch.Tensor:
        """(B, P) log pi(target) at the loss positions, temperature-scaled as the sampler's; where
        the samples carry the rollout's routing, the forward replays it (model/moe.py: the
        family's gate normalisation over the given experts)."""
        device = next(model.parameters()).device
        autocast = (torch.autocast(device.type, dtype=torch.bfloat16)
                    if self.config.model.autocast_bf16 else nullcontext())
        with autocast:
            routing = None if mb.routing_BSLk is None else mb.routing_BSLk.to(device)
            packed = PackedRows.from_segments(mb.segments_BS) if mb.shared else None
            at = {"logits_at": mb.positions_BP.to(device)}
            if not self.config.model.context_gradient:
                at = {"grad_at": GradPositions.of(*(t.to(device) for t in (mb.positions_BP, mb.valid_BP,
                                                                          mb.segments_BS)))}
            elif not self.config.model.instructions_gradient:
                at_BG, valid_BG, index_BP = (t.to(device) for t in mb.conversation_positions(self.user_turn_opening))
                at = {"grad_at": GradPositions.of(at_BG, valid_BG, mb.segments_BS.to(device)), "logits_at": index_BP}
            out = model(mb.input_ids_BS.to(device), positions_BS=mb.position_ids_BS.to(device),
                        given_experts_BSLk=routing, gradient_checkpointing=self.config.model.gradient_checkpointing,
                        packed=packed, **at)
        return selected_logprobs(out.logits, mb.targets_BP.to(device), mb.temperature)

    def _clip(self) -> float:
        limit = self.config.optim.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.params, limit if limit > 0 else math.inf)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def _empty_backward(self) -> None:
        """A forward and backward that changes no gradient (a rank with fewer micro-batches), with
        the reference's forward where the loss has one: under FSDP each forward is collectives that
        the busier ranks' micro-batches issue too, in this order."""
        ids = torch.zeros(1, 1, dtype=torch.long, device=next(self.model.parameters()).device)
        out = self.model(ids)
        if self._kl_active():
            with torch.no_grad(), self._reference_model() as reference:
                reference(ids)
        (0.0 * out.logits.sum()).backward()

    def _all_reduce(self, values: list[float], op=dist.ReduceOp.SUM) -> list[float]:
        if self.group is None:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=op, group=self.group)
        return t.tolist()

    # ---- metrics --------------------------------------------------------------------------------

    def _metrics(self, batch: PreparedBatch, sums: dict[str, float], counts: LossCounts) -> dict[str, float]:
        names = sorted(METRIC_COUNTS)
        *totals, samples = self._all_reduce([*(sums.get(n, 0.0) for n in names), float(len(batch.samples))])
        out = {}
        for name, total in zip(names, totals):
            denominator = getattr(counts, METRIC_COUNTS[name])
            if denominator:
                out[name] = total / denominator
        out.update({f"dropped_{k}": float(v) for k, v in batch.dropped.items()}, samples=samples)
        out.update(policy_tokens=float(counts.policy_tokens), sft_tokens=float(counts.sft_tokens))
        return out

    # ---- the KL reference -----------------------------------------------------------------------

    def take_reference(self) -> None:
        """The policy as it is now becomes the KL reference."""
        if self.lora:
            self.reference = clone_factors(self.model)
        else:  # through the full weights: FSDP's modules cannot be deep-copied (every rank calls it)
            self.load_reference(full_tensors(self.model))

    def reference_tensors(self) -> dict[str, torch.Tensor]:
        """What a checkpoint keeps of the reference: the LoRA factors, or the model's weights under
        HF names (gathered under FSDP: every rank calls it)."""
        if self.reference is None:
            raise ValueError("the trainer has no KL reference yet (take_reference)")
        if isinstance(self.reference, dict):
            return self.reference
        return full_tensors(self.reference)

    def load_reference(self, tensors: dict[str, torch.Tensor]) -> None:
        """The reference from `reference_tensors`' output (every rank reads the same tensors)."""
        if self.lora:
            own = lora_state_dict(self.model)
            if own.keys() != tensors.keys() or any(own[k].shape != tensors[k].shape for k in own):
                raise ValueError("the saved KL reference's LoRA factors do not match this adapter's "
                                 "(another rank or other targets?)")
            self.reference = dict(tensors)
            return
        from model.hf import load_hf_state_dict

        like = next(self.model.parameters())
        reference = Transformer(self.model.config).to(dtype=like.dtype, device=like.device)
        load_hf_state_dict(reference, tensors, source="the saved KL reference")
        if self.group is not None:
            from training.distributed import shard_model

            shard_model(reference)
        self.reference = reference.eval().requires_grad_(False)

    def _kl_active(self) -> bool:
        return self.config.loss.kl_coef > 0 and self.reference is not None

    @contextmanager
    def _reference_model(self) -> Iterator[Transformer]:
        """The module whose forward is the reference's: its own copy (full fine-tuning), or the
        policy with the reference's LoRA factors swapped in."""
        if isinstance(self.reference, dict):
            with adapters_replaced(self.model, self.reference):
                yield self.model
        else:
            yield self.reference

    # ---- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The step and the optimizer's full state (gathered across ranks under FSDP: every rank
        must call this)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=self.group is not None)
        return {"step": self.step, "optimizer": get_optimizer_state_dict(self.model, self.optimizer, options=options)}

    def load_state_dict(self, state: dict) -> None:
        """Every rank loads the full state; FSDP keeps its shard of it."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        self.step = state["step"]
        set_optimizer_state_dict(self.model, self.optimizer, state["optimizer"],
                                 options=StateDictOptions(full_state_dict=True))


def rollout_metrics(groups: list[Group]) -> dict[str, float]:
    """Over every on-policy rollout of the update (filtered or not): reward, success rate,
    response length, turns, tool calls and the share of calls made in parallel."""
    samples = [s for g in groups for s in g.samples if not s.off_policy]
    out: dict[str, float] = {}
    rewards = [s.reward for s in samples if not math.isnan(s.reward)]
    if rewards:
        out["reward"] = sum(rewards) / len(rewards)
        out["success"] = sum(r >= 1.0 for r in rewards) / len(rewards)
    if samples:
        out["response_tokens"] = sum(s.num_policy_tokens for s in samples) / len(samples)
        out["masked_rewards"] = float(len(samples) - len(rewards))
    for key in ("turns", "tool_calls"):
        values = [s.stats[key] for s in samples if key in s.stats]
        if values:
            out[key] = sum(values) / len(values)
    calls = sum(s.stats.get("tool_calls", 0) for s in samples)
    if calls:
        out["parallel_share"] = sum(s.stats.get("parallel_calls", 0) for s in samples) / calls
    return out
