"""Outcome signals: what an editor session already tells about the agent's work, written to its
session log as `outcome` records with a stated reward, and the evidence readers over session
records that training/rewards.py shares (edits, test runs, turns).

Signals (`signal`, `value`, `reward`; rewards lie in [-1, 1], `source` says who measured):

| signal                  | value | reward | measured |
| ----------------------- | ----- | ------ | -------- |
| edit_accepted           | bool  | +1 / -1 | the person's verdict on a proposed edit's diff (review mode, or a rule that asked): the turn's `permission` records by the user on file edits, and `edit_review` records |
| tests_passed_after_edit | bool  | +1 / -1 | the turn changed files and ran tests (run_terminal with a test runner) after its last edit: did the last such run exit 0 |
| turn_undone             | true  | -1      | a rewind restored a checkpoint: the work after it was thrown away |
| turn_forgotten          | true  | -1      | the person took a turn that changed no file out of the conversation (its answer was not wanted) |
| edit_kept               | share of hunks kept | (kept - reverted) / hunks | each turn's final diff against the workspace when the next session there starts: a hunk whose new lines are still there is kept, one whose old lines are back is reverted, else changed (0) |

Where each is written (agent/session.py calls these): `turn_signals` when a turn ends (the
turn's records are complete then), `undo_signal` at a restore, `forget_signal` when a turn is forgotten, `settle_previous_session` when a
new session is created in a workspace: the only moment the earlier session's edits can be
compared with what the person kept, so this is done live rather than by a later pass over logs.
Task grades (`task_resolved`) are written by training/run.py.

    records = read_session(path)
    turns = split_turns(records)                 # [[user_message, model_call, ...], ...]
    tests_after_last_edit(turns[-1])            # True / False / None (no run after the last edit)
    for fields in turn_signals(turns[-1], workspace): log.write("outcome", **fields)

Tests: .venv/bin/python -m pytest tests/training/test_editor_signals.py
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.session_log import SessionLog, list_sessions, read_session
from agent.unidiff import parse_diff

log = logging.getLogger(__name__)

FILE_EDIT_TOOLS = ("edit_file", "write_file", "delete_file")
TERMINAL_TOOL = "run_terminal"
ACCEPTED = frozenset({"allow_once", "allow_always"})
REJECTED = frozenset({"reject_once", "reject_always"})
_TEST_RUNNER = re.compile(
    r"(?:^|[\s;&|(/])(?:py\.?test|tox|nox|nosetests|unittest|manage\.py\s+test|"
    r"(?:npm|yarn|pnpm)\s+(?:run\s+)?test|go\s+test|cargo\s+test|make\s+(?:test|check)|ctest|jest|"
    r"vitest|mocha|rspec|phpunit|mvn\s+test|gradle\w*\s+test)(?=$|[\s;&|)])")
_EXIT = re.compile(r"\[exit code (-?\d+)")


# ---- evidence in session records ---------------------------------------------------------------


def relative_path(path: str, workspace: str | None) -> str:
    """A tool's path argument relative to the workspace, normalised ("./a//b.py" -> "a/b.py")."""
    if workspace and os.path.isabs(path):
        path = os.path.relpath(path, workspace)
    return os.path.normpath(path).replace(os.sep, "/").removeprefix("./")


def is_test_command(command: str) -> bool:
    """Whether a shell command runs a test suite (pytest, unittest, tox, npm test, go test, ...)."""
    return bool(_TEST_RUNNER.search(command))


def exit_code(record: dict[str, Any]) -> int | None:
    """A run_terminal call's exit code: its data, else the "[exit code N" status line."""
    data = record.get("data") if isinstance(record.get("data"), dict) else {}
    if isinstance(data.get("exit_code"), int):
        return data["exit_code"]
    m = _EXIT.search(record.get("result") or "")
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class TestRun:
    __test__ = False  # not a pytest class
    index: int
    """Position of the tool_call record in the records."""
    command: str
    passed: bool


