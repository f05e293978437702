"""Secret redaction for everything written to session logs: what tools read (files, command
output) may hold API keys, tokens and private keys, and logs travel to training machines.

    redact('OPENAI_API_KEY="sk-proj-Ab3..."')    # 'OPENAI_API_KEY="[REDACTED:openai_key]"'
    redact(env_text, path=".env.local")          # every KEY=value value, whatever the key
    redact_obj(record, skip_keys={"session_id"}) # every string inside a JSON-like value

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

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
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


def _sub(pattern: re.Pattern[str], text: str, kind: Callable[[re.Match[str]], str | None]) -> str:
    """Replaces the `s` group (or the whole match) of each match by its tag; `kind` returning None
    keeps the match."""

    def replace(m: re.Match[str]) -> str:
        label = kind(m)
        if label is None:
            return m.group(0)
        if "s" not in m.re.groupindex:
            return _tag(label)
        start, end = m.span("s")
        return m.group(0)[: start - m.start()] + _tag(label) + m.group(0)[end - m.start():]

    return pattern.sub(replace, text)


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


def _assignments(text: str) -> str:
    text = _sub(_QUOTED_ASSIGNMENT, text,
                lambda m: None if _PLACEHOLDER.match(m.group("s")) else _key_kind(m.group("key")))
    text = _sub(_CONFIG_LINE, text, lambda m: _value_kind(m.group("key"), m.group("s"), True))
    return _sub(_BARE_ASSIGNMENT, text, lambda m: _value_kind(
        m.group("key"), m.group("s"), bool(m.group("flag")) or m.group("qs") is not None))


def redact(text: str, path: str | PurePath | None = None) -> str:
    """`text` with every secret it recognises replaced by `[REDACTED:<kind>]`. `path` is where the
    text came from, when known (`.env` files have all their values redacted)."""
    if not text or text.isspace():
        return text
    for kind, pattern in _SHAPES:
        text = _sub(pattern, text, lambda m, kind=kind: None if m.group(0).startswith("[REDACTED") else kind)
    if _ANY_WORD.search(text):
        text = _assignments(text)
    if _is_env_file(path):
        text = _sub(_ENV_LINE, text,
                    lambda m: None if m.group("key").lstrip().startswith("#") or _PLACEHOLDER.match(
                        m.group("s").strip("'\"")) else "env_value")
    return _sub(_HIGH_ENTROPY, text, lambda m: "high_entropy" if _looks_random(m.group(0)) else None)


def redact_obj(value: Any, skip_keys: Iterable[str] = (), path: str | PurePath | None = None) -> Any:
    """A copy of a JSON-like value with every string redacted, except the values of `skip_keys`
    (ids, hashes) and dictionary keys."""
    skip = frozenset(skip_keys)
    if isinstance(value, str):
        return redact(value, path)
    if isinstance(value, dict):
        return {k: v if k in skip else _redact_item(k, v, skip, path) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v, skip, path) for v in value]
    return value


def _redact_item(key: str, value: Any, skip: frozenset[str], path: str | PurePath | None) -> Any:
    """A dictionary value: a string under a secret-sounding key (`{"password": "..."}`) is a
    secret unless it is a placeholder, number or plain identifier."""
    if isinstance(value, str) and re.fullmatch(_SECRET_NAME, key):
        kind = _value_kind(key, value, config_line=True)
        if kind is not None and " " not in value.strip():
            return _tag(kind)
    return redact_obj(value, skip, path)
