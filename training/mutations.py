"""Bugs by mutation: one small change inside one function, found through Python's syntax tree and
made as a text edit at the node's exact span, so the rest of the file stays byte-identical (no
`ast.unparse` reformatting: the gold patch is a one-line diff a person would write).

    source = path.read_bytes()
    for m in find_mutations(source, "pkg/mod.py"):
        m.kind, m.function, m.line, m.old, m.new
        broken = m.apply(source)                 # bytes; ast.parse(broken) succeeds

Kinds (SWE-smith's procedural modifications, the classic ones):
  operator_swap      + -, * +, // *, % //, << >>, & |, and / or, += -=
  wrong_comparison   < <=, > >=, == !=, in / not in, is / is not
  off_by_one         an int literal +-1, a range() stop or a slice bound +-1
  dropped_condition  `a and b` -> `a` (or `b`)
  missing_negation   `not x` -> `x`
  wrong_return       return True <-> False, `return x` -> `return None` (not in generators)
  swapped_args       f(a, b, ...) -> f(b, a, ...)
  wrong_constant     True <-> False outside a return, an int literal >= 2 doubled, a one-character
                     separator string swapped (',' ';', ':' '=', '-' '_', '.' ',', ' ' '')

Offsets are byte offsets into the UTF-8 source (ast's col_offset counts bytes).
Tests: .venv/bin/python -m pytest tests/training/test_taskgen.py -k mutation
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

KINDS = ("operator_swap", "wrong_comparison", "off_by_one", "dropped_condition", "missing_negation",
         "wrong_return", "swapped_args", "wrong_constant")
_CMP = {ast.Lt: ("<", ast.LtE), ast.LtE: ("<=", ast.Lt), ast.Gt: (">", ast.GtE), ast.GtE: (">=", ast.Gt),
        ast.Eq: ("==", ast.NotEq), ast.NotEq: ("!=", ast.Eq), ast.In: ("in", ast.NotIn),
        ast.NotIn: ("not in", ast.In), ast.Is: ("is", ast.IsNot), ast.IsNot: ("is not", ast.Is)}
_BIN = {ast.Add: ("+", ast.Sub), ast.Sub: ("-", ast.Add), ast.Mult: ("*", ast.Add), ast.FloorDiv: ("//", ast.Mult),
        ast.Mod: ("%", ast.FloorDiv), ast.LShift: ("<<", ast.RShift), ast.RShift: (">>", ast.LShift),
        ast.BitAnd: ("&", ast.BitOr), ast.BitOr: ("|", ast.BitAnd)}
_BOOL = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_ATOMIC = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set)
_LOOSE = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)
"""Nodes that bind more loosely than the operators whose place they take: parenthesised when moved."""
_NOISY_CALLS = frozenset({"print", "max", "min", "isinstance", "issubclass", "getattr", "setattr", "hasattr",
                          "super", "zip", "format", "warn", "join"})
"""Calls whose swapped arguments make a TypeError or nothing at all, not a bug worth a task."""
_GAP_CHARS = " \t\r\n\\()"
_SEPARATORS = {",": ";", ";": ",", ":": "=", "=": ":", "-": "_", "_": "-", ".": ",", " ": ""}
"""wrong_constant's one-character strings and what each becomes."""


@dataclass(frozen=True)
class Mutation:
    path: str
    """File, relative to the package root (posix)."""
    function: str
    """Qualified name of the function mutated: `Class.method`, `outer.inner`."""
    kind: str
    start: int
    end: int
    """Byte span of the original text replaced."""
    old: str
    new: str
    line: int

    def apply(self, source: bytes) -> bytes:
        found = source[self.start:self.end].decode()
        if found != self.old:
            raise ValueError(f"{self.path}:{self.line}: expected {self.old!r} at bytes {self.start}-{self.end}, found {found!r}")
        return source[:self.start] + self.new.encode() + source[self.end:]

    def describe(self) -> dict:
        return {"kind": self.kind, "path": self.path, "function": self.function, "line": self.line,
                "old": self.old, "new": self.new}


def _paren(text: str, node: ast.AST, loose: tuple = _LOOSE) -> str:
    return f"({text})" if isinstance(node, loose) else text


def _is_generator(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    todo: list[ast.AST] = list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))
    return False


