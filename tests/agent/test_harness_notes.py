"""The model is told when the person undoes its work between turns (agent/harness_notes.py): after
a rewind and after changes undone hunk by hunk, the next prompt holds a `[harness]` note naming
the files, the log keeps it, and a session loaded from the log continues with the same messages.
The real Session, tools, checkpoints and log; a scripted engine stands in for the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripted_engine import ScriptedEngine  # tests/agent is no package: on sys.path

from agent.checkpoint_records import Changes
from agent.harness_notes import MAX_PATHS, rewind_note, undo_note
from agent.policy import EnginePolicy
from agent.session import Session, SessionConfig
from agent.session_log import read_session
from agent.turn_review import Pick


def test_the_notes_name_the_files_and_count_the_rest():
    changes = Changes(added=("b.py", "new/"), modified=("a.py",), deleted=())
    note = rewind_note("c1", "before edit_file a.py", changes, ["open.py"])
    assert note.startswith("[harness] The user restored the workspace to checkpoint c1 (before edit_file a.py)")
    assert "3 file(s) are back as they were then (a.py, b.py, open.py)" in note and "new/" not in note
    many = rewind_note("c1", "", Changes(modified=tuple(f"f{i:02d}.py" for i in range(20))), [])
    assert f"f{MAX_PATHS - 1:02d}.py, and {20 - MAX_PATHS} more" in many
    assert "no file differed" in rewind_note("c1", "", Changes(), [])
    assert undo_note([Pick("a.py", 0, ""), Pick("a.py", 2, ""), Pick("b.py", 1, "")]) == (
        "[harness] The user undid 3 of your last turn's changes, which are back to how they were before it: "
        "a.py (2 changes), b.py (1 change). Your other changes stay. Read a file again before you edit it.")
    assert undo_note([]) == ""


def _write_then_answer(tok, *files: str) -> list[list[int]]:
    calls = "".join(f'<tool_call>\n{{"name": "write_file", "arguments": {{"path": "{f}", "content": "x = 1\\n"}}}}\n'
                    f'</tool_call>\n' for f in files)
    return [[*tok.encode(calls), tok.eos_token_id], [*tok.encode("Done."), tok.eos_token_id]]


async def _session(root: Path, tok, script: list[list[int]]) -> Session:
    config = SessionConfig(workspace=root, log_dir=root.parent / "logs", index="off", repo_map_tokens=0,
                           warm_checkpoints=False)
    return await Session.create(config, policy=EnginePolicy(ScriptedEngine(tok, script)))


async def test_a_rewind_and_an_undo_are_told_to_the_model_and_survive_a_reload(tmp_path, real_tokenizer):
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    (root / "keep.py").write_text("k = 0\n")
    session = await _session(root, tok, [*_write_then_answer(tok, "a.py", "b.py"), *_write_then_answer(tok, "c.py")])
    await session.prompt("write a and b")
    result, _ = await session.restore(session.agent.turn_checkpoint)
    told = session.agent.messages[-1]
    assert told["role"] == "user" and told["content"] == rewind_note(
        result.checkpoint.id, result.checkpoint.label, result.changes, [])
    assert "(a.py, b.py)" in told["content"] and not (root / "a.py").exists()

    await session.prompt("write c")
    _, files = await session.turn_changes()
    [c] = files
    undone, _ = await session.review_hunks([Pick("c.py", 0, c.hunks[0].digest)], [])
    assert [p.path for p in undone.undone] == ["c.py"] and not (root / "c.py").exists()
    assert session.agent.messages[-1]["content"] == undo_note(undone.undone)
    live = [dict(m) for m in session.agent.messages]
    session.close()

    records = read_session(session.log_path)
    restore = next(r for r in records if r["type"] == "restore")
    assert restore["harness_message"] == told["content"] and restore["changes"]["deleted"] == ["a.py", "b.py"]
    config = SessionConfig(workspace=root, log_dir=tmp_path / "logs", index="off", repo_map_tokens=0,
                           warm_checkpoints=False)
    loaded, _ = await Session.load(config, session.id, policy=EnginePolicy(ScriptedEngine(tok, [])))
    assert [(m["role"], m.get("content")) for m in loaded.agent.messages] == [
        (m["role"], m.get("content")) for m in live], "the loaded conversation holds both notes where they were"
    loaded.close()


def test_a_note_on_a_record_does_not_move_a_pending_harness_message():
    from agent.replay import conversation

    records = [{"type": "user_message", "text": "go"},
               {"type": "model_call", "text": "", "tool_calls": [{"id": "t1", "type": "function",
                "function": {"name": "read_file", "arguments": "{}"}}], "harness_message": "[harness] fix the JSON"},
               {"type": "tool_call", "call_id": "t1", "name": "read_file", "result": "ok"},
               {"type": "edit_review", "path": "a.py", "accepted": True},
               {"type": "restore", "checkpoint_id": "c1", "harness_message": "[harness] rewound"}]
    roles = [(m["role"], m.get("content")) for m in conversation(records, "sys")]
    assert roles[-3:] == [("tool", "ok"), ("user", "[harness] fix the JSON"), ("user", "[harness] rewound")]


async def test_a_rewind_that_forgets_the_turn_leaves_no_trace_in_the_conversation(tmp_path, real_tokenizer):
    """`forget`: the files go back and the turn leaves the conversation; the next prompt is the
    conversation without it, rendered again (prefix_break rewound), and a loaded session has
    neither the turn in its conversation nor in the history its client is shown."""
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    session = await _session(root, tok, [*_write_then_answer(tok, "a.py"), *_write_then_answer(tok, "b.py")])
    engine = session.agent.policy.engine
    await session.prompt("write a")
    after_first = [dict(m) for m in session.agent.messages]
    reads_after_first = dict(session.agent.ctx.state.get("file_reads", {}))
    await session.prompt("write b")
    assert "b.py" in session.agent.ctx.state["file_reads"]
    first_checkpoint = session.agent.turn_checkpoint
    with pytest.raises(RuntimeError, match="only the last turn"):
        await session.restore("some-older-checkpoint", forget=True)
    await session.restore(first_checkpoint)  # undo first (the model is told), then forget it too
    (root / "mine.py").write_text("typed after the undo\n")
    forgot, _ = await session.restore(first_checkpoint, forget=True)
    assert not forgot.changes and (root / "mine.py").exists(), "forgetting a turn just undone rewinds nothing"
    assert session.agent.messages == after_first and not (root / "b.py").exists() and (root / "a.py").exists()
    assert session.agent.ctx.state["file_reads"] == reads_after_first, "b.py was never read, as far as it knows"
    assert session.agent.ctx.state["changed_paths"] == ["a.py"], "nor written"
    assert session.agent.turn_checkpoint is None, "nothing left to rewind to by default"
    loaded, history = await Session.load(SessionConfig(workspace=root, log_dir=tmp_path / "logs", index="off",
                                                       repo_map_tokens=0, warm_checkpoints=False),
                                         session.id, policy=EnginePolicy(ScriptedEngine(tok, [])))
    assert loaded.agent.messages == after_first and loaded.agent.stream.pending == "rewound"
    asked = [u["content"]["text"] for u in history if u.get("sessionUpdate") == "user_message_chunk"]
    assert asked == ["write a"], "the client is not shown the turn either"
    with pytest.raises(RuntimeError, match="no turn to forget"):
        loaded.forget_turn()  # a forget never reaches back to the turn before (here one that wrote a.py)
    loaded.close()

    await session.prompt("write c")  # the live session goes on without the turn
    prompt_ids, _ = engine.seen[-1]
    first_prompt, first_answer = engine.seen[1]  # turn one's last call, as the engine saw and sampled it
    assert prompt_ids[:len(first_prompt) + len(first_answer)] == first_prompt + first_answer, \
        "the next prompt extends what the model saw before the forgotten turn, token for token"
    assert tok.decode(prompt_ids[len(first_prompt) + len(first_answer):]).count("write c") == 1
    session.close()
    again, _ = await Session.load(SessionConfig(workspace=root, log_dir=tmp_path / "logs", index="off",
                                                repo_map_tokens=0, warm_checkpoints=False),
                                  session.id, policy=EnginePolicy(ScriptedEngine(tok, [])))
    assert again.agent.stream.ids == prompt_ids + engine.seen[-1][1] and again.agent.stream.pending is None, \
        "a reload goes on from the call after the forget, token for token"
    again.close()
    records = read_session(session.log_path)
    told, forgot = [r for r in records if r["type"] == "restore"]
    assert "harness_message" in told and forgot["forgot_turn"] is True and "harness_message" not in forgot
    undone = [r for r in records if r.get("signal") == "turn_undone"]
    assert len(undone) == 1, "one undo of the turn, one reward, however it was asked for"
    calls = [r for r in records if r["type"] == "model_call"]
    assert calls[-1]["prefix_break"] == {"reason": "rewound"} and calls[-1]["parent"] == calls[1]["call_id"]
    from training.trajectories import session_segments
    segments, dropped = session_segments(records)
    assert not dropped and [s.start_reason for s in segments][-1] == "rewound"


async def test_forgetting_a_turn_undone_before_a_restart_rewinds_nothing_again(tmp_path, real_tokenizer):
    root = tmp_path / "repo"
    root.mkdir()
    session = await _session(root, real_tokenizer, _write_then_answer(real_tokenizer, "a.py"))
    await session.prompt("write a")
    checkpoint = session.agent.turn_checkpoint
    await session.restore(checkpoint)
    (root / "mine.py").write_text("typed after the undo\n")
    session.close()  # the server restarts
    config = SessionConfig(workspace=root, log_dir=tmp_path / "logs", index="off", repo_map_tokens=0,
                           warm_checkpoints=False)
    loaded, _ = await Session.load(config, session.id, policy=EnginePolicy(ScriptedEngine(real_tokenizer, [])))
    forgot, _ = await loaded.restore(checkpoint, forget=True)
    assert not forgot.changes and (root / "mine.py").exists()
    assert [m["content"] for m in loaded.agent.messages if m["role"] == "user"] == []
    loaded.close()
    undone = [r for r in read_session(session.log_path) if r.get("signal") == "turn_undone"]
    assert len(undone) == 1


async def test_a_forget_after_undoing_the_undo_hunk_by_hunk_rewinds_again(tmp_path, real_tokenizer):
    """Undo, then the undo's own changes undone hunk by hunk (the turn's file back), then forget:
    the files moved on from the undo, so the forget rewinds them again."""
    root = tmp_path / "repo"
    root.mkdir()
    session = await _session(root, real_tokenizer, _write_then_answer(real_tokenizer, "a.py"))
    await session.prompt("write a")
    checkpoint = session.agent.turn_checkpoint
    undone, _ = await session.restore(checkpoint)
    _, [gone] = await session.turn_changes(undone.backup.id)
    await session.review_hunks([Pick("a.py", 0, gone.hunks[0].digest)], [], undone.backup.id)
    assert (root / "a.py").exists()
    await session.restore(checkpoint, forget=True)
    assert not (root / "a.py").exists()
    session.close()
