"""Failing closed where the sandbox is weaker than bubblewrap (agent/isolation.py), in process: the
opt-in and its config file, the permission policy that asks about every command (and review
mode's), the session wiring, run_sandboxed and run_terminal refusing, and the editor's question.
The same in real subprocesses with stubbed `bwrap`/`unshare`: tests/agent/test_escape.py.

Run: .venv/bin/python -m pytest tests/agent/test_isolation.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

import agent.sandbox as sandbox
from agent.isolation import (
    OPT_IN_FLAG,
    IsolationStatus,
    UnsandboxedError,
    config_file,
    configured_opt_in,
    gate_session,
    status_for,
)
from agent.permission_files import load_policy
from agent.permissions import (
    PermissionPolicy,
    Rule,
    default_editor_policy,
    review_policy,
    rollout_policy,
)
from agent.tools.base import ToolContext, ToolRegistry
from agent.tools.terminal import RunTerminal
from agent.workspace import Workspace
from server.hub import ServerSettings, SessionHub


@pytest.fixture(autouse=True)
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty XDG_CONFIG_HOME for each test: the real user's config.toml never leaks in."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home / "composer" / "config.toml"


def write_config(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def weak(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's probe says only `none` works (as on a Mac or in a locked-down container)."""
    support = sandbox.SandboxSupport("none", ("none",), None, 0, ("bwrap: `bwrap` is not on PATH",))
    monkeypatch.setattr(sandbox, "_support", support)


# ---- the opt-in ------------------------------------------------------------------------------


def test_config_file_is_the_users_own(user_config: Path):
    assert config_file() == user_config
    assert configured_opt_in() is False  # no file
    write_config(user_config, "allow_unsandboxed = true\n")
    assert configured_opt_in() is True
    write_config(user_config, "allow_unsandboxed = false\n")
    assert configured_opt_in() is False


@pytest.mark.parametrize(("text", "message"), [
    ("allow_unsandboxed = tru", "invalid TOML"),
    ("allow_unsandboxed = 'yes'", "must be true or false"),
    ("allow-unsandboxed = true", "unknown key(s) ['allow-unsandboxed']"),
])
def test_a_bad_config_file_is_a_clear_error(user_config: Path, text: str, message: str):
    write_config(user_config, text)
    with pytest.raises(ValueError) as err:
        configured_opt_in()
    assert str(user_config) in str(err.value) and message in str(err.value)


def test_status_of_each_level(user_config: Path):
    full = status_for("bwrap")
    assert not full.weaker and not full.restricted
    write_config(user_config, "not toml at all [")
    assert not status_for("bwrap").restricted  # bubblewrap machines never read the file
    write_config(user_config, "")
    none = status_for("none", ("bwrap: exit 1",))
    assert none.weaker and none.restricted and none.opt_in is None
    refusal = none.refusal("this command")
    for needle in ("'none'", "weaker than bubblewrap", "bwrap: exit 1", OPT_IN_FLAG,
                   "allow_unsandboxed = true", str(user_config)):
        assert needle in refusal
    assert status_for("unshare", allow_unsandboxed=True).opt_in == OPT_IN_FLAG
    write_config(user_config, "allow_unsandboxed = true\n")
    by_file = status_for("unshare")
    assert not by_file.restricted and by_file.opt_in == str(user_config)
    assert "allows it" in by_file.describe() and by_file.to_dict()["level"] == "unshare"


def test_check_raises_only_when_restricted():
    with pytest.raises(UnsandboxedError, match="Refused to run this rollout") as err:
        IsolationStatus("none", None).check("this rollout")
    assert err.value.level == "none"
    assert IsolationStatus("none", OPT_IN_FLAG).check("this rollout").level == "none"
    assert IsolationStatus("bwrap", None).check("this rollout").level == "bwrap"


# ---- the permission policy -------------------------------------------------------------------

NOTICE = IsolationStatus("none", None).notice()


