"""The model behind the agent, behind one `Policy` protocol with two backends:

- `EnginePolicy`: the in-process engine (model/engine.py), tool calls decoded under the
  constraint that keeps them well-formed, token ids, logprobs, the forced-token mask and routed
  experts for training;
- `EndpointPolicy`: any OpenAI-compatible server (model.serve, `vllm serve`), through
  model.client: token-in, token-out (`/v1/completions` with the prompt as ids) when it has the
  model's tokenizer and the server takes ids, else the chat API (the reply says `text_only`).

    policy = EnginePolicy(Engine.from_pretrained(quantize="int4"))
    reply = await policy.complete(messages, tools, on_text=print)          # renders `messages`
    reply = await policy.complete(messages, tools, prompt_ids=ids, ...)    # exactly these ids
    reply.content, reply.tool_calls, reply.completion_token_ids, reply.logprobs, reply.forced

A policy with a `tokenizer` and `token_native` true takes `prompt_ids`: the agent loop then builds
every prompt token-natively (agent/trajectory.py). Logprobs are in the "sampling" convention
(model/sampling.py): an endpoint's are kept when the server says it follows it, or when the
temperature is 0 or 1 (where every convention agrees), and are None otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from model.toolcalls import (
    StreamingToolCallParser,
    TextDelta,
    ToolCall,
    ToolCallError,
    ToolCallFailed,
    ToolCallFinished,
)

log = logging.getLogger(__name__)


@dataclass
class Reply:
    """One model call's result."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str
    tool_call_errors: list[ToolCallError] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    routed_experts: list | None = None
    """(positions, layers, k) for every fed position: the prompt's, then the completion's but
    the last."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    forced: list[bool] | None = None
    """Per completion token: the tool-call constraint forced it (None: the backend did not say)."""
    weight_version: int | str | None = None
    sampler: dict[str, Any] | None = None
    """What sampled it: temperature, top_p, seed."""
    text_only: bool = False
    """The backend took the conversation as text, not `prompt_ids`."""


class Policy(Protocol):
    """What the agent loop needs of a model. A token-native policy also has `tokenizer` and
    `token_native = True`, and its `complete` takes `prompt_ids` (the exact prompt), `top_p` and
    `seed`; the loop passes those only to policies that need them. A policy with `takes_quotes =
    True` also takes `quotes` (the texts that quoted tool arguments are copied from, see
    ToolSpec.quoted)."""

    model_id: str
    context_window: int

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict]) -> int: ...

    async def complete(
        self,
        messages: Sequence[dict],
        tools: Sequence[dict],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        on_text: Callable[[str], None] | None = None,
    ) -> Reply: ...


class _Text:
    """The model's streamed text -> what the editor is shown (tool-call blocks removed), the
    calls, and the blocks that could not be used."""

    def __init__(self, tools: list[dict], on_text: Callable[[str], None] | None) -> None:
        self.parser = StreamingToolCallParser(tools or None)
        self.on_text = on_text
        self.parts: list[str] = []
        self.calls: list[ToolCall] = []
        self.errors: list[ToolCallError] = []

    def feed(self, text: str) -> None:
        self._take(self.parser.feed(text))

    def finish(self) -> None:
        self._take(self.parser.finish())

    def _take(self, events) -> None:
        for event in events:
            if isinstance(event, TextDelta):
                self.parts.append(event.text)
                if self.on_text is not None:
                    self.on_text(event.text)
            elif isinstance(event, ToolCallFinished):
                self.calls.append(event.call)
            elif isinstance(event, ToolCallFailed):
                self.errors.append(event.error)

    @property
    def content(self) -> str:
        return "".join(self.parts).strip()


def _seed(seed: int | None) -> int:
    """The seed a call samples with: the caller's, or a fresh one (so the log can record it)."""
    return seed if seed is not None else secrets.randbits(63)


