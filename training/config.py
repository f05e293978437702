"""The trainer's configuration: one `RLConfig` of frozen, typed component configs, every field
documented (the docstrings are the `--help` text tyro generates), and the presets as functions.

    python -m training.rl --preset smoke                      # this CPU, minutes, end to end
    python -m training.rl --preset cpu --optim.lr 2e-5        # a preset, then any field
    python -m training.rl --help                              # every field with its docstring

Presets: `smoke` (end to end on this CPU in under 10 minutes), `cpu` (the learning run on this
machine, at most 2 hours), `multi_gpu` (8 GPUs: FSDP2 trainer, vLLM rollout servers, Ray), and
`debug` (the tiny random model of the unit tests). `dataclasses.replace` (or `replace_in`) makes
variants; it is shallow, so nested configs are replaced one level at a time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

FROZEN = {"frozen": True, "kw_only": True, "slots": True}


@dataclass(**FROZEN)
class TrainModelConfig:
    path: str = "composer-mini"
    """Checkpoint directory in Hugging Face layout (Mixtral, Qwen3-MoE, Llama), "composer-mini"
    for the default model (built on first use), or "debug" for a tiny random MoE."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Master weights' dtype. float32 on a CPU keeps the trainer's logprobs equal to the engine's."""
    autocast_bf16: bool = False
    """Run matmuls in bf16 under autocast (AMX on recent Xeons, tensor cores on GPUs)."""
    lora_rank: int = 0
    """0: full fine-tuning. >0: LoRA adapters of this rank on `lora_targets`, the base frozen."""
    lora_alpha: float = 16.0
    """LoRA scale numerator: the update is (alpha / rank) * B @ A."""
    lora_targets: tuple[str, ...] = ("qkv", "o_proj", "w13_EFD", "w2_EDF")
    """Parameter-name suffixes that get adapters (the experts' stacked weights get one per expert)."""
    gradient_checkpointing: bool = False
    """Recompute each block's activations in backward (memory for time)."""
    context_gradient: bool = True
    """False: a detached context (model/transformer.py `grad_at`). Only the positions whose next
    token carries loss (the policy's own tokens) are computed with gradient; the prompt and tool
    outputs, ~95% of an agent sample's positions, go through one pass without gradient, and
    their keys and values are constants to the loss positions. The loss and logprobs are
    unchanged; the gradient leaves out how the weights change the context's representations
    (bench/trainer.py measures its cosine to the exact gradient). It costs about one forward
    per token instead of a forward, a recomputation and a backward."""
    instructions_gradient: bool = True
    """False: the instructions, every token before a sample's first user message (the tool
    schemas and the system prompt, ~3.3k of a harness sample's ~4.5k positions, the same in every
    sample), are a constant context as the detached one's are; the conversation after them (the
    request, tool outputs, the policy's own tokens) carries the gradient. What that keeps of the
    exact gradient is the path through the task's own context: how the weights change the
    representation of the code the policy read, which a detached context leaves out. Needs a
    chat template (the user turn's opening marks where the instructions end); a sample without
    one carries the gradient everywhere. Ignored with `--model.no-context-gradient`."""


@dataclass(**FROZEN)
class OptimConfig:
    lr: float = 1e-5
    """AdamW learning rate (after warmup)."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    warmup_steps: int = 0
    """Linear warmup from 0 over this many updates."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""


@dataclass(**FROZEN)
class LossConfig:
    eps_low: float = 0.2
    """Clip floor: r >= 1 - eps_low (training/loss.py, choice 3)."""
    eps_high: float = 0.28
    """Clip ceiling: r <= 1 + eps_high; higher than the floor (clip-higher)."""
    tis_cap: float = 2.0
    """Truncated importance sampling: w = min(pi_old / mu, tis_cap) (choice 4)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the reference, the policy RL starts from (choice 6); 0 turns it off."""
    sft_coef: float = 1.0
    """Weight of the reward-filtered likelihood term for off-policy samples (choice 7)."""
    sft_min_reward: float = 1.0
    """Off-policy samples with a reward below this are dropped, not imitated."""