class _Finder(ast.NodeVisitor):
    def __init__(self, source: bytes, path: str) -> None:
        self.source, self.path = source, path
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.scope: list[str] = []
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.found: list[Mutation] = []

    # ---- spans -------------------------------------------------------------------------------

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def text(self, start: int, end: int) -> str:
        return self.source[start:end].decode()

    def node_text(self, node: ast.AST) -> str:
        return self.text(*self.span(node))

    def add(self, kind: str, start: int, end: int, new: str, node: ast.AST) -> None:
        if not self.functions:
            return
        old = self.text(start, end)
        if old != new:
            line = self.source.count(b"\n", 0, start) + 1
            self.found.append(Mutation(self.path, ".".join(self.scope), kind, start, end, old, new, line))

    def operator(self, left_end: int, right_start: int, symbol: str) -> tuple[int, int] | None:
        """The byte span of `symbol` between two operands; None when the gap holds anything else
        (a comment, a line continuation we do not understand)."""
        gap = self.text(left_end, right_start)
        lead = len(gap) - len(gap.lstrip(_GAP_CHARS))
        pattern = r"\s+".join(re.escape(word) for word in symbol.split())
        m = re.compile(pattern).match(gap, lead)
        if m is None or gap[m.end():].strip(_GAP_CHARS):
            return None
        return left_end + m.start(), left_end + m.end()

    # ---- scopes ------------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # Only the body: defaults, annotations and decorators are not the function's logic.
        self.scope.append(node.name)
        self.functions.append(node)
        for stmt in node.body:
            self.visit(stmt)
        self.functions.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # docstrings
            self.generic_visit(node)

    # ---- operator_swap ----------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            symbol, swap = _CMP[type(op)]
            where = self.operator(self.span(left)[1], self.span(right)[0], symbol)
            if where is not None:
                self.add("wrong_comparison", *where, _CMP[swap][0], node)
            left = right
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        strings = any(isinstance(side, ast.JoinedStr) or (isinstance(side, ast.Constant) and isinstance(side.value, str | bytes))
                      for side in (node.left, node.right))
        if type(node.op) in _BIN and not strings:
            symbol, swap = _BIN[type(node.op)]
            where = self.operator(self.span(node.left)[1], self.span(node.right)[0], symbol)
            if where is not None:
                self.add("operator_swap", *where, _BIN[swap][0], node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if type(node.op) in _BIN:
            symbol, swap = _BIN[type(node.op)]
            where = self.operator(self.span(node.target)[1], self.span(node.value)[0], symbol + "=")
            if where is not None:
                self.add("operator_swap", *where, _BIN[swap][0] + "=", node)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        if len(node.values) == 2:
            first, second = node.values
            symbol, other = _BOOL[type(node.op)]
            where = self.operator(self.span(first)[1], self.span(second)[0], symbol)
            if where is not None:
                self.add("operator_swap", *where, other, node)
            start, end = self.span(node)
            for kept in (first, second):  # dropped_condition: keep one side
                self.add("dropped_condition", start, end, _paren(self.node_text(kept), kept), node)
        self.generic_visit(node)

    # ---- missing_negation, off_by_one, wrong_constant, wrong_return, swapped_args ---------

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self.add("missing_negation", *self.span(node), _paren(self.node_text(node.operand), node.operand), node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if type(value) is int and abs(value) < 10**6:
            self.add("off_by_one", *self.span(node), str(value + 1), node)
            if value > 0:
                self.add("off_by_one", *self.span(node), str(value - 1), node)
            if value >= 2:
                self.add("wrong_constant", *self.span(node), str(value * 2), node)
        elif type(value) is bool:
            self.add("wrong_constant", *self.span(node), str(not value), node)
        elif type(value) is str and value in _SEPARATORS:
            text = self.node_text(node)
            quote = text[-1] if text[-1:] in "'\"" else None
            if quote is not None and text == quote + value + quote:  # not r'', implicit concatenation, f-string text
                self.add("wrong_constant", *self.span(node), quote + _SEPARATORS[value] + quote, node)

    def _plus_one(self, node: ast.expr | None) -> None:
        if node is not None and not isinstance(node, ast.Constant | ast.Starred):
            text = _paren(self.node_text(node), node, (ast.expr,)) if not isinstance(node, _ATOMIC) else self.node_text(node)
            for delta in (" + 1", " - 1"):
                self.add("off_by_one", *self.span(node), text + delta, node)

    def visit_Slice(self, node: ast.Slice) -> None:
        self._plus_one(node.upper)
        self._plus_one(node.lower)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name == "range" and 1 <= len(node.args) <= 3:
            self._plus_one(node.args[0] if len(node.args) == 1 else node.args[1])
        first_two = node.args[:2]
        if len(first_two) == 2 and name not in _NOISY_CALLS and not any(isinstance(a, ast.Starred) for a in first_two):
            a, b = first_two
            (a_start, a_end), (b_start, b_end) = self.span(a), self.span(b)
            if a_end <= b_start and self.text(a_start, a_end) != self.text(b_start, b_end):
                middle = self.text(a_end, b_start)
                self.add("swapped_args", a_start, b_end, self.text(b_start, b_end) + middle + self.text(a_start, a_end), node)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None and self.functions:
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                self.add("wrong_return", *self.span(value), str(not value.value), node)
                return  # the returned bool is wrong_return's, not wrong_constant's
            if not (isinstance(value, ast.Constant) and value.value is None) and not _is_generator(self.functions[-1]):
                self.add("wrong_return", *self.span(value), "None", node)
        self.generic_visit(node)


def find_mutations(source: bytes | str, path: str) -> list[Mutation]:
    """Every candidate mutation inside a function of `source`, in file order. Each is checked
    to parse only when used (`parses`): parsing a big module once per candidate is slow."""
    data = source.encode() if isinstance(source, str) else source
    finder = _Finder(data, path)
    finder.visit(ast.parse(data, filename=path))
    return finder.found


def parses(mutation: Mutation, source: bytes) -> bool:
    try:
        ast.parse(mutation.apply(source))
    except SyntaxError:
        return False
    return True
