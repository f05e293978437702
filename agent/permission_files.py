"""Permission rule files: the workspace's and the user's, layered over a preset, and the trust a
workspace's own file needs before it may allow anything.

    policy = load_policy(workspace_root)   # preset + workspace file + user file + "always" answers
    trust_workspace(workspace_root)        # `composer-lsp --trust-workspace DIR`

Rule files: `.composer/permissions.json` (or `.toml`) in the workspace, and
`$XDG_CONFIG_HOME/composer/permissions.json` for the user: a list of rules or `{"default":
"ask", "rules": [...]}` (TOML: `default = ...` and `[[rules]]`). Errors name file and rule index.

"Always allow" and "Always reject" answers are kept for the workspace, in the user's
`$XDG_CONFIG_HOME/composer/answers/<workspace name>-<hash of its path>.json` (a list of rules, as
above; a `default` there is ignored), and apply to every later session there until the file is
deleted. They are the user's own answers, so they need no trust; they never go into the
workspace, whose files a repository brings. They come last, so only a deny rule elsewhere
overrides them, and they belong to the path: another repository cloned at the same path later
inherits them (delete the file).

The opt-in to run commands where the sandbox is weaker than bubblewrap is not a rule: it lives
in the user's `$XDG_CONFIG_HOME/composer/config.toml` (agent/isolation.py), never in a workspace.

Workspace trust: a workspace's file comes with the repository, so whoever wrote the repository
wrote it. Its deny and ask rules always apply; its allow rules and an `allow` default apply only
once the user has trusted that exact file (`composer-lsp --trust-workspace DIR`, which records
the file's SHA-256 in `$XDG_CONFIG_HOME/composer/trusted-workspaces.json`). Any change to the
file, a `git pull` included, drops the trust until it is given again (direnv's `allow`, per
content). Until then the ignored rules are logged with the command that trusts them.

Tests: .venv/bin/python -m pytest tests/agent/test_permissions.py
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.permissions import Action, PermissionPolicy, Rule, default_editor_policy, parse_action
from agent.textfile import atomic_write
from model.home import file_lock

log = logging.getLogger("composer.permissions")
WORKSPACE_FILES = (".composer/permissions.json", ".composer/permissions.toml")


def load_rules(path: Path) -> tuple[list[Rule], Action | None]:
    """Rules (and the default, when the file sets one) from a JSON or TOML file."""
    path = Path(path)
    kind, loads, error = ("TOML", tomllib.loads, tomllib.TOMLDecodeError) if path.suffix == ".toml" else (
        "JSON", json.loads, json.JSONDecodeError)
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except error as err:
        raise ValueError(f"{path}: invalid {kind}: {err}") from None
    default = None
    if isinstance(data, dict):
        unknown = set(data) - {"rules", "default"}
        if unknown:
            raise ValueError(f"{path}: unknown key(s) {sorted(unknown)}; expected rules and default")
        default = data.get("default") and parse_action(data["default"], f"{path}: default")
        data = data.get("rules", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of rules, got {type(data).__name__}")
    return [Rule.from_dict(item, f"{path}: rule {i}") for i, item in enumerate(data)], default


def save_rules(path: Path, rules: Iterable[Rule], default: Action | None = None) -> None:
    """Writes rules as JSON (e.g. the `learned` ones to the user file)."""
    data: dict[str, Any] = {"rules": [r.to_dict() for r in rules]}
    if default is not None:
        data["default"] = default
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode())


def workspace_answers_file(workspace_root: Path) -> Path:
    """Where the user's "always" answers in this workspace are kept (in the user's config)."""
    root = Path(workspace_root).resolve()
    tag = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    return _config_dir() / "answers" / f"{root.name[:64] or 'root'}-{tag}.json"


def remember_answers(path: Path, rules: list[Rule]) -> None:
    """Adds `rules` to the answers file, keeping what other sessions added meanwhile (under a
    lock). A file that cannot be read or written is logged and left alone: the answers still hold
    for this session."""
    try:
        with file_lock(path):
            kept = load_rules(path)[0] if path.is_file() else []
            new = [rule for rule in rules if rule not in kept]
            if new:
                save_rules(path, [*kept, *new])
    except (OSError, ValueError) as err:
        log.warning("could not keep %d answer(s) in %s: %s; they hold for this session only", len(rules), path, err)


def forget_answers(path: Path) -> bool:
    """Deletes the answers file (readable or not), after any session adding to it; True if it was there."""
    with file_lock(path):
        existed = path.is_file()
        path.unlink(missing_ok=True)
    return existed


def user_permissions_file() -> Path:
    return _config_dir() / "permissions.json"


def trusted_workspaces_file() -> Path:
    return _config_dir() / "trusted-workspaces.json"


def _config_dir() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(config) / "composer"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trusted(trust_file: Path) -> dict[str, str]:
    """{absolute rule-file path: SHA-256 the user trusted}; an unreadable store trusts nothing."""
    try:
        data = json.loads(trust_file.read_text(encoding="utf-8"))
        files = data["files"]
        return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def workspace_rule_files(workspace_root: Path) -> list[Path]:
    root = Path(workspace_root).resolve()
    found = [root / name for name in WORKSPACE_FILES if (root / name).is_file()]
    if len(found) > 1:
        raise ValueError(f"both {found[0]} and {found[1]} exist; keep one")
    return found


def trust_workspace(workspace_root: Path, *, trust_file: Path | None = None) -> list[Path]:
    """Trusts the workspace's rule files as they are now (their allow rules apply until the
    content changes). Returns the files trusted; checks that they parse first."""
    trust_file = trust_file or trusted_workspaces_file()
    found = workspace_rule_files(workspace_root)
    for path in found:
        load_rules(path)  # never trust a file that would fail to load
    trusted = _trusted(trust_file)
    trusted.update({str(path): _digest(path) for path in found})
    trust_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(trust_file, (json.dumps({"files": trusted}, indent=2, sort_keys=True) + "\n").encode())
    return found


def _without_untrusted(path: Path, rules: list[Rule], default: Action | None,
                       trust_file: Path) -> tuple[list[Rule], Action | None]:
    """The rules of a workspace file the user has not trusted as it is now: deny and ask only."""
    if _trusted(trust_file).get(str(path)) == _digest(path):
        return rules, default
    kept = [rule for rule in rules if rule.action != "allow"]
    dropped = len(rules) - len(kept)
    loose_default = default == "allow"
    if dropped or loose_default:
        what = f"{dropped} allow rule(s)" + (" and its allow default" if loose_default else "")
        log.warning("%s: %s ignored until you trust this file (`composer-lsp --trust-workspace %s`); "
                    "its deny and ask rules apply", path, what, path.parent.parent)
    return kept, None if loose_default else default


def load_policy(workspace_root: Path, *, user_file: Path | None = None, base: PermissionPolicy | None = None,
                trust_file: Path | None = None, answers_file: Path | None = None) -> PermissionPolicy:
    """`base` (default_editor_policy) + the workspace's rules + the user's rules + the user's
    "always" answers in this workspace (`answers_file`, default workspace_answers_file()), in that
    order: later rules override earlier ones and any deny wins. A file's `default` replaces the
    base's. The workspace file's allow rules and allow default count only if the user trusted it
    as it is (`trust_file`, default trusted_workspaces_file()). New "always" answers are added to
    `answers_file`."""
    workspace_root = Path(workspace_root).resolve()
    policy = (base or default_editor_policy()).extended([])
    policy.workspace_root = workspace_root
    for path in workspace_rule_files(workspace_root):
        rules, default = _without_untrusted(path, *load_rules(path), trust_file or trusted_workspaces_file())
        policy = policy.extended(rules, default)
    user = user_file or user_permissions_file()
    user = user if user_file or user.is_file() else user.with_suffix(".toml")
    if user.is_file():
        policy = policy.extended(*load_rules(user))
    elif user_file is not None:
        raise ValueError(f"permissions file {user} does not exist")
    answers = answers_file or workspace_answers_file(workspace_root)
    if answers.is_file():
        policy = policy.extended(load_rules(answers)[0])
    policy.on_remember = functools.partial(remember_answers, answers)
    return policy
