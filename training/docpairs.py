"""Docstring/code pairs from installed Python packages: the data codebase search is measured on
(bench/retrieval.py) and its embedder is tuned on (training/embedder.py), from disjoint packages.

    source, targets = strip_docstrings("pkg/mod.py", text)   # docstrings -> `pass`, lines kept
    pairs = mine_pairs(site_packages, exclude={"requests", "urllib3"})

A target is a top-level function or method with a docstring whose first sentence has at least
five words; its query is that sentence, and the code it must find is the definition with every
docstring in the file removed, so the answer cannot be read off the comment it came from.
"""

from __future__ import annotations

import ast
import inspect
import random
import re
from dataclasses import dataclass
from pathlib import Path

from agent.retrieval.chunking import chunk_text


@dataclass
class Target:
    """A definition a docstring query must find."""

    path: str
    qualname: str
    def_line: int
    end_line: int
    def_text: str
    last_text: str
    query: str


@dataclass(frozen=True)
class Pair:
    """A query and the text the embedder reads for the chunk that answers it."""

    query: str
    code: str
    package: str


def first_sentence(doc: str) -> str:
    """A docstring's first sentence, Sphinx roles and backticks removed, at most 300 chars."""
    text = inspect.cleandoc(doc).split("\n\n")[0]
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "").replace("`", "")
    text = " ".join(text.split())
    cut = re.search(r"(?<=[a-z0-9)])\.\s", text)
    return (text[: cut.start() + 1] if cut else text)[:300]


def _docstring(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def strip_docstrings(rel: str, source: str) -> tuple[str, list[Target]]:
    """The source with every docstring replaced by `pass` (same line count), and a Target for
    each top-level function or method whose docstring has a usable first sentence."""
    tree = ast.parse(source)
    lines = source.split("\n")
    targets: list[Target] = []

    def visit(node: ast.AST, name: str | None) -> None:
        """`name`: a function's qualified name, or a class's prefix for its methods; None below
        the first level (nested definitions are stripped but are not targets)."""
        doc = _docstring(node)
        if doc is not None and doc.lineno != getattr(node, "lineno", 0):
            lines[doc.lineno - 1] = " " * doc.col_offset + "pass"
            for i in range(doc.lineno, doc.end_lineno):
                lines[i] = ""
            sentence = first_sentence(doc.value.value)
            is_def = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_def and name and not node.name.startswith("__") and len(sentence.split()) >= 5:
                targets.append(Target(rel, name, node.lineno, node.end_lineno, "", "", sentence))
        top = isinstance(node, ast.Module)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name + "." if top else None)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                prefix = "" if top else name if isinstance(node, ast.ClassDef) else None
                visit(child, None if prefix is None else prefix + child.name)

    visit(tree, None)
    for t in targets:
        t.def_text = lines[t.def_line - 1].strip()
        t.last_text = lines[t.end_line - 1].strip()
    return "\n".join(lines), targets


def package_pairs(root: Path, package: str) -> list[Pair]:
    """Pairs from one package directory (vendored copies of other packages and tests skipped):
    each target's query and the first chunk of its definition, docstrings stripped. Definitions
    that are not chunks of their own (a method inside a small class's one chunk, small functions
    merged with their neighbours) give no pair."""
    pairs: list[Pair] = []
    for src in sorted((root / package).rglob("*.py")):
        parts = src.relative_to(root).parts
        if any(p in ("_vendor", "vendor", "vendored", "tests") for p in parts):
            continue
        rel = "/".join(parts)
        try:
            stripped, targets = strip_docstrings(rel, src.read_text(errors="replace"))
            chunks = chunk_text(rel, stripped) if targets else []
        except (SyntaxError, ValueError, RecursionError):
            continue
        for t in targets:
            chunk = next((c for c in chunks if c.symbol == t.qualname and c.start_line <= t.def_line <= c.end_line), None)
            if chunk is not None:
                pairs.append(Pair(t.query, chunk.embedding_text, package))
    return pairs


def mine_pairs(site: Path, *, exclude: set[str], per_package: int = 600, seed: int = 0) -> list[Pair]:
    """Pairs from every package directory under `site` but the excluded ones, at most
    `per_package` from each (a random sample), shuffled."""
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for entry in sorted(site.iterdir()):
        name = entry.name
        if not entry.is_dir() or name in exclude or name.startswith("_") or "." in name or name.endswith("libs"):
            continue
        found = package_pairs(site, name)
        rng.shuffle(found)
        pairs += found[:per_package]
    rng.shuffle(pairs)
    return pairs
