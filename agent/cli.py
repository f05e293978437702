"""`composer-agent`: one headless agent turn from the command line, the workspace's checkpoints,
and the permission answers kept for it.

    composer-agent run --workspace DIR [--json] [--endpoint URL] [--yes] [--allow-unsandboxed] "request"
    composer-agent checkpoints --workspace DIR [--list | --diff ID | --restore ID | --keep N]
    composer-agent answers --workspace DIR [--forget]

Without --endpoint the in-process engine runs composer-mini-trained (int4 weights): built once
from composer-mini and the committed adapter by `make run`, `python -m model.home` or its first
load here, or your own run that `make model-trained` installed.
--json prints every session/update payload as one JSON line, then a summary object. Permission
prompts cannot be answered headless: what the policy would ask about is refused, unless --yes
allows it; "always" answers given in an editor for the workspace apply here too. The session log is written either way; the summary says where. A turn that fails
(the model endpoint dies mid-answer, the disk fills) prints `the turn failed: ...` on stderr, a
summary with stopReason "error" under --json, and exits 1.

The sandbox's isolation level is reported on stderr at start (and in the summary). Where it is
weaker than bubblewrap, every run_terminal command is refused, --yes or not, unless
--allow-unsandboxed (or `allow_unsandboxed = true` in $XDG_CONFIG_HOME/composer/config.toml)
says to run them anyway: agent/isolation.py.

`checkpoints` and `answers`, what the workspace keeps between sessions: agent/workspace_cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent import workspace_cli
from agent.isolation import OPT_IN_FLAG, IsolationStatus
from agent.loop import LoopConfig
from agent.object_store import CheckpointError
from agent.sandbox import startup_isolation
from agent.session import Session, SessionConfig
from model.home import served_model


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="composer-agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one agent turn")
    run.add_argument("request", help="what the agent should do")
    run.add_argument("--workspace", type=Path, default=Path.cwd(), help="the repository to work in")
    run.add_argument("--json", action="store_true", help="print one JSON event per line and a summary")
    run.add_argument("--endpoint", default=None, help="an OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    run.add_argument("--model", default=None, help="checkpoint directory, or the model name at --endpoint")
    run.add_argument("--api-key", default=None)
    run.add_argument("--quantize", choices=["none", "int4"], default="int4", help="in-process engine weights")
    run.add_argument("--max-steps", type=int, default=LoopConfig.max_steps)
    run.add_argument("--max-tokens", type=int, default=LoopConfig.max_tokens_per_step)
    run.add_argument("--yes", action="store_true", help="allow what the permission policy would ask about")
    run.add_argument(OPT_IN_FLAG, action="store_true",
                     help="run commands even where the sandbox is weaker than bubblewrap (unshare, none)")
    run.add_argument("--log-dir", type=Path, default=None, help="where session logs go")
    workspace_cli.add_parsers(sub)
    return parser


class _Printer:
    """Prints events: JSON lines, or the answer on stdout and tool activity on stderr."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.printed: dict[str, int] = {}
        """Tool call id -> characters of a running command's output printed so far."""
        self.midline = False
        """The last output printed did not end its line: the next note starts a new one."""

    async def emit(self, update: dict) -> None:
        if self.as_json:
            print(json.dumps(update, ensure_ascii=False), flush=True)
            return
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            print(update["content"].get("text", ""), end="", flush=True)
        elif kind == "tool_call":
            print(f"{self._newline()}\n[tool] {update.get('title', '')}", file=sys.stderr, flush=True)
        elif kind == "tool_call_update" and update.get("status") == "in_progress" and update.get("content"):
            self._print_output(update)
        elif kind == "tool_call_update" and update.get("status") == "failed":
            text = next((c["content"].get("text", "") for c in update.get("content") or []
                         if c.get("type") == "content"), "")
            print(f"{self._newline()}[tool failed] {update.get('toolCallId')}: {text[:500]}", file=sys.stderr, flush=True)

    def _print_output(self, update: dict) -> None:
        """What a running command printed since the last update (agent/live_output.py)."""
        total = ((update.get("_meta") or {}).get("composer") or {}).get("outputChars")
        tail = update["content"][0].get("content", {}).get("text", "")
        if not isinstance(total, int):
            return
        new = total - self.printed.get(update["toolCallId"], 0)
        self.printed[update["toolCallId"]] = total
        if new <= 0:
            return
        if new > len(tail):  # more came between two updates than one shows
            print(f"{self._newline()}  [...]", file=sys.stderr)
        print(tail[-new:], end="", file=sys.stderr, flush=True)
        self.midline = not tail.endswith("\n")

    def _newline(self) -> str:
        """A line break when streamed output left the line open."""
        was, self.midline = self.midline, False
        return "\n" if was else ""


async def _run(args: argparse.Namespace, status: IsolationStatus) -> int:
    printer = _Printer(args.json)
    config = SessionConfig(
        workspace=args.workspace, endpoint=args.endpoint, model=served_model(args.model, args.endpoint),
        api_key=args.api_key,
        quantize=args.quantize, log_dir=args.log_dir, auto_allow=args.yes, client="cli",
        allow_unsandboxed=args.allow_unsandboxed,
        loop=LoopConfig(max_steps=args.max_steps, max_tokens_per_step=args.max_tokens),
    )
    try:
        session = await Session.create(config, events=printer)
    except CheckpointError as err:  # the workspace's store cannot open (a linked `.composer`)
        print(f"composer-agent: {err}", file=sys.stderr)
        return 1
    try:
        result = await session.prompt(args.request)
    except Exception as err:  # the endpoint died mid-answer, the disk filled: one clear line, no traceback
        return _failed(args, session, status, err)
    finally:
        await session.aclose()
    summary = {
        "type": "summary", "stopReason": result.stop_reason, "steps": result.steps,
        "toolCalls": result.tool_calls, "sessionId": session.id, "log": str(session.log_path), "text": result.text,
        "isolation": status.to_dict(),
    }
    if args.json:
        print(json.dumps(summary, ensure_ascii=False), flush=True)
    else:
        print(f"\n[{result.stop_reason}: {result.steps} steps, {result.tool_calls} tool calls; log {session.log_path}]",
              file=sys.stderr)
    return 0 if result.stop_reason in ("end_turn", "max_turn_requests", "max_tokens") else 1


def _failed(args: argparse.Namespace, session: Session, status: IsolationStatus, err: Exception) -> int:
    """A turn that failed (the loop logged it as an `error` record): its message on stderr and,
    with --json, a summary whose stopReason is "error". Exit status 1."""
    message = f"the turn failed: {type(err).__name__}: {err}"
    if args.json:
        print(json.dumps({"type": "summary", "stopReason": "error", "error": message, "sessionId": session.id,
                          "log": str(session.log_path), "isolation": status.to_dict()}, ensure_ascii=False), flush=True)
    print(f"\ncomposer-agent: {message}; log {session.log_path}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("checkpoints", "answers"):
        return workspace_cli.run(args)
    status = startup_isolation("composer-agent", args.workspace, args.allow_unsandboxed)
    if status is None:
        return 2
    return asyncio.run(_run(args, status))


if __name__ == "__main__":
    sys.exit(main())
