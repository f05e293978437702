"""`python -m training.rl` on the tiny model and the toy task (training/toy.py): reward rises within
a few updates, and a run killed with SIGKILL resumes to the very result of an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from training.config import debug, replace_in
from training.metrics import read_metrics
from training.rl import parse_args, train

ROOT = Path(__file__).resolve().parents[2]
WARM = 30


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("gradient", [{}, {"context_gradient": False}, {"instructions_gradient": False}],
                         ids=["exact", "detached-context", "constant-instructions"])
def test_reward_rises_within_a_few_updates(tmp_path, gradient):
    # training/config.py: the detached context has only the policy's own tokens with gradient,
    # constant instructions everything from the user turn's opening on.
    config = replace_in(debug(), checkpoint={"dir": str(tmp_path), "every": 100}, train={"steps": 5},
                        model=gradient)
    run = train(config)
    rl = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["step"] > WARM]
    rewards = [r["reward"] for r in rl]
    assert len(rewards) == 5
    assert rewards[0] <= 0.5 and rewards[-1] >= 0.75, rewards  # a quarter by chance, then learned
    warm = [r["sft_loss"] for r in read_metrics(tmp_path / "metrics.jsonl") if r["step"] <= WARM]
    assert warm[-1] < warm[0] / 3  # the warm start taught the call format
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    assert (tmp_path / "final" / "model.safetensors").is_file() and run.trainer.step == WARM + 5


def test_reward_does_not_rise_without_the_policy_gradient(tmp_path):
    # The negative control of the test above: the same run with the RL updates' learning rate at 0
    # (the warm start alone) stays at chance.
    config = replace_in(debug(), checkpoint={"dir": str(tmp_path), "every": 100}, train={"steps": 3})
    train(replace_in(config, train={"steps": 0}))  # the warm start, checkpointed
    train(replace_in(config, optim={"lr": 0.0}))  # resumes it, then RL that changes nothing
    rewards = [r["reward"] for r in read_metrics(tmp_path / "metrics.jsonl") if r["step"] > WARM]
    assert max(rewards) <= 0.5, rewards


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_kl_reference_is_the_policy_rl_starts_from(tmp_path, lora_rank):
    # Not the model the run loaded: after a warm start that is the policy that makes no tool call.
    config = replace_in(debug(), checkpoint={"dir": str(tmp_path), "every": 1}, model={"lora_rank": lora_rank},
                        loss={"kl_coef": 0.5}, train={"steps": 0})
    train(config)  # the warm start alone
    weights = "adapter/adapter_model.safetensors" if lora_rank else "model.safetensors"
    warm = load_file(tmp_path / "final" / weights)
    train(replace_in(config, train={"steps": 4}))
    saved = tmp_path / "checkpoints" / "reference.safetensors"
    reference = load_file(saved)
    assert reference.keys() == warm.keys() and all(reference[k].equal(warm[k]) for k in warm)
    kl = [r["kl_ref"] for r in read_metrics(tmp_path / "metrics.jsonl") if "kl_ref" in r]
    assert kl[0] < 1e-6 < max(kl), kl  # the first update's policy is the reference, then it moves
    written = saved.stat().st_mtime_ns
    run = train(replace_in(config, train={"steps": 5}))  # resumed: the saved reference, not the policy now
    again = run.trainer.reference_tensors()
    assert saved.stat().st_mtime_ns == written and all(again[k].equal(reference[k]) for k in reference)


def _command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "training.rl", "--preset", "debug", "--checkpoint.dir", str(run_dir),
            "--train.steps", "6", "--checkpoint.every", "2"]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_resume_after_kill_9_ends_where_an_uninterrupted_run_ends(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_command(whole), cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(_command(killed), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = killed / "checkpoints" / f"step_{WARM + 2:06d}"  # inside the RL phase
    deadline = time.monotonic() + 600
    while not target.is_dir() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert target.is_dir() and not (killed / "final").exists()
    subprocess.run(_command(killed), cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=600)

    a = load_file(whole / "final" / "model.safetensors")
    b = load_file(killed / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    ra = read_metrics(whole / "metrics.jsonl")
    rb = read_metrics(killed / "metrics.jsonl")
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == list(range(1, WARM + 7))
    assert [r.get("reward") for r in ra] == [r.get("reward") for r in rb]
    # Every RL job was consumed once: the journal of the killed run holds no job twice among
    # the updates that survived (its own duplicates would have raised on admission).
    assert max(r["step"] for r in rb) == WARM + 6


def test_cli_surface_is_frozen():
    # New flags are a contract change: add them here on purpose.
    config = parse_args(["--preset", "cpu", "--optim.lr", "2e-5", "--rollout.group_size", "8"])
    assert config.optim.lr == 2e-5 and config.rollout.group_size == 8 and config.model.lora_rank == 16
    out = subprocess.run([sys.executable, "-m", "training.rl", "--help"], cwd=ROOT, env=_env(),
                         capture_output=True, text=True, check=True).stdout
    flags = sorted({w.split()[0].rstrip(",") for w in out.replace("│", " ").split(" --")[1:]})
    assert flags == sorted(EXPECTED_FLAGS), set(flags) ^ set(EXPECTED_FLAGS)
    with pytest.raises(SystemExit, match="unknown preset"):
        parse_args(["--preset", "nope"])


EXPECTED_FLAGS = [
    "help", "progress", "no-progress",
    "model.path", "model.dtype", "model.autocast-bf16", "model.no-autocast-bf16", "model.lora-rank",
    "model.lora-alpha", "model.lora-targets", "model.gradient-checkpointing", "model.no-gradient-checkpointing",
    "model.context-gradient", "model.no-context-gradient", "model.instructions-gradient",
    "model.no-instructions-gradient",
    "optim.lr", "optim.betas", "optim.weight-decay", "optim.warmup-steps", "optim.max-grad-norm",
    "loss.eps-low", "loss.eps-high", "loss.tis-cap", "loss.kl-coef", "loss.sft-coef", "loss.sft-min-reward",
    "rollout.tasks", "rollout.group-size", "rollout.tasks-per-step", "rollout.temperature", "rollout.top-p",
    "rollout.max-turns", "rollout.max-tokens", "rollout.attempt-timeout-s", "rollout.workers", "rollout.backend",
    "rollout.engine-quantize", "rollout.vllm-urls", "rollout.replay-logs", "rollout.guided",
    "buffer.max-offpolicy-steps", "buffer.max-policy-age", "buffer.drop-zero-advantage",
    "buffer.no-drop-zero-advantage",
    "train.steps", "train.seed", "train.micro-batch-tokens", "train.warm-start-steps", "train.warm-start-batch",
    "train.warm-start-lr", "train.warm-start",
    "train.warm-start-tasks", "train.endpoint", "train.endpoint-model", "train.device",
    "checkpoint.dir", "checkpoint.every", "checkpoint.keep", "checkpoint.resume", "checkpoint.no-resume",
]


def logged_dataset(root: Path, reward: float):
    """A dataset of one line: a logged session of the toy task (`python -m training.data build`'s
    format), and the demonstration it holds."""
    import json

    from training.toy import byte_tokenizer, demonstrations

    demo = demonstrations(byte_tokenizer())[0]
    root.mkdir()
    (root / "manifest.json").write_text("{}")
    (root / "trajectories.jsonl").write_text(json.dumps({
        "token_ids": demo.tokens, "loss_mask": [int(m) for m in demo.mask], "logprobs": [None] * len(demo.tokens),
        "reward": reward}) + "\n")
    return root, demo


def run_debug(run_dir: Path, *flags: str, check: bool = True) -> subprocess.CompletedProcess:
    # in a process of its own: more runs in this one leave it too large for the Ray tests after it
    # to fork (ENOMEM)
    command = [sys.executable, "-m", "training.rl", "--preset", "debug", "--checkpoint.dir", str(run_dir),
               "--checkpoint.every", "100", *flags]
    return subprocess.run(command, cwd=ROOT, env=_env(), check=check, capture_output=True, text=True, timeout=600)


def test_logged_sessions_join_every_rl_update_by_likelihood(tmp_path):
    # --rollout.replay-logs: a dataset line (a logged session of the toy task, reward 1) trains
    # in each RL update beside the rollouts, through the off-policy likelihood term only.
    data, demo = logged_dataset(tmp_path / "data", 1.0)
    sft = {}
    for arm, logs in (("without", []), ("with", ["--rollout.replay-logs", str(data)])):
        run_debug(tmp_path / arm, "--train.steps", "2", "--train.warm-start-steps", "0", *logs)
        sft[arm] = [r["sft_tokens"] for r in read_metrics(tmp_path / arm / "metrics.jsonl")]
    assert sft["without"] == [0.0, 0.0] and all(t == sum(demo.mask) for t in sft["with"]), sft


def test_a_warm_start_from_logged_sessions_alone(tmp_path):
    # --train.warm-start logs: the logged sessions are the only demonstrations; a dataset whose
    # rewards would all be filtered out is refused rather than trained on nothing.
    data, demo = logged_dataset(tmp_path / "data", 1.0)
    logs = ["--train.warm-start", "logs", "--train.warm-start-steps", "2", "--train.steps", "0"]
    run_debug(tmp_path / "run", *logs, "--rollout.replay-logs", str(data))
    assert [r["sft_tokens"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [sum(demo.mask)] * 2
    missing = run_debug(tmp_path / "none", *logs, check=False)
    assert missing.returncode != 0 and "needs --rollout.replay-logs DATASET" in missing.stderr
    failed, _ = logged_dataset(tmp_path / "failed", 0.0)
    refused = run_debug(tmp_path / "zero", *logs, "--rollout.replay-logs", str(failed), check=False)
    assert refused.returncode != 0 and "no demonstration has a reward of at least" in refused.stderr