@dataclass(**FROZEN)
class RolloutConfig:
    tasks: str = "bugfix-train"
    """Task set: a suite name under training/data/suites/ or a JSONL file of tasks."""
    group_size: int = 4
    """Samples per task (the group of choice 1 in training/loss.py)."""
    tasks_per_step: int = 4
    """Tasks per update: a batch holds tasks_per_step * group_size samples."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (the loss divides logits by the same value)."""
    top_p: float = 1.0
    """Nucleus sampling of rollouts."""
    max_turns: int = 8
    """Model calls per rollout. A rollout cut at this limit is graded as it stands (the hidden tests
    run on its workspace); only an infrastructure failure is masked."""
    max_tokens: int = 384
    """Most tokens per model call."""
    attempt_timeout_s: float = 900.0
    """The harness's clock per attempt (agent turn, grading excluded); running out masks it."""
    workers: int = 2
    """Concurrent rollouts (agent sessions and their environments)."""
    backend: Literal["engine", "ray", "vllm"] = "engine"
    """engine: the in-process engine; ray: rollout actors (local or a cluster), same code path;
    vllm: vLLM servers at `vllm_urls` with weights pushed after every update."""
    engine_quantize: Literal["none", "int4"] = "none"
    """The rollout engine's weights. int4 decodes ~6.6x faster here (29.2 against 4.4 tok/s) and
    TIS corrects the small mismatch. A LoRA run's adapter stays beside the int4 base in fp32 and
    each sync sends only its residuals (model/adapter.py), because int4 of the merged weights
    erases a LoRA's change: after a 16-update warm start the fp32 model puts 0.87 on starting a
    tool call, int4 of its merged weights 0.001 (as the base model does), int4 with the adapter
    beside it 0.867 (bench/adapter_quantization.py)."""
    vllm_urls: tuple[str, ...] = ()
    """vLLM OpenAI-compatible servers for backend=vllm."""
    replay_logs: tuple[str, ...] = ()
    """Datasets built by `python -m training.data build` (logged sessions and the person's
    corrections of edits): they join the warm start's demonstrations, and each RL update trains on
    the next `group_size` of them, by reward-filtered likelihood (training/logged.py)."""
    guided: float = 0.0
    """Share of jobs whose attempts start at the task's edit: the gold script plays the turns
    before it (grep, read) as untrained context, the model the rest (training/guided.py)."""


@dataclass(**FROZEN)
class BufferConfig:
    max_offpolicy_steps: int = 0
    """How many updates a sample may lag the policy it trains (0: synchronous, every sample
    comes from the current weights)."""
    max_policy_age: int = 8
    """Replayed logs older than this many versions are treated as off-policy (training/loss.py
    choice 7) instead of being importance-weighted."""
    drop_zero_advantage: bool = True
    """Drop groups whose rewards are all equal (they carry no gradient, DAPO's dynamic sampling)."""


