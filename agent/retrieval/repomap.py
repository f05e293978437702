"""A repo map: the most referenced definitions of a codebase, ranked like Aider's, in a budget.

    tags = {rel: file_tags(rel, text) for rel, text in files.items()}
    print(repo_map(tags, files, budget_tokens=1024, focus_files=["src/app.py"], mentioned={"Session"}))

    requests/sessions.py:
    |class Session(SessionRedirectMixin):
    ...
    |    def request(
    ...

How (Aider's aider/repomap.py):
- A graph over files: for every identifier both defined and referenced, an edge from each
  referencing file to each defining file, weighted sqrt(number of references) times: x10 if the
  identifier is in `mentioned`, x10 if it is snake_case, kebab-case or camelCase and at least 8
  characters long, x0.1 if it starts with "_", x0.1 if more than 5 files define it, and x50 if the
  referencing file is in `focus_files`. A definition nobody references gets a 0.1 self-edge.
  Without any references at all, definitions count as references.
- Personalised PageRank (damping 0.85, power iteration in NumPy), personalised towards
  `focus_files` and files whose path parts name a `mentioned` identifier; uniform otherwise.
- Each file's rank flows out along its edges in proportion to their weights; what arrives at
  (defining file, identifier) is that definition's score.
- The map lists the best definitions, grouped by file ("path:" then "|"-prefixed definition
  lines cut at 100 characters, each with its enclosing definition's line, "..." for skipped
  lines), then files without definitions. How many definitions fit is found by binary search.
  Tokens are estimated as characters / 4 (no tokenizer needed; code runs ~3-4 chars a token).
  Definitions in `focus_files` are left out of the map: the caller already has those files.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

import numpy as np

from agent.exceptions import WorkspaceError
from agent.retrieval.languages import language_for
from agent.retrieval.tags import Tag, file_tags
from agent.workspace import Workspace

DAMPING = 0.85
MAX_ITERATIONS = 100
TOLERANCE = 1e-6
LINE_CHARS = 100
CHARS_PER_TOKEN = 4


def rank_definitions(tags_by_file: dict[str, list[Tag]], *, focus_files: Iterable[str] = (),
                     mentioned: Iterable[str] = ()) -> list[tuple[str, str, float]]:
    """(path, identifier, score) of every definition that gets rank, best first."""
    focus, wanted = set(focus_files), set(mentioned)
    defines: dict[str, set[str]] = defaultdict(set)
    references: dict[str, list[str]] = defaultdict(list)
    for path, tags in tags_by_file.items():
        for tag in tags:
            if tag.kind == "def":
                defines[tag.name].add(path)
            else:
                references[tag.name].append(path)
    if not references:
        references = defaultdict(list, {name: sorted(paths) for name, paths in defines.items()})

    edges: list[tuple[str, str, float, str]] = []  # (referencer, definer, weight, identifier)
    for name in sorted(defines):
        definers = sorted(defines[name])
        if name not in references:
            edges += [(path, path, 0.1, name) for path in definers]
            continue
        mul = _identifier_weight(name, wanted, len(definers))
        for referencer, count in sorted(Counter(references[name]).items()):
            weight = mul * (50.0 if referencer in focus else 1.0) * math.sqrt(count)
            edges += [(referencer, definer, weight, name) for definer in definers]
    if not edges:
        return []

    files = sorted({e[0] for e in edges} | {e[1] for e in edges})
    index = {path: i for i, path in enumerate(files)}
    src = np.array([index[e[0]] for e in edges])
    dst = np.array([index[e[1]] for e in edges])
    weight = np.array([e[2] for e in edges])
    personal = np.array([1.0 if _personal(path, focus, wanted) else 0.0 for path in files])
    rank = pagerank(len(files), src, dst, weight, personal if personal.any() else None)

    out_weight = np.bincount(src, weights=weight, minlength=len(files))
    flow = rank[src] * weight / out_weight[src]
    scores: dict[tuple[str, str], float] = defaultdict(float)
    for (_, definer, _, name), amount in zip(edges, flow.tolist()):
        scores[(definer, name)] += amount
    ranked = [(path, name, score) for (path, name), score in scores.items()]
    return sorted(ranked, key=lambda r: (-r[2], r[0], r[1]))


def _identifier_weight(name: str, mentioned: set[str], num_definers: int) -> float:
    mul = 1.0
    is_snake = "_" in name and any(c.isalpha() for c in name)
    is_kebab = "-" in name and any(c.isalpha() for c in name)
    is_camel = any(c.isupper() for c in name) and any(c.islower() for c in name)
    if name in mentioned:
        mul *= 10
    if (is_snake or is_kebab or is_camel) and len(name) >= 8:
        mul *= 10
    if name.startswith("_"):
        mul *= 0.1
    if num_definers > 5:
        mul *= 0.1
    return mul


def _personal(path: str, focus: set[str], mentioned: set[str]) -> bool:
    if path in focus:
        return True
    parts = PurePosixPath(path)
    return bool(mentioned.intersection({*parts.parts, parts.stem}))


def pagerank(num_nodes: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
             personalization: np.ndarray | None = None) -> np.ndarray:
    """PageRank of a weighted multigraph given as edge arrays, as networkx.pagerank computes it:
    dangling nodes (no out-edges) jump by the personalization vector (uniform if None); stops
    when the L1 change is under num_nodes * TOLERANCE or after MAX_ITERATIONS."""
    p = np.full(num_nodes, 1.0 / num_nodes) if personalization is None else personalization / personalization.sum()
    out_weight = np.bincount(src, weights=weight, minlength=num_nodes)
    dangling = out_weight == 0
    share = weight / np.where(out_weight[src] > 0, out_weight[src], 1.0)
    x = np.full(num_nodes, 1.0 / num_nodes)
    for _ in range(MAX_ITERATIONS):
        last = x
        moved = np.bincount(dst, weights=last[src] * share, minlength=num_nodes)
        x = DAMPING * (moved + last[dangling].sum() * p) + (1.0 - DAMPING) * p
        if np.abs(x - last).sum() < num_nodes * TOLERANCE:
            break
    return x


def repo_map(tags_by_file: dict[str, list[Tag]], sources: dict[str, str] | Callable[[str], str], *,
             budget_tokens: int = 1024, focus_files: Iterable[str] = (),
             mentioned: Iterable[str] = ()) -> str:
    """The map of the best-ranked definitions that fits in budget_tokens (chars / 4); "" when
    not even one fits. `sources` gives a file's text, as a dict or a function of the path."""
    focus = set(focus_files)
    ranked = rank_definitions(tags_by_file, focus_files=focus, mentioned=mentioned)
    def_lines: dict[tuple[str, str], list[int]] = defaultdict(list)
    for path, tags in tags_by_file.items():
        for tag in tags:
            if tag.kind == "def":
                def_lines[(path, tag.name)].append(tag.line)
    items: list[tuple[str, int | None]] = []  # (path, line); None: a file listed by name only
    for path, name, _ in ranked:
        if path not in focus:
            items += [(path, line) for line in sorted(set(def_lines[(path, name)]))]
    listed = {path for path, _ in items}
    items += [(path, None) for path in sorted(tags_by_file) if path not in listed and path not in focus]

    renderer = _Renderer(tags_by_file, sources)
    best, lo, hi = "", 1, len(items)
    while lo <= hi:  # the most items whose rendering fits
        mid = (lo + hi) // 2
        text = renderer.render(items[:mid])
        if len(text) <= budget_tokens * CHARS_PER_TOKEN:
            best, lo = text, mid + 1
        else:
            hi = mid - 1
    return best


