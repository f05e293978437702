"""The per-tool facts behind schema-aware `arguments` in model/constrained.py.

For a tool whose parameters schema lists `properties` (or `required` keys), the top level of
`arguments` is checked: keys are property names (unless `additionalProperties` is true or a
schema; then other keys are allowed too, written without escapes), each at most once; each
property's value has its declared JSON type (`type`, a list of types, or the kinds of its `enum`
values; nested values are any JSON); the object closes only once every `required` key is there.

A key is tracked by its JSON-escaped text (as tool names are), so `"\\u0070ath"` is not `"path"`.
Costs are the fewest characters of the shortest completion, as in model/constrained.py: a
missing required key costs `"key":` plus the shortest value of its type ("" 0 false null [] {}).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

STRING, NUMBER, INTEGER, BOOLEAN, NULL, ARRAY, OBJECT = (1 << i for i in range(7))
ANY = (1 << 7) - 1
_BITS = {
    "string": STRING, "number": NUMBER, "integer": INTEGER, "boolean": BOOLEAN, "null": NULL,
    "array": ARRAY, "object": OBJECT,
}  # fmt: skip
_SHORTEST = ((STRING, '"', 2), (NUMBER, "0", 1), (INTEGER, "0", 1), (BOOLEAN, "f", 5),
             (NULL, "n", 4), (ARRAY, "[", 2), (OBJECT, "{", 2))  # fmt: skip


def _shortest(mask: int) -> tuple[int, str]:
    return min((cost, char) for bit, char, cost in _SHORTEST if mask & bit)


TYPE_COST: tuple[int, ...] = (0, *(_shortest(m)[0] for m in range(1, ANY + 1)))
TYPE_FIRST: tuple[str, ...] = ("", *(_shortest(m)[1] for m in range(1, ANY + 1)))
# the types a value may have given its first character
CHAR_TYPE = {
    '"': STRING,
    "{": OBJECT,
    "[": ARRAY,
    "t": BOOLEAN,
    "f": BOOLEAN,
    "n": NULL,
    "-": NUMBER | INTEGER,
}
CHAR_TYPE.update(dict.fromkeys("0123456789", NUMBER | INTEGER))


def kind(value: Any) -> int:
    """The type bit of a JSON value (an integral number counts as integer and number)."""
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER | NUMBER
    return {float: NUMBER, str: STRING, list: ARRAY, dict: OBJECT}.get(type(value), NULL)


def type_mask(prop: Any) -> int:
    """The JSON types a property schema allows, as a bit mask (ANY when it does not say)."""
    if not isinstance(prop, Mapping):
        return ANY
    declared = prop.get("type")
    if declared is None:
        enum = prop.get("enum")
        mask = 0
        for value in enum if isinstance(enum, list) else ():
            mask |= kind(value) & ~(NUMBER if isinstance(value, int) else 0)
        return mask or ANY
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list) or not all(name in _BITS for name in names):
        return ANY
    mask = 0
    for name in names:
        mask |= _BITS[name]
    return mask or ANY


class ArgSchema:
    """One tool's top-level `arguments` rules, with memoized costs. A mask of seen keys has
    bit i for `keys[i]`."""

    def __init__(self, keys: list[str], types: list[int], required: int, open_: bool) -> None:
        self.keys = keys  # JSON-escaped
        self.index = {key: i for i, key in enumerate(keys)}
        self.types = types
        self.required = required  # mask of the required keys
        self.open = open_
        self.prefixes = frozenset(key[:n] for key in keys for n in range(len(key) + 1))
        # "key": plus the shortest value of its type
        self.entry = [len(key) + 3 + TYPE_COST[t] for key, t in zip(keys, types, strict=True)]
        self._missing: dict[tuple[int, bool], int] = {}
        self._key: dict[tuple[str, int], tuple[int, str] | None] = {}
        self.quoted: dict[int, Any] = {}  # key index -> its QuotedArgument (constrained_quote.py)
        self.path_key = self.index.get("path")  # the argument that names the file quoted from
        self.path: str | None = None  # its value, once written (a view: `with_path`)

    def with_path(self, path: str) -> ArgSchema:
        """This schema for a call whose `path` argument reads `path`; everything else shared."""
        view = copy.copy(self)
        view.path = path
        return view

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> ArgSchema | None:
        """The rules for a parameters schema; None when it lists neither properties nor
        required keys (any object goes)."""
        props = parameters.get("properties")
        required = parameters.get("required")
        props = props if isinstance(props, Mapping) else None
        required = [k for k in required if isinstance(k, str)] if isinstance(required, list) else []
        if props is None and not required:
            return None
        names = [k for k in (props or {}) if isinstance(k, str)]
        names += [k for k in dict.fromkeys(required) if k not in names]
        extra = parameters.get("additionalProperties")
        open_ = props is None or extra is True or isinstance(extra, Mapping)
        keys = [json.dumps(name, ensure_ascii=False)[1:-1] for name in names]
        types = [type_mask((props or {}).get(name)) for name in names]
        req = 0
        for i, name in enumerate(names):
            req |= (1 << i) if name in required else 0
        return cls(keys, types, req, open_)

    def missing(self, mask: int, first: bool) -> int:
        """Characters to add every required key not in `mask` (with commas; `first`: nothing
        written yet, so one comma fewer)."""
        cost = self._missing.get((mask, first))
        if cost is None:
            todo = [
                i for i in range(len(self.keys)) if self.required >> i & 1 and not mask >> i & 1
            ]
            cost = sum(self.entry[i] for i in todo) + max(0, len(todo) - (1 if first else 0))
            self._missing[(mask, first)] = cost
        return cost

    def open_cost(self) -> int:
        """`{...}` from before its '{'."""
        return 2 + self.missing(0, True)

    def key(self, prefix: str, mask: int) -> tuple[int, str] | None:
        """For a key begun with `prefix` (after its opening quote): the fewest characters to
        finish it, its value and the object (its '}' included), and the next character of that
        way; None if no allowed key starts so."""
        if prefix not in self.prefixes:  # an unknown key, open schemas only
            return (4 + self.missing(mask, False), '"') if self.open else None
        found = self._key.get((prefix, mask), 0)
        if found != 0:
            return found  # type: ignore[return-value]
        best = None
        for i, key in enumerate(self.keys):
            if mask >> i & 1 or not key.startswith(prefix):
                continue
            cost = len(key) - len(prefix) + 3 + TYPE_COST[self.types[i]]
            cost += self.missing(mask | 1 << i, False)
            if best is None or cost < best[0]:
                best = (cost, key[len(prefix)] if len(key) > len(prefix) else '"')
        if self.open:  # close as an unknown key (one more character if it names a seen key)
            seen = prefix in self.index
            cost = 4 + seen + self.missing(mask, False)
            if best is None or cost < best[0]:
                best = (cost, "0" if seen else '"')
        self._key[(prefix, mask)] = best
        return best

    def key_chars(self) -> str:
        return "".join(self.keys)
