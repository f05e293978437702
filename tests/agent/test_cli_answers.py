"""`composer-agent answers`: the "always" answers kept for a workspace listed, and forgotten with
--forget, after which a new session asks again; an unreadable file is named and can be forgotten."""

from __future__ import annotations

import pytest

from agent.cli import main
from agent.permission_files import load_policy, workspace_answers_file


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


async def answer_always(workspace, command: str, answer: str) -> None:
    async def ask(tool_name, args, decision):
        return answer
    await load_policy(workspace).check("run_terminal", {"command": command}, ask)


async def test_answers_are_listed_then_forgotten_and_asked_again(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    assert main(["answers", "--workspace", str(ws)]) == 0
    assert capsys.readouterr().out.startswith("no answers kept for ")
    await answer_always(ws, "npm test", "allow_always")
    await answer_always(ws, "npm publish", "reject_always")

    assert main(["answers", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"2 answers kept for {ws} in {workspace_answers_file(ws)}:")
    assert "  allow run_terminal: npm test\n" in out and "  deny run_terminal: npm publish\n" in out

    assert main(["answers", "--workspace", str(ws), "--forget"]) == 0
    assert capsys.readouterr().out.startswith("forgot the answers kept for ")
    assert load_policy(ws).decide("run_terminal", {"command": "npm test"}).action == "ask"


def test_an_unreadable_answers_file_is_named_and_can_be_forgotten(tmp_path, capsys):
    kept = workspace_answers_file(tmp_path)
    kept.parent.mkdir(parents=True)
    kept.write_text("{broken")
    assert main(["answers", "--workspace", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert str(kept) in err and "--forget deletes the file" in err
    assert main(["answers", "--workspace", str(tmp_path), "--forget"]) == 0
    assert not kept.exists()
