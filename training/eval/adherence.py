"""Adherence to the codebase: does a candidate patch build on the code around it the way the
task's reference solution does? Measured on tasks whose reference reuses existing helpers, named
in `metadata.helpers` (dotted: `toolz.dicttoolz.get_in`, `pkg.mod.Class.method`). Pure functions
of (task, candidate patch, workspace); the workspace is the task's starting tree, never changed
(patches are applied to copies of the files they touch).

    check_helpers(task, workspace)                     # [] when every helper exists in the workspace
                                                       # and the reference's changed code uses it
    report = await adherence(task, candidate, workspace)
    report.reused, report.rewritten, report.missing    # the helpers, sorted into three
    report.reuse                                       # len(reused) / len(helpers)
    report.stray                                       # share of the changed lines outside the
                                                       # functions (and files) the reference changes
    report.stray_functions, report.stray_files
    report.lint_errors                                 # ruff findings the patch adds to its files
    report.score                                       # 0.5 reuse + 0.3 (1 - stray) + 0.2 lint-clean

How each is read (Python's syntax tree, `ast`):
- Changed code: the lines a patch adds or removes, each placed in its innermost enclosing
  function or class (`Class.method`), else `<module>`, on the side of the diff it belongs to
  (an added function is its own new scope).
- Reused: the helper's name (its last dotted part) is referenced (called, passed, imported)
  inside the candidate's changed scopes, and the candidate defines no function of that name.
- Rewritten: not reused, and the candidate adds a function named like the helper or whose body
  has the helper's shape (SequenceMatcher ratio >= REWRITE_RATIO over the normalised syntax
  tree, names and constants blanked).
- Lint: the file before and after through the agent's own lint (agent/tools/lints.py: the
  project's ruff config when it has one, else the harness's default rules); new findings are
  counted by (code, message), so moved lines are not new.

An empty candidate scores 0. Tests: .venv/bin/python -m pytest tests/training/test_adherence.py
"""

from __future__ import annotations

import ast
import difflib
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from agent.tools.lints import lint
from agent.workspace import Workspace
from training.tasks import Task, TaskError, apply_patch, git

REWRITE_RATIO = 0.7
WEIGHTS = {"reuse": 0.5, "stray": 0.3, "lint": 0.2}
MODULE_SCOPE = "<module>"


class AdherenceError(ValueError):
    """A task without helpers, helpers the reference does not bear out, or a patch that does not apply."""


@dataclass
class Adherence:
    helpers: list[str]
    reused: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    stray: float = 0.0
    stray_functions: list[str] = field(default_factory=list)
    """`path::scope` the candidate changes and the reference does not."""
    stray_files: list[str] = field(default_factory=list)
    lint_errors: int = 0
    lint_findings: list[str] = field(default_factory=list)
    empty: bool = False

    @property
    def reuse(self) -> float:
        return len(self.reused) / len(self.helpers) if self.helpers else 0.0

    @property
    def lint_clean(self) -> bool:
        return self.lint_errors == 0

    @property
    def score(self) -> float:
        if self.empty:
            return 0.0
        return round(WEIGHTS["reuse"] * self.reuse + WEIGHTS["stray"] * (1 - self.stray)
                     + WEIGHTS["lint"] * self.lint_clean, 4)

    def to_json(self) -> dict:
        return {**self.__dict__, "reuse": round(self.reuse, 4), "lint_clean": self.lint_clean, "score": self.score}


# ---- patches as files before and after --------------------------------------------------------


def patched_files(patch: str, workspace: Path) -> dict[str, tuple[str, str]]:
    """{path: (text before, text after)} for every file `patch` touches ("" for a file it creates
    or deletes); AdherenceError when it does not apply to the workspace."""
    if not patch.strip():
        return {}
    with tempfile.TemporaryDirectory(prefix="composer-adherence-") as tmp:
        scratch = Path(tmp)
        git(scratch, "init", "-q")
        stat = git(scratch, "apply", "--numstat", "-z", "-", input=patch, check=False)
        if stat.returncode != 0:
            raise AdherenceError(f"the patch is not a diff git reads: {stat.stderr.strip()[-300:]}")
        paths = [field.split("\t")[-1] for field in stat.stdout.split("\0") if "\t" in field]
        before = {}
        for rel in paths:
            source = workspace / rel
            if source.is_file():
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, scratch / rel)
            before[rel] = source.read_text(encoding="utf-8", errors="replace") if source.is_file() else ""
        try:
            apply_patch(scratch, patch, "candidate patch")
        except TaskError as err:
            raise AdherenceError(str(err)) from None
        return {rel: (before[rel], (scratch / rel).read_text(encoding="utf-8", errors="replace")
                      if (scratch / rel).is_file() else "") for rel in paths}


