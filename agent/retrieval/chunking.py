"""Split a source file into chunks for semantic search: functions, classes, methods and glue.

    chunks = chunk_text("agent/session.py", text)           # max_chars=MAX_CHARS (1,000)
    for c in chunks:
        embed(c.embedding_text)                             # "agent/session.py: Session.prompt (method)\\n..."

The recipe (Cursor; Continue's core/indexing/chunk/code.ts; Sweep's chunker):
- Top-level functions and classes become chunks; methods carry their class as symbol prefix
  ("Session.prompt"), as do members of namespaces and modules ("ns.Point", "Foo.bar" for a Go
  method on Foo or C++ `Foo::bar`). Comments, decorators and attributes right above a definition
  belong to it.
- A class that fits max_chars is one chunk. A larger class yields a collapsed chunk (its header and
  members, method bodies elided as `...` / `{ ... }`) plus its methods as chunks of their own; a
  method (or function) that is itself too large is split into line windows within it, each
  window keeping the method's kind and symbol.
- Small adjacent top-level pieces (imports, constants, definitions under max_chars // 5) are
  merged up to max_chars into "module" chunks.
- Markdown is split by headings ("section", symbol = the heading text): a section that fits is one
  chunk, a larger one is its own text before the first subheading plus its subsections.
- Anything else (no grammar, or a parse where more than MAX_ERROR_FRACTION of the text is
  ERROR nodes) becomes line windows of up to max_chars overlapping by OVERLAP_LINES lines.

Guarantees: every non-blank line lies in at least one chunk's line range; no chunk's text is
longer than max_chars (a single longer line is cut into pieces of max_chars, each a chunk of
that one line); files over MAX_FILE_CHARS characters or containing NUL give no chunks. Chunk
text is whole source lines, except for collapsed classes and pieces of long lines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate
from typing import TYPE_CHECKING

from agent.retrieval import languages
from agent.retrieval.languages import node_text, qualified
from agent.retrieval.query import split_identifier

if TYPE_CHECKING:
    from tree_sitter import Node

    from agent.retrieval.languages import LanguageSpec

MAX_FILE_CHARS = 1_000_000
MAX_CHARS = 1000
"""The default chunk size. MiniLM reads 256 word pieces and code runs about 3.5 characters to a
piece, so 30% of 1,500-character chunks lost their tail to truncation; at 1,000 a long function
becomes windows that each fit, and search ranks the function by its best window. Measured on
bench/retrieval.py (requests, urllib3) against 1,500: hybrid function recall@10 on docstring
queries 85% -> 87%, identifier MRR 0.88 -> 0.90, for 22% more chunks."""
OVERLAP_LINES = 3
SMALL_DIVISOR = 5
"""A top-level definition under max_chars // SMALL_DIVISOR is merged with its neighbours."""
BIG_MEMBER_DIVISOR = 4
"""In a collapsed class, a non-method member over max_chars // BIG_MEMBER_DIVISOR shows only its
first line; its full text becomes a chunk of its own."""
MAX_ERROR_FRACTION = 0.1
NAMED_KINDS = frozenset({"function", "method", "class", "section"})


@dataclass(frozen=True)
class Chunk:
    path: str
    """Workspace-relative, "/"-separated."""
    start_line: int
    """1-based, inclusive."""
    end_line: int
    """1-based, inclusive."""
    kind: str
    """"function", "method", "class", "module", "section" (Markdown) or "lines"."""
    symbol: str | None
    """Qualified name ("Session.prompt", "Foo.bar", a Markdown heading); None for glue and windows."""
    text: str
    """The chunk's source lines (a collapsed class: its member signatures)."""

    @property
    def header(self) -> str:
        """What to prepend when embedding: "agent/session.py: Session.prompt (method)"."""
        return f"{self.path}: {self.symbol} ({self.kind})" if self.symbol else self.path

    @property
    def embedding_text(self) -> str:
        """What the embedder reads: the header first (so the path and symbol always count), then
        the text."""
        return f"{self.header}\n{self.text}"

    @property
    def name_text(self) -> str | None:
        """A definition's name as words, its owner in parentheses ("unicode is ascii",
        "send (session)"), for the index's name vectors; None for glue and windows without a
        symbol. Without the path, so a moved file keeps its vectors."""
        if not self.symbol or self.kind not in NAMED_KINDS:
            return None
        if self.kind == "section":
            return self.symbol
        *owner, name = self.symbol.split(".")
        words = " ".join(w.lower() for w in split_identifier(name))
        context = " ".join(w.lower() for part in owner for w in split_identifier(part))
        return f"{words} ({context})" if context else words


