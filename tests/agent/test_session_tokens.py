"""Sessions and their token streams: secrets never reach the log (strings or decoded ids), a log
grows linearly, a loaded session continues from its logged ids (or says it rebuilt from text),
and context shortening splits the trajectory. The real Session, tools, log and dataset builder;
a scripted engine (tests/agent/scripted_engine.py) stands in for the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_engine import (  # tests/agent is no package: on sys.path
    Echo,
    ScriptedEngine,
    TextPolicy,
    call_ids,
    echo_call,
)

from agent.loop import LoopConfig
from agent.policy import EnginePolicy
from agent.session import Session, SessionConfig
from agent.session_log import read_session
from agent.tools.base import ToolRegistry
from training.data import Filters, build
from training.trajectories import session_segments

KEY_IN_RULES = "AKIAJQ3EXAMPLE7RULES"
KEY_IN_FILE = "AKIA5FILE2EXAMPLE9XY"


def config(root: Path, **loop) -> SessionConfig:
    return SessionConfig(workspace=root, log_dir=root.parent / "logs", checkpoints=False, index="off",
                         repo_map_tokens=0, loop=LoopConfig(**loop))


def model_calls(path: Path) -> list[dict]:
    return [r for r in read_session(path) if r["type"] == "model_call"]


def decoded_log(path: Path, tok) -> str:
    """The log's text, and every token id list in it decoded."""
    text = path.read_text()
    for record in model_calls(path):
        text += tok.decode(record["prompt_token_ids"]) + tok.decode(record["completion_token_ids"])
    return text


@pytest.mark.parametrize("model", [None, "/models/composer-mini-trained"])
async def test_the_log_names_the_checkpoint_the_engine_serves(tmp_path, real_tokenizer, monkeypatch, model):
    from agent import session as session_module

    root = tmp_path / "repo"
    root.mkdir()
    engine = ScriptedEngine(real_tokenizer, [[*real_tokenizer.encode("Hello."), real_tokenizer.eos_token_id]])
    monkeypatch.setattr(session_module, "_shared_engine", lambda checkpoint, quantize: engine)
    session = await Session.create(SessionConfig(workspace=root, log_dir=tmp_path / "logs", checkpoints=False,
                                                 index="off", repo_map_tokens=0, model=model))
    await session.prompt("hi")
    session.close()
    header = read_session(session.log_path)[0]
    assert header["model"]["id"] == (model or "composer-mini") and header["model"]["backend"] == "engine"


async def test_secrets_in_rules_and_read_files_reach_neither_strings_nor_ids(tmp_path, real_tokenizer):
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    (root / "AGENTS.md").write_text(f"Deploy with aws_access_key_id={KEY_IN_RULES}.\n")
    (root / "settings.py").write_text(f'AWS_KEY = "{KEY_IN_FILE}"\nDEBUG = True\n')
    (root / "README.md").write_text("# app\nRun it with make.\n")

    def read(path: str, text: str = "") -> list[int]:
        block = f'<tool_call>\n{{"name": "read_file", "arguments": {{"path": "{path}"}}}}\n</tool_call>'
        return [*tok.encode(text + block), tok.eos_token_id]

    engine = ScriptedEngine(tok, [read("settings.py"), read("README.md", f"The key is {KEY_IN_FILE}. "),
                                  [*tok.encode(f"Done; the rules use {KEY_IN_RULES}."), tok.eos_token_id]])
    session = await Session.create(config(root), policy=EnginePolicy(engine))
    await session.prompt("Which AWS key does settings.py use?")
    session.close()
    # The model saw both keys (the rules in its first prompt, the file in its second) ...
    assert KEY_IN_RULES in tok.decode(engine.seen[0][0]) and KEY_IN_FILE in tok.decode(engine.seen[1][0])
    # ... and the log holds neither, in any string or any decoded id list.
    text = decoded_log(session.log_path, tok)
    assert KEY_IN_RULES not in text and KEY_IN_FILE not in text
    assert "[REDACTED:aws_access_key]" in tok.decode(model_calls(session.log_path)[1]["prompt_token_ids"])
    out = tmp_path / "dataset"
    build(tmp_path / "logs", out, Filters())
    dataset = (out / "trajectories.jsonl").read_text() + (out / "off_policy.jsonl").read_text()
    streams = [tok.decode(json.loads(line)["token_ids"]) for line in dataset.splitlines()]
    # The calls that saw a key train nothing; the last one, which saw only tags, does.
    assert len(streams) == 1 and "[REDACTED:aws_access_key]" in streams[0]
    assert not any(k in s for s in streams for k in (KEY_IN_RULES, KEY_IN_FILE))


