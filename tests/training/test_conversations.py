"""A stronger model's text-only sessions as demonstrations (training/conversations.py): the same
replies logged once by a token-native policy and once through a chat API render to the same
tokens; then the dataset line, its reward, and the trainer's samples.

Run: .venv/bin/python -m pytest tests/training/test_conversations.py
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
from pathlib import Path

from scripted_policy import ScriptedPolicy
from test_teacher import SCRIPT, the_task

from agent.loop import Agent, LoopConfig
from agent.policy import EndpointPolicy, Reply
from agent.session import default_tools
from agent.session_log import SessionLog, read_session
from agent.tools.base import ToolContext
from agent.workspace import Workspace
from model.toolcalls import ToolCall, ToolCallError
from training.conversations import conversation_line, conversation_samples
from training.data import Filters, build
from training.demos import ScriptPolicy, run_config_in
from training.logged import logged_samples
from training.run import run_tasks
from training.teacher import endpoint_demonstrations
from training.trajectories import session_segments

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from scripted_model import ScriptedModel  # tests/server is no package: on sys.path above

SYSTEM = "You are a careful engineer."
KEY = "sk-proj-" + "Ab3dEf9hIjK2mNoP5qRsT8uVwXyZ1234567890abcd"
TURNS = [
    ("go", [("", [ToolCall("read_file", {"path": "a.py"})]),
            ("A is 1; I'll make it 2.", [ToolCall("edit_file", {"path": "a.py", "old_string": "A = 1",
                                                                "new_string": "A = 2"})]),
            ("Done: A is 2.", [])]),
    ("thanks", [("You're welcome.", [])]),
]


def run_session(tmp_path: Path, name: str, policy, tokenizer, turns=TURNS, config=None) -> Path:
    """The turns' requests in a fresh workspace (the same path each time: what the tools say of it
    is the same), logged; the editor's verdict on the edit afterwards."""
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    (root / "a.py").write_text("A = 1\n")
    (root / ".env").write_text(f'OPENAI_API_KEY="{KEY}"\n')
    tools = default_tools()
    log = SessionLog.open(root, model={"id": name}, sampler={}, tools=tools.openai_tools(), system_prompt=SYSTEM,
                          log_dir=tmp_path / "logs" / name, tokenizer=tokenizer if policy.token_native else None)
    agent = Agent(policy, tools, ToolContext(Workspace(root)), system=SYSTEM, log=log, config=config or LoopConfig())
    for request, _ in turns:
        asyncio.run(agent.run_turn(request))
    log.write("outcome", signal="edit_accepted", value=True, reward=1.0, source="editor")
    log.close()
    return log.path


def text_policy(turns=TURNS) -> ScriptedPolicy:
    policy = ScriptedPolicy([Reply(text, list(calls), "tool_calls" if calls else "stop")
                             for _, replies in turns for text, calls in replies])
    policy.token_native = False
    return policy


def token_policy(tokenizer, turns=TURNS) -> ScriptPolicy:
    return ScriptPolicy(tokenizer, [reply for _, replies in turns for reply in replies])


def trained(tokenizer, sample) -> str:
    """The text of the tokens that carry loss."""
    return tokenizer.decode([t for t, m in zip(sample.tokens, sample.mask, strict=True) if m])


def session_of(path: Path) -> dict:
    return {"session_id": path.stem, "reward": 1.0}


def test_a_text_only_session_renders_to_the_tokens_a_token_native_session_logs(tmp_path, real_tokenizer):
    native = read_session(run_session(tmp_path, "native", token_policy(real_tokenizer), real_tokenizer))
    text = read_session(run_session(tmp_path, "text", text_policy(), real_tokenizer))
    assert all(r.get("text_only") for r in text if r.get("type") == "model_call")
    [segment], _ = session_segments(native)
    assert len(segment.calls) == 4  # read, edit, answer; the second turn's answer extends the same stream

    line = conversation_line(text, session_of(Path("text")))
    assert line is not None and conversation_line(native, session_of(Path("native"))) is None
    [sample] = conversation_samples(json.loads(json.dumps(line)), real_tokenizer)
    assert sample.tokens == segment.token_ids  # token for token, what the harness feeds the policy
    replies = [False] * len(sample.tokens)
    for call in segment.calls:
        replies[call["completion_start"]:call["end"]] = [True] * (call["end"] - call["completion_start"])
    assert sample.mask == replies  # the replies train; the prompt, tool results and requests do not
    assert sample.off_policy and sample.reward == 1.0 and all(math.isnan(lp) for lp in sample.behaviour_logprobs)
    shown = trained(real_tokenizer, sample)
    assert "I'll make it 2." in shown and "You're welcome." in shown and "A = 1\n" not in shown


def test_a_corrected_reply_is_context_and_a_long_conversation_ends_where_it_fits(tmp_path, real_tokenizer):
    broken = [("go", [("", [ToolCall("read_file", {"path": "a.py"})]), ("Done.", [])])]
    policy = text_policy(broken)
    first = policy.replies[0]
    first.tool_call_errors.append(ToolCallError(1, "tool call 2 is not valid JSON", "<tool_call>{</tool_call>"))
    text = read_session(run_session(tmp_path, "text", policy, real_tokenizer, broken))
    line = conversation_line(text, session_of(Path("text")))
    assert line["untrained_replies"] == [0]
    [sample] = conversation_samples(line, real_tokenizer)
    shown = trained(real_tokenizer, sample)
    assert "read_file" not in shown and "Done." in shown  # the harness's correction followed the first

    [whole] = conversation_samples(line, real_tokenizer)
    [first_only] = conversation_samples({**line, "untrained_replies": []}, real_tokenizer,
                                        max_tokens=len(whole.tokens) - 1)
    assert first_only.tokens == whole.tokens[: len(first_only.tokens)] and len(first_only.tokens) < len(whole.tokens)
    assert conversation_samples(line, real_tokenizer, max_tokens=len(first_only.tokens)) == []  # nothing trains


