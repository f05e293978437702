"""The changed-edit search (model/changed_edit.py) and its use by EnginePolicy, with the real
tokenizer and tool-call constraint and a text model standing in for the engine: it answers every
prompt by continuing whichever scripted reply the prompt's reply so far begins."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.policy import EnginePolicy
from model.changed_edit import changed_reply
from model.constrained import ToolCallConstraint
from model.sampling import SamplingParams
from model.sequence import Completion, StreamEvent
from model.token_table import TokenTable

TOOLS = [{"type": "function", "function": {"name": "edit_file", "description": "edit", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "old_string": {"type": "string"},
                                     "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
    "required": ["path", "old_string", "new_string"]}}}]
PROMPT = [1, 2, 3]
STEP = -0.1
"""The text model's logprob for each token it writes."""


def reply(new: str, tail: str = "") -> str:
    arguments = json.dumps({"path": "a.py", "old_string": "x = a - b", "new_string": new})
    return f'<tool_call>\n{{"name": "edit_file", "arguments": {arguments[:-1]}{tail}}}}}\n</tool_call>'


UNCHANGED = reply("x = a - b")
FIXED, OTHER = reply("x = a + b"), reply("x = a * b")
STILL_UNCHANGED = reply("x = a - b", ', "replace_all": false')


class TextModel:
    """The engine's interface over scripted replies (first match wins); `top` gives the
    alternatives the unchanged reply's sampler reported, by position."""

    def __init__(self, tokenizer, replies: list[str], top: dict[int, list[tuple[int, float]]]) -> None:
        self.tokenizer, self.replies, self.top = tokenizer, replies, top
        self.max_seq_len = 1 << 16
        self.table = TokenTable(tokenizer.token_strings(), [tokenizer.eos_token_id, *tokenizer.stop_token_ids],
                                tokenizer.special_token_ids)
        self.asked: list[list[int]] = []

    def tool_call_constraint(self, tools, mode="auto", quotes=None):
        return ToolCallConstraint(self.table, tools=tools, mode=mode)

    def first(self) -> Completion:
        ids = [*self.tokenizer.encode(UNCHANGED), self.tokenizer.eos_token_id]
        top = [[(t, STEP), *self.top.get(k, [])] for k, t in enumerate(ids)]
        return Completion(list(PROMPT), ids, UNCHANGED, [STEP] * len(ids), top, "stop", None, 0.0, 0.0,
                          forced=[False] * len(ids))

    def generate(self, prompts, params):
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            self.asked.append(prompt)
            so_far = self.tokenizer.decode(prompt[len(PROMPT):])
            text = next(r for r in self.replies if r.startswith(so_far))[len(so_far):]
            ids = [*self.tokenizer.encode(text), self.tokenizer.eos_token_id]
            for k, token in enumerate(ids):  # the constraint was handed over in the reply's state
                assert p.constraint.is_allowed(token, p.max_tokens - k), (so_far, text)
                p.constraint.advance(token)
            out.append(Completion(list(prompt), ids, text, [STEP] * len(ids), [], "stop", None, 0.0, 0.0,
                                  forced=[False] * len(ids)))
        return out

    def submit(self, prompt_ids, params, on_event, on_done):
        first = self.first()
        if params.top_logprobs == 0:
            first.top_logprobs = []
        on_event(StreamEvent(first.token_ids, first.text, first.logprobs, [], True, "stop", forced=first.forced))
        on_done(first)
        return lambda: None


def _alternative(tokenizer, ids: list[int], at_char: int, target: str) -> tuple[int, int]:
    """The position of the token holding character `at_char` of the unchanged reply, and the
    token that starts `target` from that token's start."""
    k = max(i for i in range(len(ids)) if len(tokenizer.decode(ids[:i])) <= at_char)
    alt = tokenizer.encode(target[len(tokenizer.decode(ids[:k])):])[0]
    assert alt != ids[k]
    return k, alt


