"""Logged sessions in the trainer: the datasets `python -m training.data build` writes, as
Samples mixed into the warm start's demonstrations and into every RL update
(`--rollout.replay-logs DATASET ...`).

    samples = logged_samples(["runs/editor-data"], tokenizer)

Every logged sample trains by reward-filtered likelihood (training/loss.py choice 7, `off_policy`),
never inside the importance ratio: a log's weight versions count another run's updates (or none:
a served model), so its behaviour logprobs are not this run's. A line's reward is its session's
(training/data.py: a graded task's combined reward, else the mean of the editor's signals); a
line without one is masked (NaN) and the batch drops it rather than score it zero. The person's
corrections of the model's edits (corrections.jsonl, training/corrections.py) have reward 1. A
text-only session (a stronger model served through a chat API) is rendered in the policy's tokens
(conversations.jsonl, training/conversations.py).

Tests: .venv/bin/python -m pytest tests/training/test_corrections.py tests/training/test_conversations.py
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from training.buffer import Sample
from training.conversations import conversation_samples
from training.corrections import correction_sample

FILES = ("trajectories.jsonl", "off_policy.jsonl", "corrections.jsonl", "conversations.jsonl")


def line_sample(line: dict[str, Any]) -> Sample:
    """A trajectory line (training/data.py) as an off-policy Sample."""
    reward = line.get("reward")
    return Sample(tokens=list(line["token_ids"]), mask=[bool(m) for m in line["loss_mask"]],
                  behaviour_logprobs=[math.nan if lp is None else float(lp) for lp in line["logprobs"]],
                  reward=math.nan if reward is None else float(reward), weight_version=-1, off_policy=True,
                  stats={"logged": 1})


def logged_samples(datasets: Iterable[str | Path], tokenizer: Any, *, max_tokens: int | None = None) -> list[Sample]:
    """Every line of the datasets, in order (dataset, file, line): a fixed order, so a resumed
    run takes the same samples at the same update. A text-only conversation is rendered in
    `tokenizer`'s format up to `max_tokens` (the policy's context; training/conversations.py)."""
    samples = []
    for dataset in datasets:
        root = Path(dataset)
        if not (root / "manifest.json").is_file():
            raise ValueError(f"{root} is not a dataset of `python -m training.data build` (no manifest.json)")
        for name in FILES:
            path = root / name
            if not path.is_file():
                continue
            for text in path.read_text().splitlines():
                line = json.loads(text)
                if "messages" in line:
                    samples += conversation_samples(line, tokenizer, max_tokens=max_tokens)
                else:
                    samples.append(correction_sample(line, tokenizer) if "correction" in line else line_sample(line))
    return samples


def take(samples: list[Sample], update: int, count: int) -> list[Sample]:
    """The `count` samples update `update` trains on, cycling through them in order."""
    if not samples or count <= 0:
        return []
    start = update * count % len(samples)
    return [samples[(start + i) % len(samples)] for i in range(min(count, len(samples)))]
