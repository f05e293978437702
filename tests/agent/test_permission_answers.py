""""Always" answers are kept for the workspace: a later session there is not asked again, a
session in another workspace is; answers two sessions give at once are all kept; a file that
cannot be written loses no answer for the session, and a broken one fails loudly at load."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from agent.permission_files import load_policy, workspace_answers_file
from agent.permissions import review_policy


def terminal(command: str) -> dict:
    return {"command": command}


def always(answer: str):
    async def ask(tool_name, args, decision):
        return answer
    return ask


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


async def test_always_answers_hold_in_later_sessions_of_the_workspace_only(tmp_path: Path, config: Path):
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir(), other.mkdir()
    first = load_policy(ws)
    assert first.decide("run_terminal", terminal("npm test")).action == "ask"
    assert await first.check("run_terminal", terminal("npm test"), always("allow_always"))
    assert not await first.check("run_terminal", terminal("npm publish"), always("reject_always"))

    later = load_policy(ws)  # a new session, or the server started again
    assert later.decide("run_terminal", terminal("npm test")).action == "allow"
    assert later.decide("run_terminal", terminal("npm test && npm publish")).action == "deny"
    assert later.decide("run_terminal", terminal("npm test -- --watch")).action == "ask"  # exact only
    elsewhere = load_policy(other)
    assert elsewhere.decide("run_terminal", terminal("npm test")).action == "ask"
    assert elsewhere.decide("run_terminal", terminal("npm publish")).action == "ask"
    kept = workspace_answers_file(ws)
    assert kept.is_relative_to(config) and not (ws / ".composer").exists()  # never in the repository
    assert [rule["command"] for rule in json.loads(kept.read_text())["rules"]] == ["npm test", "npm publish"]


async def test_answers_of_two_sessions_at_once_are_all_kept(tmp_path: Path, config: Path):
    one, two = load_policy(tmp_path), load_policy(tmp_path)  # both loaded before either answered
    assert await one.check("run_terminal", terminal("npm test"), always("allow_always"))
    assert await two.check("run_terminal", terminal("make lint"), always("allow_always"))
    assert await two.check("run_terminal", terminal("npm test"), always("allow_always"))  # no duplicate
    later = load_policy(tmp_path)
    assert later.decide("run_terminal", terminal("npm test && make lint")).action == "allow"
    assert len(json.loads(workspace_answers_file(tmp_path).read_text())["rules"]) == 2


async def test_review_mode_keeps_its_answers_and_still_asks_for_edits_later(tmp_path: Path, config: Path):
    review = review_policy(load_policy(tmp_path))
    assert await review.check("edit_file", {"path": "app.py"}, always("allow_always"))
    assert load_policy(tmp_path).decide("edit_file", {"path": "app.py"}).action == "allow"
    assert review_policy(load_policy(tmp_path)).decide("edit_file", {"path": "app.py"}).action == "ask"


async def test_an_answer_about_a_top_level_file_is_about_that_file_only(tmp_path: Path, config: Path):
    review = review_policy(load_policy(tmp_path))
    assert await review.check("edit_file", {"path": "config"}, always("allow_always"))
    later = load_policy(tmp_path)
    assert later.decide("edit_file", {"path": "config"}).action == "allow"
    assert later.decide("edit_file", {"path": ".git/config"}).action == "ask"  # git runs its hooks
    assert review_policy(later).decide("edit_file", {"path": "sub/config"}).action == "ask"


async def test_a_workspace_with_a_long_name_keeps_its_answers(tmp_path: Path, config: Path):
    ws = tmp_path / ("w" * 250)
    ws.mkdir()
    assert await load_policy(ws).check("run_terminal", terminal("npm test"), always("allow_always"))
    assert load_policy(ws).decide("run_terminal", terminal("npm test")).action == "allow"


async def test_an_unwritable_answers_file_keeps_the_answer_for_the_session(
        tmp_path: Path, config: Path, caplog: pytest.LogCaptureFixture):
    (config / "composer").mkdir(parents=True)
    (config / "composer/answers").write_text("a file where the folder goes")
    policy = load_policy(tmp_path)
    with caplog.at_level(logging.WARNING, logger="composer.permissions"):
        assert await policy.check("run_terminal", terminal("npm test"), always("allow_always"))
    assert "hold for this session only" in caplog.text
    assert policy.decide("run_terminal", terminal("npm test")).action == "allow"


def test_a_broken_answers_file_is_named_at_load(tmp_path: Path, config: Path):
    kept = workspace_answers_file(tmp_path)
    kept.parent.mkdir(parents=True)
    kept.write_text('{"rules": [{"tool": "run_terminal", "action": "sometimes"}]}')
    with pytest.raises(ValueError, match=re.escape(kept.name)):
        load_policy(tmp_path)
