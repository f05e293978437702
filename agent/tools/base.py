"""What a tool is: a spec declared as data (name, description, JSON Schema, whether it only
reads), an async `run(args, ctx)` returning a structured `ToolResult`, and the registry that
validates the model's arguments and never lets a tool's failure escape into the agent loop.

    registry = ToolRegistry([ReadFile(), EditFile(), ...])
    result = await registry.call("read_file", {"path": "a.py"}, ctx)   # never raises
    registry.openai_tools()            # the `tools` list for the model / chat template

Errors are addressed to the model: they say what failed and what to do next.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import jsonschema

if TYPE_CHECKING:
    from agent.workspace import Workspace

ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"]
"""ACP's tool kinds: editors pick icons and review UI by them."""

MAX_OUTPUT_CHARS = 30_000
"""Default cap on what one tool result shows the model."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments (an object schema)."""
    read_only: bool
    """Never changes the workspace: safe to run beside other calls of the same message."""
    kind: ToolKind = "other"
    quoted: tuple[str, ...] = ()
    """String arguments copied verbatim from files the agent has read (edit_file's old_string):
    the engine's decoder keeps them a piece of those files (model/constrained_quote.py)."""

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class ToolResult:
    output: str = ""
    """What the model reads."""
    error: str | None = None
    """Set when the call failed: what went wrong and how to recover, for the model."""
    data: dict[str, Any] = field(default_factory=dict)
    """Structured details for the editor and the log (diffs, paths, exit codes, matches)."""
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def for_model(self) -> str:
        return self.output if self.error is None else f"Error: {self.error}" + (f"\n{self.output}" if self.output else "")


@dataclass
class ToolContext:
    workspace: Workspace
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the turn is cancelled: long-running tools stop and clean up."""
    diagnostics: Callable[[str], Awaitable[list[dict[str, Any]]]] | None = None
    """The editor's diagnostics for a path (LSP Diagnostic dicts), when an editor is attached."""
    on_output: Callable[[str], None] | None = None
    """Streams partial output (terminal) while the tool runs."""
    state: dict[str, Any] = field(default_factory=dict)
    """Per-session tool state (the todo list, sandbox settings)."""


class Tool(Protocol):
    spec: ToolSpec

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        """Workspace paths the call may change; None when unknown (the whole workspace)."""
        ...


class ToolError(Exception):
    """Raised inside a tool for an expected failure; the message goes to the model as is."""


def truncate(text: str, limit: int = MAX_OUTPUT_CHARS, how_to_continue: str = "") -> tuple[str, bool]:
    """Keeps the head of `text` within `limit` characters and says how much was cut and how to
    see the rest."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    if "\n" in cut[limit // 2 :]:
        cut = cut[: cut.rindex("\n") + 1]
    note = f"\n[output truncated: showing {len(cut)} of {len(text)} characters."
    note += f" {how_to_continue}]" if how_to_continue else "]"
    return cut + note, True


def _schema_error(spec: ToolSpec, args: Any) -> str | None:
    if not isinstance(args, dict):
        return f"arguments of {spec.name} must be a JSON object, got {type(args).__name__}"
    try:
        jsonschema.validate(args, spec.parameters)
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "arguments"
        return f"invalid arguments for {spec.name} at {where}: {err.message}. Expected schema: {json.dumps(spec.parameters)}"
    return None


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.spec.name in self._tools:
            raise ValueError(f"tool {tool.spec.name!r} is registered twice")
        self._tools[tool.spec.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def kind(self, name: str) -> str:
        """ACP's tool kind of a call to `name` (read, edit, execute, ...; other for an unknown tool)."""
        tool = self._tools.get(name)
        return tool.spec.kind if tool is not None else "other"

    def read_only(self, name: str) -> bool:
        """Whether a call to `name` changes nothing (an unknown tool runs nothing)."""
        tool = self._tools.get(name)
        return tool is None or tool.spec.read_only

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def openai_tools(self) -> list[dict[str, Any]]:
        return [spec.to_openai() for spec in self.specs()]

    def check(self, name: str, args: Any) -> str | None:
        """What is wrong with a call before it runs (unknown tool, arguments off the schema), for
        the model; None when it may run."""
        tool = self._tools.get(name)
        if tool is None:
            return f"there is no tool named {name!r}; available tools: {', '.join(self._tools)}"
        return _schema_error(tool.spec, args)

    async def call(self, name: str, args: Any, ctx: ToolContext) -> ToolResult:
        """Validates and runs one call. Unknown tools, bad arguments, ToolErrors and unexpected
        exceptions all come back as a ToolResult with `error` set."""
        problem = self.check(name, args)
        if problem is not None:
            return ToolResult(error=problem)
        tool = self._tools[name]
        return await run_guarded(name, lambda: tool.run(args, ctx))


async def run_guarded(name: str, run: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    """Runs the body of tool `name`: ToolErrors and unexpected exceptions come back as a
    ToolResult with `error` set, never ending the turn; the seconds it took go in its data."""
    started = time.perf_counter()
    try:
        result = await run()
    except ToolError as err:
        result = ToolResult(error=str(err))
    except asyncio.CancelledError:
        raise
    except Exception as err:  # a tool bug must not end the session
        result = ToolResult(error=f"{name} failed unexpectedly: {type(err).__name__}: {err}")
    result.data.setdefault("duration_s", round(time.perf_counter() - started, 6))
    return result
