"""Secret redaction for everything written to session logs: what tools read (files, command
output) may hold API keys, tokens and private keys, and logs travel to training machines.

    redact('OPENAI_API_KEY="sk-proj-Ab3..."')    # 'OPENAI_API_KEY="[REDACTED:openai_key]"'
    redact(env_text, path=".env.local")          # every KEY=value value, whatever the key
    redact_obj(record, skip_keys={"session_id"}) # every string inside a JSON-like value
    find_secrets(text)                           # [(start, end, kind)] of what redact replaces
    redact_token_ids(ids, tokenizer, known)      # the same, reaching token ids (session logs)

What is caught, from most to least certain:
  * private key blocks (PEM, OpenSSH, PGP);
  * tokens with a known shape: OpenAI/Anthropic `sk-...`, GitHub `ghp_`/`gho_`/`github_pat_`,
    AWS `AKIA...`, Slack `xox?-` and webhooks, Google `AIza...`, Stripe `sk_live_`, Hugging Face
    `hf_`, npm, PyPI, GitLab `glpat-`, JWTs, `Bearer`/`Basic` credentials, `user:pass@` in URLs;
  * assignments to secret-sounding names (password, passwd, secret, token, api_key, apikey,
    access_key, private_key, client_secret, credentials, auth): a quoted value in any language
    (`password = "..."`, `"token": "..."`, `api_key => '...'`), or an unquoted config-style value
    (`DB_PASSWORD=hunter2`, `token: abc123-def`, `--password=x1`, `?access_token=...`) that holds a
    digit or punctuation, so code such as `token = tokens[0]`, `password: str` or
    `token=token` is left alone;
  * `.env` files (by path): every value;
  * long high-entropy strings (32+ characters, 20-80% of the letters upper case, lower-case runs
    shorter than 3 letters on average (words are longer), digits in two or more places, Shannon
    entropy above 4.2 bits/char), which catches tokens of unknown vendors.
    Hex digests, UUIDs and identifiers fail at least one of these and are kept.
Each secret becomes `[REDACTED:<kind>]`; the surrounding text is kept, so redaction is
idempotent and a log still reads as the session it records.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePath
from typing import Any

_WORDS = (r"passw(?:or)?d|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|"
          r"client[_-]?secret|credentials?|auth(?:orization)?")
_SECRET_NAME = rf"(?<![A-Za-z0-9_.])[A-Za-z0-9_.-]*?(?i:{_WORDS})(?![a-z])[A-Za-z0-9_.-]*+"
"""A name holding a secret word that ends there or at a camelCase or `_` boundary: `DB_PASSWORD`,
`apiKey`, `authToken`, `aws_secret_access_key`, but not `author`, `tokenizer` or `max_tokens`."""
_PLACEHOLDER = re.compile(r"^(?:none|null|nil|true|false|undefined|\*+|x+|\.\.\.|changeme|[\d.]+|"
                          r"\$\{?[\w.]+\}?|<[^>]*>|\{[^}]*\}|\{\{[^}]*\}\}|%\(?\w*\)?s?|\[REDACTED:\w+\])$", re.I)

# (kind, pattern); group "s" (or the whole match) is what gets replaced.
_SHAPES: list[tuple[str, re.Pattern[str]]] = [
    ("private_key", re.compile(
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)")),
    ("anthropic_key", re.compile(r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}")),
    ("openai_key", re.compile(r"(?<![\w-])sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_-]*\d)"
                              r"(?=[A-Za-z0-9_-]*[A-Z])[A-Za-z0-9_-]{20,}")),
    ("github_token", re.compile(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("gitlab_token", re.compile(r"(?<![\w-])glpat-[A-Za-z0-9_-]{20,}")),
    ("aws_access_key", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])")),
    ("slack_token", re.compile(r"(?<![\w-])xox[abposrce]-[A-Za-z0-9-]{10,}")),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+")),
    ("google_api_key", re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}")),
    ("stripe_key", re.compile(r"(?<![\w-])(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}")),
    ("huggingface_token", re.compile(r"(?<![\w-])hf_[A-Za-z]{30,}")),
    ("npm_token", re.compile(r"(?<![\w-])npm_[A-Za-z0-9]{36}")),
    ("pypi_token", re.compile(r"(?<![\w-])pypi-[A-Za-z0-9_-]{50,}")),
    ("jwt", re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("url_credentials", re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:(?P<s>[^\s/@]+)@")),
    ("bearer_token", re.compile(r"(?<=\b[Bb]earer )(?P<s>[A-Za-z0-9._~+/=-]{16,})")),
    ("basic_auth", re.compile(r"(?<=\bBasic )(?P<s>[A-Za-z0-9+/]{12,}={0,2})(?![\w+/=])")),
]

_QUOTED_ASSIGNMENT = re.compile(
    rf"(?P<key>{_SECRET_NAME})['\"]?\s*(?:=>|:=|[:=])\s*(?P<q>['\"`])(?P<s>[^'\"`\n]{{1,4096}}?)(?P=q)")
_BARE_ASSIGNMENT = re.compile(
    rf"(?:(?:^|(?<=[\s;,(]))(?P<flag>--)?|(?P<qs>(?<=[?&])))(?P<key>{_SECRET_NAME})\s*[:=]\s*(?P<s>[^\s'\"`,;&)(\[\]{{}}<>]{{3,}})", re.M)
_CONFIG_LINE = re.compile(
    rf"^[ \t]*(?:export[ \t]+|--)?(?P<key>{_SECRET_NAME})(?:=|[ \t]*:[ \t]+)(?P<s>[^\s'\"`]{{3,}})[ \t]*(?:#.*)?$", re.M)
_ENV_LINE = re.compile(r"^(?P<key>\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*\s*=\s*)(?P<s>.+?)\s*$", re.M)
_ANY_WORD = re.compile(rf"(?i:{_WORDS})")
_HIGH_ENTROPY = re.compile(r"(?<![A-Za-z0-9+/_=-])[A-Za-z0-9+/_-]{32,}={0,2}(?![A-Za-z0-9+/_=-])")


def _is_env_file(path: str | PurePath | None) -> bool:
    if path is None:
        return False
    name = PurePath(path).name
    return name == ".env" or name.startswith(".env.") or name.endswith(".env")


def _tag(kind: str) -> str:
    return f"[REDACTED:{kind}]"


TAG = re.compile(r"\[REDACTED:\w+\]")
"""A tag `_tag` writes, where a secret stood."""


class _Redaction:
    """A text being redacted pass by pass. Each tag remembers the span of the original text it
    replaced, so the secrets' places are known (for redacting token ids) as well as the result."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tags: list[list[Any]] = []
        """[start, end in the current text, start, end in the original, kind], in order."""

    def sub(self, pattern: re.Pattern[str], kind: Callable[[re.Match[str]], str | None]) -> None:
        """Replaces the `s` group (or the whole match) of each match by its tag; `kind` returning
        None keeps the match."""
        edits = []
        for m in pattern.finditer(self.text):
            label = kind(m)
            if label is not None:
                edits.append((*(m.span("s") if "s" in m.re.groupindex else m.span()), label))
        for start, end, label in reversed(edits):
            self._replace(start, end, label)

    def _original(self, position: int, end: bool) -> int:
        shift = 0
        for start, stop, orig_start, orig_stop, _ in self.tags:
            if start < position <= stop if end else start <= position < stop:
                return orig_stop if end else orig_start
            if stop > position:
                break
            shift += (orig_stop - orig_start) - (stop - start)
        return position + shift

    def _replace(self, start: int, end: int, kind: str) -> None:
        tag = _tag(kind)
        first, last = self._original(start, end=False), self._original(end, end=True)
        delta = len(tag) - (end - start)
        kept = []
        for entry in self.tags:
            if entry[1] <= start:
                kept.append(entry)
            elif entry[0] >= end:
                kept.append([entry[0] + delta, entry[1] + delta, *entry[2:]])
            else:  # a tag the new match overlaps: the new one covers its secret too
                first, last = min(first, entry[2]), max(last, entry[3])
        kept.append([start, start + len(tag), first, last, kind])
        self.tags = sorted(kept)
        self.text = self.text[:start] + tag + self.text[end:]