def _scopes(text: str) -> list[tuple[int, int, str]] | None:
    """(first line, last line, qualified name) of every function and class (decorators
    included); None when the text does not parse."""
    definitions = _all_definitions(text)
    if definitions is None:
        return None
    return [(min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno, name)
            for name, node in definitions]


def _scope_of(line: int, scopes: list[tuple[int, int, str]] | None) -> str:
    if scopes is None:
        return MODULE_SCOPE
    inside = [s for s in scopes if s[0] <= line <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else MODULE_SCOPE


def changed_scopes(before: str, after: str) -> Counter:
    """{scope: changed lines}: each removed line in its scope of `before`, each added line in
    its scope of `after`."""
    old, new = before.splitlines(), after.splitlines()
    old_scopes, new_scopes = _scopes(before), _scopes(after)
    counts: Counter = Counter()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            counts.update(_scope_of(i + 1, old_scopes) for i in range(i1, i2) if old[i].strip())
        if tag in ("replace", "insert"):
            counts.update(_scope_of(j + 1, new_scopes) for j in range(j1, j2) if new[j].strip())
    return counts


def touched(files: dict[str, tuple[str, str]]) -> Counter:
    """{"path::scope": changed lines} over a patch's Python files (other files: `path::<module>`)."""
    counts: Counter = Counter()
    for path, (before, after) in files.items():
        scoped = changed_scopes(before, after) if path.endswith((".py", ".pyi")) else Counter(
            {MODULE_SCOPE: max(1, len(set(before.splitlines()) ^ set(after.splitlines())))})
        counts.update({f"{path}::{scope}": n for scope, n in scoped.items()})
    return counts


# ---- helpers ---------------------------------------------------------------------------------


def _all_definitions(text: str) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]] | None:
    """(qualified name, node) of every function and class of a module (`Class.method`,
    `outer.inner`; an overloaded name once per definition), outermost first; None when the text
    does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    out: list = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.append((f"{prefix}{child.name}", child))
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _definitions(text: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """Qualified name -> its first definition ({} when the text does not parse)."""
    out: dict = {}
    for name, node in _all_definitions(text) or []:
        out.setdefault(name, node)
    return out


def locate_helper(helper: str, workspace: Path) -> tuple[str, str] | None:
    """(module file, qualified name inside it) for a dotted helper name, or None."""
    parts = helper.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        base = "/".join(parts[:cut])
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            path = workspace / rel
            if path.is_file() and ".".join(parts[cut:]) in _definitions(path.read_text(encoding="utf-8", errors="replace")):
                return rel, ".".join(parts[cut:])
    return None


def _names_in_scopes(files: dict[str, tuple[str, str]], scopes: set[str]) -> set[str]:
    """Every name (Name ids, attribute names, imported names) inside the given changed scopes
    of the patched files' new text."""
    names: set[str] = set()
    for path, (_, after) in files.items():
        wanted = {s.split("::", 1)[1] for s in scopes if s.startswith(path + "::")}
        if not wanted or not path.endswith((".py", ".pyi")):
            continue
        try:
            tree = ast.parse(after)
        except SyntaxError:
            continue
        definitions = _definitions(after)
        nodes = [definitions[w] for w in wanted if w in definitions]
        if MODULE_SCOPE in wanted:
            nodes += [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        for node in nodes:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name):
                    names.add(sub.id)
                elif isinstance(sub, ast.Attribute):
                    names.add(sub.attr)
                elif isinstance(sub, ast.alias):
                    names.add((sub.asname or sub.name).split(".")[-1])
    return names


