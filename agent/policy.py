"""The model behind the agent, behind one `Policy` protocol with two backends:

- `EnginePolicy`: the in-process engine (model/engine.py), tool calls decoded under the
  constraint that keeps them well-formed, token ids, logprobs and routed experts for training;
- `EndpointPolicy`: any OpenAI-compatible server (model.serve, `vllm serve`), through
  model.client.

    policy = EnginePolicy(Engine.from_pretrained(quantize="int4"))
    reply = await policy.complete(messages, tools, on_text=print)
    reply.content, reply.tool_calls, reply.completion_token_ids, reply.logprobs
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from model.toolcalls import (
    StreamingToolCallParser,
    TextDelta,
    ToolCall,
    ToolCallError,
    ToolCallFailed,
    ToolCallFinished,
)


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
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


class Policy(Protocol):
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


class EnginePolicy:
    def __init__(self, engine, *, model_id: str = "composer-mini", constrained: bool = True, record_routing: bool = True) -> None:
        self.engine = engine
        self.model_id = model_id
        self.context_window = engine.max_seq_len
        self.constrained = constrained
        self.record_routing = record_routing

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict]) -> int:
        return len(self.engine.tokenizer.encode_chat(list(messages), tools=list(tools) or None))

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        loop = asyncio.get_running_loop()
        started = loop.time()
        tools = list(tools)
        prompt = self.engine.tokenizer.encode_chat(list(messages), tools=tools or None)
        max_tokens = max(1, min(max_tokens, self.engine.max_seq_len - len(prompt) - 1))
        constraint = self.engine.tool_call_constraint(tools) if tools and self.constrained else None
        from model.sampling import SamplingParams  # torch: only the in-process engine needs it

        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, constraint=constraint,
            return_routing=self.record_routing,
        )
        parser = StreamingToolCallParser(tools or None)
        text_parts: list[str] = []
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []
        done: asyncio.Future = loop.create_future()

        def take(events) -> None:
            for event in events:
                if isinstance(event, TextDelta):
                    text_parts.append(event.text)
                    if on_text is not None:
                        on_text(event.text)
                elif isinstance(event, ToolCallFinished):
                    calls.append(event.call)
                elif isinstance(event, ToolCallFailed):
                    errors.append(event.error)

        # The engine's thread may still report after a cancelled caller's event loop has closed
        # (a run cut short at its end): those reports have nobody to go to, and raising would
        # stop the engine's thread for every other caller.
        def on_event(event) -> None:
            events = parser.feed(event.text)
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(take, events)

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
        take(parser.finish())
        routing = result.routed_experts.tolist() if result.routed_experts is not None else None
        return Reply(
            content="".join(text_parts).strip(), tool_calls=calls, tool_call_errors=errors,
            finish_reason="tool_calls" if calls else result.finish_reason,
            prompt_token_ids=prompt, completion_token_ids=result.token_ids, logprobs=result.logprobs,
            routed_experts=routing, prompt_tokens=len(prompt), completion_tokens=len(result.token_ids),
            seconds=loop.time() - started,
        )


class EndpointPolicy:
    """Any OpenAI-compatible chat endpoint. Token ids and routed experts are asked for with the
    vendor fields our server and vLLM understand; servers that ignore them still work."""

    def __init__(self, base_url: str, *, model: str | None = None, api_key: str | None = None, context_window: int = 8192) -> None:
        from model.client import OpenAICompatibleClient

        self.client = OpenAICompatibleClient(base_url, api_key=api_key, model=model)
        self.model_id = model or base_url
        self.context_window = context_window

    async def aclose(self) -> None:
        await self.client.close()

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict]) -> int:
        import json

        return len(json.dumps([list(messages), list(tools)])) // 3  # a conservative estimate

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None) -> Reply:
        from model.client import ChatAccumulator

        loop = asyncio.get_running_loop()
        started = loop.time()
        acc = ChatAccumulator()
        extra: dict[str, Any] = {"return_token_ids": True}
        async for delta in self.client.stream_chat(
            list(messages), tools=list(tools) or None, max_tokens=max_tokens, temperature=temperature,
            logprobs=True, extra=extra,
        ):
            acc.add(delta)
            if delta.content and on_text is not None:
                on_text(delta.content)
        result = acc.result()
        usage = result.usage
        return Reply(
            content=result.content.strip(), tool_calls=list(result.tool_calls),
            tool_call_errors=list(result.tool_call_errors), finish_reason=result.finish_reason or "stop",
            prompt_token_ids=result.prompt_token_ids, completion_token_ids=result.completion_token_ids,
            logprobs=[lp.logprob for lp in result.logprobs] if result.logprobs else None,
            routed_experts=result.routed_experts,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            seconds=loop.time() - started,
        )