class KnownSecrets:
    """The secrets a session's log has redacted so far. Later text is redacted wherever one of
    them recurs, whatever surrounds it (a `.env` value the model repeats in its answer). Only
    secrets of MIN_CHARS or more are remembered: shorter ones would match ordinary words."""

    MIN_CHARS = 8

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None

    def add(self, secret: str, kind: str) -> None:
        if len(secret.strip()) >= self.MIN_CHARS and secret not in self.kinds and not secret.startswith("[REDACTED"):
            self.kinds[secret] = kind
            self._pattern = None

    @property
    def pattern(self) -> re.Pattern[str] | None:
        if self._pattern is None and self.kinds:
            self._pattern = re.compile("|".join(re.escape(s) for s in sorted(self.kinds, key=len, reverse=True)))
        return self._pattern


def _key_kind(key: str) -> str:
    key = key.lower()
    for word, kind in (("pass", "password"), ("pwd", "password"), ("private", "private_key"),
                       ("client_secret", "secret"), ("secret", "secret"), ("token", "token"),
                       ("key", "api_key"), ("cred", "credentials"), ("auth", "auth")):
        if word in key:
            return kind
    return "secret"


def shannon_entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(c / len(text) * math.log2(c / len(text)) for c in counts.values()) if text else 0.0


