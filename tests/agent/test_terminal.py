"""The run_terminal tool through the ToolRegistry, with real sandboxed processes.

Run: nice -n 19 .venv/bin/python -m pytest tests/agent/test_terminal.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.terminal import RunTerminal, head_and_tail
from agent.workspace import Workspace


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=Workspace(tmp_path))


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([RunTerminal()])


def test_spec_is_an_execute_tool_that_may_change_anything():
    tool = RunTerminal()
    assert tool.spec.name == "run_terminal" and tool.spec.kind == "execute"
    assert tool.spec.read_only is False
    assert tool.paths({"command": "ls"}) is None


async def test_output_and_exit_code(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.call("run_terminal", {"command": "echo hi && pwd", "description": "greet"}, ctx)
    assert result.ok
    assert result.output.startswith(f"hi\n{ctx.workspace.root}\n[exit code 0 after ")
    assert result.data["exit_code"] == 0 and result.data["isolation"] == "bwrap"  # make setup installs it


async def test_a_failing_command_is_a_result_not_an_error(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.call("run_terminal", {"command": "echo no >&2; exit 4"}, ctx)
    assert result.ok and result.data["exit_code"] == 4
    assert "no\n[exit code 4 after" in result.output


async def test_long_output_keeps_head_and_tail(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.call("run_terminal", {"command": "seq 1 100000; echo BUILD FAILED"}, ctx)
    assert result.ok and result.truncated
    assert result.output.startswith("1\n2\n3\n")
    assert "99999\n100000\nBUILD FAILED\n[exit code 0" in result.output
    assert "omitted; redirect the output to a file" in result.output
    assert len(result.output) < 31_000


async def test_timeout_says_what_to_do(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.call("run_terminal", {"command": "echo partial; sleep 100", "timeout_s": 1}, ctx)
    assert not result.ok and result.data["timed_out"]
    assert "killed after 1 s" in result.error and "narrow it" in result.error
    assert result.output == "partial\n"
    assert result.for_model().startswith("Error: the command was killed after 1 s")


async def test_timeout_is_capped_by_the_session(registry: ToolRegistry, ctx: ToolContext):
    ctx.state["sandbox"] = {"max_timeout_s": 1}
    result = await registry.call("run_terminal", {"command": "sleep 100", "timeout_s": 500}, ctx)
    assert result.data["timed_out"] and result.data["duration_s"] < 50  # not the 100 s of the command
    assert "killed after 1 s" in result.error and "larger timeout_s" not in result.error


async def test_partial_output_streams_to_the_context(registry: ToolRegistry, ctx: ToolContext):
    chunks: list[str] = []
    ctx.on_output = chunks.append
    await registry.call("run_terminal", {"command": "echo a; sleep 0.2; echo b"}, ctx)
    assert "".join(chunks) == "a\nb\n"


async def test_cancelled_turn_stops_the_command(registry: ToolRegistry, ctx: ToolContext):
    asyncio.get_running_loop().call_later(0.3, ctx.cancelled.set)
    result = await registry.call("run_terminal", {"command": "sleep 100"}, ctx)
    assert result.data["cancelled"] and "cancelled by the user" in result.error
    assert result.data["duration_s"] < 50  # not the 100 s of the command


async def test_runaway_output_is_stopped(registry: ToolRegistry, ctx: ToolContext):
    result = await registry.call("run_terminal", {"command": "yes"}, ctx)
    assert not result.ok and "stopped after printing" in result.error
    assert result.data["output_bytes_capped"]


async def test_session_sandbox_settings_apply(registry: ToolRegistry, ctx: ToolContext):
    ctx.state["sandbox"] = {"env": {"GREETING": "hello"}}
    result = await registry.call("run_terminal", {"command": "echo $GREETING"}, ctx)
    assert result.output.startswith("hello\n")


async def test_bad_arguments_are_refused(registry: ToolRegistry, ctx: ToolContext):
    assert "command" in (await registry.call("run_terminal", {}, ctx)).error
    assert not (await registry.call("run_terminal", {"command": "ls", "cwd": "/"}, ctx)).ok
    assert not (await registry.call("run_terminal", {"command": "ls", "timeout_s": 0}, ctx)).ok


def test_head_and_tail():
    assert head_and_tail("short", 100) == ("short", False)
    text = "".join(f"line {i}\n" for i in range(1000))
    shown, cut = head_and_tail(text, 300)
    assert cut and shown.startswith("line 0\n") and shown.endswith("line 999\n")
    assert "omitted" in shown and len(shown) < 450
    kept = [line for line in shown.splitlines() if line.startswith("line ")]
    assert all(line in text.splitlines() for line in kept)  # cut at line boundaries