@dataclass(**FROZEN)
class TrainConfig:
    steps: int = 20
    """Updates to run."""
    seed: int = 0
    """Seeds the model init, the task order and every rollout's sampler."""
    micro_batch_tokens: int = 8192
    """Tokens per forward/backward; a batch is accumulated over as many micro-batches as needed."""
    warm_start_steps: int = 0
    """Supervised steps on demonstrations before RL (`warm_start` source)."""
    warm_start_batch: int = 0
    """Demonstrations per warm-start step (0: an RL update's samples, tasks_per_step x group_size).
    On a few dozen demonstrations, more smaller steps learn more per second of compute."""
    warm_start_lr: float = 0.0
    """The warm start's learning rate (0: optim.lr). Supervised steps on gold demonstrations take
    a larger rate than RL's updates on the model's own samples."""
    warm_start: Literal["none", "gold", "endpoint", "logs"] = "none"
    """Demonstrations: "gold" synthesises read -> edit -> test -> answer trajectories from the
    train tasks' gold patches; "endpoint" logs a stronger model served at `endpoint`; "logs" takes
    only `rollout.replay_logs` (sessions already logged, a stronger model's text-only ones rendered
    in the policy's tokens: training/conversations.py), which join the other two sources too."""
    warm_start_tasks: int = 64
    """How many train tasks the warm start acts out (the first in the run's task order; the rest
    stay for RL to meet first)."""
    endpoint: str = ""
    """OpenAI-compatible base URL of the stronger model for warm_start="endpoint"
    (training/teacher.py: its attempts, re-rendered in the policy's tokens; resolved ones kept)."""
    endpoint_model: str = ""
    """The model name to ask `endpoint` for ("": the server's first)."""
    device: str = "cpu"
    """Trainer device (cuda under torchrun)."""


@dataclass(**FROZEN)
class CheckpointConfig:
    dir: str = "runs/rl"
    """Run directory: checkpoints, TensorBoard logs, metrics and the final plot."""
    every: int = 5
    """Write a checkpoint (HF layout + trainer state) every this many updates (and at the end)."""
    keep: int = 2
    """Checkpoints kept (older ones are deleted once a newer one is complete)."""
    resume: bool = True
    """Continue from the run directory's latest complete checkpoint when there is one."""