def test_runs(records: list[dict[str, Any]]) -> list[TestRun]:
    """The run_terminal calls that ran a test suite, in log order; passed = completed with exit 0.
    One a stop cut short (status cancelled) says nothing of the tests, so it is not a run."""
    runs = []
    for i, record in enumerate(records):
        if record.get("type") != "tool_call" or record.get("name") != TERMINAL_TOOL:
            continue
        args = record.get("arguments")
        command = args.get("command") if isinstance(args, dict) else None
        if isinstance(command, str) and is_test_command(command) and record.get("status") != "cancelled":
            passed = record.get("error") is None and record.get("status", "completed") == "completed" \
                and exit_code(record) == 0
            runs.append(TestRun(i, command, passed))
    return runs


def edits(records: list[dict[str, Any]], workspace: str | None = None) -> list[tuple[int, str]]:
    """(position, relative path) of every file edit that took effect (edit_file, write_file,
    delete_file completed). Shell commands are not counted: their effect shows in final_diff."""
    found = []
    for i, record in enumerate(records):
        if record.get("type") != "tool_call" or record.get("name") not in FILE_EDIT_TOOLS:
            continue
        if record.get("error") is not None or record.get("status", "completed") != "completed":
            continue
        args, data = record.get("arguments"), record.get("data") or {}
        path = data.get("path") if isinstance(data.get("path"), str) else (
            args.get("path") if isinstance(args, dict) else None)
        if isinstance(path, str):
            found.append((i, relative_path(path, workspace)))
    return found


def last_edit_index(records: list[dict[str, Any]]) -> int:
    """Position of the last file edit; -1 when there is none."""
    done = edits(records)
    return done[-1][0] if done else -1


def tests_after_last_edit(records: list[dict[str, Any]]) -> bool | None:
    """Did the last test run after the last edit pass? None when no test ran after it."""
    after = [run for run in test_runs(records) if run.index > last_edit_index(records)]
    return after[-1].passed if after else None


def passing_test_after_last_edit(records: list[dict[str, Any]]) -> bool:
    """Whether any test run after the last edit passed (what a claim of passing tests needs)."""
    return any(run.passed for run in test_runs(records) if run.index > last_edit_index(records))


