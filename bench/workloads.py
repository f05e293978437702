"""Prompts shared by the benchmarks: a chat request, a long code-reading prompt, and the
edit-rewrite (the model re-emits a 200-line file with one change). Built from the standard
library's own sources, so every machine has them and nothing is downloaded."""

from __future__ import annotations

import inspect
import textwrap


def _source_lines(module, n: int) -> list[str]:
    return inspect.getsource(module).splitlines()[:n]


def chat_prompt() -> list[dict]:
    return [{"role": "user", "content": "Write a Python function that parses a semantic version string and explain it."}]


def long_prompt(lines: int = 110) -> list[dict]:
    import json.decoder as module

    code = "\n".join(_source_lines(module, lines))
    return [{"role": "user", "content": f"Explain what this code does:\n\n```python\n{code}\n```"}]


def edit_rewrite_file() -> str:
    return "\n".join(_source_lines(textwrap, 200)) + "\n"


def edit_rewrite_prompt(tok) -> list[int]:
    """The request, then the start of the answer, so the model goes straight into the file."""
    messages = [
        {
            "role": "user",
            "content": "In this file, change the default width from 70 to 80 everywhere. Reply with the "
            f"whole updated file and nothing else.\n\n```python\n{edit_rewrite_file()}```",
        }
    ]
    return tok.encode_chat(messages) + tok.encode("```python\n")


READ_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
"""The one-tool request the tool-call checks make (engine, server, vLLM)."""