@pytest.fixture
def scene(real_tokenizer):
    tok = real_tokenizer
    ids = tok.encode(UNCHANGED)
    minus = UNCHANGED.rindex(" - ")
    fix_at, plus = _alternative(tok, ids, minus, FIXED)
    _, times = _alternative(tok, ids, minus, OTHER)
    close_at, comma = _alternative(tok, ids, UNCHANGED.rindex('"}}'), STILL_UNCHANGED)
    newline = tok.encode("\n")[0]  # a raw newline cannot go in a JSON string: the constraint refuses it
    top = {fix_at: [(newline, -0.2), (plus, -1.0), (times, -1.5)], close_at: [(comma, -0.3)]}
    return tok, fix_at, plus, close_at, top


def _params(model: TextModel) -> SamplingParams:
    return SamplingParams(max_tokens=200, constraint=model.tool_call_constraint(TOOLS), top_logprobs=8)


def _unchanged(call) -> bool:
    return call.arguments.get("new_string") == call.arguments.get("old_string")


def test_the_likeliest_changed_edit_replaces_the_unchanged_one(scene):
    tok, fix_at, plus, close_at, top = scene
    model = TextModel(tok, [FIXED, OTHER, STILL_UNCHANGED], top)
    first = model.first()
    merged, searched = changed_reply(model, PROMPT, first, _params(model), lambda: model.tool_call_constraint(TOOLS),
                                     TOOLS, "new_string", _unchanged)
    assert merged.text == FIXED
    assert merged.token_ids[:fix_at] == first.token_ids[:fix_at] and merged.token_ids[fix_at] == plus
    assert merged.forced[fix_at] and not any(merged.forced[:fix_at] + merged.forced[fix_at + 1:])
    assert merged.logprobs[fix_at] == -1.0 and len(merged.logprobs) == len(merged.token_ids)
    assert merged.prompt_ids == PROMPT
    # the newline was refused, so three candidates were continued: each from its own position
    assert searched["position"] == fix_at and searched["candidates"] == 3
    assert sorted(len(p) for p in model.asked) == sorted([len(PROMPT) + fix_at + 1] * 2 + [len(PROMPT) + close_at + 1])


def test_no_candidate_that_changes_the_edit_leaves_the_reply(scene):
    tok, _, _, close_at, top = scene
    model = TextModel(tok, [STILL_UNCHANGED], {close_at: top[close_at]})
    assert changed_reply(model, PROMPT, model.first(), _params(model), lambda: model.tool_call_constraint(TOOLS),
                         TOOLS, "new_string", _unchanged) is None
    assert len(model.asked) == 1  # the one candidate was tried, and still changes nothing


def test_a_changed_edit_is_not_searched(scene):
    tok, *_, top = scene
    model = TextModel(tok, [FIXED], top)
    first = model.first()
    first.text = FIXED
    assert changed_reply(model, PROMPT, first, _params(model), lambda: model.tool_call_constraint(TOOLS),
                         TOOLS, "new_string", _unchanged) is None
    assert model.asked == []


@pytest.mark.parametrize(("temperature", "search", "changed"), [(0.0, True, True), (0.6, True, False), (0.0, False, False)])
def test_engine_policy_searches_greedy_replies_only(scene, temperature, search, changed):
    tok, *_, top = scene
    model = TextModel(tok, [FIXED, OTHER, STILL_UNCHANGED], top)
    policy = EnginePolicy(model, record_routing=False, edit_search=search)
    streamed: list[str] = []
    result = asyncio.run(policy.complete(None, TOOLS, max_tokens=200, temperature=temperature, prompt_ids=PROMPT,
                                         on_text=streamed.append))
    [call] = result.tool_calls
    assert call.arguments["new_string"] == ("x = a + b" if changed else "x = a - b")
    assert ("changed_edit" in result.sampler) == changed
    assert len(result.completion_token_ids) == len(result.logprobs) == len(result.forced)
    assert sum(result.forced) == int(changed) and bool(model.asked) == changed