class EnginePolicy:
    token_native = True
    takes_quotes = True

    def __init__(self, engine, *, model_id: str = "composer-mini", constrained: bool = True, record_routing: bool = True) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.model_id = model_id
        self.context_window = engine.max_seq_len
        self.constrained = constrained
        self.record_routing = record_routing

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict]) -> int:
        return len(self.engine.tokenizer.encode_prompt(messages, tools))

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, top_p=1.0, seed=None,
                       on_text=None, prompt_ids=None, quotes=None) -> Reply:
        loop = asyncio.get_running_loop()
        started = loop.time()
        tools = list(tools)
        prompt = list(prompt_ids) if prompt_ids is not None else self.tokenizer.encode_chat(list(messages), tools=tools or None)
        max_tokens = max(1, min(max_tokens, self.engine.max_seq_len - len(prompt) - 1))
        constraint = self.engine.tool_call_constraint(tools, quotes=quotes) if tools and self.constrained else None
        from model.sampling import SamplingParams  # torch: only the in-process engine needs it

        seed = _seed(seed)
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, constraint=constraint,
            return_routing=self.record_routing,
        )
        text = _Text(tools, on_text)
        done: asyncio.Future = loop.create_future()

        # The engine's thread may still report after a cancelled caller's event loop has closed
        # (a run cut short at its end): those reports have nobody to go to, and raising would
        # stop the engine's thread for every other caller.
        def on_event(event) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(text.feed, event.text)

        def on_done(result) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(result))

        cancel = self.engine.submit(prompt, params, on_event=on_event, on_done=on_done)
        try:
            result = await done
        finally:
            cancel()
        if isinstance(result, BaseException):
            raise result
        text.finish()
        routing = result.routed_experts.tolist() if result.routed_experts is not None else None
        return Reply(
            content=text.content, tool_calls=text.calls, tool_call_errors=text.errors,
            finish_reason="tool_calls" if text.calls else result.finish_reason,
            prompt_token_ids=prompt, completion_token_ids=result.token_ids, logprobs=result.logprobs,
            routed_experts=routing, prompt_tokens=len(prompt), completion_tokens=len(result.token_ids),
            seconds=loop.time() - started, forced=list(getattr(result, "forced", None) or [False] * len(result.token_ids)),
            weight_version=result.weight_version,
            sampler={"temperature": temperature, "top_p": top_p, "seed": seed},
        )


def endpoint_tokenizer(model: str | None) -> Any:
    """The tokenizer of the model an endpoint serves, when it is on this machine: `model` is a
    checkpoint directory, or composer-mini's name (its directory, when built); else None."""
    from model.home import DEFAULT_MODEL, default_model_dir
    from model.tokenizer import Tokenizer

    if not model:
        return None  # the server's first model, whatever it is: no guessing
    path = default_model_dir() if model == DEFAULT_MODEL else Path(model).expanduser()
    return Tokenizer.from_dir(path) if (path / "tokenizer.json").is_file() else None


