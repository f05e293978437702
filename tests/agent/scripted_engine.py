"""A scripted engine: the test double for the model behind the real EnginePolicy. Each request
is answered with the next scripted completion's ids, streamed as the engine streams them, and
the exact prompt ids it was given are kept, so tests compare logs and datasets with what the
engine itself saw and sampled.

    engine = ScriptedEngine(tokenizer, [ids_1, ids_2, ...])
    policy = EnginePolicy(engine)
    ...
    engine.seen       # [(prompt ids, completion ids), ...] per request

`Echo` is a tool that returns what it is told, so a test chooses every tool output.
`TextPolicy` is a policy with no tokenizer: its calls are logged text-only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch

from agent.policy import Reply
from agent.tools.base import ToolResult, ToolSpec
from model.sequence import Completion, StreamEvent

LAYERS, TOP_K = 2, 2


def routing_of(position: int, token: int) -> list[list[int]]:
    """The experts the scripted model routes a fed token to: a function of where it is and what
    it is, so the experts a dataset keeps for a position can be checked against its token."""
    return [[(token + position + layer) % 8, (3 * token + layer) % 8] for layer in range(LAYERS)]


class ScriptedEngine:
    def __init__(self, tokenizer, script: list[list[int]], *, forced: list[list[bool]] | None = None,
                 max_seq_len: int = 1 << 20, weight_version: int = 3,
                 on_submit: Callable[[list[int]], None] | None = None) -> None:
        self.tokenizer, self.max_seq_len, self.weight_version = tokenizer, max_seq_len, weight_version
        self.script = list(script)
        self.forced = list(forced) if forced is not None else None
        self.seen: list[tuple[list[int], list[int]]] = []
        self.quotes: list[dict | None] = []
        """Per request with tools: the texts quoted arguments were to be copied from."""
        self.on_submit = on_submit

    def tool_call_constraint(self, tools, mode="auto", quotes=None):
        self.quotes.append(quotes)
        return None  # the script's ids are fixed: nothing to constrain

    def submit(self, prompt_ids, params, on_event, on_done):
        if self.on_submit is not None:
            self.on_submit(list(prompt_ids))
        ids = self.script.pop(0) if self.script else [*self.tokenizer.encode("Done."), self.tokenizer.eos_token_id]
        forced = self.forced.pop(0) if self.forced else [False] * len(ids)
        self.seen.append((list(prompt_ids), list(ids)))
        stops = set(self.tokenizer.stop_token_ids)
        detok, text = self.tokenizer.incremental_decoder(), ""
        for i, token in enumerate(ids):
            if token in stops:
                piece = ""
            else:
                piece = detok.feed(token) + (detok.flush() if i == len(ids) - 1 else "")
            text += piece
            last = i == len(ids) - 1
            on_event(StreamEvent([token], piece, [-0.5], [], last, "stop" if last else None, forced=[forced[i]]))
        fed = [*prompt_ids, *ids][:-1]
        routing = torch.tensor([routing_of(p, t) for p, t in enumerate(fed)], dtype=torch.int16)
        finish = "stop" if ids and ids[-1] in stops else "length"
        on_done(Completion(list(prompt_ids), list(ids), text, [-0.5] * len(ids), [], finish, routing, 0.0, 0.0,
                           forced=list(forced), weight_version=self.weight_version))
        return lambda: None


class Echo:
    """Returns its `out` argument: the tool output the test chose."""

    spec = ToolSpec("echo", "says what it is told", {"type": "object", "properties": {
        "out": {"type": "string"}, "n": {"type": "integer"}}}, read_only=True)

    def paths(self, args):
        return []

    async def run(self, args: dict, ctx: Any) -> ToolResult:
        return ToolResult(output=args.get("out", ""))


def echo_call(tokenizer, out: str, text: str = "") -> list[int]:
    """A completion's ids: `text`, one echo call, the end-of-turn token."""
    return call_ids(tokenizer, "echo", {"out": out}, text)


def call_ids(tokenizer, name: str, arguments: dict, text: str = "") -> list[int]:
    """A completion's ids: `text`, one call of tool `name`, the end-of-turn token."""
    block = f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'
    return [*tokenizer.encode(text + block), tokenizer.eos_token_id]


class TextPolicy:
    """A text-only policy (a test double for the model): no tokenizer, no ids
    (the calls it makes are logged `text_only`)."""

    model_id = "composer-mini"
    context_window = 100_000

    def count_tokens(self, messages, tools) -> int:
        return 0

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        return Reply("Hello.", [], "stop")
