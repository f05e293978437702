"""The agent turn that bench/agent_turn.py replays: the harness's own system prompt and tool
schemas, built the way `agent.session.Session.create` builds them for a workspace (this
repository), a user task, then steps that each add one assistant `read_file` call and the real
`read_file` tool's READ_LINES-line result.

The assistant messages are scripted, not the model's own, so every backend sees exactly the same
prompts (the same token counts, the same prefixes) whatever it generates.

    work = AgentWorkload.build()
    messages = work.messages(turn=0, step=3)        # system, user, 3 x (assistant call, tool result)
    work.tools                                      # the OpenAI tool schemas sent with every step
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.prompt import system_prompt
from agent.retrieval.repomap import workspace_repo_map
from agent.session import default_tools
from agent.tools.base import ToolContext
from agent.tools.codebase import CodebaseSearch
from agent.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
READ_LINES = 26
"""Lines per read: the harness's system prompt for this repository is ~4.8k tokens, and six steps of
40-line reads would overflow composer-mini's 8,192-token context."""
OFFSETS = tuple(1 + READ_LINES * j for j in range(3))
FILES = [
    "model/engine.py", "model/transformer.py", "model/layers.py", "model/moe.py", "model/quant.py",
    "model/sampling.py", "model/sequence.py", "model/serve.py", "model/tokenizer.py",
    "model/constrained.py", "model/toolcalls.py", "model/openai_protocol.py", "agent/loop.py",
    "agent/policy.py", "agent/session.py", "agent/prompt.py", "agent/workspace.py",
    "agent/tools/files.py", "agent/tools/search.py", "agent/tools/terminal.py",
]
"""Files the scripted steps read (READ_LINES each, from a per-step offset), in turn order."""
TASKS = [
    "The engine feels slow on long agent sessions. Find where requests are prefilled and decoded, "
    "and explain what each step costs.",
    "Explain how a tool call travels from the model's output to the tool and back into the "
    "conversation.",
    "Add a setting that caps how many tokens one step may generate, and show where it goes.",
    "Where are session logs written, and what does one record hold?",
]


UNSEEN_WORKSPACE = ROOT / "editor-extension"
"""Another workspace (the editor plugins: TypeScript and Lua): its system prompt shares nothing with
this repository's, so a request there can reuse only the tool schemas the chat template puts first."""


def _system_prompt(root: Path) -> str:
    """The system prompt `Session.create` builds for a workspace at `root` (semantic search on)."""
    repo_map = workspace_repo_map(Workspace(root), budget_tokens=1024)
    return system_prompt(root, repo_map=repo_map, semantic_search=True)


@dataclass
class AgentWorkload:
    system: str
    unseen_system: str
    """The system prompt of UNSEEN_WORKSPACE."""
    tools: list[dict[str, Any]]
    reads: dict[tuple[str, int], str]
    """(path, offset) -> the read_file tool's output for those READ_LINES lines."""
    texts: dict[str, str]
    """path -> the file's text: what the agent loop quotes edit_file's old_string from."""

    @classmethod
    def build(cls, root: Path = ROOT) -> AgentWorkload:
        registry = default_tools()
        registry.register(CodebaseSearch())  # sessions add it: the index is on by default
        ctx = ToolContext(Workspace(root))
        reads, texts = {}, {path: ctx.workspace.read_text(path) for path in FILES}
        for path in FILES:
            for offset in OFFSETS:
                args = {"path": path, "offset": offset, "limit": READ_LINES}
                result = asyncio.run(registry.call("read_file", args, ctx))
                reads[(path, offset)] = result.for_model()
        return cls(_system_prompt(root), _system_prompt(UNSEEN_WORKSPACE), registry.openai_tools(), reads, texts)

    def _read(self, turn: int, step: int) -> tuple[str, int]:
        """Turn `turn` reads its own sequence of files: turns of one group diverge at step 1."""
        i = turn * 3 + step
        return FILES[i % len(FILES)], OFFSETS[(i // len(FILES)) % len(OFFSETS)]

    def messages(self, turn: int, step: int, task: int = 0) -> list[dict[str, Any]]:
        """The conversation sent at `step` (0-based) of turn `turn`: step 0 is system + user."""
        out: list[dict[str, Any]] = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": TASKS[task % len(TASKS)]},
        ]
        for j in range(step):
            path, offset = self._read(turn, j)
            call_id = f"call_{j}"
            # A JSON string, keys sorted: the chat template renders it as its own `tojson` would.
            args = {"path": path, "offset": offset, "limit": READ_LINES}
            out.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": json.dumps(args, sort_keys=True)}}]})
            out.append({"role": "tool", "tool_call_id": call_id, "name": "read_file",
                        "content": self.reads[(path, offset)]})
        return out

    def quotes(self, turn: int, step: int) -> dict[str, Any]:
        """What the agent loop passes an in-process engine at `step`: edit_file's old_string is
        quoted from the files read so far (agent/loop.py `_quotes`)."""
        read = {path: self.texts[path] for path, _ in (self._read(turn, j) for j in range(step))}
        return {"edit_file": {"old_string": read}} if read else {}

    def warmup_messages(self) -> list[dict[str, Any]]:
        """An earlier request of the same workspace: the same system prompt and tools."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": "Hello."}]

    def unseen_workspace_messages(self) -> list[dict[str, Any]]:
        """Step 0 of a session in a workspace the server has not served: only the tools are shared."""
        return [{"role": "system", "content": self.unseen_system}, {"role": "user", "content": TASKS[0]}]
