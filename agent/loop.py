"""The agent loop: ask the policy, run the tool calls it makes (read-only ones side by side,
writes to one file one after another, terminal commands alone), feed the results back, until the
model answers without a call, a limit is hit, or the turn is cancelled.

Every step is reported as ACP `session/update` payloads (agent/events.py) and written to the
session log (agent/session_log.py); a checkpoint precedes every batch that may write, so the
workspace can be restored to any step, shell changes included.

Prompts are token-native when the policy has a tokenizer (agent/trajectory.py): the next prompt
extends the last one by the completion's ids as sampled and the new messages' ids, so the log
holds exactly what the model saw; a text-only policy gets the conversation as messages.

    agent = Agent(policy, registry, ctx, system=system_prompt(root), events=sink, log=log)
    result = await agent.run_turn("fix the failing test")      # cancel the task to stop it

Stop reasons are ACP's: end_turn, max_turn_requests, max_tokens, cancelled, refusal. A turn that
fails (the endpoint dies, the disk fills) logs an `error` record and raises; either way every call
of the last reply has a result for the next turn. Broken calls cost one bounded note a step, at
most `max_calls_per_step` calls of a reply run, and a turn repeating its last steps `stop_repeats`
times stops there (agent/repetition.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent import events as ev
from agent.call_labels import (
    absolute_path,
    call_locations,
    checkpoint_label,
    permission_proposal,
    result_content,
    tool_title,
)
from agent.harness_notes import NOT_RUN, STOPPED_RUNNING, answer_unanswered, calls_note
from agent.live_output import LiveOutput
from agent.policy import Policy, Reply
from agent.redact import redact_obj
from agent.repetition import RepetitionWatch, step_signature
from agent.review import Reviewed, Revision, apply_revision, unpack
from agent.tools.base import ToolContext, ToolRegistry, ToolResult, run_guarded, truncate
from agent.tools.files import CHANGED_KEY, READS_KEY, files_read
from agent.tools.todo import STATE_KEY as TODOS_KEY
from agent.trajectory import Prompt, TokenStream, common_prefix, shorten_oldest_tool_results
from agent.write_locks import WriteLocks, finish_started, wait_through_cancels, write_paths
from model.toolcalls import ToolCall

MIN_REPLY_TOKENS = 32
"""A prompt that leaves the reply less room than this ends the turn: no tool call fits in it."""
STOP_S = 2.0
"""How long a stopped step waits for its calls to end, beyond a write's grace, before it answers them
(together under the 10 s a server gives a stopping turn, server/hub.py)."""


@dataclass(kw_only=True)
class LoopConfig:
    max_steps: int = 25
    """Model calls in one turn before stopping with max_turn_requests."""
    max_tokens_per_step: int = 1024
    """Most tokens one model call may generate."""
    max_turn_tokens: int | None = None
    """Most tokens the model calls of one turn may generate together (a benchmark's budget);
    each call may generate what is left of it; None: no limit beyond the steps'."""
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    """Seeds the first model call's sampler (the next ones take seed + 1, ...); None: each call
    draws its own, and the log records it."""
    tool_result_chars: int = 40_000
    """A safety net above the tools' own caps (which keep what matters, e.g. a log's tail)."""
    max_diff_chars: int = 200_000
    """The turn's final diff is cut to this in the session log."""
    shortened_chars: int = 400
    """What is kept of an old tool result when the context fills up."""
    max_calls_per_step: int = 64
    """Tool calls run from one model reply; more are dropped, and the model is told."""
    stop_repeats: int = 3
    """The turn stops (max_turn_requests) when its last steps repeat the steps before them this
    many times, the same calls told the same results (agent/repetition.py); 0: never."""
    write_finish_s: float = 5.0
    """A stop waits this long for a file write under way (an editor's answer to an edit) to land."""


class _ContextFull(Exception):
    """The next prompt leaves no room for a reply, with every old tool result already shortened."""


@dataclass
class TurnResult:
    stop_reason: str
    steps: int = 0
    tool_calls: int = 0
    text: str = ""
    replies: list[Reply] = field(default_factory=list)


TURN_STATE = (READS_KEY, TODOS_KEY, CHANGED_KEY)  # ToolContext.state that follows the conversation


class _TurnStart(NamedTuple):
    """What a turn found, which forgetting it puts back (state None: unknown, kept as it is)."""

    messages: list[dict[str, Any]]
    stream: TokenStream
    synced: int
    seen: int
    state: dict[str, Any] | None


class Agent:
    def __init__(
        self,
        policy: Policy,
        tools: ToolRegistry,
        ctx: ToolContext,
        *,
        system: str,
        config: LoopConfig | None = None,
        permissions: Any = None,
        ask: Callable[..., Awaitable[str | Reviewed]] | None = None,
        checkpoints: Any = None,
        log: Any = None,
        events: ev.EventSink | None = None,
    ) -> None:
        self.policy, self.tools, self.ctx = policy, tools, ctx
        self.config = config or LoopConfig()
        self.permissions, self.ask, self.checkpoints = permissions, ask, checkpoints
        self.log, self.events = log, events
        self.last_checkpoint: str | None = None
        self._turn_base: str | None = None
        self._before_turn: _TurnStart | None = None
        """What the latest turn found (None: no turn to forget)."""
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self._locks = WriteLocks()
        self._emitting: asyncio.Future | None = None
        self._model_calls = 0
        self._call_ids: set[str] = set()
        self._made_by: dict[str, str] = {}
        """Tool call id -> the model call that made it."""
        self._revisions: dict[str, Revision] = {}
        """Tool call id -> the person's revision of the edit they accepted (agent/review.py)."""
        self.stream = TokenStream(getattr(policy, "tokenizer", None))
        self._synced = 0
        """How many of `messages` the token stream holds (the last model turn included)."""
        self._seen = 0
        """How many of `messages` the model has seen (redacted for the log's sake after that)."""

    @property
    def turn_checkpoint(self) -> str | None:
        """The checkpoint taken before the latest turn's first change (restore it to undo the
        whole turn), or None when that turn changed nothing."""
        return self._turn_base

    def resume(self, messages: list[dict[str, Any]], used_call_ids: set[str], turn_checkpoint: str | None,
               tokens: Any = None, last_request: str | None = None) -> None:
        """Continues a logged session: its conversation, the call ids it used, the checkpoint that
        undoes its last turn, its token state (agent/replay.py `token_state`) and its last
        request's text (the turn a forget drops; the prompt after it is rendered from text)."""
        self.messages = messages
        self._call_ids |= used_call_ids
        self._turn_base = turn_checkpoint
        start = max((i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] == last_request),
                    default=None) if last_request is not None else None
        self._before_turn = None if start is None else _TurnStart(
            [dict(m) for m in messages[:start]], TokenStream(self.stream.tokenizer), 0, start, None)
        last_turn = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
        self._synced = self._seen = last_turn + 1
        if tokens is not None:
            self._model_calls = tokens.calls
            self.stream.restore(tokens.call_id, tokens.ids, tokens.routing_known, tokens.tools, tokens.pending)

    def tell(self, note: str) -> None:
        """A `[harness]` message the model reads before the next request: what the person did
        to the workspace between turns (agent/harness_notes.py)."""
        self.messages.append({"role": "user", "content": note})

    def forget_last_turn(self) -> None:
        """Puts the conversation back as the latest turn found it (the tool output that turn
        shortened included): the model goes on as if the turn had not happened (a rewind that
        takes the conversation back too). The next prompt extends the last call before the
        turn, token for token, and says `prefix_break: rewound`."""
        if self._before_turn is None:
            raise RuntimeError("there is no turn to forget")
        messages, self.stream, self._synced, self._seen, state = self._before_turn
        self.messages[:] = messages
        if state is not None:
            for key in TURN_STATE:
                self.ctx.state.pop(key, None)
            self.ctx.state.update(state)
        self.stream.pending = self.stream.pending or "rewound"
        self._before_turn = self._turn_base = None

    # ---- the turn --------------------------------------------------------------------------------

    async def run_turn(self, text: str) -> TurnResult:
        """One user request to the end. Cancelling the task running this stops the model and
        kills running tools; writes are atomic, so no file is left half-written."""
        self._before_turn = _TurnStart([dict(m) for m in self.messages], copy.copy(self.stream), self._synced, self._seen,
                                       copy.deepcopy({k: self.ctx.state[k] for k in TURN_STATE if k in self.ctx.state}))
        self.messages.append({"role": "user", "content": text})
        self._log("user_message", text=text)
        result = TurnResult(stop_reason="end_turn")
        self._turn_base = None
        try:
            return await self._steps(result)
        except asyncio.CancelledError:
            result.stop_reason = "cancelled"
            self._log("cancelled", by="client", step=result.steps)
            return result
        except Exception as err:  # the endpoint died, the disk filled: the turn ends with the error
            with contextlib.suppress(Exception):  # the log itself may be what failed
                self._log("error", message=f"{type(err).__name__}: {err}", kind=type(err).__name__,
                          where=f"step {result.steps}", fatal=True)
            raise
        finally:
            self._revisions.clear()  # of calls a cancelled turn never ran
            self.messages[:] = answer_unanswered(self.messages)
            await self.flush_events()
            await self._log_final_diff()

    async def _log_final_diff(self) -> None:
        """The turn's changes, from the checkpoint before its first write to now."""
        if self.checkpoints is None or self._turn_base is None or self.log is None:
            return
        diff = await asyncio.to_thread(self.checkpoints.unified_diff, self._turn_base)
        cut = len(diff) > self.config.max_diff_chars
        self._log("final_diff", diff=diff[: self.config.max_diff_chars], base_checkpoint_id=self._turn_base, truncated=cut)

    async def _steps(self, result: TurnResult) -> TurnResult:
        spent = 0
        repeats = RepetitionWatch(self.config.stop_repeats)
        for step in range(self.config.max_steps):
            left = self.config.max_tokens_per_step
            if self.config.max_turn_tokens is not None:
                left = min(left, self.config.max_turn_tokens - spent)
                if left <= 0:
                    result.stop_reason = "max_tokens"
                    return result
            result.steps = step + 1
            try:
                reply, note = await self._model_step(left)
            except _ContextFull as full:  # the model's work outgrew its context: its turn, not a fault
                result.steps = step
                self._log("error", message=str(full), kind="context_full", where=f"step {step + 1}", fatal=False)
                result.stop_reason = "max_tokens"
                return result
            spent += reply.completion_tokens
            result.replies.append(reply)
            result.text = reply.content
            if reply.finish_reason == "length" and not reply.tool_calls:
                self._correct(note)
                result.stop_reason = "max_tokens"
                return result
            if not reply.tool_calls and not reply.tool_call_errors:
                return result
            result.tool_calls += len(reply.tool_calls)
            told = len(self.messages)
            try:
                await self._run_calls(reply)
            finally:  # the model_call record holds the note however the step ends
                self._correct(note)
            period = repeats.add(step_signature(reply.tool_calls, [m["content"] for m in self.messages[told:]]))
            if period is not None:
                self._stop_repeating(period, step + 1)
                break
        result.stop_reason = "max_turn_requests"
        return result

    def _stop_repeating(self, period: int, step: int) -> None:
        """The user sees why the turn ended early; the log keeps it as a non-fatal error."""
        steps = "step" if period == 1 else f"{period} steps"
        message = (f"Stopped: the last {steps} repeated {self.config.stop_repeats} times with the same "
                   "calls and the same results.")
        self._log("error", message=message, kind="repeating", where=f"step {step}", fatal=False)
        self._emit(ev.agent_message_chunk(f"\n\n[{message}]"))

    def _correct(self, note: str) -> None:
        """Calls of the reply that did not run (malformed, past the per-reply limit): the harness
        tells the model, after the calls' results as chat formats need, so it can retry; the
        model_call record holds the same message."""
        if note:
            self.messages.append({"role": "user", "content": note})

    async def _model_step(self, max_tokens: int) -> tuple[Reply, str]:
        """One model call (at most `max_tokens`), its message added; with the harness's note on
        the calls that did not run ("" when all did)."""
        tools = self.tools.openai_tools()
        prompt = self._prompt(tools)

        def on_text(chunk: str) -> None:
            if chunk:
                self._emit(ev.agent_message_chunk(chunk))

        options: dict[str, Any] = {}  # only what a policy must know: text-only test doubles take none
        if self.config.top_p != 1.0:
            options["top_p"] = self.config.top_p
        if self.config.seed is not None:
            options["seed"] = self.config.seed + self._model_calls
        if prompt is not None:
            options["prompt_ids"] = prompt.ids
        if getattr(self.policy, "takes_quotes", False):
            options["quotes"] = await asyncio.to_thread(self._quotes)
        reply = await self.policy.complete(
            self.messages, tools, max_tokens=max_tokens,
            temperature=self.config.temperature, on_text=on_text, **options,
        )
        dropped = len(reply.tool_calls[self.config.max_calls_per_step:])
        del reply.tool_calls[self.config.max_calls_per_step:]
        note = calls_note(reply.tool_call_errors, dropped, self.config.max_calls_per_step)
        if reply.text_only:
            prompt = None
        self._unique_ids(reply.tool_calls)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in reply.tool_calls]
        self.messages.append(message)
        self._model_calls += 1
        call_id = f"m{self._model_calls}"
        self._made_by.update((c.id, call_id) for c in reply.tool_calls)
        record = self._log_call(call_id, reply, prompt, message, note)
        self.stream.commit(call_id, prompt, record)
        self._synced = len(self.messages)
        self._emit(ev.usage_update(used=reply.prompt_tokens + reply.completion_tokens, size=self.policy.context_window))
        self._redact_seen()
        return reply, note

    def _quotes(self) -> dict[str, dict[str, dict[str, str]]]:
        """For each tool argument copied from files (ToolSpec.quoted, edit_file's old_string):
        the files read this session by the names a call may give them. The engine keeps such an
        argument a piece of the file the call's `path` names (of any, if none), so it matches."""
        quoted = {spec.name: spec.quoted for spec in self.tools.specs() if spec.quoted}
        texts = files_read(self.ctx) if quoted else {}
        return {name: dict.fromkeys(keys, texts) for name, keys in quoted.items()} if texts else {}

    def _prompt(self, tools: list[dict]) -> Prompt | None:
        """The next prompt's ids for a token-native policy (None for a text-only one), with the
        oldest tool results shortened first when the context fills up (a prefix break);
        _ContextFull when even that leaves no room for a reply."""
        window, room = self.policy.context_window, self.config.max_tokens_per_step
        if not getattr(self.policy, "token_native", False):
            shorten_oldest_tool_results(self.messages, tools, window - room, self.config.shortened_chars,
                                        self.policy.count_tokens)
            return None
        prompt = self.stream.fitted_prompt(self.messages, self._synced, tools, room=room, window=window,
                                           keep_chars=self.config.shortened_chars, count_tokens=self.policy.count_tokens)
        if len(prompt.ids) + MIN_REPLY_TOKENS > self.policy.context_window:
            raise _ContextFull(f"the prompt has {len(prompt.ids)} tokens and the context window "
                               f"{self.policy.context_window}: no room for a reply; the turn ends")
        return prompt

    def _log_call(self, call_id: str, reply: Reply, prompt: Prompt | None, message: dict, note: str) -> dict:
        """Writes the model_call record; returns it as written (redacted: what the next prompt
        extends)."""
        tokens = reply.completion_tokens
        if prompt is None:  # text-only: the server's ids, shared with the last call's where they agree
            ids = reply.prompt_token_ids or []
            shared = common_prefix(self.stream.ids, ids) if self.stream.call_id and ids else 0
            parent = self.stream.call_id if shared else None
            prompt_fields = {"parent": parent, "prefix_len": shared, "prompt_token_ids": ids[shared:], "text_only": True,
                             "prefix_break": {"reason": "text_only"} if parent else None}
            routing_start = min(self.stream.routing_known, shared)
        else:
            prompt_fields = {"parent": prompt.parent, "prefix_len": prompt.prefix_len, "prompt_token_ids": prompt.delta,
                             "prefix_break": {"reason": prompt.prefix_break} if prompt.prefix_break else None}
            routing_start = prompt.routing_start
        routing = reply.routed_experts[routing_start:] if reply.routed_experts is not None else None
        completion = reply.completion_token_ids or []
        logprobs = reply.logprobs if reply.logprobs is not None and len(reply.logprobs) == len(completion) else None
        forced = reply.forced if reply.forced is not None and len(reply.forced) == len(completion) else None
        sampler = {"temperature": self.config.temperature, "top_p": self.config.top_p, "seed": None} | (reply.sampler or {})
        fields: dict[str, Any] = {
            "call_id": call_id, "model": self.policy.model_id, "text": reply.content,
            "finish_reason": reply.finish_reason, "tool_calls": message.get("tool_calls", []), **prompt_fields,
            "completion_token_ids": completion, "logprobs": logprobs,
            "forced": [int(f) for f in forced] if forced is not None else None,
            "routed_experts": routing, "routed_experts_start": routing_start,
            "weight_version": reply.weight_version, "sampler": sampler,
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": tokens,
                      "total_tokens": reply.prompt_tokens + tokens},
            "timing": {"total_s": round(reply.seconds, 4), "tokens_per_s": round(tokens / max(reply.seconds, 1e-9), 2)},
        }
        if reply.tool_call_errors:
            fields["malformed_tool_calls"] = [{"index": e.index, "message": e.message, "raw": e.raw}
                                              for e in reply.tool_call_errors]
        if note:
            fields["harness_message"] = note
        return self._log("model_call", **fields) or fields

    def _redact_seen(self) -> None:
        """Messages the model has now seen are kept as the log holds them, so a prompt rendered
        from text later (a rebuild, a text-only backend) agrees with the logged ids."""
        if self.log is not None and getattr(self.log, "redact", False):
            for message in self.messages[self._seen:]:
                if isinstance(message.get("content"), str):
                    message["content"] = self.log.redact_text(message["content"])
                if message.get("tool_calls"):
                    message["tool_calls"] = redact_obj(message["tool_calls"], ("id", "type"), known=self.log.known)
        self._seen = len(self.messages)

    def _unique_ids(self, calls: list[ToolCall]) -> None:
        """Tool call ids unique in the session, as ACP wants: models and servers often number
        calls per message (call_0, call_1, ...), so repeats get a suffix."""
        for call in calls:
            base, n = call.id or "call", 1
            while call.id in self._call_ids or not call.id:
                call.id, n = f"{base}-{n}", n + 1
            self._call_ids.add(call.id)

    # ---- tool calls ------------------------------------------------------------------------------

    async def _run_calls(self, reply: Reply) -> None:
        calls = reply.tool_calls
        group = uuid.uuid4().hex[:12]
        for call in calls:
            self._emit(ev.tool_call(call.id, tool_title(call.name, call.arguments), self.tools.kind(call.name), call.arguments,
                                    call_locations(self.ctx.workspace, call)))
        runs: list[asyncio.Future] = []
        started: set[str] = set()
        try:  # every call announced gets an answer, however the step ends (a cancel at a question too)
            allowed = await self._allow(calls)
            runs = [asyncio.ensure_future(self._run_one(c, ok, group, started)) for c, ok in zip(calls, allowed)]
            await asyncio.gather(*runs)
        finally:  # a cut-off step stops its other calls and answers those that ran (the rest get a note)
            for run in runs:
                run.cancel()  # nothing for one that ended; a write under way finishes (finish_started)
            again = await wait_through_cancels(runs, self.config.write_finish_s + STOP_S)
            self._answer(calls, runs, group, started)
            if again:  # a cancel while they stopped (a failed step's too): the turn ends as cancelled
                raise asyncio.CancelledError

    async def _allow(self, calls: list[ToolCall]) -> list[bool]:
        """Which calls may run (asking the person where the rules say to), with a checkpoint
        first when any of them may write. A call the registry would refuse (unknown tool,
        arguments off the schema) is not put to the person: it fails with the registry's message."""
        valid = [self.tools.check(c.name, c.arguments) is None for c in calls]
        allowed = [not ok or await self._permitted(c) for ok, c in zip(valid, calls)]
        writes = any(ok and fine and not self.tools.read_only(c.name) for ok, fine, c in zip(allowed, valid, calls))
        if self.checkpoints is not None and writes:
            checkpoint = await self.checkpoints.acreate(checkpoint_label(calls), self.ctx.workspace.unsaved())
            self.last_checkpoint = checkpoint.id
            self._turn_base = self._turn_base or checkpoint.id
            self._log("checkpoint", checkpoint_id=checkpoint.id, label=checkpoint.label)
        return allowed

    def _answer(self, calls: list[ToolCall], runs: list[asyncio.Future], group: str, started: set[str]) -> None:
        """Every call of the step gets its result, or, stopped by a cancel or a failed call, a
        final `failed` update (the editor shows none running) and a `cancelled` log record."""
        for i, call in enumerate(calls):
            run = runs[i] if i < len(runs) else None  # none: stopped before the calls started
            ended = run is not None and run.done() and not run.cancelled()
            failed = run.exception() if ended else None
            if ended and failed is None:
                content, _ = truncate(run.result().for_model(), self.config.tool_result_chars, "Narrow the request to see more.")
            else:
                why = f"{type(failed).__name__}: {failed}" if failed else STOPPED_RUNNING if call.id in started else NOT_RUN
                content = f"Error: {why}"
                self._emit(ev.tool_call_update(call.id, "failed", content=[ev.text_content(content)]))
                self._log("tool_call", call_id=call.id, model_call_id=self._made_by.get(call.id, ""), name=call.name,
                          arguments=call.arguments, group=group, result="", error=why, duration_s=0.0, status="cancelled")
            self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})

    async def _permitted(self, call: ToolCall) -> bool:
        if self.permissions is None:
            return True
        answers: list[str] = []

        async def ask(tool_name: str, args: dict, decision: Any) -> str:
            # Nobody to ask (headless): never do what was not allowed.
            if self.ask is None:
                answer = "reject_once"
            else:
                await self.flush_events()  # the person sees what led to the question first
                proposal = await self._proposal(call)
                answer, revised = unpack(await self.ask(proposal, decision))
                revision = Revision.of(call.name, proposal, revised, self.ctx.workspace)
                if revision is not None:
                    self._revisions[call.id] = revision
            answers.append(answer)
            return answer

        allowed = await self.permissions.check(call.name, call.arguments, ask, read_only=self.tools.read_only(call.name))
        self._log(
            "permission", call_id=call.id, tool=call.name, arguments=call.arguments,
            decision="allow" if allowed else "deny", outcome=answers[0] if answers else "auto",
            by="user" if answers and self.ask is not None else "rule", revised=call.id in self._revisions,
        )
        return allowed

    async def _run_one(self, call: ToolCall, allowed: bool, group: str, started: set[str]) -> ToolResult:
        if not allowed:
            result = ToolResult(error=f"the user did not allow {call.name} with these arguments; do something else or ask them")
        else:
            writes = not self.tools.read_only(call.name)
            paths = write_paths(self.tools.get(call.name), call.arguments) if writes else None  # None too: may write anywhere
            async with self._locks.hold(paths) if writes else contextlib.nullcontext():
                self._emit(ev.tool_call_update(call.id, "in_progress"))
                await self._refresh(call)
                started.add(call.id)
                revision = self._revisions.pop(call.id, None)
                live = LiveOutput(self._emit, call.id)  # a command's output, shown while it runs
                work = (run_guarded(call.name, lambda: apply_revision(self.ctx, revision)) if revision is not None
                        else self.tools.call(call.name, call.arguments, dataclasses.replace(self.ctx, on_output=live)))
                # A file write under way lands and is reported before a stop takes effect; a
                # command (which may write anywhere, for as long as it runs) is killed at once.
                try:
                    result = await (finish_started(work, self.config.write_finish_s) if writes and paths is not None else work)
                except BaseException:
                    live.close(flush=False)  # stopped: its final update may be out already
                    raise
                live.close()
        self._emit(ev.tool_call_update(
            call.id, "completed" if result.ok else "failed", content=result_content(self.ctx.workspace, result),
            raw_output=result.data or None,
        ))
        if "plan" in result.data:
            self._emit(ev.plan(result.data["plan"]))
        self._log(
            "tool_call", call_id=call.id, model_call_id=self._made_by.get(call.id, ""), name=call.name,
            arguments=call.arguments, group=group,
            result=result.output, error=result.error, duration_s=result.data.get("duration_s", 0.0),
            status="completed" if result.ok else ("denied" if not allowed else "failed"),
            data={k: v for k, v in result.data.items() if k not in ("old_text", "new_text")},
        )
        return result

    async def _proposal(self, call: ToolCall) -> dict[str, Any]:
        """The call as the person is asked about it, with the diff an edit would make (computed
        without writing, against the editor's text, unsaved edits included)."""
        preview = getattr(self.tools.get(call.name), "preview", None)
        if preview is not None:
            await self._refresh(call)
        proposed = await preview(call.arguments, self.ctx) if preview is not None else None
        return permission_proposal(call, self.tools.kind(call.name), self.ctx.workspace, proposed)

    async def _refresh(self, call: ToolCall) -> None:
        """Has the workspace take the files a call reads or writes afresh from the editor, when it
        can (an optional `refresh(paths)`: the ACP agent's asks its client, unsaved edits included)."""
        refresh = getattr(self.ctx.workspace, "refresh", None)
        tool = self.tools.get(call.name)
        if refresh is None or tool is None:
            return
        path = call.arguments.get("path") if isinstance(call.arguments, dict) else None
        paths = {p for p in [path, *(write_paths(tool, call.arguments) or [])] if isinstance(p, str)}
        await refresh(sorted(p for p in paths if absolute_path(self.ctx.workspace, p)))

    # ---- helpers ---------------------------------------------------------------------------------

    def _emit(self, update: dict) -> None:
        """Sends an update without blocking the caller, in order: each send waits for the last."""
        if self.events is None:
            return
        previous = self._emitting

        async def send() -> None:
            if previous is not None:
                await previous
            await self.events.emit(update)

        self._emitting = asyncio.ensure_future(send())

    async def flush_events(self) -> None:
        if self._emitting is not None:
            await asyncio.shield(self._emitting)

    def _log(self, record_type: str, **fields: Any) -> dict[str, Any] | None:
        """Writes a record; returns it as written (None without a log)."""
        if self.log is None:
            return None
        return self.log.write(record_type, **json.loads(json.dumps(fields, default=str)))
