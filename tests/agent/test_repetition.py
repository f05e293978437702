"""Loop detection (agent/repetition.py) and the agent loop stopping a turn that repeats itself,
with the real edit_file and run_terminal tools: the loop composer-mini-trained fell into on the
issue's stats.py request (an edit the tool refuses as unchanged, then the same failing command,
in turn, until the step limit)."""

from __future__ import annotations

import json

import pytest

from agent.loop import Agent, LoopConfig
from agent.policy import Reply
from agent.repetition import RepetitionWatch, step_signature
from agent.session_log import SessionLog
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.files import EditFile
from agent.tools.terminal import RunTerminal
from agent.workspace import Workspace
from model.toolcalls import ToolCall
from tests.agent.test_loop import ScriptedPolicy


def sig(name: str, told: str) -> str:
    return step_signature([ToolCall(name, {"path": "a.py"})], [told])


def test_a_step_repeated_three_times_is_a_loop_of_period_one():
    watch = RepetitionWatch(repeats=3)
    assert [watch.add(sig("read", "x")) for _ in range(3)] == [None, None, 1]


def test_two_steps_in_turn_are_a_loop_of_period_two_after_three_cycles():
    watch = RepetitionWatch(repeats=3)
    seen = [watch.add(sig(name, "same")) for name in ["edit", "run"] * 3]
    assert seen == [None] * 5 + [2]


def test_a_loop_broken_by_another_step_starts_again():
    watch = RepetitionWatch(repeats=3)
    steps = ["a", "a", "b", "a", "a", "a"]
    assert [watch.add(sig(s, "")) for s in steps] == [None] * 5 + [1]


def test_results_that_change_are_progress_but_durations_are_not():
    polling = RepetitionWatch(repeats=3)
    assert all(polling.add(sig("run", f"{'ready' if i == 2 else 'starting'}")) is None for i in range(3))
    timed = RepetitionWatch(repeats=3)
    told = ["1 failed in 0.03s\n[exit code 1 after 0.1 s]", "1 failed in 0.05s\n[exit code 1 after 0.0 s]",
            "1 failed in 0.04s\n[exit code 1 after 0.2 s]"]
    assert [timed.add(sig("run", t)) for t in told] == [None, None, 1]


def test_arguments_are_part_of_a_step():
    watch = RepetitionWatch(repeats=3)
    steps = [step_signature([ToolCall("read_file", {"path": f"{i}.py"})], ["x"]) for i in range(3)]
    assert all(watch.add(s) is None for s in steps)


def test_zero_turns_it_off_and_one_is_refused():
    watch = RepetitionWatch(repeats=0)
    assert all(watch.add(sig("a", "")) is None for _ in range(10))
    with pytest.raises(ValueError, match="at least 2"):
        RepetitionWatch(repeats=1)


def loop_agent(tmp_path, replies, **config):
    (tmp_path / "stats.py").write_text("def median(v):\n    return v[0] / 3\n")
    events: list[dict] = []

    class Sink:
        async def emit(self, update):
            events.append(update)

    log = SessionLog.open(tmp_path, model={"id": "scripted"}, sampler={}, tools=[], system_prompt="sys",
                          log_dir=tmp_path / "logs")
    agent = Agent(ScriptedPolicy(replies), ToolRegistry([EditFile(), RunTerminal()]),
                  ToolContext(Workspace(tmp_path)), system="sys", events=Sink(), log=log,
                  config=LoopConfig(**config))
    return agent, events, log


UNCHANGED_EDIT = ToolCall("edit_file", {"path": "stats.py", "old_string": "/ 3", "new_string": "/ 3"})
FAILING_RUN = ToolCall("run_terminal", {"command": "python -c 'import tests'"})


async def test_the_turn_stops_after_three_cycles_of_a_refused_edit_and_a_failing_run(tmp_path):
    replies = [Reply("", [call], "tool_calls") for call in [UNCHANGED_EDIT, FAILING_RUN] * 12]
    agent, events, log = loop_agent(tmp_path, replies)
    result = await agent.run_turn("test_median fails, fix it")
    assert result.steps == 6 and result.stop_reason == "max_turn_requests"  # not 25
    said = "".join(e["content"]["text"] for e in events if e.get("sessionUpdate") == "agent_message_chunk")
    assert "the last 2 steps repeated 3 times" in said
    records = [json.loads(line) for line in log.path.read_text().splitlines()]
    stop = [r for r in records if r.get("type") == "error" and r.get("kind") == "repeating"]
    assert len(stop) == 1 and stop[0]["fatal"] is False and stop[0]["where"] == "step 6"
    # The conversation stays whole for the next turn: every call has its result.
    assert agent.messages[-1]["role"] == "tool"


async def test_a_command_whose_output_changes_runs_on_and_zero_turns_the_watch_off(tmp_path):
    growing = ToolCall("run_terminal", {"command": "echo more >> grow.txt; cat grow.txt"})
    agent, _, _ = loop_agent(tmp_path, [Reply("", [growing], "tool_calls")] * 5)
    assert (await agent.run_turn("watch it")).steps == 6  # five runs and the answer
    agent, _, _ = loop_agent(tmp_path, [Reply("", [FAILING_RUN], "tool_calls")] * 5, stop_repeats=0)
    assert (await agent.run_turn("again")).steps == 6