def _added_definitions(files: dict[str, tuple[str, str]]) -> dict[str, ast.AST]:
    """`path::qualname` -> node for the functions a patch adds (new in the after text)."""
    added = {}
    for path, (before, after) in files.items():
        if path.endswith((".py", ".pyi")):
            old = _definitions(before)
            for name, node in _definitions(after).items():
                if name not in old and not isinstance(node, ast.ClassDef):
                    added[f"{path}::{name}"] = node
    return added


def _shape(node: ast.AST) -> list[str]:
    """The node's body as a sequence of syntax-node types with names and constants blanked."""
    body = getattr(node, "body", [node])
    return [type(sub).__name__ for stmt in body for sub in ast.walk(stmt)
            if not isinstance(sub, ast.expr_context | ast.Load | ast.Store)]


def check_helpers(task: Task, workspace: Path) -> list[str]:
    """Problems with the task's `metadata.helpers` (empty when they hold): each must be defined
    in the workspace and referenced by the reference patch's changed code."""
    helpers = task.metadata.get("helpers") or []
    if not helpers:
        return [f"{task.instance_id}: no metadata.helpers"]
    files = patched_files(task.patch, workspace)
    used = _names_in_scopes(files, set(touched(files)))
    problems = []
    for helper in helpers:
        if locate_helper(helper, workspace) is None:
            problems.append(f"{helper}: not defined in the workspace")
        elif helper.rsplit(".", 1)[-1] not in used:
            problems.append(f"{helper}: the reference patch's changed code does not use it")
    return problems


# ---- the report -------------------------------------------------------------------------------


def _sort_helpers(report: Adherence, files: dict[str, tuple[str, str]], scopes: set[str], workspace: Path) -> None:
    used = _names_in_scopes(files, scopes)
    added = _added_definitions(files)
    for helper in report.helpers:
        where = locate_helper(helper, workspace)
        name = helper.rsplit(".", 1)[-1]
        own = [key for key in added if key.split("::", 1)[1].rsplit(".", 1)[-1] == name]
        if name in used and not own:
            report.reused.append(helper)
            continue
        shape = None
        if where is not None:
            node = _definitions((workspace / where[0]).read_text(encoding="utf-8", errors="replace"))[where[1]]
            shape = _shape(node)
        similar = shape is not None and any(
            difflib.SequenceMatcher(None, shape, _shape(node), autojunk=False).ratio() >= REWRITE_RATIO
            for node in added.values())
        (report.rewritten if own or similar else report.missing).append(helper)


async def _lint_added(files: dict[str, tuple[str, str]], workspace: Path) -> list[str]:
    ws = Workspace(workspace)
    found = []
    for path, (before, after) in sorted(files.items()):
        if not path.endswith((".py", ".pyi")) or not after:
            continue
        old = Counter((d.code, d.message) for d in await lint(ws, path, text=before)) if before else Counter()
        new = Counter((d.code, d.message) for d in await lint(ws, path, text=after))
        found += [f"{path}: {code} {message}" for (code, message), n in (new - old).items() for _ in range(n)]
    return found


async def adherence(task: Task, candidate: str, workspace: Path) -> Adherence:
    """The candidate patch's adherence report against the task's reference (see the module
    docstring). AdherenceError for a task without helpers or a patch that does not apply."""
    helpers = list(task.metadata.get("helpers") or [])
    if not helpers:
        raise AdherenceError(f"{task.instance_id}: no metadata.helpers; adherence needs them")
    workspace = Path(workspace)
    report = Adherence(helpers=helpers)
    files = patched_files(candidate, workspace)
    changed = touched(files)
    if not changed:
        report.empty, report.stray, report.missing = True, 1.0, helpers
        return report
    reference = touched(patched_files(task.patch, workspace))
    ref_files = {key.split("::", 1)[0] for key in reference}
    outside = {key: n for key, n in changed.items() if key not in reference}
    report.stray = round(sum(outside.values()) / sum(changed.values()), 4)
    report.stray_functions = sorted(outside)
    report.stray_files = sorted({key.split("::", 1)[0] for key in changed} - ref_files)
    _sort_helpers(report, files, set(changed), workspace)
    report.lint_findings = await _lint_added(files, workspace)
    report.lint_errors = len(report.lint_findings)
    return report