def _looks_random(token: str) -> bool:
    """Random tokens mix cases about evenly and scatter their digits; identifiers (camelCase,
    snake_case, hex digests, UUIDs) do not."""
    if token.startswith("[REDACTED"):
        return False
    lower_runs = re.findall(r"[a-z]+", token)
    lower, upper = sum(map(len, lower_runs)), sum(c.isupper() for c in token)
    return (lower > 0 and 0.2 <= upper / (upper + lower) <= 0.8 and lower / len(lower_runs) < 3.0
            and len(re.findall(r"[0-9]+", token)) >= 2 and shannon_entropy(token) > 4.2)


def _value_kind(key: str, value: str, config_line: bool) -> str | None:
    """The kind of secret an unquoted `value` assigned to `key` is, or None for code: placeholders,
    numbers, and identifiers (`token=token`, `password: str`); an identifier with a digit that
    does not start upper case counts on a config-style line (`DB_PASSWORD=hunter2`)."""
    if _PLACEHOLDER.match(value):
        return None
    if re.fullmatch(r"[A-Za-z_][\w.]*", value) and not (
            config_line and re.search(r"\d", value) and not value[0].isupper()):
        return None  # code (`token=token`, `password: Str2`), unless `DB_PASSWORD=hunter2`
    return _key_kind(key)


def _assignments(work: _Redaction) -> None:
    work.sub(_QUOTED_ASSIGNMENT, lambda m: None if _PLACEHOLDER.match(m.group("s")) else _key_kind(m.group("key")))
    work.sub(_CONFIG_LINE, lambda m: _value_kind(m.group("key"), m.group("s"), True))
    work.sub(_BARE_ASSIGNMENT, lambda m: _value_kind(
        m.group("key"), m.group("s"), bool(m.group("flag")) or m.group("qs") is not None))


def _redaction(text: str, path: str | PurePath | None, known: KnownSecrets | None) -> _Redaction:
    work = _Redaction(text)
    if not text or text.isspace():
        return work
    for kind, pattern in _SHAPES:
        work.sub(pattern, lambda m, kind=kind: None if m.group(0).startswith("[REDACTED") else kind)
    if _ANY_WORD.search(work.text):
        _assignments(work)
    if _is_env_file(path):
        work.sub(_ENV_LINE, lambda m: None if m.group("key").lstrip().startswith("#") or _PLACEHOLDER.match(
            m.group("s").strip("'\"")) else "env_value")
    work.sub(_HIGH_ENTROPY, lambda m: "high_entropy" if _looks_random(m.group(0)) else None)
    if known is not None:
        if known.pattern is not None:
            work.sub(known.pattern, lambda m: known.kinds[m.group(0)])
        for _, _, start, end, kind in work.tags:
            known.add(text[start:end], kind)
    return work


def redact(text: str, path: str | PurePath | None = None, known: KnownSecrets | None = None) -> str:
    """`text` with every secret it recognises replaced by `[REDACTED:<kind>]`. `path` is where the
    text came from, when known (`.env` files have all their values redacted). With `known`, the
    secrets it holds are redacted too, and the ones found here are added to it."""
    return _redaction(text, path, known).text


