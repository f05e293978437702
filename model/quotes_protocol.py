"""The `quotes` vendor field: the files a tool argument is copied from, sent with a request.

The in-process engine keeps edit_file's `old_string` a verbatim piece of the files the agent has
read (model/constrained_quote.py). A session that decodes on a server (`--endpoint` to
model.serve) sends those files with each request, so the server's constraint does the same:

    "quotes": {"arguments": {"edit_file": ["old_string"]},
               "files": [{"paths": ["a.py", "./a.py", "/w/a.py"], "text": "..."}]}

`arguments` names each tool's quoted string arguments; `files` holds each file's text once with
every name a call may give it. Every quoted argument draws on all the files, matched to the
call's `path`: the form the agent loop builds (agent/loop.py `_quotes`). `encode` is the client's
side (agent/policy.py EndpointPolicy), `decode` the server's (model/openai_protocol.py reads it
into the request's `quotes`, model/serve.py hands it to the engine's constraint). vLLM ignores the
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Quotes = dict[str, dict[str, dict[str, str]]]
"""tool -> quoted argument -> path -> text: what Engine.tool_call_constraint takes."""


def encode(quotes: Mapping[str, Mapping[str, Mapping[str, str]]]) -> dict[str, Any] | None:
    """The field for `quotes` (None when no argument has a file to quote). Every argument must
    draw on the same files, as the agent loop gives them."""
    sources = [texts for keys in quotes.values() for texts in keys.values()]
    if not sources or not sources[0]:
        return None
    if any(texts != sources[0] for texts in sources[1:]):
        raise ValueError("quoted arguments draw on different files; the 'quotes' field holds one set")
    paths: dict[str, list[str]] = {}
    for path, text in sources[0].items():
        paths.setdefault(text, []).append(path)
    return {
        "arguments": {tool: list(keys) for tool, keys in quotes.items() if keys},
        "files": [{"paths": names, "text": text} for text, names in paths.items()],
    }


def decode(value: Any) -> Quotes:
    """The field read back; ValueError names what is malformed."""
    if not isinstance(value, dict) or set(value) - {"arguments", "files"}:
        raise ValueError("expected an object with 'arguments' and 'files'")
    arguments, files = value.get("arguments", {}), value.get("files", [])
    if not isinstance(arguments, dict) or not all(
        isinstance(keys, list) and all(isinstance(k, str) for k in keys) for keys in arguments.values()
    ):
        raise ValueError("'arguments' must map tool names to lists of argument names")
    if not isinstance(files, list):
        raise ValueError("'files' must be a list of {\"paths\": [...], \"text\": ...} objects")
    texts: dict[str, str] = {}
    for i, item in enumerate(files):
        paths = item.get("paths") if isinstance(item, dict) else None
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths) or not isinstance(
            item.get("text"), str
        ):
            raise ValueError(f"files[{i}] must be {{\"paths\": [strings], \"text\": string}}")
        texts.update(dict.fromkeys(paths, item["text"]))
    if not texts:
        return {}
    return {tool: dict.fromkeys(keys, texts) for tool, keys in arguments.items() if keys}
