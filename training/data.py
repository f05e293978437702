"""Session logs -> a trajectory dataset for the RL trainer.

    python -m training.data build LOGDIR --out DATASET [--workspace DIR] [--model ID]
        [--weight-version N ...] [--min-weight-version N] [--outcome SIGNAL[=VALUE] ...]
        [--policy-model ID] [--include-heldout] [--suites DIR]

Reads every `*.jsonl` session log under LOGDIR (agent/session_log.py, schema version 2) and
writes DATASET (a new directory, written beside it and renamed into place when complete):

  trajectories.jsonl   one on-policy trajectory segment per line (training/trajectories.py)
  off_policy.jsonl     segments that must not be mixed in as on-policy: another model than
                       --policy-model, text-only calls, or completions without comparable logprobs
  corrections.jsonl    the person's corrections of the model's edits (training/corrections.py):
                       a model call's context ids and the reply it should have written
  conversations.jsonl  sessions whose every model call was text-only (a model behind a chat API,
                       such as a stronger one through --endpoint): the conversation, which the
                       trainer renders in the policy's tokens (training/conversations.py)
  manifest.json        the format, the filters, the counts, and every session, segment or call
                       left out with the reason

A segment line: `id` (session:index), `session_id`, `log`, `workspace`, `model`, `task_id`,
`start_reason` (why the segment starts there), `token_ids`, `loss_mask` (1: a completion token
the model sampled under exactly the logged context; 0: prompt, tool output, forced and redaction-
tainted tokens), `logprobs` (behaviour logprobs of completion tokens, null elsewhere; the sampling
convention: log_softmax(logits / T), T = 1 when greedy, before top-p and the tool-call
constraint), `routed_experts` (per position, the experts it was routed to when fed, or null; null
for the whole segment when no call logged routing), `calls` (per call: call_id, prompt_start,
completion_start, end, weight_version, sampler, finish_reason, forced count, masked reason),
`weight_versions`, `outcomes` (the session's outcome records: signal, value, source, call_id,
path, detail), `reward` and `reward_source` (below) and `off_policy` (null or the reason). A
correction line has the session's fields, `token_ids` (the context only), `correction` (the
reply's `text` and `tool_calls`, the corrected one in place), reward 1 and `off_policy` set;
`--rollout.replay-logs DATASET` (training/logged.py) trains on all four files.

A line's reward is what its session's outcome records state (docs/contracts.md): a graded task's
combined reward, the one the RL trainer's rollouts get (training/rewards.py `score`: success,
efficiency, parallel calls, malformed calls, unsupported claims; `reward_source` "task"), else the
mean of the editor's signals (`editor_reward`: edits accepted or rejected, tests passing after
the last edit, turns undone or forgotten, edits kept; "editor"); null when neither says (or the
grader failed: "masked"), and the trainer then drops the line rather than score it zero. Every
line of a session shares its reward, a forgotten turn's signal included, so the likelihood term's
filter (`--loss.sft-min-reward`, 1 by default) keeps only sessions the person had nothing against.

Left out by default: sessions of the benchmark's held-out tasks (a header `task_id` that is an
`instance_id` in training/data/suites/*-heldout.jsonl; --include-heldout keeps them), version 1
logs (whole prompts, ids not redacted), and segments with nothing to train on. The report printed
at the end (and kept in the manifest) says what was dropped and why.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.session_log import SessionLogWarning, read_session
from training.conversations import conversation_line
from training.corrections import correction_lines
from training.rewards import editor_reward, score
from training.trajectories import NO_IDS, Segment, session_segments

FORMAT = "composer-trajectories"
FORMAT_VERSION = 1
SUITES = Path(__file__).parent / "data" / "suites"
REWARD_COUNTS = (("reward_task", "from a task's grade"), ("reward_editor", "from the editor's signals"),
                 ("reward_masked", "masked (the grader failed)"), ("reward_none", "without one (the trainer drops them)"))


@dataclass
class Filters:
    workspace: str | None = None
    model: str | None = None
    weight_versions: set[Any] = field(default_factory=set)
    min_weight_version: int | None = None
    outcomes: list[tuple[str, str | None]] = field(default_factory=list)
    policy_model: str | None = None
    heldout: frozenset[str] = frozenset()


def heldout_tasks(suites: Path) -> frozenset[str]:
    """The instance ids of every `*-heldout.jsonl` under `suites` (none: the empty set)."""
    ids: set[str] = set()
    for path in sorted(suites.glob("*-heldout.jsonl")) if suites.is_dir() else []:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                ids.add(str(json.loads(line)["instance_id"]))
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not a task with an instance_id ({err})") from None
    return frozenset(ids)


def _outcome_matches(outcomes: list[dict[str, Any]], signal: str, value: str | None) -> bool:
    return any(o.get("signal") == signal and (value is None or json.dumps(o.get("value")) == value
                                              or str(o.get("value")) == value) for o in outcomes)


def _session_drop(header: dict[str, Any], outcomes: list[dict[str, Any]], f: Filters) -> dict[str, str] | None:
    """Why a whole session is left out ({"reason", "detail"}), or None."""
    model = header.get("model") if isinstance(header.get("model"), dict) else {}
    if header.get("task_id") is not None and str(header["task_id"]) in f.heldout:
        return {"reason": "held-out benchmark task", "detail": str(header["task_id"])}
    if f.workspace is not None and header.get("workspace") != f.workspace:
        return {"reason": "another workspace", "detail": str(header.get("workspace"))}
    if f.model is not None and model.get("id") != f.model:
        return {"reason": "another model", "detail": str(model.get("id"))}
    for signal, value in f.outcomes:
        if not _outcome_matches(outcomes, signal, value):
            return {"reason": "outcome not met", "detail": signal if value is None else f"{signal}={value}"}
    return None


def _version_drop(segment: Segment, f: Filters) -> dict[str, str] | None:
    versions = {c["weight_version"] for c in segment.calls}
    shown = ", ".join(sorted(map(str, versions)))
    if f.weight_versions and not versions <= f.weight_versions:
        return {"reason": "weight version not selected", "detail": shown}
    if f.min_weight_version is not None and any(
            not isinstance(v, int) or v < f.min_weight_version for v in versions):
        return {"reason": "weight version too old", "detail": shown}
    return None


def _segment_drop(segment: Segment, f: Filters) -> dict[str, str] | None:
    if (why := _version_drop(segment, f)) is not None:
        return why
    if not segment.trainable:
        return {"reason": "no token to train on", "detail": segment.start_reason or ""}
    return None


def _off_policy(segment: Segment, model: str | None, f: Filters) -> str | None:
    if f.policy_model is not None and model != f.policy_model:
        return f"model {model}, not {f.policy_model}"
    if segment.text_only:
        return "text-only calls (the server rendered the prompt)"
    if segment.missing_logprobs:
        return "no comparable logprobs"
    return None


def session_reward(records: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """The reward of a session's lines and where it comes from (module docstring)."""
    task = score(records)
    if task.status == "scored":
        return task.reward, "task"
    if task.masked:
        return None, "masked"
    editor = editor_reward(records)
    return (None, None) if editor is None else (round(editor, 6), "editor")