def test_a_conversation_past_the_policy_s_context_is_shortened_as_the_harness_shortens_it(tmp_path, real_tokenizer):
    # A stronger model's long session: rendered for a policy with a smaller context, the oldest tool
    # output is cut where the harness, serving that policy the same replies, would cut it.
    big = "".join(f"def helper_{i}(value):\n    return value * {i} + {i * 7}\n\n" for i in range(60))
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "big.py").write_text(big)
    turns = [("go", [("", [ToolCall("read_file", {"path": "big.py"})]), *TURNS[0][1]]), TURNS[1]]
    replies = [reply for _, r in turns for reply in r]
    unlimited = read_session(run_session(tmp_path, "wide", ScriptPolicy(real_tokenizer, replies), real_tokenizer, turns))
    [whole], _ = session_segments(unlimited)
    last = whole.calls[-1]["completion_start"]  # the last reply's prompt, in tokens
    window = last + LoopConfig().max_tokens_per_step - 1  # the last prompt alone leaves too little room

    narrow = ScriptPolicy(real_tokenizer, replies, context_window=window)
    native = read_session(run_session(tmp_path, "native", narrow, real_tokenizer, turns))
    segments, _ = session_segments(native)
    assert [s.start_reason for s in segments][1:] == ["context_shortened"], "the harness shortened once"
    text = read_session(run_session(tmp_path, "text", text_policy(turns), real_tokenizer, turns))
    line = conversation_line(text, session_of(Path("text")))
    samples = conversation_samples(line, real_tokenizer, max_tokens=window)
    assert [s.tokens for s in samples] == [s.token_ids for s in segments]
    assert "helper_59" not in real_tokenizer.decode(samples[-1].tokens), "the read's output was cut"
    assert trained(real_tokenizer, samples[-1]) == "You're welcome.<|endoftext|>"


def test_a_reply_the_log_does_not_hold_as_written_is_context(tmp_path, real_tokenizer):
    # A secret the model wrote is a redaction tag in the log, and calls past the step's limit were
    # dropped (the next prompt says so): neither reply is what the model wrote.
    turns = [("check my key", [("", [ToolCall("read_file", {"path": ".env"})]),
                               (f"Your key is {KEY}.", []),
                               ]),
             ("read both", [("", [ToolCall("read_file", {"path": "a.py"}), ToolCall("read_file", {"path": ".env"})]),
                            ("Read.", [])])]
    log = run_session(tmp_path, "text", text_policy(turns), real_tokenizer, turns, LoopConfig(max_calls_per_step=1))
    line = conversation_line(read_session(log), session_of(log))
    assert line["untrained_replies"] == [1, 2] and KEY not in json.dumps(line)
    [sample] = conversation_samples(line, real_tokenizer)
    shown = trained(real_tokenizer, sample)
    assert "Your key is" not in shown and "a.py" not in shown and "Read." in shown


def test_the_dataset_keeps_the_conversation_and_the_trainer_renders_it(tmp_path, real_tokenizer):
    run_session(tmp_path, "text", text_policy(), real_tokenizer)
    manifest = build(tmp_path / "logs", tmp_path / "ds", Filters())
    assert manifest["counts"]["conversations"] == 1 and manifest["counts"].get("on_policy_segments", 0) == 0
    [line] = [json.loads(x) for x in (tmp_path / "ds" / "conversations.jsonl").read_text().splitlines()]
    assert (line["reward"], line["reward_source"]) == (1.0, "editor") and line["messages"][0]["content"] == SYSTEM
    [sample] = logged_samples([tmp_path / "ds"], real_tokenizer)
    assert sample.stats == {"conversation": 1} and sum(sample.mask) > 0 and sample.reward == 1.0


async def test_a_logged_endpoint_session_trains_as_the_live_teacher_would(real_tokenizer, tmp_path):
    # The same scripted endpoint attempts the same task twice: once as the live teacher warm start
    # (training/teacher.py renders each reply as it comes), once as a text-only session through
    # the chat API, logged, graded, built into a dataset and rendered from there.
    tasks = the_task(tmp_path)
    with ScriptedModel(SCRIPT) as teacher:
        [live] = await endpoint_demonstrations(tasks, real_tokenizer, tmp_path / "teacher", teacher.url)
        chat = EndpointPolicy(teacher.url, token_in=False)
        try:
            [attempt] = await run_tasks(tasks, chat, config=run_config_in(tmp_path / "chat"), parallel=1)
        finally:
            await chat.aclose()
    assert attempt.grade.resolved
    build(tmp_path / "chat" / "sessions", tmp_path / "ds", Filters())
    [logged] = logged_samples([tmp_path / "ds"], real_tokenizer, max_tokens=8192)
    assert trained(real_tokenizer, logged) == trained(real_tokenizer, live) and logged.reward >= 1.0
    # the same context but for the test run's timings ("2 passed in 0.66s")
    timings = re.compile(r"\d+\.\d+")
    assert timings.sub("#", real_tokenizer.decode(logged.tokens)) == timings.sub("#", real_tokenizer.decode(live.tokens))