def split_turns(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records of each turn (a user_message and what followed it, up to the next one)."""
    turns: list[list[dict[str, Any]]] = []
    for record in records:
        if record.get("type") == "user_message":
            turns.append([])
        if turns:
            turns[-1].append(record)
    return turns


def review_verdicts(records: list[dict[str, Any]], workspace: str | None = None) -> list[dict[str, Any]]:
    """The person's verdicts on proposed file edits: {call_id, path, accepted}. An edit they
    changed before accepting it (`revised`, agent/review.py) is neither."""
    verdicts = []
    for record in records:
        kind = record.get("type")
        if kind == "edit_review":
            verdicts.append({"call_id": record.get("call_id"), "path": relative_path(record["path"], workspace),
                             "accepted": bool(record["accepted"])})
        elif kind == "permission" and record.get("by") == "user" and record.get("tool") in FILE_EDIT_TOOLS \
                and record.get("outcome") in ACCEPTED | REJECTED and not record.get("revised"):
            args = record.get("arguments")
            path = args.get("path") if isinstance(args, dict) and isinstance(args.get("path"), str) else None
            verdicts.append({"call_id": record.get("call_id"), "accepted": record["outcome"] in ACCEPTED,
                             "path": relative_path(path, workspace) if path else None})
    return verdicts


# ---- kept or reverted ---------------------------------------------------------------------------


def _contains(lines: list[str], block: list[str]) -> bool:
    """Whether `block` occurs in `lines` as consecutive whole lines (an empty block: when the
    file is empty too, since a hunk with no lines on a side emptied or created the file)."""
    if not block:
        return not lines
    return ("\n" + "\n".join(block) + "\n") in ("\n" + "\n".join(lines) + "\n")


def hunk_states(diff: str, read_text: Callable[[str], str | None]) -> dict[str, int]:
    """How many of the diff's hunks are kept, reverted or changed in the files as `read_text`
    gives them now (None: the file is missing). Binary sections are not judged."""
    counts = {"kept": 0, "reverted": 0, "changed": 0}
    for fd in parse_diff(diff):
        if fd.binary:
            continue
        text = read_text(fd.path)
        if fd.deleted or text is None:
            gone = text is None
            state = ("kept" if gone else "reverted") if fd.deleted else ("reverted" if fd.created else "changed")
            counts[state] += max(1, len(fd.hunks))
            continue
        lines = text.splitlines()
        for hunk in fd.hunks:
            if _contains(lines, hunk.new):
                counts["kept"] += 1
            elif _contains(lines, hunk.old):
                counts["reverted"] += 1
            else:
                counts["changed"] += 1
    return counts


def kept_signals(records: list[dict[str, Any]], read_text: Callable[[str], str | None]) -> list[dict[str, Any]]:
    """One edit_kept signal per non-empty final_diff of a session."""
    signals = []
    for record in records:
        if record.get("type") != "final_diff" or not (record.get("diff") or "").strip():
            continue
        counts = hunk_states(record["diff"], read_text)
        total = sum(counts.values())
        if total == 0:
            continue
        signals.append({"signal": "edit_kept", "value": round(counts["kept"] / total, 4),
                        "reward": round((counts["kept"] - counts["reverted"]) / total, 4), "source": "next_session",
                        "detail": counts | {"hunks": total, "final_diff_seq": record.get("seq"),
                                            "truncated": bool(record.get("truncated"))}})
    return signals


# ---- the signals, written where they become known ------------------------------------------------


def turn_signals(turn: list[dict[str, Any]], workspace: str | None = None) -> list[dict[str, Any]]:
    """The outcome fields a finished turn yields: review verdicts, tests after the last edit."""
    signals = [{"signal": "edit_accepted", "value": v["accepted"], "reward": 1.0 if v["accepted"] else -1.0,
                "source": "editor", **{k: v[k] for k in ("call_id", "path") if v[k]}}
               for v in review_verdicts(turn, workspace)]
    changed = any(r.get("type") == "final_diff" and (r.get("diff") or "").strip() for r in turn)
    passed = tests_after_last_edit(turn) if changed or edits(turn) else None
    if passed is not None:
        runs = [run for run in test_runs(turn) if run.index > last_edit_index(turn)]
        signals.append({"signal": "tests_passed_after_edit", "value": passed, "reward": 1.0 if passed else -1.0,
                        "source": "agent_tests", "detail": {"command": runs[-1].command[:500], "runs": len(runs)}})
    return signals


def forget_signal() -> dict[str, Any]:
    """The last turn, which changed no file, was taken out of the conversation by the person."""
    return {"signal": "turn_forgotten", "value": True, "reward": -1.0, "source": "editor"}


def undo_signal(checkpoint_id: str) -> dict[str, Any]:
    """A rewind to `checkpoint_id`: everything the agent did after it was thrown away."""
    return {"signal": "turn_undone", "value": True, "reward": -1.0, "source": "editor",
            "detail": {"checkpoint_id": checkpoint_id}}


def settle_previous_session(workspace: Path, read_text: Callable[[str], str | None], *,
                            log_dir: Path | None = None) -> Path | None:
    """Writes edit_kept signals into the latest session of `workspace` logged so far (call it
    before the new session's log is opened) when it has final diffs and no edit_kept yet;
    returns its log path, None when nothing was written."""
    earlier = list_sessions(workspace, log_dir)
    if not earlier:
        return None
    path = earlier[-1].path
    records = read_session(path)
    if any(r.get("type") == "outcome" and r.get("signal") == "edit_kept" for r in records):
        return None
    signals = kept_signals(records, read_text)
    if not signals:
        return None
    with SessionLog.reopen(path) as writer:
        for fields in signals:
            writer.write("outcome", **fields)
    return path