async def test_weaker_sandbox_asks_about_every_command_whatever_the_rules_say(tmp_path: Path):
    policy = default_editor_policy(tmp_path).extended([Rule("run_terminal", "allow", command="make *")])
    policy.terminal_notice = NOTICE
    for command in ("ls", "git status", "make all", "echo hi > out.txt"):
        decision = policy.decide("run_terminal", {"command": command})
        assert decision.action == "ask" and decision.once_only and decision.notice == NOTICE, command
        assert all("asked anyway" in reason for reason in decision.reasons)
    assert policy.decide("run_terminal", {"command": "ls && sudo rm x"}).action == "deny"
    # an "always" answer counts once: nothing is learned and the next call asks again
    asked: list[str] = []

    async def always(tool, args, decision):
        asked.append(args["command"])
        return "allow_always"

    assert await policy.check("run_terminal", {"command": "pytest -q"}, always)
    assert await policy.check("run_terminal", {"command": "pytest -q"}, always)
    assert asked == ["pytest -q", "pytest -q"] and policy.learned == []
    # a rule learned before the sandbox got weaker does not skip the question either
    learned = default_editor_policy(tmp_path)
    learned.remember("run_terminal", learned.decide("run_terminal", {"command": "npm test"}), "allow")
    assert learned.decide("run_terminal", {"command": "npm test"}).action == "allow"
    learned.terminal_notice = NOTICE
    assert learned.decide("run_terminal", {"command": "npm test"}).action == "ask"
    # other tools are not touched, and copies keep the notice
    assert policy.decide("edit_file", {"path": "a.py"}).action == "allow"
    assert review_policy(policy).terminal_notice == NOTICE


async def test_reject_always_is_still_remembered():
    policy = rollout_policy()
    policy.terminal_notice = NOTICE

    async def never(tool, args, decision):
        return "reject_always"

    assert not await policy.check("run_terminal", {"command": "curl x"}, never)
    assert policy.decide("run_terminal", {"command": "curl x"}).action == "deny"


def test_review_mode_asks_before_every_command(tmp_path: Path):
    agent = default_editor_policy(tmp_path)
    review = review_policy(agent)
    for command in ("ls", "git status", "pytest -q", "echo x > a.txt"):
        assert agent.decide("run_terminal", {"command": command}).action == "allow", command
        decision = review.decide("run_terminal", {"command": command})
        assert decision.action == "ask" and decision.once_only and decision.notice is None, command
    assert review.decide("run_terminal", {"command": "sudo ls"}).action == "deny"
    assert review.decide("edit_file", {"path": "a.py"}).action == "ask"
    assert not agent.decide("run_terminal", {"command": "ls"}).once_only


def test_only_an_explicit_review_rule_exempts_a_command(tmp_path: Path):
    (tmp_path / ".composer").mkdir()
    user = tmp_path / "user.json"
    user.write_text('[{"tool": "run_terminal", "command": "git status*", "action": "allow", "mode": "review"},'
                    ' {"tool": "run_terminal", "command": "rm *", "action": "ask", "mode": "agent"}]')
    base = load_policy(tmp_path, user_file=user)
    review = review_policy(base)
    assert review.decide("run_terminal", {"command": "git status -s"}).action == "allow"
    assert review.decide("run_terminal", {"command": "git log"}).action == "ask"
    assert review.decide("run_terminal", {"command": "rm a.txt"}).action == "ask"  # review's own ask
    assert base.decide("run_terminal", {"command": "rm a.txt"}).action == "ask"  # the agent-mode rule
    # in agent mode the review-only rule is ignored (not an allow beyond the preset's)
    assert base.extended([Rule("run_terminal", "deny", command="git status*")]).decide(
        "run_terminal", {"command": "git status"}).action == "deny"
    with pytest.raises(ValueError, match="mode 'reviews' is not one of agent, review"):
        Rule.from_dict({"tool": "*", "action": "allow", "mode": "reviews"}, "rule 0")
    assert Rule.from_dict({"action": "allow", "mode": "review"}, "r").to_dict() == {
        "tool": "*", "action": "allow", "mode": "review"}


# ---- sessions, run_sandboxed, run_terminal ---------------------------------------------------