@dataclass(**FROZEN)
class RLConfig:
    model: TrainModelConfig = field(default_factory=TrainModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    progress: bool = True
    """Show a progress bar on stderr."""


def replace_in(config: RLConfig, **changes: Any) -> RLConfig:
    """`replace_in(cfg, optim={"lr": 1e-4}, progress=False)`: a dict replaces fields of that
    section, any other value the top-level field."""
    resolved = {
        name: dataclasses.replace(getattr(config, name), **value) if isinstance(value, dict) else value
        for name, value in changes.items()
    }
    return dataclasses.replace(config, **resolved)


# ---- presets --------------------------------------------------------------------------------------


def debug() -> RLConfig:
    """The tiny random MoE on the toy task (training/toy.py): a format warm start, then RL;
    seconds per update."""
    return replace_in(
        RLConfig(),
        model={"path": "debug"},
        optim={"lr": 3e-3},
        rollout={"tasks": "toy", "group_size": 4, "tasks_per_step": 2, "max_tokens": 40, "workers": 1},
        train={"steps": 6, "warm_start": "gold", "warm_start_steps": 30, "micro_batch_tokens": 4096},
        checkpoint={"dir": "runs/debug", "every": 3},
        progress=False,
    )


def smoke() -> RLConfig:
    """composer-mini, end to end on this CPU in under 10 minutes (~2.5 here): two warm-start
    updates, each on one train task's gold demonstration acted out in the harness, the adapter
    synced to the int4 rollout engine, then two updates of LoRA RL on two bug-fix tasks, a
    checkpoint and the plot. So every part runs on the real model: demonstrations, the trainer's
    forward, backward and step, weight sync, rollouts and grading. Two warm-start steps do not
    teach the harness, so the RL groups' rewards are usually all 0 and those groups are dropped
    (no advantage); the RL loss itself is exercised by the `debug` preset's learning test."""
    return replace_in(
        RLConfig(),
        model={"lora_rank": 8, "gradient_checkpointing": True, "context_gradient": False},
        optim={"lr": 1e-4},
        rollout={"group_size": 2, "tasks_per_step": 2, "max_turns": 3, "max_tokens": 160,
                 "engine_quantize": "int4"},
        train={"steps": 2, "micro_batch_tokens": 4096, "warm_start": "gold", "warm_start_steps": 2,
               "warm_start_batch": 1, "warm_start_tasks": 2, "warm_start_lr": 3e-4},
        checkpoint={"dir": "runs/smoke", "every": 1},
    )


def cpu() -> RLConfig:
    """The learning run on this machine (2 cores): a warm start on 240 train tasks' gold patches
    acted out in the harness, then LoRA RL on the bug-fix family's train split with the harness's
    own system prompt, int4 rollouts with the adapter beside the int4 weights and replayed
    routing. Matmuls in bf16 (AMX): one 5.4k-token demonstration's forward and backward takes 63 s
    instead of 87 s in fp32 on a 2-vCPU Xeon (on AVX2-only CPUs bf16 is slower: pass
    `--model.no-autocast-bf16`; with AVX512-BF16 and no AMX, as on AMD Zen 4, the trainer's
    matmuls still run ~2x faster in bf16: 336-366 against 153-190 GFLOP/s forward and backward
    at 5.4k tokens, micro, 2026-12-05); truncated importance sampling corrects the sampler's int4
    logprobs against the trainer's."""
    return replace_in(
        RLConfig(),
        model={"lora_rank": 16, "lora_alpha": 32.0, "gradient_checkpointing": True, "autocast_bf16": True},
        optim={"lr": 5e-5, "warmup_steps": 2},
        # 8 model calls, the benchmark's budget: a demonstration that retries a wrong fix takes 7.
        rollout={"group_size": 4, "tasks_per_step": 4, "max_turns": 8, "max_tokens": 256,
                 "engine_quantize": "int4", "workers": 2},
        buffer={"max_offpolicy_steps": 1},
        # The warm start measured on 2026-12-03 (with --model.no-context-gradient): 40 steps of 4
        # of 64 demonstrations (2.5 epochs) got the first call on 16 held-out tasks right 15 times
        # (one epoch: once); 60 steps of 4 of 240, each seen once, 16 of 16. With windowed reads
        # (training/demos.py; ~37 s a step in bf16 on AMX, 44 minutes in all) 9 of 16 held-out
        # edits apply and 1 fixes: the line is often found, the change to it is not
        # (docs/benchmarks.md, the warm start on windowed scripts). Scripts that run the request's
        # check and retry a wrong fix (~45 s a step): the same 6 of 120 held-out, with the check run
        # in 115 attempts and 2 unsupported claims instead of 64 (docs/benchmarks.md, 2026-12-05).
        # A group's prompt is packed once, its samples behind it, in 12k-token micro-batches.
        train={"steps": 40, "warm_start": "gold", "warm_start_steps": 60, "warm_start_batch": 4,
               "warm_start_lr": 3e-4, "warm_start_tasks": 240, "micro_batch_tokens": 12288},
        checkpoint={"dir": "runs/cpu", "every": 5},
    )


def multi_gpu() -> RLConfig:
    """One 8-GPU node (or more, with Ray): `torchrun --nproc-per-node 4 -m training.rl --preset
    multi_gpu` trains with FSDP2 (experts sharded across ranks) on 4 GPUs while 4 vLLM servers
    (`vllm serve DIR --port 8001..8004`) sample; weights go to them after every update."""
    return replace_in(
        RLConfig(),
        model={"dtype": "bfloat16", "gradient_checkpointing": True},
        optim={"lr": 1e-6, "warmup_steps": 10},
        rollout={"group_size": 8, "tasks_per_step": 32, "max_turns": 32, "max_tokens": 2048,
                 "workers": 64, "backend": "vllm",
                 "vllm_urls": tuple(f"http://127.0.0.1:{8001 + i}" for i in range(4))},
        buffer={"max_offpolicy_steps": 2},
        train={"steps": 500, "micro_batch_tokens": 32768, "device": "cuda"},
        checkpoint={"dir": "runs/multi_gpu", "every": 25},
    )


PRESETS = {"debug": debug, "smoke": smoke, "cpu": cpu, "multi_gpu": multi_gpu}
