"""`codebase_search`: the semantic search tool over the codebase index (keyword + embeddings +
symbol names, fused), read-only.

    tool = CodebaseSearch(index)                 # a CodebaseIndex, or a callable returning one
    await registry.call("codebase_search", {"query": "where are retries handled", "k": 5}, ctx)

Without an index given here the tool looks in `ctx.state["codebase_index"]` (an index or a
callable). While there is no complete index it answers at once with an error that says to use
grep meanwhile, never waiting for the build. Output: ranked chunks with path:start-end, symbol,
kind, score and a few lines of the chunk, within a character budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.retrieval.exceptions import IndexNotReadyError, RetrievalError
from agent.tools.base import ToolContext, ToolError, ToolResult, ToolSpec

if TYPE_CHECKING:
    from agent.retrieval.index import CodebaseIndex, SearchHit

STATE_KEY = "codebase_index"
"""Where a session puts its CodebaseIndex (or a callable returning it) in ToolContext.state."""
DEFAULT_K, MAX_K = 10, 50
SNIPPET_LINES, LINE_CHARS = 6, 160
OUTPUT_BUDGET = 8_000
"""Characters of output at most; later results are cut with a note."""


def _snippet(hit: SearchHit) -> list[str]:
    lines = hit.text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    shown = [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " [...]" for line in lines[:SNIPPET_LINES]]
    if len(lines) > SNIPPET_LINES:
        shown.append(f"... ({len(lines) - SNIPPET_LINES} more lines: read_file {hit.path} lines "
                     f"{hit.start_line}-{hit.end_line})")
    return ["    " + line for line in shown]


def render(query: str, hits: list[SearchHit], budget: int = OUTPUT_BUDGET) -> tuple[str, bool]:
    """The model's view of the hits: a header, then one block per hit, best first, cut at
    `budget` characters with a note saying how many were left out."""
    if not hits:
        return (f"No indexed code matches {query!r}. Try other words (what the code does, or a "
                "name), widen `paths`, or use grep for an exact string."), False
    out = [f"{len(hits)} results for {query!r}, best first (path:lines  symbol (kind)  score):"]
    used = len(out[0])
    for i, hit in enumerate(hits, 1):
        where = f"{hit.path}:{hit.start_line}-{hit.end_line}"
        name = f"  {hit.symbol} ({hit.kind})" if hit.symbol else f"  ({hit.kind})"
        block = "\n".join([f"{i}. {where}{name}  {hit.score:.4f}", *_snippet(hit)])
        if used + len(block) > budget and i > 1:
            out.append(f"[{len(hits) - i + 1} more results cut to keep this short; ask for a smaller k, "
                       "narrow `paths`, or read_file a range above]")
            return "\n".join(out), True
        out.append(block)
        used += len(block) + 1
    return "\n".join(out), False


class CodebaseSearch:
    spec = ToolSpec(
        "codebase_search",
        "Search the codebase by meaning: describe what the code does ('where are HTTP retries "
        "handled', 'parse the config file') or name a symbol ('Session.send'). Combines keyword, "
        "embedding and symbol-name matches and returns the best chunks (functions, classes, "
        "sections) with path, line range, symbol, score and a short snippet. Use grep for an "
        "exact string or regex, glob for file names, and read_file to see a whole result.",
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1,
                          "description": "What you are looking for, in words or as identifiers."},
                "paths": {"type": "array", "items": {"type": "string", "minLength": 1},
                          "description": "Only search these directories, files or globs ('src', 'tests/**/*.py')."},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_K,
                      "description": f"How many results (default {DEFAULT_K})."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        True,
        "search",
    )

    def __init__(self, index: CodebaseIndex | Callable[[], CodebaseIndex | None] | None = None) -> None:
        self._index = index

    def paths(self, args: dict[str, Any]) -> list[str]:
        return []

    def _resolve(self, ctx: ToolContext) -> CodebaseIndex:
        source = self._index if self._index is not None else ctx.state.get(STATE_KEY)
        index = source() if callable(source) else source
        if index is None:
            raise ToolError("the codebase index is being built (or is off for this session); use grep "
                            "and glob meanwhile")
        return index

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        index = self._resolve(ctx)
        query, k, paths = args["query"].strip(), args.get("k", DEFAULT_K), args.get("paths")
        if not query:
            raise ToolError("query is empty; describe what the code does or name a symbol")
        if not index.ready:
            done, total = index.progress
            progress = f" ({done} of {total} files so far)" if total else ""
            raise ToolError(f"the index is being built{progress}; use grep meanwhile")
        try:
            hits = await asyncio.to_thread(index.search, query, k, paths=paths)
        except IndexNotReadyError as err:
            raise ToolError(f"{err}; use grep meanwhile") from err
        except (RetrievalError, ValueError) as err:
            raise ToolError(f"codebase_search failed: {err}; use grep meanwhile") from err
        output, truncated = render(query, hits)
        data = {"query": query, "k": k, "paths": paths, "results": [
            {"path": h.path, "start_line": h.start_line, "end_line": h.end_line, "symbol": h.symbol,
             "kind": h.kind, "score": round(h.score, 6), "ranks": h.ranks} for h in hits]}
        return ToolResult(output=output, data=data, truncated=truncated)