class _Renderer:
    def __init__(self, tags_by_file: dict[str, list[Tag]], sources: dict[str, str] | Callable[[str], str]):
        self.tags_by_file = tags_by_file
        self.sources = sources
        self._lines: dict[str, list[str]] = {}
        self._parents: dict[str, dict[int, int]] = {}

    def lines(self, path: str) -> list[str]:
        if path not in self._lines:
            text = self.sources.get(path, "") if isinstance(self.sources, dict) else self.sources(path)
            self._lines[path] = text.split("\n")
        return self._lines[path]

    def parents(self, path: str) -> dict[int, int]:
        """Definition line -> the line of the definition enclosing it (by indentation)."""
        if path not in self._parents:
            lines = self.lines(path)
            stack: list[tuple[int, int]] = []  # (indent, line)
            found = {}
            for line in sorted({t.line for t in self.tags_by_file.get(path, []) if t.kind == "def"}):
                text = lines[line - 1] if line <= len(lines) else ""
                indent = len(text) - len(text.lstrip())
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                if stack:
                    found[line] = stack[-1][1]
                stack.append((indent, line))
            self._parents[path] = found
        return self._parents[path]

    def render(self, items: list[tuple[str, int | None]]) -> str:
        by_file: dict[str, set[int]] = {}
        for path, line in items:
            shown = by_file.setdefault(path, set())
            parents = self.parents(path)
            while line is not None:
                shown.add(line)
                line = parents.get(line)
        out = []
        for path, shown in by_file.items():
            if not shown:
                out.append(path)
                continue
            out.append(f"{path}:")
            lines, previous = self.lines(path), 0
            for line in sorted(shown):
                if line > len(lines):
                    continue
                if line != previous + 1:
                    out.append("...")
                out.append("|" + lines[line - 1].rstrip()[:LINE_CHARS])
                previous = line
            if previous < len(lines):
                out.append("...")
        return "\n".join(out) + "\n" if out else ""