def session_lines(path: Path, records: list[dict[str, Any]], f: Filters,
                  dropped: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The dataset lines of one session; what is left out goes to `dropped`."""
    header = records[0] if records and records[0].get("type") == "session" else {}
    session_id = str(header.get("session_id") or path.stem)
    outcomes = [{k: v for k, v in r.items() if k not in ("type", "version", "session_id", "seq")}
                for r in records if r.get("type") == "outcome"]
    where = {"log": str(path), "session_id": session_id}
    if not header:
        dropped.append({**where, "reason": "no session header"})
        return
    why = _session_drop(header, outcomes, f)
    if why is not None:
        dropped.append({**where, **why})
        return
    model = header["model"].get("id") if isinstance(header.get("model"), dict) else None
    reward, reward_source = session_reward(records)
    session = {"session_id": session_id, "log": str(path), "workspace": header.get("workspace"), "model": model,
               "task_id": header.get("task_id"), "outcomes": outcomes, "reward": reward, "reward_source": reward_source}
    segments, calls = session_segments(records)
    if (talk := conversation_line(records, session)) is not None:
        # the conversation holds its calls; any ids a server sent with them carry no loss
        segments, calls = [], [c for c in calls if c.get("reason") != NO_IDS]
        if f.weight_versions or f.min_weight_version is not None:
            dropped.append({**where, "reason": "weight version not selected",
                            "detail": "a text-only conversation: version filters select the policy's own samples"})
        else:
            yield talk
    dropped.extend({**where, **call} for call in calls)
    if not segments and not calls and talk is None:
        dropped.append({**where, "reason": "no model calls"})
    # A correction's context is the logged ids and its reply the trainer's tokenizer's: only where
    # those are one model's tokens (not a server's text-only prompt, not another model).
    yield from correction_lines(records, segments, session, lambda seg: _version_drop(seg, f) is None
                                and not seg.text_only and (f.policy_model is None or model == f.policy_model))
    for index, segment in enumerate(segments):
        why = _segment_drop(segment, f)
        if why is not None:
            dropped.append({**where, "segment": index, **why})
            continue
        yield {
            **session, "id": f"{session_id}:{index}", "start_reason": segment.start_reason,
            "token_ids": segment.token_ids, "loss_mask": segment.loss_mask, "logprobs": segment.logprobs,
            "routed_experts": segment.routed_experts if any(r is not None for r in segment.routed_experts) else None,
            "calls": segment.calls, "weight_versions": sorted({c["weight_version"] for c in segment.calls}, key=str),
            "off_policy": _off_policy(segment, model, f),
        }


def _logs(root: Path) -> Iterable[Path]:
    return sorted(p for p in root.rglob("*.jsonl") if p.is_file())


def build(log_dir: Path, out: Path, f: Filters) -> dict[str, Any]:
    """Writes the dataset (module docstring); returns the manifest."""
    if not log_dir.is_dir():
        raise ValueError(f"{log_dir} is not a directory of session logs")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not empty: choose a new directory for the dataset")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    dropped: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    try:
        with open(tmp / "trajectories.jsonl", "w") as on, open(tmp / "off_policy.jsonl", "w") as off, \
                open(tmp / "corrections.jsonl", "w") as fixes, open(tmp / "conversations.jsonl", "w") as talks:
            for path in _logs(log_dir):
                counts["logs"] += 1
                with warnings.catch_warnings(record=True) as torn:
                    warnings.simplefilter("always", SessionLogWarning)
                    try:
                        records = read_session(path)
                    except OSError as err:
                        dropped.append({"log": str(path), "reason": "unreadable log", "detail": str(err)})
                        continue
                dropped.extend({"log": str(path), "reason": "torn line skipped", "detail": str(w.message)} for w in torn)
                for line in session_lines(path, records, f, dropped):
                    if "correction" in line:
                        counts["corrections"] += 1
                        fixes.write(json.dumps(line, separators=(",", ":")) + "\n")
                        continue
                    counts[f"reward_{line['reward_source'] or 'none'}"] += 1
                    if "messages" in line:
                        counts["conversations"] += 1
                        talks.write(json.dumps(line, separators=(",", ":")) + "\n")
                        continue
                    kind = "off_policy" if line["off_policy"] else "on_policy"
                    counts[f"{kind}_segments"] += 1
                    counts[f"{kind}_tokens"] += len(line["token_ids"])
                    counts[f"{kind}_trainable_tokens"] += sum(line["loss_mask"])
                    (off if line["off_policy"] else on).write(json.dumps(line, separators=(",", ":")) + "\n")
        manifest = {
            "format": FORMAT, "version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": str(log_dir.resolve()), "files": {"on_policy": "trajectories.jsonl", "off_policy": "off_policy.jsonl",
                                                          "corrections": "corrections.jsonl",
                                                          "conversations": "conversations.jsonl"},
            "logprob_convention": "sampling: log_softmax(logits / T), T = 1 when greedy, before top-p and the tool-call constraint",
            "filters": {"workspace": f.workspace, "model": f.model, "weight_versions": sorted(map(str, f.weight_versions)),
                        "min_weight_version": f.min_weight_version,
                        "outcomes": [s if v is None else f"{s}={v}" for s, v in f.outcomes],
                        "policy_model": f.policy_model, "heldout_tasks": len(f.heldout)},
            "counts": dict(counts), "dropped_by_reason": dict(Counter(d["reason"] for d in dropped)),
            "dropped": dropped,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def report(manifest: dict[str, Any]) -> str:
    counts = manifest["counts"]
    lines = [f"read {counts.get('logs', 0)} logs: {counts.get('on_policy_segments', 0)} on-policy segments "
             f"({counts.get('on_policy_trainable_tokens', 0)} trainable of {counts.get('on_policy_tokens', 0)} tokens), "
             f"{counts.get('off_policy_segments', 0)} off-policy, {counts.get('corrections', 0)} corrections, "
             f"{counts.get('conversations', 0)} text-only conversations"]
    rewarded = [f"{counts[key]} {what}" for key, what in REWARD_COUNTS if counts.get(key)]
    if rewarded:
        lines.append("  rewards: " + ", ".join(rewarded))
    lines += [f"  dropped {n}: {reason}" for reason, n in sorted(manifest["dropped_by_reason"].items())]
    return "\n".join(lines)


def _outcome(text: str) -> tuple[str, str | None]:
    signal, eq, value = text.partition("=")
    return signal, value if eq else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.data", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="turn a directory of session logs into a trajectory dataset")
    b.add_argument("log_dir", type=Path)
    b.add_argument("--out", type=Path, required=True, help="the dataset directory to create")
    b.add_argument("--workspace", default=None, help="only sessions of this workspace (its path)")
    b.add_argument("--model", default=None, help="only sessions of this model id")
    b.add_argument("--weight-version", action="append", default=[], help="only segments on these weight versions")
    b.add_argument("--min-weight-version", type=int, default=None)
    b.add_argument("--outcome", action="append", default=[], type=_outcome, metavar="SIGNAL[=VALUE]",
                   help="only sessions with this outcome record (repeatable: all must hold)")
    b.add_argument("--policy-model", default=None, help="the model being trained: other models' sessions are off-policy")
    b.add_argument("--include-heldout", action="store_true", help="keep the benchmark's held-out tasks")
    b.add_argument("--suites", type=Path, default=SUITES, help="where the *-heldout.jsonl task lists are")
    args = parser.parse_args(argv)
    versions = {int(v) if v.lstrip("-").isdigit() else v for v in args.weight_version}
    try:
        filters = Filters(
            workspace=str(Path(args.workspace).expanduser().resolve()) if args.workspace else None,
            model=args.model, weight_versions=versions, min_weight_version=args.min_weight_version,
            outcomes=args.outcome, policy_model=args.policy_model,
            heldout=frozenset() if args.include_heldout else heldout_tasks(args.suites),
        )
        manifest = build(args.log_dir, args.out, filters)
    except ValueError as err:
        print(f"training.data: {err}", file=sys.stderr)
        return 2
    print(report(manifest))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
