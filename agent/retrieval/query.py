"""From a search query to what each channel asks, and from the channels' rankings to one list.

    terms = keyword_terms("where are HTTP retries handled?")   # ["http", "retr", "handl"]
    fts_expression(terms)                                      # '"http" OR "retr" OR "handl"'
    symbol_lookups("parse header links")                       # exact names, squashed runs, prefixes
    fuse({"keyword": [a, b], "vector": [b, c]}, k=10)           # reciprocal-rank fusion

Keyword terms are words and identifier parts (camelCase and snake_case split, the whole kept
too), lower-cased, stop words dropped, and cut to a crude stem that is a prefix of the word's
inflections ("parsing" -> "pars"), because the FTS5 trigram index matches substrings: a stem
finds "parse", "parser" and "parse_url" alike. Symbol lookups: identifiers as typed, runs of 2-4
query words squashed together ("parse header links" -> "parseheaderlinks", which is how
`parse_header_links` and `parseHeaderLinks` are stored), plain words, and longer words as
prefixes, in tiers from strongest to weakest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|[0-9]{2,}")
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_GLOB_CHARS = frozenset("*?[{!")

_STOP_TEXT = """
a an the and or of to in on for with by from at as is are was were be been being it its this that
these those which what where when how who whom why do does did done can could should would will
shall may might must not no yes if then else than there here into onto over under about after before
all any each some such only also just more most other same so too very via per up out off our your
their them they we you i me my he she his her get gets got set sets use uses used using make makes
made return returns returned code function functions method methods class classes file files find
given give gives value values new one two way like e g etc none true false self
"""
STOPWORDS = frozenset(_STOP_TEXT.split())
"""Words that carry no search signal here (and would match most chunks)."""


def split_identifier(word: str) -> list[str]:
    """`getHTTPResponse_code` -> ["get", "HTTP", "Response", "code"]."""
    return [p for part in re.split(r"[_.]+", word) for p in _PART.findall(part)]


def stem(word: str) -> str:
    """A prefix shared by the word's inflections, for substring matching: "retries" -> "retr",
    "parsing" -> "pars", "headers" -> "header". Words stay at least 4 letters long."""
    for suffix in ("ies", "ing", "ed", "es", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _words(query: str) -> list[str]:
    return _TOKEN.findall(query)


def keyword_terms(query: str, limit: int = 12) -> list[str]:
    """Lower-cased FTS terms, at least 3 characters (the trigram index's unit), no stop words;
    the `limit` longest (most specific) when there are more, in query order. Each term costs a
    trigram phrase scan; on bench/retrieval.py's queries 12 terms keep the recall of 16 (8 lost
    6 points on bug reports) and cut the long queries' keyword p95 on 50k chunks a little."""
    terms: list[str] = []
    for token in _words(query):
        parts = split_identifier(token)
        pieces = [token] if len(parts) <= 1 else [token.replace(".", "_"), *parts]
        for i, piece in enumerate(pieces):
            word = piece.lower()
            whole = i == 0 and len(parts) > 1  # an identifier kept whole is not stemmed
            if len(word) >= 3 and word not in STOPWORDS:
                terms.append(word if whole or not word.isalpha() else stem(word))
    terms = list(dict.fromkeys(terms))
    if len(terms) > limit:
        keep = set(sorted(terms, key=len, reverse=True)[:limit])
        terms = [t for t in terms if t in keep][:limit]
    return terms


def fts_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: any of the terms, each as a quoted string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _identifier_like(token: str) -> bool:
    """`parse_url`, `Session.send`, `getUser`, `md5`: not a plain word."""
    return any(c in token for c in "_.0123456789") or any(c.isupper() for c in token[1:])


def symbol_lookups(query: str) -> tuple[list[tuple[int, str, list[str]]], list[str]]:
    """What the symbol channel looks up, strongest tier first, and the prefixes (the weakest):
    tier 0, a symbol as written (`Session.send`) or an identifier-like token equal to a symbol's
    tail (`parse_url`); tier 1, the tail of a dotted token (`send` of `Session.send`), squashed
    identifiers and runs of 2-4 words ("parse header links" -> "parseheaderlinks"); tier 2, a
    plain word equal to a symbol's tail ("send")."""
    tokens = _words(query)
    idents = [t for t in tokens if len(t) >= 3 and _identifier_like(t)]
    words = [p.lower() for t in tokens for p in split_identifier(t)]
    content = [w for w in words if w not in STOPWORDS]
    tails = [t.rsplit(".", 1)[-1] for t in idents]
    squashed = {t.replace("_", "").lower() for t in tails if len(split_identifier(t)) > 1}
    for n in (2, 3, 4):
        for i in range(len(content) - n + 1):
            squashed.add("".join(content[i : i + n]))
    for i in range(len(words) - 1):  # "get user" keeps its stop word: get_user
        squashed.add(words[i] + words[i + 1])
    plain = [t.lower() for t in tokens if len(t) >= 3 and not _identifier_like(t) and t.lower() not in STOPWORDS]
    lookups = [(0, "symbol", list(dict.fromkeys(idents))),
               (0, "tail", list(dict.fromkeys(t.lower() for t in idents if "." not in t))),
               (1, "tail", list(dict.fromkeys(t.rsplit(".", 1)[-1].lower() for t in idents if "." in t))),
               (1, "squashed", sorted(squashed)), (2, "tail", list(dict.fromkeys(plain)))]
    prefixes = list(dict.fromkeys(w for w in content if len(w) >= 4))
    return lookups, prefixes


EXACT_TIERS = 1
"""The best symbol tier found, when it is at most this one (identifiers and runs of words matching
a name), also counts as the "exact" ranking, so that such a match weighs like a channel."""


def fuse(rankings: dict[str, Sequence[Hashable]], *, k: int = 60,
         weights: dict[str, float] | None = None) -> list[tuple[Hashable, float, dict[str, int]]]:
    """Reciprocal-rank fusion: each item scores sum(weight / (k + rank)) over the channels that
    ranked it (rank 1 is the best). Returns (item, score, {channel: rank}), best first; ties keep
    the order of first appearance."""
    scores: dict[Hashable, float] = {}
    ranks: dict[Hashable, dict[str, int]] = {}
    for channel, items in rankings.items():
        weight = 1.0 if weights is None else weights.get(channel, 1.0)
        for rank, item in enumerate(items, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            ranks.setdefault(item, {})[channel] = rank
    order = sorted(scores, key=lambda item: -scores[item])
    return [(item, scores[item], ranks[item]) for item in order]


def path_filter(patterns: Sequence[str] | None) -> Callable[[str], bool] | None:
    """A predicate on workspace-relative paths from globs ('*.py', 'src/**/test_*.py') and
    directories or files ('src', 'agent/loop.py'); None when there is nothing to filter."""
    if not patterns:
        return None
    from agent.tools.search import glob_matcher  # the same glob dialect as the glob tool

    tests: list[Callable[[str], bool]] = []
    for raw in patterns:
        pattern = raw.strip().removeprefix("./")
        if not pattern or pattern in (".", "/"):
            return None
        if _GLOB_CHARS & set(pattern):
            tests.append(glob_matcher(pattern))
        else:
            prefix = pattern.strip("/")
            tests.append(lambda path, p=prefix: path == p or path.startswith(p + "/"))
    return lambda path: any(test(path) for test in tests)