def chunk_text(path: str, text: str, *, max_chars: int = MAX_CHARS) -> list[Chunk]:
    """The chunks of one file, ordered by start line (a collapsed class before its methods)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    if len(text) > MAX_FILE_CHARS or "\x00" in text:
        return []
    chunker = _Chunker(path, text, max_chars)
    name = languages.language_for(path)
    if name == "markdown":
        chunker.markdown()
    elif name is None:
        chunker.windows(1, len(chunker.lines), "lines", None)
    else:
        chunker.code(name)
    return sorted(chunker.out, key=lambda c: (c.start_line, -c.end_line))


@dataclass(frozen=True, slots=True)
class _Seg:
    """A run of whole lines: a definition (kind set) or glue (kind None)."""

    start: int
    end: int
    kind: str | None = None
    symbol: str | None = None
    base: str = ""
    """"function" or "class" for definitions."""
    node: Node | None = None
    """The definition's outermost node (decorators, export, template included)."""
    owner: Node | None = None
    """The node holding the body: the definition, or a variable's value (`const A = class {}`)."""


def _lines(node: Node) -> tuple[int, int]:
    """1-based first and last line of a node (a node ending at column 0 ends on the line before)."""
    start, end = node.start_point.row, node.end_point.row
    if node.end_point.column == 0 and end > start:
        end -= 1
    return start + 1, end + 1


