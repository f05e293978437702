"""Editor sessions as data: agent/outcomes.py's signals written by real sessions (review verdicts
and the agent's own test runs at turn end, rewinds, edits kept or reverted by the next session),
the diff reader they stand on (agent/unidiff.py), and the pure judges on constructed input.

Run: .venv/bin/python -m pytest tests/training/test_editor_signals.py
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from pathlib import Path

import pytest
from scripted_policy import ScriptedPolicy, calls

from agent import outcomes
from agent.outcomes import hunk_states, is_test_command, turn_signals
from agent.permissions import Rule
from agent.policy import Reply
from agent.session import Session, SessionConfig
from agent.session_log import read_session, validate_record
from agent.turn_review import Pick
from agent.unidiff import parse_diff, touched_paths, without_paths
from training.envs.diff import file_diff, tree_diff
from training.rewards import editor_reward


def edit(path: str, old: str, new: str) -> tuple[str, dict]:
    return ("edit_file", {"path": path, "old_string": old, "new_string": new})


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("A = 1\n")
    (root / "b.py").write_text("B = 1\n")
    (root / "test_ab.py").write_text("from a import A\n\ndef test_a():\n    assert A == 2\n")
    return root


def outcome_records(path: Path) -> list[dict]:
    records = read_session(path)
    for record in records:
        validate_record(record)
    return [r for r in records if r["type"] == "outcome"]


async def open_session(root: Path, tmp_path: Path, replies: list[Reply], answers: dict[str, str] | None = None) -> Session:
    async def ask(proposal: dict, decision) -> str:
        return (answers or {}).get(proposal["rawInput"].get("path"), "allow_once")

    config = SessionConfig(workspace=root, log_dir=tmp_path / "logs", repo_map_tokens=0, index="off", client="test")
    session = await Session.create(config, policy=ScriptedPolicy(replies), ask=ask)
    if answers is not None:  # review mode, as server/hub.py sets it: every edit is asked about
        session.agent.permissions = session.agent.permissions.extended(
            [Rule(tool, "ask", path="**", source="review") for tool in ("edit_file", "write_file", "delete_file")])
    return session


# ---- live sessions ------------------------------------------------------------------------------


async def test_a_reviewed_turn_records_verdicts_and_its_tests_after_the_last_edit(tmp_path):
    root = workspace(tmp_path)
    replies = [calls(edit("a.py", "A = 1", "A = 2"), edit("b.py", "B = 1", "B = 2")),
               calls(("run_terminal", {"command": "python -m pytest -q -p no:cacheprovider test_ab.py"})),
               Reply("A is 2 now and the test passes.", [], "stop")]
    session = await open_session(root, tmp_path, replies, answers={"a.py": "allow_once", "b.py": "reject_once"})
    await session.prompt("make A two")
    found = outcome_records(session.log_path)
    verdicts = {o["path"]: (o["value"], o["reward"]) for o in found if o["signal"] == "edit_accepted"}
    assert verdicts == {"a.py": (True, 1.0), "b.py": (False, -1.0)}
    assert (root / "b.py").read_text() == "B = 1\n"  # the rejected edit never reached the file
    (tests,) = [o for o in found if o["signal"] == "tests_passed_after_edit"]
    assert tests["value"] is True and tests["reward"] == 1.0 and "pytest" in tests["detail"]["command"]
    # a rewind throws the turn away: turn_undone
    await session.restore(session.agent.turn_checkpoint)
    assert (root / "a.py").read_text() == "A = 1\n"
    undone = outcome_records(session.log_path)[-1]
    assert undone["signal"] == "turn_undone" and undone["reward"] == -1.0
    assert editor_reward(read_session(session.log_path)) == pytest.approx(0.0)  # (1 - 1 + 1 - 1) / 4
    session.close()


async def test_a_rewind_is_refused_while_the_turn_runs_and_works_after_it(tmp_path):
    root = workspace(tmp_path)
    asked, answered = asyncio.Event(), asyncio.Event()

    async def ask(proposal: dict, decision) -> str:
        asked.set()
        await answered.wait()  # the person has not answered yet: the turn is running
        return "allow_once"

    replies = [calls(edit("a.py", "A = 1", "A = 2")), Reply("A is 2.", [], "stop")]
    session = await open_session(root, tmp_path, replies)
    session.agent.ask = ask
    session.agent.permissions = session.agent.permissions.extended([Rule("edit_file", "ask", path="**")])
    turn = asyncio.ensure_future(session.prompt("make A two"))
    await asyncio.wait_for(asked.wait(), 10)
    with pytest.raises(RuntimeError, match="a turn is running"):
        await session.restore(session.last_checkpoint or "none yet")
    answered.set()
    await turn
    assert (root / "a.py").read_text() == "A = 2\n"
    await session.restore(session.agent.turn_checkpoint)
    assert (root / "a.py").read_text() == "A = 1\n"
    session.close()


def first_checkpoints_done() -> None:
    for thread in threading.enumerate():
        if thread.name == "composer-first-checkpoint":
            thread.join(10)


async def test_a_new_workspace_is_recorded_once_as_sessions_open_and_the_first_write_stores_nothing_new(tmp_path):
    root = workspace(tmp_path)
    for i in range(200):
        (root / f"module_{i}.py").write_text(f"VALUE = {i}\n" * 50)
    replies = [calls(edit("a.py", "A = 1", "A = 2")), Reply("A is 2.", [], "stop")]
    session, beside = await open_session(root, tmp_path, replies), await open_session(root, tmp_path, [])
    await asyncio.to_thread(first_checkpoints_done)  # two sessions opened it: one records it
    (opened,) = session.checkpoints.list()
    assert opened.label == "the workspace when a session first opened it" and opened.files == 203
    await session.prompt("make A two")
    first_write = session.checkpoints.get(session.agent.turn_checkpoint)
    assert first_write.label == "before edit_file a.py" and first_write.new_objects == 0  # nothing changed since
    later = await open_session(root, tmp_path, [])
    assert not [t for t in threading.enumerate() if t.name == "composer-first-checkpoint"]  # it has some
    for one in (session, beside, later):
        one.close()


async def paused_rewind(tmp_path: Path) -> tuple[Path, Session, asyncio.Future, threading.Event]:
    """A session after a turn that edited a.py, and its rewind stopped in its thread just before
    writing the files, until the returned event is set."""
    root = workspace(tmp_path)
    session = await open_session(root, tmp_path, [calls(edit("a.py", "A = 1", "A = 2")), Reply("A is 2.", [], "stop")])
    await session.prompt("make A two")
    applying, go_on = threading.Event(), threading.Event()
    apply = session.checkpoints._apply

    def pause_then_apply(changes):
        applying.set()
        go_on.wait(10)
        return apply(changes)

    session.checkpoints._apply = pause_then_apply
    rewind = asyncio.ensure_future(session.restore(session.agent.turn_checkpoint))
    assert await asyncio.to_thread(applying.wait, 10)
    return root, session, rewind, go_on


async def test_a_prompt_is_refused_while_a_rewind_runs(tmp_path):
    root, session, rewind, go_on = await paused_rewind(tmp_path)
    with pytest.raises(RuntimeError, match="a rewind is running"):
        await session.prompt("make A three")
    go_on.set()
    await rewind
    assert (root / "a.py").read_text() == "A = 1\n" and not session.changing
    session.close()


async def test_a_cancelled_rewind_still_holds_off_prompts_until_its_thread_is_done(tmp_path):
    root, session, rewind, go_on = await paused_rewind(tmp_path)
    rewind.cancel()  # the editor cancelled the request; the thread writes on
    await asyncio.sleep(0.1)
    assert session.changing
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await rewind
    assert not session.changing and (root / "a.py").read_text() == "A = 1\n"
    assert [r for r in read_session(session.log_path) if r["type"] == "restore"]  # what it did is logged
    session.close()


async def test_failing_tests_after_the_last_edit_and_turns_without_signals(tmp_path):
    root = workspace(tmp_path)
    replies = [calls(("run_terminal", {"command": "python -m pytest -q -p no:cacheprovider test_ab.py"})),
               calls(edit("a.py", "A = 1", "A = 3")),
               calls(("run_terminal", {"command": "python -m pytest -q -p no:cacheprovider test_ab.py"})),
               Reply("done", [], "stop"),
               calls(("read_file", {"path": "a.py"})), Reply("A is 3", [], "stop")]
    session = await open_session(root, tmp_path, replies)
    await session.prompt("make A three")
    (tests,) = outcome_records(session.log_path)
    assert tests["signal"] == "tests_passed_after_edit" and tests["value"] is False and tests["reward"] == -1.0
    await session.prompt("what is A?")  # no edit, no review: nothing to say
    assert len(outcome_records(session.log_path)) == 1
    session.close()


async def test_the_next_session_judges_which_edits_were_kept(tmp_path):
    root = workspace(tmp_path)
    (root / "c.py").write_text("".join(f"line {i}\n" for i in range(30)))
    replies = [calls(edit("a.py", "A = 1", "A = 2"), edit("b.py", "B = 1", "B = 2"),
                     edit("c.py", "line 3\n", "line three\n")),
               calls(edit("c.py", "line 25\n", "line twenty-five\n")),
               Reply("done", [], "stop")]
    first = await open_session(root, tmp_path, replies)
    await first.prompt("change things")
    first.close()
    (root / "b.py").write_text("B = 1\n")  # the person reverts b.py ...
    text = (root / "c.py").read_text().replace("line twenty-five", "line 25 (mine)")
    (root / "c.py").write_text(text)       # ... rewrites one hunk of c.py, keeps the rest
    assert outcome_records(first.log_path) == []
    second = await open_session(root, tmp_path, [])
    (kept,) = outcome_records(first.log_path)
    assert kept["signal"] == "edit_kept" and kept["source"] == "next_session"
    assert {k: kept["detail"][k] for k in ("kept", "reverted", "changed", "hunks")} == \
        {"kept": 2, "reverted": 1, "changed": 1, "hunks": 4}
    assert kept["value"] == 0.5 and kept["reward"] == 0.25
    second.close()
    third = await open_session(root, tmp_path, [])  # judged once: the second session had no diff
    assert len(outcome_records(first.log_path)) == 1 and outcome_records(second.log_path) == []
    third.close()


# ---- the judges on constructed input -------------------------------------------------------------


def test_hunk_states_on_created_deleted_and_missing_files():
    diff = (file_diff("new.py", None, (b"X = 1\n", "100644")) + file_diff("gone.py", (b"Y = 1\n", "100644"), None)
            + file_diff("m.py", (b"a\nb\nc\n", "100644"), (b"a\nB\nc\n", "100644")))
    files = {"new.py": "X = 1\n", "m.py": "a\nB\nc\n"}
    assert hunk_states(diff, files.get) == {"kept": 3, "reverted": 0, "changed": 0}
    files = {"gone.py": "Y = 1\n", "m.py": "a\nb\nc\n"}
    assert hunk_states(diff, files.get) == {"kept": 0, "reverted": 3, "changed": 0}
    assert hunk_states(diff, {"new.py": "X = 2\n", "m.py": "z\n"}.get) == {"kept": 1, "reverted": 0, "changed": 2}


def test_turn_signals_from_records():
    def tool(name, **args):
        data = {"exit_code": args.pop("exit_code")} if "exit_code" in args else {}
        return {"type": "tool_call", "name": name, "arguments": args, "result": "", "error": None, "status": "completed", "data": data}

    def permission(path, outcome, by="user"):
        return {"type": "permission", "tool": "edit_file", "arguments": {"path": path}, "decision": "allow",
                "outcome": outcome, "by": by, "call_id": "c"}

    test_ok, test_bad = tool("run_terminal", command="pytest -q", exit_code=0), tool("run_terminal", command="pytest", exit_code=1)
    turn = [{"type": "user_message", "text": "x"}, permission("/ws/a.py", "allow_always"), permission("b.py", "auto", by="rule"),
            {"type": "edit_review", "path": "c.py", "accepted": False}, test_bad, tool("edit_file", path="a.py"), test_ok]
    signals = turn_signals(turn, "/ws")
    assert [(s["signal"], s["value"], s.get("path")) for s in signals] == [
        ("edit_accepted", True, "a.py"), ("edit_accepted", False, "c.py"), ("tests_passed_after_edit", True, None)]
    assert outcomes.tests_after_last_edit(turn[:-1]) is None  # the failing run came before the edit
    stopped = dict(tool("run_terminal", command="pytest -q"), status="cancelled", error="the turn ended before this call ran")
    assert outcomes.tests_after_last_edit([*turn[:-1], stopped]) is None  # a stopped run says nothing of the tests
    assert is_test_command("cd pkg && python -m pytest -x") and is_test_command("npm run test")
    assert not is_test_command("cat pytest.ini") and not is_test_command("echo latest")


# ---- the diff reader ------------------------------------------------------------------------------


def test_diff_reader_on_git_and_tree_diffs(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for tree in (old, new):
        (tree / "tests").mkdir(parents=True)
        (tree / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (old / "caf\u00e9.py").write_text("x = 1\n")
    (new / "caf\u00e9.py").write_text("x = 2\n")
    (new / "tests" / "test_x.py").write_text("def test_x():\n    assert True\n")
    (new / "blob.bin").write_bytes(b"\0\1\2")
    diff = tree_diff(old, new)
    files = {fd.path: fd for fd in parse_diff(diff)}
    assert set(files) == {"caf\u00e9.py", "tests/test_x.py", "blob.bin"}
    assert files["blob.bin"].binary and files["blob.bin"].created
    assert files["caf\u00e9.py"].hunks[0].old == ["x = 1"] and files["caf\u00e9.py"].hunks[0].new == ["x = 2"]
    kept = without_paths(diff, {"tests/test_x.py"})
    assert touched_paths(kept) == {"caf\u00e9.py", "blob.bin"}
    root = tmp_path / "apply"
    subprocess.run(["cp", "-a", str(old), str(root)], check=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    done = subprocess.run(["git", "-C", str(root), "apply", "-"], input=kept.encode("utf-8", "surrogateescape"),
                          capture_output=True)
    assert done.returncode == 0, done.stderr  # what is left still applies
    assert (root / "caf\u00e9.py").read_text() == "x = 2\n" and "pass" in (root / "tests" / "test_x.py").read_text()


async def test_two_undos_of_changes_at_once_never_lose_one(tmp_path):
    root = workspace(tmp_path)
    session = await open_session(root, tmp_path, [calls(edit("a.py", "A = 1", "A = 2")), Reply("A is 2.", [], "stop")])
    await session.prompt("make A two")
    _, [changed] = await session.turn_changes()
    pick = Pick("a.py", 0, changed.hunks[0].digest)
    first = asyncio.ensure_future(session.review_hunks([pick], []))
    await asyncio.sleep(0)  # the first has started: it holds the workspace
    with pytest.raises(RuntimeError, match="an undo of changes is running"):
        await session.review_hunks([pick], [])
    with pytest.raises(RuntimeError, match="an undo of changes is running"):
        await session.prompt("make A three")
    result, backup = await first
    assert [p.path for p in result.undone] == ["a.py"] and backup and (root / "a.py").read_text() == "A = 1\n"
    verdicts = [(r["path"], r["accepted"]) for r in read_session(session.log_path) if r["type"] == "edit_review"]
    assert verdicts == [("a.py", False)]
    session.close()