async def test_a_ten_step_log_grows_by_each_steps_new_tokens_and_tool_output(tmp_path, real_tokenizer):
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    outputs = [f"step {i}: " + "lorem ipsum dolor sit amet " * 60 for i in range(10)]
    sizes: list[int] = []
    holder: dict = {}
    engine = ScriptedEngine(tok, [echo_call(tok, out) for out in outputs],
                            on_submit=lambda _: sizes.append(holder["path"].stat().st_size))
    session = await Session.create(config(root, max_steps=12), policy=EnginePolicy(engine), tools=ToolRegistry([Echo()]))
    holder["path"] = session.log_path
    await session.prompt("echo ten times")
    session.close()
    calls = model_calls(session.log_path)
    assert len(calls) == 11 and all(c["parent"] == f"m{i}" for i, c in enumerate(calls[1:], 1))
    seen = engine.seen
    for step in range(1, 11):  # bytes between model call k's start and k+1's: call k and its tool call
        added = sizes[step] - sizes[step - 1]
        prompt, completion = seen[step - 1]
        before = len(seen[step - 2][0]) + len(seen[step - 2][1]) if step > 1 else 0
        new_tokens = len(prompt) - before + len(completion)  # what the engine got that it had not had
        assert added <= 40 * new_tokens + 3 * len(outputs[step - 1]) + 2000, (step, added, new_tokens)
    steps = [sizes[s] - sizes[s - 1] for s in range(2, 11)]
    assert max(steps) < 1.2 * min(steps)


async def test_a_loaded_session_continues_from_its_logged_ids(tmp_path, real_tokenizer):
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    first = ScriptedEngine(tok, [echo_call(tok, "één\r\n"), [*tok.encode("Done."), tok.eos_token_id]])
    session = await Session.create(config(root), policy=EnginePolicy(first), tools=ToolRegistry([Echo()]))
    await session.prompt("one")
    session.close()
    second = ScriptedEngine(tok, [echo_call(tok, "x"), [*tok.encode("Fine."), tok.eos_token_id]])
    loaded, history = await Session.load(config(root), session.id, policy=EnginePolicy(second), tools=ToolRegistry([Echo()]))
    await loaded.prompt("two")
    loaded.close()
    assert any(u["sessionUpdate"] == "tool_call" for u in history)
    prompt, completion = first.seen[-1]
    assert second.seen[0][0][: len(prompt) + len(completion)] == prompt + completion  # no re-rendering
    calls = model_calls(session.log_path)
    assert [c["call_id"] for c in calls] == ["m1", "m2", "m3", "m4"]
    assert calls[2]["parent"] == "m2" and calls[2]["prefix_break"] is None
    assert calls[2]["prefix_len"] == len(prompt) + len(completion)
    segments, dropped = session_segments(read_session(session.log_path))
    assert not dropped and len(segments) == 1
    assert segments[0].token_ids == second.seen[-1][0] + second.seen[-1][1]


async def test_a_session_logged_as_text_continues_rebuilt_from_text_and_says_so(tmp_path, real_tokenizer):
    root = tmp_path / "repo"
    root.mkdir()
    session = await Session.create(config(root), policy=TextPolicy())
    await session.prompt("hi")
    session.close()
    assert model_calls(session.log_path)[0]["text_only"] is True
    engine = ScriptedEngine(real_tokenizer, [[*real_tokenizer.encode("Again."), real_tokenizer.eos_token_id]])
    loaded, _ = await Session.load(config(root), session.id, policy=EnginePolicy(engine))
    await loaded.prompt("and now?")
    loaded.close()
    call = model_calls(session.log_path)[-1]
    assert call["prefix_break"] == {"reason": "rebuilt_from_text"} and call["parent"] is None
    assert engine.seen[0][0] == real_tokenizer.encode_chat(loaded.agent.messages[:4], tools=loaded.agent.tools.openai_tools())


async def test_shortening_old_tool_output_breaks_the_prefix_and_splits_the_trajectory(tmp_path, real_tokenizer):
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    script = [echo_call(tok, "word " * 150) for _ in range(3)]
    engine = ScriptedEngine(tok, script, max_seq_len=900)
    session = await Session.create(config(root, max_tokens_per_step=100, shortened_chars=40, max_steps=5),
                                   policy=EnginePolicy(engine), tools=ToolRegistry([Echo()]))
    await session.prompt("go")
    session.close()
    calls = model_calls(session.log_path)
    broken = [c for c in calls if c["prefix_break"]]
    assert broken and broken[0]["prefix_break"] == {"reason": "context_shortened"}
    assert 0 < broken[0]["prefix_len"] < len(engine.seen[calls.index(broken[0]) - 1][0])  # shares the head only
    segments, _ = session_segments(read_session(session.log_path))
    assert len(segments) >= 2 and segments[1].start_reason == "context_shortened"
    for segment in segments:
        last = calls.index(next(c for c in calls if c["call_id"] == segment.calls[-1]["call_id"]))
        assert segment.token_ids == engine.seen[last][0] + engine.seen[last][1]
        assert not any(segment.loss_mask[: segment.calls[0]["completion_start"]])  # carried context trains nothing