def find_secrets(text: str, path: str | PurePath | None = None,
                 known: KnownSecrets | None = None) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each secret `redact` replaces, in `text`'s own offsets."""
    return [(start, end, kind) for _, _, start, end, kind in _redaction(text, path, known).tags]


def redact_obj(value: Any, skip_keys: Iterable[str] = (), path: str | PurePath | None = None,
               known: KnownSecrets | None = None) -> Any:
    """A copy of a JSON-like value with every string redacted, except the values of `skip_keys`
    (ids, hashes) and dictionary keys."""
    skip = frozenset(skip_keys)
    if isinstance(value, str):
        return redact(value, path, known)
    if isinstance(value, dict):
        return {k: v if k in skip else _redact_item(k, v, skip, path, known) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v, skip, path, known) for v in value]
    return value


def _redact_item(key: str, value: Any, skip: frozenset[str], path: str | PurePath | None,
                 known: KnownSecrets | None) -> Any:
    """A dictionary value: a string under a secret-sounding key (`{"password": "..."}`) is a
    secret unless it is a placeholder, number or plain identifier."""
    if isinstance(value, str) and re.fullmatch(_SECRET_NAME, key):
        kind = _value_kind(key, value, config_line=True)
        if kind is not None and " " not in value.strip():
            if known is not None:
                known.add(value, kind)
            return _tag(kind)
    return redact_obj(value, skip, path, known)


def redact_token_ids(ids: Sequence[int], tokenizer: Any, known: KnownSecrets | None = None
                     ) -> tuple[list[int], list[tuple[int, int, int, int]]]:
    """Token ids with every span that decodes to a secret replaced by the ids of its tag, and the
    edits made: (start, end) in `ids`, (start, end) of the tag's ids in the result. Each run of
    ordinary tokens between special ones is decoded and redacted as one text (a secret never
    holds a special token, and a PEM block without its end line cannot swallow the chat's
    structure). The tokens a secret touches are replaced whole: their text, with the secret's
    part replaced by its tag, is encoded again; every other id is kept as it was."""
    special = frozenset(tokenizer.special_token_ids)
    out: list[int] = []
    edits: list[tuple[int, int, int, int]] = []
    start = 0
    for end in [*(i for i, t in enumerate(ids) if t in special), len(ids)]:
        if end > start:
            _redact_run(list(ids[start:end]), start, tokenizer, known, out, edits)
        if end < len(ids):
            out.append(ids[end])
        start = end + 1
    return out, edits


def _redact_run(run: list[int], offset: int, tokenizer: Any, known: KnownSecrets | None,
                out: list[int], edits: list[tuple[int, int, int, int]]) -> None:
    pieces = [tokenizer.id_to_bytes[t] for t in run]
    data = b"".join(pieces)
    text = data.decode("utf-8", "surrogateescape")  # lossless: text offsets map back to bytes
    secrets = find_secrets(text, known=known)
    if not secrets:
        out.extend(run)
        return
    bounds = [0]
    for piece in pieces:
        bounds.append(bounds[-1] + len(piece))

    def byte(char: int) -> int:
        return len(text[:char].encode("utf-8", "surrogateescape"))

    spans = [(byte(a), byte(b), kind) for a, b, kind in secrets]
    groups: list[list[Any]] = []  # [first token, last token + 1, [(byte span, kind), ...]]
    for lo, hi, kind in spans:
        first = bisect.bisect_right(bounds, lo) - 1
        last = bisect.bisect_left(bounds, hi)
        if groups and first < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], last)
            groups[-1][2].append((lo, hi, kind))
        else:
            groups.append([first, last, [(lo, hi, kind)]])
    kept = 0
    for first, last, inside in groups:
        out.extend(run[kept:first])
        cut, at = b"", bounds[first]
        for lo, hi, kind in inside:
            cut += data[at:lo] + _tag(kind).encode()
            at = hi
        cut += data[at:bounds[last]]
        new_start = len(out)
        out.extend(tokenizer.encode(cut.decode("utf-8", "replace")))
        edits.append((offset + first, offset + last, new_start, len(out)))
        kept = last
    out.extend(run[kept:])
