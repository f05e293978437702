"""Token-native rollouts, checked end to end: the real agent loop, EnginePolicy, session log and
dataset builder, with the real tokenizer and a scripted engine (tests/agent/scripted_engine.py)
standing in for the model.

Random multi-step rollouts (hypothesis): Unicode and CRLF tool outputs, non-canonical tool-call
JSON, malformed blocks, completions tokenized non-canonically (as a sampler may produce them),
turns cut by the length limit. On secret-free sessions the dataset's token stream equals the
engine's own prompt and completion ids, with no re-tokenisation; with secrets it is equal except
for the recorded redaction spans. The decoded completion without its tool-call blocks is what
the editor was shown.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scripted_engine import (  # tests/agent is no package: on sys.path
    Echo,
    ScriptedEngine,
    routing_of,
)

from agent.loop import Agent, LoopConfig
from agent.policy import EnginePolicy
from agent.session_log import SessionLog, read_session
from agent.tools.base import ToolContext, ToolRegistry
from agent.workspace import Workspace
from model.toolcalls import parse_tool_calls
from training.trajectories import session_segments

SECRETS = ["AKIAQWERTYUIOPASDF12", "AKIAZXCVBNM123456789"]
TOOL_TEXT = st.lists(st.sampled_from([*"ab yz019{}[]\":,\\\t\r\n", "\r\n", "é", "ß", "日本", "🙂", "\u0301", "<", ">"]),
                     max_size=30).map("".join)
MODEL_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Co")), max_size=24).filter(
    lambda t: "<" not in t and "REDACTED" not in t)


@st.composite
def tool_block(draw, secrets: bool) -> str:
    out = draw(TOOL_TEXT)
    if secrets and draw(st.booleans()):
        out = out[: len(out) // 2] + f"\nkey {draw(st.sampled_from(SECRETS))}\n" + out[len(out) // 2:]
    items = [("out", out), ("n", draw(st.integers(-3, 99)))]
    if draw(st.booleans()):
        items.reverse()
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :  ")]))
    args = json.dumps(dict(items), ensure_ascii=draw(st.booleans()), separators=separators)
    form = draw(st.sampled_from(['<tool_call>\n{{"name": "echo", "arguments": {}}}\n</tool_call>',
                                 '<tool_call>{{"arguments":{},"name":"echo"}}</tool_call>',
                                 '<tool_call>\n  {{ "name" : "echo" , "arguments" : {} }}  \n</tool_call>']))
    return form.format(args)


MALFORMED = st.sampled_from(['<tool_call>\n{"name": "echo" "arguments": }\n</tool_call>',
                             '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',
                             "<tool_call>\n[1, 2]\n</tool_call>"])


@st.composite
def completion_ids(draw, tok, text: str, end: bool) -> list[int]:
    """`text` as a sampler may produce it: cut at random places, each piece tokenized alone."""
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=4))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if a < b]
    ids = [i for piece in pieces for i in tok.encode(piece)]
    return [*ids, tok.eos_token_id] if end else ids


@st.composite
def rollout(draw, tok, secrets: bool) -> tuple[list[list[int]], list[list[bool]]]:
    script: list[list[int]] = []
    for _ in range(draw(st.integers(1, 3))):
        parts = [draw(MODEL_TEXT)]
        parts += draw(st.lists(tool_block(secrets), min_size=0, max_size=2))
        if draw(st.booleans()) or len(parts) == 1:
            parts.append(draw(MALFORMED))
        if secrets and draw(st.integers(0, 3)) == 0:
            parts.insert(1, f"I will use {draw(st.sampled_from(SECRETS))}.")
        script.append(draw(completion_ids(tok, draw(st.sampled_from(["", "\n", " "])).join(parts), draw(st.booleans()))))
    script.append(draw(completion_ids(tok, draw(MODEL_TEXT) + " done", True)))
    forced = [[draw(st.integers(0, 7)) == 0 for _ in ids] for ids in script]
    return script, forced


class Events:
    def __init__(self) -> None:
        self.updates: list[dict] = []

    async def emit(self, update: dict) -> None:
        self.updates.append(update)

    def shown_per_call(self) -> list[str]:
        """The agent message text the editor showed for each model call."""
        calls, current = [], []
        for update in self.updates:
            if update["sessionUpdate"] == "agent_message_chunk":
                current.append(update["content"]["text"])
            elif update["sessionUpdate"] == "usage_update":
                calls.append("".join(current))
                current = []
        return calls


def run_session(root: Path, tok, script, forced, config: LoopConfig | None = None) -> tuple[ScriptedEngine, Events, Path]:
    engine = ScriptedEngine(tok, script, forced=forced)
    registry = ToolRegistry([Echo()])
    log = SessionLog.open(root, model={"id": "composer-mini"}, sampler={}, tools=registry.openai_tools(),
                          system_prompt="sys", log_dir=root / "logs", tokenizer=tok)
    events = Events()
    agent = Agent(EnginePolicy(engine), registry, ToolContext(Workspace(root)), system="sys", log=log,
                  events=events, config=config or LoopConfig(max_steps=10))
    asyncio.run(agent.run_turn("go"))
    log.close()
    return engine, events, log.path


def absolute_spans(segment, records_by_id: dict[str, dict]) -> list[tuple[int, int]]:
    spans = []
    for call in segment.calls:
        redactions = records_by_id[call["call_id"]].get("redactions") or {}
        spans += [(call["prompt_start"] + a, call["prompt_start"] + b) for a, b in redactions.get("prompt", [])]
        spans += [(call["completion_start"] + a, call["completion_start"] + b) for a, b in redactions.get("completion", [])]
    return sorted(spans)


def equal_except(logged: list[int], seen: list[int], spans: list[tuple[int, int]], tok) -> bool:
    """`logged` is `seen` with each span standing in for ids that decode to a secret."""
    i = j = 0
    for a, b in spans:
        if logged[i:a] != seen[j:j + a - i]:
            return False
        j += a - i
        following = logged[b:next((s for s, _ in spans if s >= b), len(logged))]
        k = next((k for k in range(j, len(seen) + 1) if seen[k:k + len(following)] == following
                  and any(s in tok.decode(seen[j:k]) for s in SECRETS)), None)
        if k is None:
            return False
        i, j = b, k
    return logged[i:] == seen[j:]


def check_session(tok, engine: ScriptedEngine, events: Events, path: Path, secrets: bool) -> None:
    records = read_session(path)
    calls = [r for r in records if r["type"] == "model_call"]
    by_id = {r["call_id"]: r for r in calls}
    assert len(calls) == len(engine.seen)
    segments, dropped = session_segments(records)
    assert not dropped
    if not secrets:
        assert len(segments) == 1 and not any(r.get("prefix_break") for r in calls)
    for segment in segments:
        for call in segment.calls:  # every call's stream is a prefix of the segment
            prompt, completion = engine.seen[calls.index(by_id[call["call_id"]])]
            seen = prompt + completion
            spans = [s for s in absolute_spans(segment, by_id) if s[1] <= call["end"]]
            if secrets:
                assert equal_except(segment.token_ids[: call["end"]], seen, spans, tok)
            else:
                assert segment.token_ids[: call["end"]] == seen  # no re-tokenisation anywhere
            tainted = by_id[call["call_id"]].get("redactions")
            mask = segment.loss_mask[call["completion_start"]: call["end"]]
            if not tainted:
                forced = by_id[call["call_id"]]["forced"]
                assert mask == [1 - f for f in forced] and len(mask) == len(completion)
                assert segment.logprobs[call["completion_start"]: call["end"]] == [-0.5] * len(completion)
            assert not any(segment.loss_mask[call["prompt_start"]: call["completion_start"]])
        for position, row in enumerate(segment.routed_experts):
            if row is not None:
                assert row == routing_of(position, segment.token_ids[position])
        if not secrets:
            assert None not in segment.routed_experts[:-1]
    for index, record in enumerate(calls):  # malformed blocks: their raw text, and the correction the model got
        blocks = record.get("malformed_tool_calls", [])
        if blocks and not secrets:
            assert all(b["raw"] in tok.decode(engine.seen[index][1]) for b in blocks)
            if index + 1 < len(engine.seen):  # (a turn cut by the length limit ends there)
                assert record["harness_message"] in tok.decode(engine.seen[index + 1][0])
    shown = events.shown_per_call()
    for (_, completion), text in zip(engine.seen, shown, strict=True):
        ids = completion[:-1] if completion and completion[-1] in tok.stop_token_ids else completion
        assert parse_tool_calls(tok.decode(ids)).content == text
    if secrets:
        log_text = path.read_text()
        for record in calls:
            log_text += tok.decode(record["prompt_token_ids"]) + tok.decode(record["completion_token_ids"])
        assert not any(s in log_text for s in SECRETS)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), secrets=st.booleans())
def test_random_rollouts_log_the_engines_own_tokens(tmp_path_factory, real_tokenizer, data, secrets) -> None:
    root = tmp_path_factory.mktemp("ws")
    script, forced = data.draw(rollout(real_tokenizer, secrets))
    engine, events, path = run_session(root, real_tokenizer, script, forced)
    check_session(real_tokenizer, engine, events, path, secrets)


def test_prompts_extend_the_last_one_and_match_the_template_when_the_text_is_canonical(tmp_path, real_tokenizer) -> None:
    tok = real_tokenizer
    call = '<tool_call>\n{"name": "echo", "arguments": {"out": "a\\r\\nb"}}\n</tool_call>'
    # a reply that ends as composer-mini's do (<|endoftext|>, the harness's reply format)
    engine, _, path = run_session(tmp_path, tok, [[*tok.encode(call), tok.stop_token_ids[0]]], None)
    (first, completion), (second, _) = engine.seen
    assert second[: len(first) + len(completion)] == first + completion
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"},
                {"role": "assistant", "content": call}, {"role": "tool", "content": "a\r\nb"}]
    assert second == tok.encode_chat(messages, tools=[Echo.spec.to_openai()])
    records = [r for r in read_session(path) if r["type"] == "model_call"]
    assert records[1]["parent"] == "m1" and records[1]["prefix_len"] == len(first) + len(completion)
    assert records[1]["prompt_token_ids"] == second[len(first) + len(completion):]  # only the new ids
    tool = next(r for r in read_session(path) if r["type"] == "tool_call")
    assert tool["model_call_id"] == "m1"
    sampler = records[0]["sampler"]
    assert sampler["temperature"] == 0.0 and sampler["top_p"] == 1.0 and isinstance(sampler["seed"], int)
    assert records[0]["weight_version"] == 3 and records[0]["forced"] == [0] * len(completion)