def test_a_template_that_rewrites_history_makes_the_next_prompt_a_rebuild(real_tokenizer):
    from agent.trajectory import TokenStream
    from model.tokenizer import Tokenizer

    last_two = ("{%- for m in messages[-2:] %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok = Tokenizer(real_tokenizer.backend, chat_template=last_two)
    stream = TokenStream(tok)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    first = stream.next_prompt(messages, 0, [])
    assert first.parent is None and first.prefix_break is None
    stream.commit("m1", first, {"parent": None, "prompt_token_ids": first.ids,
                                "completion_token_ids": [*tok.encode("Hello."), tok.eos_token_id]})
    messages += [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "and?"}]
    second = stream.next_prompt(messages, 3, [])
    assert second.prefix_break == "template" and second.ids == tok.encode_chat(messages)
    assert second.parent == "m1" and second.prefix_len < len(stream.ids)


async def test_a_version_1_log_loads_and_continues_rebuilt_from_text(tmp_path, real_tokenizer):
    from agent.session_log import workspace_slug

    root = tmp_path / "repo"
    root.mkdir()
    path = tmp_path / "logs" / workspace_slug(root) / "old-1.jsonl"
    path.parent.mkdir(parents=True)
    base = {"version": 1, "session_id": "old-1", "time": 1.0}
    path.write_text("".join(json.dumps({**base, **r, "seq": i}) + "\n" for i, r in enumerate([
        {"type": "session", "workspace": str(root.resolve()), "model": {"id": "composer-mini"}, "sampler": {},
         "tools": [], "system_prompt_hash": "sha256:" + "0" * 64},
        {"type": "user_message", "text": "hi"},
        {"type": "model_call", "call_id": "m1", "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4],
         "logprobs": [-1.0], "text": "Hello there.", "finish_reason": "stop"},
    ])))
    engine = ScriptedEngine(real_tokenizer, [[*real_tokenizer.encode("Again."), real_tokenizer.eos_token_id]])
    loaded, history = await Session.load(config(root), "old-1", policy=EnginePolicy(engine))
    await loaded.prompt("more")
    loaded.close()
    assert [u["content"]["text"] for u in history if "content" in u] == ["hi", "Hello there."]
    new = model_calls(path)[-1]
    assert new["version"] == 2 and new["call_id"] == "m2"
    assert new["prefix_break"] == {"reason": "rebuilt_from_text"} and new["parent"] is None
    assert "Hello there." in real_tokenizer.decode(engine.seen[0][0])


async def test_a_context_that_stays_full_ends_the_turn_as_the_models_own_not_as_a_fault(tmp_path, real_tokenizer):
    """Many small tool results, which shortening cannot save: the turn ends (max_tokens, an error
    record that is not fatal) before a prompt too long for the engine is ever sent."""
    tok = real_tokenizer
    root = tmp_path / "repo"
    root.mkdir()
    limit = 700
    engine = ScriptedEngine(tok, [echo_call(tok, "ok") for _ in range(40)], max_seq_len=limit,
                            on_submit=lambda ids: len(ids) < limit or pytest.fail(f"a {len(ids)}-token prompt was sent"))
    session = await Session.create(config(root, max_tokens_per_step=64, max_steps=40, stop_repeats=0),
                                   policy=EnginePolicy(engine), tools=ToolRegistry([Echo()]))
    result = await session.prompt("go")
    session.close()
    assert result.stop_reason == "max_tokens"
    assert result.steps == len(engine.seen) < 40
    [full] = [r for r in read_session(session.log_path) if r["type"] == "error"]
    assert full["kind"] == "context_full" and full["fatal"] is False and f"context window {limit}" in full["message"]


async def test_edit_file_old_string_is_quoted_from_the_files_read_as_they_are_now(tmp_path, real_tokenizer):
    """Each request tells the engine the texts edit_file's old_string may be copied from: the
    files read or written this session, at their current contents (a deleted one dropped)."""
    tok, root = real_tokenizer, tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "b.py").write_text("y = 2\n")
    engine = ScriptedEngine(tok, [
        call_ids(tok, "read_file", {"path": "a.py"}), call_ids(tok, "read_file", {"path": "b.py"}),
        call_ids(tok, "edit_file", {"path": "a.py", "old_string": "x = 1", "new_string": "x = 3"}),
        call_ids(tok, "delete_file", {"path": "b.py"}),
    ])  # fmt: skip
    session = await Session.create(config(root, max_steps=8), policy=EnginePolicy(engine))
    await session.prompt("change x")
    quoted = [q["edit_file"]["old_string"] if q else {} for q in engine.quotes]
    assert [{path: text for path, text in q.items() if "/" not in path} for q in quoted] == [
        {}, {"a.py": "x = 1\n"}, {"a.py": "x = 1\n", "b.py": "y = 2\n"},
        {"a.py": "x = 3\n", "b.py": "y = 2\n"}, {"a.py": "x = 3\n"},
    ]  # fmt: skip
    assert quoted[1]["./a.py"] == quoted[1][str(root.resolve() / "a.py")] == "x = 1\n"  # as a call may name it