_TAGS_CACHE: dict[tuple[str, str], tuple[int, int, list[Tag]]] = {}
"""(root, path) -> (mtime_ns, size, tags): files unchanged since the last map are not parsed again."""


def _cached_tags(workspace: Workspace, rel: str, max_file_bytes: int) -> list[Tag] | None:
    st = workspace.stat(rel)
    if st.st_size > max_file_bytes:
        return None
    key = (str(workspace.root), rel)
    hit = _TAGS_CACHE.get(key)
    if workspace.buffer(rel) is None and hit is not None and hit[:2] == (st.st_mtime_ns, st.st_size):
        return hit[2]
    tags = file_tags(rel, workspace.read_text(rel))
    if workspace.buffer(rel) is None:  # an unsaved buffer is not what the disk's stat describes
        _TAGS_CACHE[key] = (st.st_mtime_ns, st.st_size, tags)
    return tags


def workspace_repo_map(workspace: Workspace, *, budget_tokens: int = 1024, max_files: int = 5000,
                       max_file_bytes: int = 256_000) -> str:
    """The repo map of a workspace's source files (gitignore respected; at most `max_files`
    files of up to `max_file_bytes` each are read, so a huge repository costs bounded time).
    Tags are cached per file by mtime and size, so a new session in a known workspace re-parses
    only what changed; only the files the map shows are read again."""
    tags_by_file: dict[str, list[Tag]] = {}
    for i, rel in enumerate(workspace.iter_files()):
        if i >= max_files:
            break
        if language_for(rel) is None:
            continue
        try:
            tags = _cached_tags(workspace, rel, max_file_bytes)
        except (OSError, ValueError, WorkspaceError):  # binary, too big, vanished: not in the map
            continue
        if tags is not None:
            tags_by_file[rel] = tags
    if not tags_by_file:
        return ""

    def source(rel: str) -> str:
        try:
            return workspace.read_text(rel)
        except (OSError, ValueError, WorkspaceError):
            return ""

    return repo_map(tags_by_file, source, budget_tokens=budget_tokens)