class _Chunker:
    def __init__(self, path: str, text: str, max_chars: int) -> None:
        self.path, self.text, self.max = path, text, max_chars
        self.lines = text.split("\n")
        self.cum = [0, *accumulate(len(line) + 1 for line in self.lines)]
        self.out: list[Chunk] = []
        self.spec: LanguageSpec | None = None
        self._source: bytes | None = None

    @property
    def source(self) -> bytes:
        """The text as the parser read it (byte offsets of nodes index this)."""
        if self._source is None:
            self._source = self.text.encode("utf-8", "replace")
        return self._source

    # ---- lines, sizes, emitting ---------------------------------------------------------------

    def size(self, start: int, end: int) -> int:
        """len() of lines start..end joined by newlines."""
        return self.cum[end] - self.cum[start - 1] - 1

    def blank(self, line: int) -> bool:
        return not self.lines[line - 1].strip()

    def emit(self, start: int, end: int, kind: str, symbol: str | None) -> None:
        """One chunk of whole lines (blank lines at either end dropped), or windows if too long."""
        while start <= end and self.blank(start):
            start += 1
        while end >= start and self.blank(end):
            end -= 1
        if start > end:
            return
        if self.size(start, end) > self.max:
            self.windows(start, end, kind, symbol)
            return
        text = "\n".join(self.lines[start - 1 : end])
        self.out.append(Chunk(self.path, start, end, kind, symbol, text))

    def windows(self, start: int, end: int, kind: str, symbol: str | None) -> None:
        """Windows of whole lines up to max_chars, overlapping by OVERLAP_LINES; a longer line is
        cut into pieces of max_chars."""
        last_end = start - 1
        line = start
        while line <= end:
            while line <= end and self.blank(line):
                line += 1
            if line > end:
                return
            if self.size(line, line) > self.max:
                text = self.lines[line - 1]
                pieces = (text[i : i + self.max] for i in range(0, len(text), self.max))
                self.out += [Chunk(self.path, line, line, kind, symbol, p) for p in pieces if p.strip()]
                last_end, line = line, line + 1
                continue
            stop = line
            while stop < end and self.size(line, stop + 1) <= self.max:
                stop += 1
            while self.blank(stop):
                stop -= 1
            if stop <= last_end:  # the overlap left no room for a new line: start after it
                line = last_end + 1
                continue
            self.out.append(Chunk(self.path, line, stop, kind, symbol,
                                  "\n".join(self.lines[line - 1 : stop])))
            last_end = stop
            line = max(line + 1, stop + 1 - OVERLAP_LINES)
            if stop >= end:
                return

    # ---- code ---------------------------------------------------------------------------------

    def code(self, name: str) -> None:
        self.spec = languages.LANGUAGES[name]
        root = languages.parse(name, self.text).root_node
        if _error_fraction(root) > MAX_ERROR_FRACTION:
            self.windows(1, len(self.lines), "lines", None)
            return
        self.pack(self.fill_gaps(self.segments(root.children, "", in_class=False)))

    def fill_gaps(self, segs: list[_Seg]) -> list[_Seg]:
        """Non-blank lines outside every node (a C line continuation alone) become glue."""
        filled: list[_Seg] = []
        line = 1
        for seg in [*segs, _Seg(len(self.lines) + 1, len(self.lines) + 1)]:
            gap = [n for n in range(line, seg.start) if not self.blank(n)]
            if gap:
                self.add(filled, _Seg(gap[0], gap[-1]))
            if seg.start <= len(self.lines):
                self.add(filled, seg)
            line = seg.end + 1
        return filled

    def pack(self, segs: list[_Seg]) -> None:
        """Emit top-level pieces: large definitions alone, small pieces merged up to max_chars."""
        small = self.max // SMALL_DIVISOR
        group: list[_Seg] = []

        def flush() -> None:
            if len(group) == 1 and group[0].kind:
                self.emit(group[0].start, group[0].end, group[0].kind, group[0].symbol)
            elif group:
                self.emit(group[0].start, group[-1].end, "module", None)
            group.clear()

        for seg in segs:
            size = self.size(seg.start, seg.end)
            if seg.kind and size >= small:
                flush()
                self.definition(seg)
            elif size > self.max:
                flush()
                self.windows(seg.start, seg.end, "module", None)
            else:
                if group and self.size(group[0].start, seg.end) > self.max:
                    flush()
                group.append(seg)
        flush()

    def definition(self, seg: _Seg) -> None:
        assert seg.kind is not None
        if self.size(seg.start, seg.end) <= self.max:
            self.emit(seg.start, seg.end, seg.kind, seg.symbol)
            return
        body = languages.class_body(seg.owner) if seg.base == "class" else None
        if body is not None and body.named_child_count:
            self.big_class(seg, body)
        else:
            self.windows(seg.start, seg.end, seg.kind, seg.symbol)

    def big_class(self, seg: _Seg, body: Node) -> None:
        """A collapsed chunk (header and member signatures), then the members' own chunks."""
        members = self.segments(body.named_children, f"{seg.symbol}.", in_class=True)
        self.emit_entries(self.collapse(seg, members), "class", seg.symbol)
        big_member = self.max // BIG_MEMBER_DIVISOR
        for m in members:
            if m.kind:
                self.definition(m)
            elif self.size(m.start, m.end) > big_member:
                self.emit(m.start, m.end, "class", seg.symbol)

    def collapse(self, seg: _Seg, members: list[_Seg]) -> list[tuple[int, int, str]]:
        """(first line, last line, text) entries of a class with bodies elided."""
        entries = []
        if members and members[0].start > seg.start:
            entries.append(self.verbatim(seg.start, members[0].start - 1))
        big_member = self.max // BIG_MEMBER_DIVISOR
        for m in members:
            small = self.size(m.start, m.end) <= big_member
            if m.kind is None or (m.base == "class" and small):
                first = self.lines[m.start - 1].rstrip()
                entries.append(self.verbatim(m.start, m.end) if small else (m.start, m.end, f"{first} ..."))
            elif m.base == "class":
                body = languages.class_body(m.owner)
                inner = self.segments(body.named_children, "", in_class=True) if body is not None else []
                entries += self.collapse(m, inner) if inner else [(m.start, m.end, self.lines[m.start - 1])]
            else:
                entries.append((m.start, m.end, self.signature(m)))
        if members and members[-1].end < seg.end:
            entries.append(self.verbatim(members[-1].end + 1, seg.end))
        return [e for e in entries if e[2].strip()]

    def verbatim(self, start: int, end: int) -> tuple[int, int, str]:
        return start, end, "\n".join(x for x in self.lines[start - 1 : end] if x.strip())

    def signature(self, m: _Seg) -> str:
        """A method as its signature with the body elided: `def f(self): ...`, `int f() { ... }`."""
        assert m.node is not None and m.owner is not None
        body = m.owner.child_by_field_name("body")
        row = m.node.start_point.row
        if body is None or body.start_byte <= m.node.start_byte:
            return "\n".join(self.lines[row : _lines(m.node)[1]])
        line = self.lines[row]
        indent = line[: len(line) - len(line.lstrip())]
        head = self.source[m.node.start_byte : body.start_byte]
        elided = " { ... }" if (body.text or b"").startswith(b"{") else " ..."
        return indent + head.decode("utf-8", "replace").rstrip() + elided

    def emit_entries(self, entries: list[tuple[int, int, str]], kind: str, symbol: str | None) -> None:
        """Entries joined into chunks of at most max_chars (an entry longer than that is cut)."""
        group: list[tuple[int, int, str]] = []
        size = -1
        for entry in [*entries, None]:
            if entry is None or (group and size + 1 + len(entry[2]) > self.max):
                if group:
                    text = "\n".join(e[2] for e in group)[: self.max]
                    start, end = min(e[0] for e in group), max(e[1] for e in group)
                    self.out.append(Chunk(self.path, start, end, kind, symbol, text))
                group, size = [], -1
            if entry is not None:
                group.append(entry)
                size += 1 + len(entry[2])

    # ---- from syntax nodes to segments ------------------------------------------------------

    def segments(self, nodes: list[Node], prefix: str, *, in_class: bool) -> list[_Seg]:
        """Definitions and glue among sibling nodes, in order, as line runs that do not overlap."""
        spec = self.spec
        assert spec is not None
        segs: list[_Seg] = []
        pending: list[Node] = []  # comments/attributes waiting for a definition right below

        def flush() -> None:
            for node in pending:
                self.add(segs, _Seg(*_lines(node)))
            pending.clear()

        for node in nodes:
            start, end = _lines(node)
            if node.type in spec.attached and not (segs and start <= segs[-1].end):
                if pending and start > _lines(pending[-1])[1] + 1:
                    flush()
                pending.append(node)
                continue
            inner = self.unwrap(node)
            if inner.type in spec.scopes:
                flush()
                for seg in self.scope(node, inner, prefix, in_class):
                    self.add(segs, seg)
                continue
            found = self.describe(inner)
            if found is None:
                flush()
                self.add(segs, _Seg(start, end))
                continue
            base, name, is_method, owner = found
            if pending and start <= _lines(pending[-1])[1] + 1:
                start = _lines(pending[0])[0]
                pending.clear()
            flush()
            kind = "method" if base == "function" and (in_class or is_method) else base
            self.add(segs, _Seg(start, end, kind, prefix + name, base, node, owner))
        flush()
        return segs

    def scope(self, node: Node, inner: Node, prefix: str, in_class: bool) -> list[_Seg]:
        """A namespace, module or preprocessor block: its members as if they were top-level."""
        name = inner.child_by_field_name("name")
        if name is not None and not inner.type.startswith("preproc"):
            prefix = f"{prefix}{qualified(node_text(name))}."
        body = inner.child_by_field_name("body")
        children: list[Node] = []
        for child in inner.children:
            children += child.children if body is not None and child == body else [child]
        segs = self.segments(children, prefix, in_class=in_class)
        if node != inner:  # `export namespace X {...}`: the wrapper's own lines are glue
            (start, end), (inner_start, inner_end) = _lines(node), _lines(inner)
            segs = [_Seg(start, inner_start), *segs, _Seg(inner_end, end)]
        return segs

    def unwrap(self, node: Node) -> Node:
        """The definition inside decorators, `export`, `template <...>`, `declare`."""
        spec = self.spec
        assert spec is not None
        while node.type in spec.wrappers:
            inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
            if inner is None:
                named = [c for c in node.named_children if c.type not in spec.attached]
                inner = named[-1] if named else None
            if inner is None:
                break
            node = inner
        return node

    def describe(self, inner: Node) -> tuple[str, str, bool, Node] | None:
        """(base kind, name, is a method by its name, body owner) of a definition, else None."""
        spec = self.spec
        assert spec is not None
        if inner.type in spec.variables:
            return languages.variable_definition(inner)
        if inner.type in spec.functions:
            base = "function"
        elif inner.type in spec.classes:
            base = "class"
        else:
            return None
        name, is_method = languages.definition_name(inner)
        return (base, name, is_method, inner) if name else None

    def add(self, segs: list[_Seg], seg: _Seg) -> None:
        """Append, merging with the previous segment when they share a line (a definition's
        identity wins over glue's; of two definitions, the longer one's). Glue of punctuation only
        (`}`, `};`) joins the segment before it: alone it would be a useless chunk."""
        if segs and seg.kind is None and seg.start > segs[-1].end:
            text = "".join(self.lines[seg.start - 1 : seg.end])
            if not any(ch.isalnum() for ch in text):
                segs[-1] = replace(segs[-1], end=seg.end)
                return
        if not segs or seg.start > segs[-1].end:
            segs.append(seg)
            return
        prev = segs[-1]
        keep = prev
        if seg.kind and (not prev.kind or seg.end - seg.start > prev.end - prev.start):
            keep = seg
        segs[-1] = replace(keep, start=min(prev.start, seg.start), end=max(prev.end, seg.end))

    # ---- markdown -----------------------------------------------------------------------------

    def markdown(self) -> None:
        """Sections by heading: one chunk when a section fits, else its intro and subsections."""
        root = languages.parse("markdown", self.text).root_node
        heads = _headings(root)
        num_lines = len(self.lines)
        ends = [num_lines] * len(heads)  # a section ends before the next heading of its level or higher
        open_heads: list[int] = []
        for i, (line, level, _) in enumerate(heads):
            while open_heads and heads[open_heads[-1]][1] >= level:
                ends[open_heads.pop()] = line - 1
            open_heads.append(i)

        def section(i: int) -> int:
            """Emit heading i's section; return the index of the next heading after it."""
            start, end, title = heads[i][0], ends[i], heads[i][2] or None
            j = i + 1
            children = []
            while j < len(heads) and heads[j][0] <= end:
                children.append(j)
                j = section_end(j)
            if self.size(start, end) <= self.max or not children:
                self.emit(start, end, "section", title)
                return j
            self.emit(start, heads[children[0]][0] - 1, "section", title)
            for c in children:
                section(c)
            return j

        def section_end(i: int) -> int:
            j = i + 1
            while j < len(heads) and heads[j][0] <= ends[i]:
                j += 1
            return j

        self.emit(1, heads[0][0] - 1 if heads else num_lines, "section", None)
        i = 0
        while i < len(heads):
            i = section(i)