def test_gate_session():
    restricted, opted = IsolationStatus("none", None), IsolationStatus("none", OPT_IN_FLAG)
    for client in ("rollout", None, "lsp"):
        with pytest.raises(UnsandboxedError, match=OPT_IN_FLAG):
            gate_session(restricted, rollout_policy(), {}, client=client, auto_allow=True)
    editor, state = PermissionPolicy(), {}
    gate_session(restricted, editor, state, client="web", auto_allow=False)
    assert editor.terminal_notice == restricted.notice() and state["sandbox"]["unsandboxed"] == "ask"
    for client in ("cli", None):  # nobody to ask: run_terminal refuses by itself
        headless, state = rollout_policy(), {}
        gate_session(restricted, headless, state, client=client, auto_allow=client == "cli")
        assert headless.terminal_notice is None and "unsandboxed" not in state.get("sandbox", {})
    state = {}
    gate_session(opted, rollout_policy(), state, client="rollout", auto_allow=True)
    assert state["sandbox"]["unsandboxed"] == "allow"
    state = {}
    gate_session(IsolationStatus("bwrap", None), rollout_policy(), state, client="rollout", auto_allow=True)
    assert state == {}


async def test_run_sandboxed_refuses_a_weaker_level_before_running(tmp_path: Path, weak, user_config: Path):
    with pytest.raises(UnsandboxedError, match=OPT_IN_FLAG):
        await sandbox.run_sandboxed("touch made", workspace_root=tmp_path)
    assert not (tmp_path / "made").exists()
    ran = await sandbox.run_sandboxed("touch made", workspace_root=tmp_path, allow_unsandboxed=True)
    assert ran.exit_code == 0 and ran.isolation == "none" and (tmp_path / "made").exists()
    write_config(user_config, "allow_unsandboxed = true\n")
    again = await sandbox.run_sandboxed("touch again", workspace_root=tmp_path)
    assert again.exit_code == 0 and (tmp_path / "again").exists()


async def test_run_terminal_refuses_unless_allowed_or_asked(tmp_path: Path, weak):
    tools, ctx = ToolRegistry([RunTerminal()]), ToolContext(Workspace(tmp_path))
    refused = await tools.call("run_terminal", {"command": "touch made"}, ctx)
    assert not refused.ok and refused.data == {"isolation": "none", "refused": True, "duration_s": refused.data["duration_s"]}
    assert "Refused to run this command" in refused.error and OPT_IN_FLAG in refused.error
    assert not (tmp_path / "made").exists()
    for gate in ("ask", "allow"):
        ctx.state["sandbox"] = {"unsandboxed": gate}
        ran = await tools.call("run_terminal", {"command": f"touch {gate}"}, ctx)
        assert ran.ok and ran.data["isolation"] == "none" and (tmp_path / gate).exists()


# ---- the editor's question -------------------------------------------------------------------


class Peer:
    def __init__(self) -> None:
        self.asked: list[dict] = []

    async def notify(self, method: str, params: dict) -> None:
        pass

    async def request(self, method: str, params: dict) -> dict:
        self.asked.append(params)
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}


async def test_the_question_shows_the_command_and_the_level_and_offers_no_always(tmp_path: Path):
    peer = Peer()
    ask = SessionHub(peer, ServerSettings(workspace=tmp_path))._asker("s1")
    command = "make all && " + "x" * 300  # longer than a title
    call = {"toolCallId": "c1", "title": f"run_terminal {command}"[:200], "kind": "execute",
            "status": "pending", "rawInput": {"command": command}, "locations": []}
    policy = default_editor_policy(tmp_path)
    policy.terminal_notice = NOTICE
    assert await ask(call, policy.decide("run_terminal", {"command": command})) == "allow_once"
    assert await ask(call, review_policy(default_editor_policy(tmp_path)).decide("run_terminal", {"command": command}))
    assert await ask({**call, "kind": "edit", "rawInput": {"path": "a.py"}},
                     review_policy(default_editor_policy(tmp_path)).decide("edit_file", {"path": "a.py"}))
    weak_q, review_q, edit_q = peer.asked
    assert [o["kind"] for o in weak_q["options"]] == ["allow_once", "reject_once", "reject_always"]
    texts = [c["content"]["text"] for c in weak_q["toolCall"]["content"]]
    assert texts == [f"$ {command}", f"Warning: {NOTICE}"] and "'none'" in texts[1]
    assert [c["content"]["text"] for c in review_q["toolCall"]["content"]] == [f"$ {command}"]
    assert "allow_always" not in [o["kind"] for o in review_q["options"]]
    assert "allow_always" in [o["kind"] for o in edit_q["options"]] and "content" not in edit_q["toolCall"]
