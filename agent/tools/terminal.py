"""The `run_terminal` tool: one shell command in the sandbox (agent/sandbox.py), cwd = the
workspace root, output streamed to the editor while it runs and shown to the model with its head
and its tail (the end of a build log is where the error is).

    registry = ToolRegistry([RunTerminal()])
    result = await registry.call("run_terminal", {"command": "pytest -x -q"}, ctx)
    result.output            # "...\n[exit code 1 after 3.2 s]"
    result.data["exit_code"] # 1

Sandbox settings per session live in `ctx.state["sandbox"]` (a dict): `network` (bool),
`env` (extra variables), `memory_bytes`, `max_processes`, `max_file_bytes` (passed to
run_sandboxed), `max_timeout_s` (the cap on the model's `timeout_s`, default 600) and
`unsandboxed`: whether commands may run where the sandbox is weaker than bubblewrap
(agent/isolation.py): "allow" (the user opted in) or "ask" (the session's permission policy asks
a person about every command). Without it the tool refuses there, with an error that names the
opt-in: headless runs and anything else nobody watches fail closed.

The command sees the files on disk, not the editor's unsaved buffers. Processes it leaves in the
background are killed when it ends, so long jobs must finish within the timeout.

Tests: .venv/bin/python -m pytest tests/agent/test_terminal.py
"""

from __future__ import annotations

import logging
from typing import Any

from agent.isolation import UnsandboxedError
from agent.sandbox import SandboxResult, run_sandboxed
from agent.tools.base import MAX_OUTPUT_CHARS, ToolContext, ToolResult, ToolSpec

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 120
MAX_TIMEOUT_S = 600
CAPTURE_BYTES = 2_000_000
"""Bytes read from a command before it is stopped (runaway output such as `yes`)."""
_SETTINGS = ("network", "env", "memory_bytes", "max_processes", "max_file_bytes")

DESCRIPTION = """Run a shell command (bash) in the workspace root and return its output and exit code.
The command runs in a sandbox: the workspace is writable, the rest of the system is read-only,
there is no network, and /tmp and $HOME are fresh and emptied after each call. Each call starts
a new shell (cd and exported variables do not carry over; chain with &&). Processes left running
in the background are killed when the command ends. Long output keeps its head and tail."""

SPEC = ToolSpec(
    name="run_terminal",
    description=DESCRIPTION,
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The bash command line."},
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": f"Seconds before the command is killed (default {DEFAULT_TIMEOUT_S}, "
                f"at most {MAX_TIMEOUT_S}).",
            },
            "description": {
                "type": "string",
                "description": "A few words on what the command does, shown to the user.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    read_only=False,
    kind="execute",
)


def head_and_tail(text: str, limit: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    """Keeps the first and last lines of `text` within about `limit` characters, with a note in
    the middle saying how much was left out."""
    if len(text) <= limit:
        return text, False
    head, tail = text[: limit // 3], text[-(limit - limit // 3) :]
    if "\n" in head[len(head) // 2 :]:
        head = head[: head.rindex("\n") + 1]
    if "\n" in tail[: len(tail) // 2]:
        tail = tail[tail.index("\n") + 1 :]
    omitted = len(text) - len(head) - len(tail)
    note = (f"\n[... {omitted} characters ({text.count(chr(10), len(head), len(text) - len(tail))} "
            "lines) omitted; redirect the output to a file and grep or read it in parts ...]\n")
    return head + note + tail, True


def _status_line(result: SandboxResult, timeout_s: float, max_timeout_s: float) -> str:
    if result.timed_out:
        more = f" or pass a larger timeout_s (at most {max_timeout_s:g})" if timeout_s < max_timeout_s else ""
        return (f"[the command was killed after {timeout_s:g} s; narrow it (e.g. one test file, "
                f"`pytest -x`){more}. Background jobs do not outlive a call.]")
    if result.cancelled:
        return f"[the command was cancelled by the user after {result.duration_s:.1f} s]"
    if result.truncated:
        return (f"[the command was stopped after printing {CAPTURE_BYTES} bytes; redirect its "
                "output to a file (`cmd > out.log 2>&1`) and read the parts you need]")
    return f"[exit code {result.exit_code} after {result.duration_s:.1f} s]"


class RunTerminal:
    spec = SPEC

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        return None  # a command may change anything in the workspace

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        settings = dict(ctx.state.get("sandbox") or {})
        unknown = set(settings) - {*_SETTINGS, "max_timeout_s", "unsandboxed"}
        if unknown:
            log.warning("run_terminal ignores unknown sandbox settings %s", sorted(unknown))
        max_timeout_s = float(settings.pop("max_timeout_s", MAX_TIMEOUT_S))
        timeout_s = min(float(args.get("timeout_s") or DEFAULT_TIMEOUT_S), max_timeout_s)
        try:
            result = await run_sandboxed(
                args["command"],
                workspace_root=ctx.workspace.root,
                timeout_s=timeout_s,
                max_output_bytes=CAPTURE_BYTES,
                on_output=ctx.on_output,
                cancelled=ctx.cancelled,
                allow_unsandboxed=settings.get("unsandboxed") in ("allow", "ask"),
                **{key: settings[key] for key in _SETTINGS if key in settings},
            )
        except UnsandboxedError as err:
            return ToolResult(error=str(err), data={"isolation": err.level, "refused": True})
        shown, cut = head_and_tail(result.output)
        if shown and not shown.endswith("\n"):
            shown += "\n"
        status = _status_line(result, timeout_s, max_timeout_s)
        data = {
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "cancelled": result.cancelled,
            "output_bytes_capped": result.truncated,
            "isolation": result.isolation,
            "duration_s": round(result.duration_s, 6),
        }
        if result.timed_out or result.cancelled or result.truncated:
            # for_model() shows "Error: <status>" and then the partial output
            return ToolResult(output=shown, error=status.strip("[]"), data=data, truncated=True)
        return ToolResult(output=shown + status, data=data, truncated=cut)
