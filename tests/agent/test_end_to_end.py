"""One headless turn with the real composer-mini on a small repository, through the
`composer-agent run` entry point: JSON events, a summary, and a session log that validates
against the schema record by record."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from agent.cli import main
from agent.events import validate_update
from agent.session_log import read_session, validate_record

pytestmark = pytest.mark.slow


def test_headless_turn_writes_a_schema_valid_log(tmp_path, composer_mini_dir):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# calc\nA tiny calculator.\n")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([
            "run", "--workspace", str(repo), "--model", str(composer_mini_dir), "--json", "--yes",
            "--log-dir", str(tmp_path / "logs"), "--max-steps", "3", "--max-tokens", "96",
            "Read calc.py and tell me what add does.",
        ])
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    summary = lines[-1]
    assert code == 0 and summary["type"] == "summary"
    assert summary["stopReason"] in ("end_turn", "max_turn_requests", "max_tokens")
    for update in lines[:-1]:
        validate_update(update)
    assert any(u["sessionUpdate"] == "agent_message_chunk" or u["sessionUpdate"] == "tool_call" for u in lines[:-1])
    records = read_session(summary["log"])
    for record in records:
        validate_record(record)
    types = [r["type"] for r in records]
    assert types[0] == "session" and "user_message" in types and "model_call" in types
    model_call = next(r for r in records if r["type"] == "model_call")
    assert model_call["completion_token_ids"] and len(model_call["logprobs"]) == len(model_call["completion_token_ids"])
    assert model_call["routed_experts"]  # composer-mini is an MoE: routing is recorded for replay
