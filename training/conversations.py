"""Text-only sessions as demonstrations: a model served through a chat API (`composer-lsp
--endpoint URL`, a stronger model than the policy) leaves a log of text, not of the policy's
tokens, so its segments have nothing to train on. Its conversation is rendered again here, in
the policy's own token format, as the harness would have fed the policy the same turns.

    line = conversation_line(records, session)          # training/data.py: conversations.jsonl
    samples = conversation_samples(line, tokenizer)     # training/logged.py: the trainer's Samples

The line keeps the session's conversation as the loop built it (agent/replay.py `conversation`:
the logged system prompt, requests, replies with their calls, tool results in call order, the
harness's notes, without turns a rewind took back) and the tools the session offered. The
samples follow the harness's token stream (agent/trajectory.py `TokenStream`): the first prompt
rendered whole, each later one the previous prompt and reply plus only the new messages, each
reply written as the policy writes replies (training/demos.py `rendered_ids`). So a sample is, token
for token, what a token-native session with the same replies logs (tests hold it to that, and to
the live teacher's samples, training/teacher.py), within the limits below.

Only replies train: prompts, tool results and notes are context (loss mask 0), and so is a reply
the harness had to correct (a malformed call, which the rendered reply would silently fix; calls
past a step's limit), one cut off at its length limit, and one in which a secret the model wrote
is a redaction tag. Where the conversation outgrows the policy's context (a stronger model's often
does), the oldest tool output is shortened as the harness shortens it for the policy
(`TokenStream.fitted_prompt` with LoopConfig's defaults) and a new sample starts there; the
conversation ends only before a reply that would not fit even then. A session reloaded in an
editor was continued under the system prompt built then, where this renders the one its log began
with.

The samples are off-policy (no behaviour logprobs of the policy), trained by reward-filtered
likelihood on the session's reward (training/data.py), like the endpoint warm start's
(training/teacher.py) but from logs the person already has.

Tests: .venv/bin/python -m pytest tests/training/test_conversations.py
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from agent.loop import MIN_REPLY_TOKENS, LoopConfig
from agent.redact import TAG
from agent.replay import conversation, remembered
from agent.trajectory import TokenStream
from model.toolcalls import ToolCall
from training.buffer import Sample
from training.corrections import call_fields

OFF_POLICY = "text-only: another model's replies, rendered in the policy's tokens"


def conversation_line(records: list[dict[str, Any]], session: dict[str, Any]) -> dict[str, Any] | None:
    """The dataset line of a session whose every model call was text-only (None otherwise, or
    when the log does not hold the system prompt), beside `session`'s fields."""
    header = records[0] if records and records[0].get("type") == "session" else {}
    calls = [r for r in remembered(records) if r.get("type") == "model_call"]
    if not calls or not all(c.get("text_only") for c in calls) or not isinstance(header.get("system_prompt"), str):
        return None
    untrained = [i for i, call in enumerate(calls) if not _as_written(call)]
    return {**session, "id": f"{session['session_id']}:conversation", "start_reason": "conversation",
            "messages": conversation(records, header["system_prompt"]), "tools": header.get("tools") or [],
            "untrained_replies": untrained, "off_policy": OFF_POLICY}


def _as_written(call: dict[str, Any]) -> bool:
    """Whether the logged reply is the model's as it wrote it and as the next prompt says: not
    corrected by the harness (a malformed call, calls past the step's limit: `harness_message`),
    not cut at its length limit, no secret it wrote replaced by a redaction tag."""
    return not (call.get("malformed_tool_calls") or call.get("harness_message") or call.get("finish_reason") == "length"
                or TAG.search(json.dumps([call.get("text"), call.get("tool_calls")])))


def conversation_samples(line: dict[str, Any], tokenizer: Any, *, max_tokens: int | None = None) -> list[Sample]:
    """The line's conversation in the policy's tokens: one Sample while the stream extends its
    prompt exactly, a new one where the chat template or a shortening makes it start over, to fit
    `max_tokens` (the policy's context; None: no limit)."""
    from training.demos import rendered_ids  # training.demos imports the harness's task runner

    messages, tools = copy.deepcopy(line["messages"]), line["tools"]  # shortened in place, as the loop does
    limit, loop = max_tokens or math.inf, LoopConfig()

    def count(some: list[dict], schemas: list[dict]) -> int:  # as the policy counts: EnginePolicy.count_tokens
        return len(tokenizer.encode_prompt(some, schemas))
    untrained = set(line.get("untrained_replies") or ())
    reward = math.nan if line.get("reward") is None else float(line["reward"])
    stream = TokenStream(tokenizer)
    pieces: list[tuple[list[int], list[bool]]] = []
    synced = replies = 0
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = stream.fitted_prompt(messages[:index], synced, tools, room=loop.max_tokens_per_step, window=limit,
                                      keep_chars=loop.shortened_chars, count_tokens=count)
        calls = [ToolCall(**call_fields(c)) for c in message.get("tool_calls") or []]
        reply = rendered_ids(tokenizer, message.get("content") or "", calls)
        if len(prompt.ids) + max(len(reply), MIN_REPLY_TOKENS) > limit:
            break  # no room for this reply even with old output shortened: the harness stops there
        if not pieces or prompt.prefix_len != len(pieces[-1][0]):
            pieces.append(([], []))
        tokens, mask = pieces[-1]
        delta = prompt.ids[len(tokens):]
        tokens += delta + reply
        mask += [False] * len(delta) + [replies not in untrained] * len(reply)
        stream.commit(f"m{replies + 1}", prompt, {"parent": prompt.parent, "prefix_len": prompt.prefix_len,
                                                   "prompt_token_ids": prompt.delta, "completion_token_ids": reply})
        synced, replies = index + 1, replies + 1
    return [Sample(tokens=tokens, mask=mask, behaviour_logprobs=[math.nan] * len(tokens), reward=reward,
                   weight_version=-1, off_policy=True, stats={"conversation": 1})
            for tokens, mask in pieces if any(mask)]

