"""The agent's plan: `todo_write` keeps a short task list in the session's tool state and shows it
back as a checklist; the editor shows it as an ACP `plan`.

    tool = TodoWrite()
    await registry.call("todo_write", {"todos": [
        {"id": "1", "content": "Reproduce the failing test", "status": "in_progress"},
        {"id": "2", "content": "Fix the parser", "status": "pending", "priority": "high"},
    ]}, ctx)
    await registry.call("todo_write", {"merge": True, "todos": [{"id": "1", "status": "completed"}]}, ctx)
    ctx.state["todos"]                  # [{"id", "content", "status", "priority"}, ...]
    result.data["plan"]                 # ACP plan entries: [{"content", "priority", "status"}, ...]

Without `merge` the list given replaces the plan; with `merge` each item updates the task with its
id (only the fields given) and new ids are appended. At most one task may be in_progress. The
loop sends `result.data["plan"]` as a `session/update` of kind `plan` (ACP replaces the whole
plan each time, which is why the full list is always returned).
"""

from __future__ import annotations

from typing import Any

from agent.tools.base import ToolContext, ToolError, ToolResult, ToolSpec

STATE_KEY = "todos"
STATUSES = ("pending", "in_progress", "completed")
PRIORITIES = ("high", "medium", "low")
MAX_TODOS = 50
_MARK = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


def _plan_entries(todos: list[dict[str, Any]]) -> list[dict[str, str]]:
    """ACP `plan` entries: content, priority, status (ACP's own vocabulary)."""
    return [{"content": t["content"], "priority": t["priority"], "status": t["status"]} for t in todos]


def checklist(todos: list[dict[str, Any]]) -> str:
    """The compact text the model reads back: one line per task, the current one marked."""
    if not todos:
        return "The todo list is empty."
    done = sum(t["status"] == "completed" for t in todos)
    lines = [f"Todos ({done}/{len(todos)} completed):"]
    for t in todos:
        priority = "" if t["priority"] == "medium" else f" ({t['priority']} priority)"
        current = "  <- in progress" if t["status"] == "in_progress" else ""
        lines.append(f"{_MARK[t['status']]} {t['id']}. {t['content']}{priority}{current}")
    if done == len(todos):
        lines.append("All tasks are completed.")
    elif not any(t["status"] == "in_progress" for t in todos):
        lines.append("No task is in progress: mark the next one in_progress when you start it.")
    return "\n".join(lines)


def _merged(current: list[dict[str, Any]], items: list[dict[str, Any]], merge: bool) -> list[dict[str, Any]]:
    """The new list: `items` alone, or `current` updated by id and extended by new ids."""
    seen: set[str] = set()
    for item in items:
        if item["id"] in seen:
            raise ToolError(f"the id {item['id']!r} appears twice in todos; give each task its own id")
        seen.add(item["id"])
    by_id = {t["id"]: dict(t) for t in current} if merge else {}
    for item in items:
        task = by_id.get(item["id"])
        if task is None:
            missing = [k for k in ("content", "status") if k not in item]
            if missing:
                known = f" (known ids: {', '.join(by_id)})" if merge and by_id else ""
                raise ToolError(
                    f"task {item['id']!r} is new, so it needs {' and '.join(missing)}{known}; "
                    + ("with merge=true only existing ids can be updated partially" if merge else
                       "without merge every task needs id, content and status (merge=true updates by id)")
                )
            task = by_id[item["id"]] = {"id": item["id"], "priority": "medium"}
        task.update({k: v for k, v in item.items() if k != "id"})
    return list(by_id.values())


def _validate(todos: list[dict[str, Any]]) -> None:
    if len(todos) > MAX_TODOS:
        raise ToolError(f"{len(todos)} tasks is more than {MAX_TODOS}; keep the plan short (group small steps)")
    if empty := [t["id"] for t in todos if not t["content"].strip()]:
        raise ToolError(f"task {empty[0]!r} has empty content; say what the task is")
    active = [t["id"] for t in todos if t["status"] == "in_progress"]
    if len(active) > 1:
        raise ToolError(
            f"{len(active)} tasks are in_progress ({', '.join(active)}); keep exactly one task in "
            "progress at a time: mark the others pending (not started) or completed (done)"
        )


_ITEM = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "minLength": 1, "description": "Stable id of the task, e.g. '1', '2'."},
        "content": {"type": "string", "description": "What to do, as a short imperative sentence."},
        "status": {"type": "string", "enum": list(STATUSES), "description": "pending, in_progress (one at a time) or completed."},
        "priority": {"type": "string", "enum": list(PRIORITIES), "description": "high, medium (default) or low."},
    },
    "required": ["id"],
    "additionalProperties": False,
}


class TodoWrite:
    spec = ToolSpec(
        name="todo_write",
        description=(
            "Create or update your task list for a multi-step request (3 or more steps): it shows the "
            "user your plan and progress. Keep exactly one task in_progress while you work on it and "
            "mark it completed as soon as it is done, then start the next. Without merge the list you "
            "give replaces the plan (every task needs id, content and status); with merge=true each "
            "task updates the one with the same id (e.g. {id, status} only) and new ids are added. "
            "Skip it for single, trivial steps."
        ),
        parameters={
            "type": "object",
            "properties": {
                "todos": {"type": "array", "items": _ITEM, "minItems": 1, "description": "The tasks, in order."},
                "merge": {"type": "boolean", "description": "Update tasks by id instead of replacing the list (default false)."},
            },
            "required": ["todos"],
            "additionalProperties": False,
        },
        read_only=True,
        kind="think",
    )

    def paths(self, args: dict[str, Any]) -> list[str]:
        return []

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        current = ctx.state.get(STATE_KEY) or []
        todos = _merged(current, args["todos"], args.get("merge", False))
        _validate(todos)
        ctx.state[STATE_KEY] = todos
        return ToolResult(output=checklist(todos), data={"todos": [dict(t) for t in todos], "plan": _plan_entries(todos)})
