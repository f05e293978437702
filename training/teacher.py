"""Warm-start demonstrations from a stronger model: its attempts at the train tasks, made through
any OpenAI-compatible endpoint inside this harness, re-rendered in the policy's own token format.

    python -m training.rl --preset cpu --train.warm-start endpoint --train.endpoint http://HOST:8000/v1 \
        [--train.endpoint-model NAME]
    samples = await endpoint_demonstrations(tasks, tokenizer, run_dir / "demos", url, model=NAME)

A teacher has its own tokenizer and chat template, so its token ids (when the server returns
any) mean nothing to the policy, and a chat-API log is text only. `TeacherPolicy` is therefore
the policy as far as the harness knows: token-native, the prompts built with the policy's
tokenizer exactly as for a rollout; on each step it asks the teacher through the chat API (the
conversation as messages, the tools as schemas) and returns the teacher's content and calls
encoded as the policy writes them (training/demos.py `rendered_ids`). The log is then token-exact
for the policy: prompt, completion and tool results in its own format, a trajectory it could have
sampled. A call the teacher wrote broken is not rendered (the harness's error message for it is
in the next prompt, which never trains).

The runs are graded by the hidden tests like any attempt and only resolved ones are kept: the
teacher's samples have no behaviour logprobs the policy's could be compared with, so they are
off-policy, trained by the reward-filtered likelihood term (training/loss.py choice 7) and
never mixed into the policy ratio. Held-out tasks never reach here (training.harness_rollout's
train_tasks refuses them).

Tests: .venv/bin/python -m pytest tests/training/test_teacher.py
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.policy import EndpointPolicy, Reply
from training.buffer import Sample
from training.demos import act_out, rendered_ids
from training.tasks import Task


class TeacherPolicy:
    """A token-native stand-in for the policy whose replies come from `teacher` (the chat API)."""

    token_native = True

    def __init__(self, teacher: EndpointPolicy, tokenizer, *, context_window: int = 8192) -> None:
        self.teacher, self.tokenizer, self.context_window = teacher, tokenizer, context_window
        self.model_id = f"teacher:{teacher.model_id}"

    async def aclose(self) -> None:
        await self.teacher.aclose()

    def count_tokens(self, messages, tools) -> int:
        return len(self.tokenizer.encode_prompt(messages, tools))

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, top_p=1.0, seed=None,
                       on_text=None, prompt_ids=None) -> Reply:
        said = await self.teacher.complete(messages, tools, max_tokens=max_tokens, temperature=temperature,
                                           top_p=top_p, seed=seed, on_text=on_text)
        ids = rendered_ids(self.tokenizer, said.content, said.tool_calls)
        prompt = list(prompt_ids) if prompt_ids is not None else self.tokenizer.encode_prompt(messages, tools)
        return Reply(content=said.content, tool_calls=list(said.tool_calls), tool_call_errors=list(said.tool_call_errors),
                     finish_reason=said.finish_reason, prompt_token_ids=prompt, completion_token_ids=ids,
                     prompt_tokens=len(prompt), completion_tokens=len(ids), seconds=said.seconds, weight_version=-1,
                     sampler={"temperature": temperature, "top_p": top_p, "seed": seed})


async def endpoint_demonstrations(tasks: Sequence[Task], tokenizer, run_dir: Path, url: str, *,
                                  model: str | None = None, parallel: int = 2,
                                  context_window: int = 8192) -> list[Sample]:
    """The teacher at `url` attempts every task in the harness (logs under `run_dir`/sessions);
    the resolved attempts' Samples, in the policy's tokens; ValueError when none resolved."""
    teacher = TeacherPolicy(EndpointPolicy(url, model=model or None, context_window=context_window, token_in=False),
                            tokenizer, context_window=context_window)
    try:
        return await act_out(tasks, lambda task: teacher, run_dir, parallel=parallel, what=f"attempt by {url}")
    finally:
        await teacher.aclose()
