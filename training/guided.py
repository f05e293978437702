"""Guided rollouts: the gold script plays a task's turns before its edit (grep, read), the model
plays the rest, so a group's attempts all start at the decision that fails most, the edit.

The warm-started composer-mini finds the broken function (its first call is the gold one on 40
of 40 held-out tasks) but fixes it rarely (3 of 40 greedy edits, given the gold turns before them:
bench/gold_moves.py). An unguided rollout spends most of its minutes on the navigation it already
knows, and a group whose attempts lose their way apart gives advantages that say little about the
edit. Starting from the expert's state at the edit (as Backplay and reverse-curriculum RL start
from demonstration states) puts every attempt of a group at the same context: the advantages
compare edits only, each attempt costs one or two model calls instead of six, and the trainer's
shared-prefix rows (training/batch.py) compute the group's long common context once.

The scripted turns are context, never trained: the script's replies carry no logprobs, so the
trajectory's loss mask is 0 on them (training/trajectories.py), and the importance ratio covers
only what the model sampled. The reward is the whole attempt's (training/rewards.py), the
scripted turns the same in every attempt of the group. The benchmark never guides.

    policy = GuidedPolicy(engine_policy, lead_turns(task))     # one per attempt
    guided_job(job, share)       # whether job k's group is guided: share 0.25 guides one in four
"""

from __future__ import annotations

from collections.abc import Sequence

from training.demos import ScriptPolicy, Turn, gold_turns
from training.tasks import Task


def lead_turns(task: Task) -> list[Turn] | None:
    """The gold script's turns before its first edit; None when there are none or the task has no
    script the policy could follow (training/demos.py `gold_turns` refuses it)."""
    try:
        turns = gold_turns(task)
    except ValueError:
        return None
    lead = []
    for content, calls in turns:
        if any(call.name == "edit_file" for call in calls):
            break
        lead.append((content, calls))
    return lead or None


def guided_job(job: int, share: float) -> bool:
    """Whether job `job`'s group starts from the gold lead: `share` of the jobs, spread evenly."""
    return int((job + 1) * share) > int(job * share)


class GuidedPolicy:
    """A token-native policy whose first replies are the `lead` turns (scripted), then `policy`'s;
    one per attempt (it plays the lead once)."""

    token_native = True

    def __init__(self, policy, lead: Sequence[Turn]) -> None:
        self.policy = policy
        self.lead = ScriptPolicy(policy.tokenizer, lead, model_id="gold-lead")
        self.model_id, self.context_window = policy.model_id, policy.context_window
        self.tokenizer = policy.tokenizer

    @property
    def takes_quotes(self) -> bool:
        return getattr(self.policy, "takes_quotes", False)

    def count_tokens(self, messages: Sequence[dict], tools: Sequence[dict]) -> int:
        return self.policy.count_tokens(messages, tools)

    async def complete(self, messages, tools, **kwargs):
        if self.lead.turns:
            kwargs.pop("quotes", None)
            return await self.lead.complete(messages, tools, **kwargs)
        return await self.policy.complete(messages, tools, **kwargs)
