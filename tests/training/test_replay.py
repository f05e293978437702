"""Replay of logged sessions: a session driven by a scripted policy through the real harness
(agent.session.Session, real tools, checkpoints, session log) is replayed on a fresh copy of its
starting snapshot; the replay reproduces the final diffs, and a tampered log is reported as not
matching. Run: .venv/bin/python -m pytest tests/training/test_replay.py"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_policy import ScriptedPolicy, calls

from agent.policy import Reply
from agent.session import Session, SessionConfig
from agent.session_log import read_session
from training.replay import ReplayError, replay_session

ROOT = Path(__file__).resolve().parents[2]
TESTS = "python -c 'import calc; assert calc.add(2, 3) == 5 and calc.TWICE(4) == 8'"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def make_workspace(root: Path) -> Path:
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "notes.txt").write_text("remove me\n")
    (root / "README.md").write_text("# calc\nadd numbers\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "start")
    return root


TURN_1 = [
    calls(("read_file", {"path": "calc.py"}), ("grep", {"pattern": "def "}), ("list_dir", {"path": "."})),
    calls(("edit_file", {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
          ("write_file", {"path": "pkg/extra.py", "content": "VALUE = 1\n"}),
          ("read_file", {"path": "README.md"})),
    calls(("run_terminal", {"command": "echo 'TWICE = lambda x: 2 * x' >> calc.py && rm notes.txt"})),
    Reply("fixed", [], "stop"),
]
TURN_2 = [
    calls(("read_file", {"path": "calc.py"})),
    calls(("edit_file", {"path": "README.md", "old_string": "add numbers", "new_string": "adds numbers"}),
          ("delete_file", {"path": "pkg/extra.py"})),
    Reply("tidied", [], "stop"),
]


@pytest.fixture
def logged_session(tmp_path) -> tuple[Path, Path, Path]:
    """(log path, the workspace after the session, a pristine copy of its start)."""
    workspace = make_workspace(tmp_path / "ws")
    pristine = tmp_path / "pristine"
    shutil.copytree(workspace, pristine)

    async def run() -> Path:
        config = SessionConfig(workspace=workspace, log_dir=tmp_path / "logs", auto_allow=True,
                               repo_map_tokens=0, index="off", client="test")
        session = await Session.create(config, policy=ScriptedPolicy(TURN_1 + TURN_2))
        assert not descriptors_of(session.log_path)  # an idle session holds no file open
        first = await session.prompt("fix add")
        second = await session.prompt("tidy up")
        assert first.stop_reason == second.stop_reason == "end_turn"
        assert not descriptors_of(session.log_path)
        session.close()
        return session.log_path

    import asyncio
    log = asyncio.run(run())
    return log, workspace, pristine


def descriptors_of(path: Path) -> list[str]:
    """This process's open file descriptors on `path` (one another thread closes while they are
    listed is not open)."""
    target, found = os.path.realpath(path), []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                found.append(fd)
        except FileNotFoundError:
            continue
    return found


def tamper(log: Path, out: Path, change) -> Path:
    records = read_session(log)
    for record in records:
        change(record)
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


async def test_replay_reproduces_the_final_diffs_from_the_checkpoint_snapshot(logged_session):
    log, workspace, _ = logged_session
    records = read_session(log)
    assert [r["type"] for r in records].count("final_diff") == 2
    assert (workspace / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    report = await replay_session(log, tests=TESTS)
    assert report["source"]["kind"] == "checkpoint"
    assert report["matches"] is True, report
    assert [d["matches"] for d in report["final_diffs"]] == [True, True]
    assert report["mismatches"] == [] and report["calls"] == 10 and report["skipped"] == 0
    assert report["tests"]["passed"] is True and report["tests"]["exit_code"] == 0


async def test_replay_from_an_explicit_source_and_a_tampered_edit(logged_session, tmp_path):
    log, _, pristine = logged_session
    report = await replay_session(log, workspace_source=pristine, tests=TESTS)
    assert report["matches"] is True and report["source"] == {"kind": "dir", "path": str(pristine)}

    def edit(record):
        if record["type"] == "tool_call" and record["name"] == "edit_file" and record["arguments"]["path"] == "calc.py":
            record["arguments"]["new_string"] = "a * b"
    bad = await replay_session(tamper(log, tmp_path / "edit.jsonl", edit), workspace_source=pristine, tests=TESTS)
    assert bad["matches"] is False
    assert [d["matches"] for d in bad["final_diffs"]] == [False, True]
    assert "a * b" in bad["final_diffs"][0]["first_difference"]["replayed"]
    assert bad["tests"]["passed"] is False


async def test_tampered_read_result_and_final_diff_are_reported(logged_session, tmp_path):
    log, _, pristine = logged_session

    def read(record):
        if record["type"] == "tool_call" and record["name"] == "read_file" and record["arguments"]["path"] == "README.md":
            record["result"] = record["result"].replace("add numbers", "subtract numbers")
        if record["type"] == "final_diff" and "adds numbers" in record["diff"]:
            record["diff"] = record["diff"].replace("adds numbers", "adds all numbers")
    report = await replay_session(tamper(log, tmp_path / "read.jsonl", read), workspace_source=pristine)
    assert report["matches"] is False and [d["matches"] for d in report["final_diffs"]] == [True, False]
    (mismatch,) = report["mismatches"]
    assert mismatch["name"] == "read_file" and mismatch["what"] == "result"
    assert "subtract numbers" in mismatch["logged"] and "add numbers" in mismatch["replayed"]


def test_cli_prints_the_report_and_exits_by_match(logged_session, tmp_path):
    log, _, pristine = logged_session
    keep = tmp_path / "kept"
    done = subprocess.run([sys.executable, "-m", "training.replay", str(log), "--workspace-source", str(pristine),
                           "--tests", TESTS, "--keep", str(keep)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["matches"] is True and report["tests"]["passed"] is True
    assert "TWICE" in (keep / "calc.py").read_text() and not (keep / "notes.txt").exists()
    missing = subprocess.run([sys.executable, "-m", "training.replay", str(tmp_path / "nope.jsonl")],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert missing.returncode == 2 and "error" in json.loads(missing.stdout)


async def test_a_log_without_header_or_snapshot_is_refused(tmp_path, logged_session):
    log, _, _ = logged_session
    headless = tmp_path / "headless.jsonl"
    headless.write_text("".join(json.dumps(r) + "\n" for r in read_session(log)[1:]))
    with pytest.raises(ReplayError, match="session header"):
        await replay_session(headless)

    def elsewhere(record):
        if record["type"] == "session":
            record["workspace"], record["git"] = str(tmp_path / "gone"), None
    with pytest.raises(ReplayError, match="--workspace-source"):
        await replay_session(tamper(log, tmp_path / "gone.jsonl", elsewhere))


async def test_a_call_the_turn_stopped_is_skipped_not_rerun(logged_session, tmp_path):
    """A `cancelled` record (agent/loop.py: a stop ended the call, or it never started) is not
    run again: a read whose logged result is the stop's note is no mismatch."""
    log, _, pristine = logged_session

    def stop(record):
        if record["type"] == "tool_call" and record["name"] == "read_file" and record["arguments"]["path"] == "README.md":
            record.update(status="cancelled", result="", error="the turn ended before this call ran")
    report = await replay_session(tamper(log, tmp_path / "stopped.jsonl", stop), workspace_source=pristine)
    assert report["matches"] is True and report["mismatches"] == []
    assert report["calls"] == 10 and report["skipped"] == 1
