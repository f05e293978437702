"""Symbol tags: where names are defined and referenced in a file, from tree-sitter tags queries.

    tags = file_tags("requests/sessions.py", text)
    [t for t in tags if t.kind == "def"]   # Tag(path, name="Session", kind="def", line=356, category="class")
    [t for t in tags if t.kind == "ref"]   # Tag(..., name="merge_setting", kind="ref", line=..., category="call")

The queries are languages.tags_query(): each grammar wheel's queries/tags.scm plus our EXTRA_TAGS.
A match's `@name` capture is the tag; its `@definition.KIND` / `@reference.KIND` capture gives
kind and category. A "function" defined inside a class-like node (per languages.LANGUAGES) is a
"method". Tags are de-duplicated by (kind, name, line); lines are 1-based. Files without a
grammar or tags query, binary files and files over MAX_FILE_CHARS give no tags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tree_sitter import QueryCursor

from agent.retrieval import languages
from agent.retrieval.chunking import MAX_FILE_CHARS
from agent.retrieval.languages import class_body, definition_name

if TYPE_CHECKING:
    from tree_sitter import Node

    from agent.retrieval.languages import LanguageSpec

_PREFERENCE = {"method": 0, "class": 1, "interface": 1, "function": 2}
"""When two patterns tag the same definition, the more specific category wins (lower)."""


@dataclass(frozen=True)
class Tag:
    path: str
    name: str
    kind: str
    """"def" or "ref"."""
    line: int
    """1-based line of the name."""
    category: str
    """What the query calls it: "function", "class", "method", "call", "type", "constant"..."""


def file_tags(path: str, text: str) -> list[Tag]:
    """Definitions and references in one file, sorted by line."""
    name = languages.language_for(path)
    if name is None or len(text) > MAX_FILE_CHARS or "\x00" in text:
        return []
    query = languages.tags_query(name)
    if query is None:
        return []
    spec = languages.LANGUAGES[name]
    root = languages.parse(name, text).root_node
    found: dict[tuple[str, str, int], str] = {}
    for _, captures in QueryCursor(query).matches(root):
        key = next((k for k in captures if k.startswith(("definition.", "reference."))), None)
        if key is None or "name" not in captures:
            continue
        kind = "def" if key.startswith("definition.") else "ref"
        category = key.split(".", 1)[1]
        if kind == "def" and category in ("function", "method"):
            category = _function_category(captures[key][0], spec)
        for node in captures["name"]:
            tag_name = (node.text or b"").decode("utf-8", "replace").strip()
            if not tag_name:
                continue
            where = (kind, tag_name, node.start_point.row + 1)
            if where not in found or _PREFERENCE.get(category, 3) < _PREFERENCE.get(found[where], 3):
                found[where] = category
    tags = [Tag(path, n, kind, line, category) for (kind, n, line), category in found.items()]
    return sorted(tags, key=lambda t: (t.line, t.kind, t.name))


def _function_category(node: Node, spec: LanguageSpec) -> str:
    """"method" for a function defined in a class body or named as one (Go receiver, C++
    `Foo::bar`, Lua `M:bar`), else "function" (a Rust fn in a `mod` is not a method)."""
    definition = None
    parent: Node | None = node
    while parent is not None:
        if parent.type in spec.functions or parent.type in spec.classes:
            body = class_body(parent) if parent.type in spec.classes else parent.child_by_field_name("body")
            inside = body is not None and body.start_byte <= node.start_byte < body.end_byte
            if inside:
                if parent.type in spec.classes:
                    return "method"
                break  # a function nested in a function
            if parent.type in spec.functions and definition is None:
                definition = parent  # the definition itself (its name is outside its body)
        parent = parent.parent
    return "method" if definition is not None and definition_name(definition)[1] else "function"
