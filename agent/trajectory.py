"""The token stream of a session as the model sees it: token-native prompts.

A session's next prompt is the previous prompt's ids, plus the completion's ids as sampled, plus
the encoding of only the new messages (tool results, the harness's corrective message, the next
user message: `Tokenizer.encode_continuation`). Old turns are never re-rendered, so what the
model saw is what the session log holds, token for token, and the log stores each call's new ids
only (a delta against its parent call).

Where the exact prefix cannot hold, the prompt says why (`prefix_break`) and the trajectory
splits there: old tool output was shortened to fit the context, the session was loaded from a
log that holds no usable ids, the tools or the model changed, the chat template rewrites earlier
turns, the person took a turn back out of the conversation (`rewound`), or the parent call's ids
were redacted (the model saw a secret there; from this call on it sees the tag the log holds).

    stream = TokenStream(tokenizer)
    prompt = stream.next_prompt(messages, new_from=synced, tools=tools)   # a Prompt
    reply = await policy.complete(messages, tools, prompt_ids=prompt.ids, ...)
    record = log.write("model_call", parent=prompt.parent, prompt_token_ids=prompt.delta, ...)
    stream.commit("m3", prompt, record)           # goes on from what the log holds
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from model.tokenizer import TemplateRewritesHistory

SHORTENED_NOTE = "\n[older tool output shortened to save context; call the tool again if you need it]"
REBUILD = frozenset({"rebuilt_from_text", "model_changed"})
"""Breaks after which the next prompt is rendered from the conversation's text."""


@dataclass
class Prompt:
    """One model call's prompt and how it relates to the call before it."""

    ids: list[int]
    parent: str | None
    """The call whose logged prompt + completion ids this prompt starts with (their first
    `prefix_len`); None: the prompt stands alone."""
    prefix_len: int
    prefix_break: str | None
    """Why this prompt is not the parent's exact extension (None: it is)."""
    routing_start: int
    """The first position whose routed experts the log does not hold yet."""

    @property
    def delta(self) -> list[int]:
        """The ids the log stores for this prompt."""
        return self.ids[self.prefix_len:]


TokenCount = Callable[[Sequence[dict], Sequence[dict]], int]
"""(messages, tools) -> how many tokens the policy's prompt of them takes (Policy.count_tokens)."""


def shorten_oldest_tool_results(messages: Sequence[dict], tools: Sequence[dict], budget: float, keep_chars: int,
                                count_tokens: TokenCount) -> bool:
    """Cuts the oldest tool results (in place) to their first `keep_chars` characters and a note
    until the conversation counts at most `budget` tokens; returns whether it cut any. The whole is
    counted once, then lowered by what each cut saves: linear in the conversation, however long."""
    used = count_tokens(messages, tools)
    shortened = False
    for message in messages:
        if used <= budget:
            break
        content = message.get("content") or ""
        if message["role"] == "tool" and len(content) > keep_chars and not content.endswith(SHORTENED_NOTE):
            before = count_tokens([message], [])
            message["content"] = content[:keep_chars] + SHORTENED_NOTE
            used -= before - count_tokens([message], [])
            shortened = True
    return shortened


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


class TokenStream:
    """The ids of the last model call (prompt and completion, as the log holds them) and what
    the next prompt must say about itself. `tokenizer` None: only text-only calls are tracked."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.call_id: str | None = None
        self.tools_key: str | None = None
        self.routing_known = 0
        """Positions of `ids` whose routed experts the log holds."""
        self.pending: str | None = None
        """A break the next prompt carries (redaction, or one of REBUILD)."""

    def next_prompt(self, messages: Sequence[dict], new_from: int, tools: Sequence[dict]) -> Prompt:
        """The prompt for the conversation `messages`, whose first `new_from` messages the
        stream already holds (the last of them the model's own turn)."""
        key = json.dumps(list(tools))
        if self.call_id is None or self.pending in REBUILD:
            return self.rebuild(messages, tools, self.pending)
        if key != self.tools_key:
            return self.rebuild(messages, tools, "tools_changed")
        try:
            more = self.tokenizer.encode_continuation(
                list(messages[new_from:]), list(tools) or None, last_token=self.ids[-1] if self.ids else None)
        except TemplateRewritesHistory:
            return self.rebuild(messages, tools, "template")
        return Prompt(self.ids + more, self.call_id, len(self.ids), self.pending, self._routing_start(len(self.ids)))

    def fitted_prompt(self, messages: list[dict], new_from: int, tools: Sequence[dict], *, room: int,
                      window: float, keep_chars: int, count_tokens: TokenCount) -> Prompt:
        """`next_prompt`, but when it leaves the reply less than `room` of the context `window`,
        with the oldest tool results shortened first (`shorten_oldest_tool_results`, in
        `messages`) and the conversation rendered again: a `context_shortened` break."""
        prompt = self.next_prompt(messages, new_from, tools)
        if len(prompt.ids) + room <= window:
            return prompt
        if not shorten_oldest_tool_results(messages, tools, window - room, keep_chars, count_tokens):
            return prompt
        return self.rebuild(messages, tools, "context_shortened")

    def rebuild(self, messages: Sequence[dict], tools: Sequence[dict], reason: str | None) -> Prompt:
        """The whole conversation rendered from its text; it still shares the ids it starts with
        with the last call (a log stores only the rest)."""
        self.tools_key = json.dumps(list(tools))
        ids = self.tokenizer.encode_prompt(messages, tools)
        if self.call_id is None:
            return Prompt(ids, None, 0, reason, 0)
        shared = common_prefix(self.ids, ids)
        return Prompt(ids, self.call_id, shared, reason, self._routing_start(shared))

    def _routing_start(self, prefix_len: int) -> int:
        return min(self.routing_known, prefix_len)

    def commit(self, call_id: str, prompt: Prompt | None, record: dict[str, Any]) -> None:
        """The call `call_id` is done and `record` holds its ids as logged (redacted): the next
        prompt extends those. `prompt` None: a text-only call (its ids, if the server sent any,
        are the server's own rendering)."""
        prefix = self.ids[: record.get("prefix_len") or 0] if record.get("parent") else []
        prompt_ids, completion = record.get("prompt_token_ids") or [], record.get("completion_token_ids") or []
        if prompt is None and not (prompt_ids or completion):
            self.ids, self.call_id, self.routing_known = [], None, 0
            self.pending = "rebuilt_from_text"
            return
        self.ids = prefix + prompt_ids + completion
        self.call_id = call_id
        rows = record.get("routed_experts")
        start = record.get("routed_experts_start", len(prefix))
        self.routing_known = start + len(rows) if rows is not None else min(self.routing_known, start)
        self.pending = "redaction" if record.get("redactions") else None
        if prompt is None:
            self.pending = "rebuilt_from_text"

    def restore(self, call_id: str | None, ids: list[int], routing_known: int, tools: Sequence[dict] | None,
                pending: str | None) -> None:
        """Continues a logged session (agent/replay.py `token_state`)."""
        self.call_id, self.ids, self.routing_known, self.pending = call_id, ids, routing_known, pending
        self.tools_key = json.dumps(list(tools)) if tools is not None else None
