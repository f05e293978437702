"""todo_write: the plan kept in the session's tool state, validated, shown as a checklist and
carried as ACP plan entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.todo import TodoWrite
from agent.workspace import Workspace


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=Workspace(tmp_path))


async def write(ctx: ToolContext, **args):
    return await ToolRegistry([TodoWrite()]).call("todo_write", args, ctx)


PLAN = [
    {"id": "1", "content": "Reproduce the failing test", "status": "completed"},
    {"id": "2", "content": "Fix the parser", "status": "in_progress", "priority": "high"},
    {"id": "3", "content": "Run the whole suite", "status": "pending", "priority": "low"},
]


async def test_replace_shows_checklist_and_plan(ctx: ToolContext):
    res = await write(ctx, todos=PLAN)
    assert res.ok, res.error
    assert res.output.splitlines() == [
        "Todos (1/3 completed):",
        "[x] 1. Reproduce the failing test",
        "[>] 2. Fix the parser (high priority)  <- in progress",
        "[ ] 3. Run the whole suite (low priority)",
    ]
    assert res.data["plan"] == [
        {"content": "Reproduce the failing test", "priority": "medium", "status": "completed"},
        {"content": "Fix the parser", "priority": "high", "status": "in_progress"},
        {"content": "Run the whole suite", "priority": "low", "status": "pending"},
    ]
    assert ctx.state["todos"][1] == {"id": "2", "content": "Fix the parser", "status": "in_progress", "priority": "high"}
    replaced = await write(ctx, todos=[{"id": "9", "content": "Only task", "status": "pending"}])
    assert [t["id"] for t in ctx.state["todos"]] == ["9"]
    assert "mark the next one in_progress" in replaced.output


async def test_merge_updates_by_id_and_appends(ctx: ToolContext):
    await write(ctx, todos=PLAN)
    res = await write(ctx, merge=True, todos=[
        {"id": "2", "status": "completed"},
        {"id": "3", "status": "in_progress"},
        {"id": "4", "content": "Write the changelog", "status": "pending"},
    ])
    assert res.ok, res.error
    assert [(t["id"], t["status"]) for t in ctx.state["todos"]] == [
        ("1", "completed"), ("2", "completed"), ("3", "in_progress"), ("4", "pending")]
    assert ctx.state["todos"][1]["content"] == "Fix the parser"  # untouched fields stay
    done = await write(ctx, merge=True, todos=[{"id": "3", "status": "completed"}, {"id": "4", "status": "completed"}])
    assert "Todos (4/4 completed)" in done.output and "All tasks are completed." in done.output


async def test_validation_errors_leave_the_plan_alone(ctx: ToolContext):
    await write(ctx, todos=PLAN)
    before = [dict(t) for t in ctx.state["todos"]]
    two = await write(ctx, merge=True, todos=[{"id": "3", "status": "in_progress"}])
    assert "2 tasks are in_progress (2, 3)" in two.error and "exactly one task in progress" in two.error
    new = await write(ctx, merge=True, todos=[{"id": "7", "status": "pending"}])
    assert "task '7' is new, so it needs content" in new.error and "known ids: 1, 2, 3" in new.error
    partial = await write(ctx, todos=[{"id": "1", "content": "x"}])
    assert "needs status" in partial.error and "merge=true" in partial.error
    dup = await write(ctx, todos=[{"id": "1", "content": "a", "status": "pending"}, {"id": "1", "content": "b", "status": "pending"}])
    assert "appears twice" in dup.error
    empty = await write(ctx, todos=[{"id": "1", "content": "  ", "status": "pending"}])
    assert "empty content" in empty.error
    bad = await write(ctx, todos=[{"id": "1", "content": "a", "status": "doing"}])
    assert "invalid arguments for todo_write" in bad.error and "doing" in bad.error
    extra = await write(ctx, todos=[{"id": "1", "content": "a", "status": "pending", "owner": "me"}])
    assert not extra.ok
    assert ctx.state["todos"] == before


def test_spec():
    spec = TodoWrite().spec
    assert spec.name == "todo_write" and spec.read_only and spec.kind == "think"
    assert spec.parameters["additionalProperties"] is False
    assert TodoWrite().paths({"todos": []}) == []