class EndpointPolicy:
    """Any OpenAI-compatible endpoint. With the model's `tokenizer`, prompts go as ids to
    `/v1/completions` (`token_in`: None tries it and falls back to the chat API for good when
    the server refuses ids, True insists, False never tries); the chat API's replies are
    `text_only`. Token ids and routed experts are asked for with the vendor fields our server
    and vLLM understand, and with ids go the files quoted arguments are copied from (`quotes`,
    model/quotes_protocol.py: model.serve's constraint copies `old_string` from them as the
    in-process engine does); servers that ignore them still work."""

    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None,
                 context_window: int = 8192, tokenizer: Any = None, token_in: bool | None = None) -> None:
        from model.client import OpenAICompatibleClient

        self.client = OpenAICompatibleClient(base_url, api_key=api_key, model=model)
        self.model_id = model or base_url
        self.context_window = context_window
        self.tokenizer = tokenizer
        self.token_in = token_in if tokenizer is not None else False

    @property
    def token_native(self) -> bool:
        return self.tokenizer is not None and self.token_in is not False

    @property
    def takes_quotes(self) -> bool:
        """Quotes go with token ids only: the chat API may reach a server that refuses the field."""
        return self.token_native

    async def aclose(self) -> None:
        await self.client.close()

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict]) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode_prompt(messages, tools))
        return len(json.dumps([list(messages), list(tools)])) // 3  # a conservative estimate

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, top_p=1.0, seed=None,
                       on_text=None, prompt_ids=None, quotes=None) -> Reply:
        from model.client import APIError

        seed = _seed(seed)
        if prompt_ids is not None and self.token_native:
            text = _Text(list(tools), on_text)
            try:
                reply = await self._complete_ids(list(prompt_ids), list(tools), text, max_tokens, temperature, top_p,
                                                 seed, quotes)
            except APIError as err:
                if self.token_in is not None or text.parts or err.status not in (400, 404, 405, 422):
                    raise
                log.warning("%s takes no token ids (%s); using the chat API, text only", self.client.base_url, err)
                self.token_in = False
            else:
                self.token_in = True
                return reply
        return await self._complete_chat(list(messages), list(tools), on_text, max_tokens, temperature, top_p, seed)

    async def _complete_ids(self, prompt: list[int], tools: list[dict], text: _Text, max_tokens: int,
                            temperature: float, top_p: float, seed: int, quotes: dict | None) -> Reply:
        from model.completions_protocol import CompletionAccumulator
        from model.quotes_protocol import encode

        started = asyncio.get_running_loop().time()
        acc = CompletionAccumulator()
        extra: dict[str, Any] = {"return_token_ids": True, "return_routed_experts": True}
        if tools:
            extra |= {"tools": tools, "tool_choice": "auto"}
        if tools and quotes and (field := encode(quotes)):
            extra["quotes"] = field
        async for delta in self.client.stream_completion(
            prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, logprobs=0, extra=extra,
        ):
            acc.add(delta)
            text.feed(delta.text)
        text.finish()
        result = acc.result()
        ids = result.token_ids
        comparable = result.logprob_convention == "sampling" or temperature in (0.0, 1.0)
        return Reply(
            content=text.content, tool_calls=text.calls, tool_call_errors=text.errors,
            finish_reason="tool_calls" if text.calls else (result.finish_reason or "stop"),
            prompt_token_ids=prompt, completion_token_ids=ids,
            logprobs=result.logprobs if comparable else None, routed_experts=_routing(result.routed_experts),
            prompt_tokens=len(prompt), completion_tokens=len(ids),
            seconds=asyncio.get_running_loop().time() - started,
            forced=[bool(f) for f in result.forced] if result.forced is not None else None,
            weight_version=result.weight_version, sampler={"temperature": temperature, "top_p": top_p, "seed": seed},
        )

    async def _complete_chat(self, messages: list[dict], tools: list[dict], on_text, max_tokens: int,
                             temperature: float, top_p: float, seed: int) -> Reply:
        from model.client import ChatAccumulator

        loop = asyncio.get_running_loop()
        started = loop.time()
        acc = ChatAccumulator()
        async for delta in self.client.stream_chat(
            messages, tools=tools or None, max_tokens=max_tokens, temperature=temperature,
            top_p=top_p if top_p != 1.0 else None, seed=seed, logprobs=True, extra={"return_token_ids": True},
        ):
            acc.add(delta)
            if delta.content and on_text is not None:
                on_text(delta.content)
        result = acc.result()
        usage = result.usage
        comparable = temperature in (0.0, 1.0)
        return Reply(
            content=result.content.strip(), tool_calls=list(result.tool_calls),
            tool_call_errors=list(result.tool_call_errors), finish_reason=result.finish_reason or "stop",
            prompt_token_ids=result.prompt_token_ids, completion_token_ids=result.completion_token_ids,
            logprobs=[lp.logprob for lp in result.logprobs] if result.logprobs and comparable else None,
            routed_experts=result.routed_experts,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            seconds=loop.time() - started, sampler={"temperature": temperature, "top_p": top_p, "seed": seed},
            text_only=True,
        )


def _routing(value: Any) -> list | None:
    """Routed experts as nested lists: ours send them so; vLLM sends a base64 `.npy` array."""
    if value is None or isinstance(value, list):
        return value
    import base64
    import io

    import numpy as np

    return np.load(io.BytesIO(base64.b64decode(value))).tolist()