def _error_fraction(root: Node) -> float:
    """The share of the text inside ERROR nodes (outermost ones)."""
    if not root.has_error:
        return 0.0
    total = max(1, root.end_byte - root.start_byte)
    if root.is_error:
        return 1.0
    bad, stack = 0, [root]
    while stack:
        node = stack.pop()
        if node.is_error:
            bad += node.end_byte - node.start_byte
        elif node.has_error:
            stack.extend(node.children)
    return bad / total


def _headings(root: Node) -> list[tuple[int, int, str]]:
    """(1-based line, level, text) of Markdown headings, outside code blocks and quotes."""
    found = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "atx_heading":
            marker = node.children[0].type if node.children else "atx_h1_marker"
            content = node.child_by_field_name("heading_content")
            level = int(marker[5]) if marker[5:6].isdigit() else 1
            found.append((node.start_point.row + 1, level, node_text(content).strip() if content else ""))
        elif node.type == "setext_heading":
            level = 1 if any(c.type == "setext_h1_underline" for c in node.children) else 2
            content = node.child_by_field_name("heading_content")
            title = node_text(content).strip().split("\n")[0] if content else ""
            found.append((node.start_point.row + 1, level, title))
        elif node.type in ("document", "section"):
            stack.extend(reversed(node.children))
    return sorted(found)
