"""Whether shell commands may run at the isolation this machine gives, and what people are told
about it. Only bubblewrap (agent/sandbox.py's "bwrap" level) gives the guarantees the harness
promises: the workspace writable and nothing else, home directories and secrets hidden, no
network. The weaker levels fail closed:

- editor sessions (composer-lsp: LSP, ACP, the web page): every run_terminal command is asked
  about, whatever the rules or earlier "always" answers say; the question states the level and
  what it lets through, and offers no "allow always";
- headless runs (`composer-agent run`, with `--yes` too): every run_terminal command is refused
  with a message that names the opt-in;
- rollouts and environments (training/envs, the scheduler, a Session with `auto_allow`) refuse
  to start; `run_sandboxed` itself refuses a weaker level unless its caller passes the opt-in.

The one opt-in that lifts all of this, for people who mean it: `--allow-unsandboxed` (on
composer-agent and composer-lsp), or in the user's own `$XDG_CONFIG_HOME/composer/config.toml`
(default `~/.config/composer/config.toml`):

    allow_unsandboxed = true

A workspace's own files (`.composer/...`) are never read for it: whoever wrote the repository
must not be able to switch the sandbox off.

    status = isolation_status(allow_unsandboxed=args.allow_unsandboxed)   # agent/sandbox.py
    status.level, status.weaker, status.restricted, status.describe()
    status.check("this rollout")      # raises UnsandboxedError when restricted

Tests: .venv/bin/python -m pytest tests/agent/test_isolation.py tests/agent/test_escape.py
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPT_IN_FLAG = "--allow-unsandboxed"
OPT_IN_KEY = "allow_unsandboxed"
CONFIG_NAME = "config.toml"
FULL_LEVEL = "bwrap"
EDITOR_CLIENTS = frozenset({"lsp", "acp", "web"})
"""Session clients with a person to ask (server/hub.py's); other sessions cannot ask."""

LETS_THROUGH = {
    "bwrap": "nothing beyond the workspace: the rest of the system is read-only, home directories "
             "and secrets are hidden, and there is no network",
    "unshare": "writes to any mount that fails to be remounted read-only (failures are ignored), "
               "and the host's /dev and /sys; there is no network",
    "none": "everything you can do yourself: writing outside the workspace, reading your secrets "
            "(~/.ssh, credentials) and using the network",
}
"""What each level lets a command do that bubblewrap would not (agent/sandbox.py explains why)."""


class UnsandboxedError(RuntimeError):
    """Something refused to run commands at a level weaker than bubblewrap; the message names
    the opt-in."""

    def __init__(self, message: str, level: str) -> None:
        super().__init__(message)
        self.level = level


def config_file() -> Path:
    """The user's own Composer settings file (never a workspace's)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(config) / "composer" / CONFIG_NAME


def configured_opt_in(path: Path | None = None) -> bool:
    """`allow_unsandboxed` from the user's config.toml (False when there is no file). A file
    that is not valid TOML, or a value that is not a boolean, raises ValueError naming it."""
    path = path or config_file()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: invalid TOML: {err}") from None
    unknown = set(data) - {OPT_IN_KEY}
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {sorted(unknown)}; the known one is {OPT_IN_KEY}")
    value = data.get(OPT_IN_KEY, False)
    if not isinstance(value, bool):
        raise ValueError(f"{path}: {OPT_IN_KEY} must be true or false, got {value!r}")
    return value


def opt_in_hint() -> str:
    return (f"pass {OPT_IN_FLAG} (composer-agent, composer-lsp; allow_unsandboxed=True from Python), "
            f"or set `{OPT_IN_KEY} = true` in {config_file()}")


@dataclass(frozen=True)
class IsolationStatus:
    level: str
    """agent/sandbox.py's level in use: bwrap, unshare or none."""
    opt_in: str | None
    """What allowed a weaker level: the flag, or the config file's path; None: nothing did."""
    notes: tuple[str, ...] = ()
    """Why the stronger levels are not usable here (the sandbox probe's notes)."""

    @property
    def weaker(self) -> bool:
        return self.level != FULL_LEVEL

    @property
    def restricted(self) -> bool:
        """Weaker than bubblewrap and not opted in: commands are asked about or refused."""
        return self.weaker and self.opt_in is None

    @property
    def lets_through(self) -> str:
        return LETS_THROUGH.get(self.level, LETS_THROUGH["none"])

    def notice(self) -> str:
        """What a permission question says about the command it asks about."""
        return (f"This command would run with sandbox isolation '{self.level}', weaker than "
                f"bubblewrap: it lets through {self.lets_through}.")

    def refusal(self, what: str = "this command") -> str:
        why = f" ({'; '.join(self.notes)})" if self.notes else ""
        return (f"Refused to run {what}: the sandbox here is '{self.level}', weaker than bubblewrap, which "
                f"is not usable{why}; '{self.level}' lets through {self.lets_through}. Install "
                f"bubblewrap (`make setup`), or, to run commands with this weaker isolation anyway, "
                f"{opt_in_hint()}.")

    def describe(self) -> str:
        """One line for a start-up report."""
        if not self.weaker:
            return "sandbox isolation: bwrap (bubblewrap): " + LETS_THROUGH["bwrap"]
        head = f"sandbox isolation: {self.level}, weaker than bubblewrap; it lets through {self.lets_through}. "
        if self.opt_in is not None:
            return head + f"Commands run anyway ({self.opt_in} allows it)."
        return head + ("Editors ask about every terminal command; headless runs refuse them and "
                       f"rollouts do not start. To allow this level: {opt_in_hint()}.")

    def check(self, what: str) -> IsolationStatus:
        """Raises UnsandboxedError when restricted (for what must not run then); else self."""
        if self.restricted:
            raise UnsandboxedError(self.refusal(what), self.level)
        return self

    def to_dict(self) -> dict[str, Any]:
        """What editors are told (composer/isolation, session/new's _meta)."""
        return {"level": self.level, "weaker": self.weaker, "restricted": self.restricted,
                "letsThrough": self.lets_through, "optIn": self.opt_in, "message": self.describe()}


def status_for(level: str, notes: tuple[str, ...] = (), allow_unsandboxed: bool = False) -> IsolationStatus:
    """The status of `level`, with the flag's opt-in or else the config file's (read only when
    the level is weaker: a bubblewrap machine never reads it)."""
    opt_in = None
    if level != FULL_LEVEL:
        if allow_unsandboxed:
            opt_in = OPT_IN_FLAG
        elif configured_opt_in():
            opt_in = str(config_file())
    return IsolationStatus(level, opt_in, tuple(notes))


def gate_session(status: IsolationStatus, permissions: Any, state: dict[str, Any], *,
                 client: str | None, auto_allow: bool) -> None:
    """Wires a new agent.Session to `status`: refuses an auto-allowing session that is not the
    headless CLI (a rollout), makes an editor session's policy ask about every command, and tells
    run_terminal (ctx.state["sandbox"]["unsandboxed"]) whether it may run at a weaker level:
    "allow" (opted in) or "ask" (a person is asked about each command). Without either the tool
    refuses, as in headless runs."""
    if not status.weaker:
        return
    sandbox = state.setdefault("sandbox", {})
    if status.opt_in is not None:
        sandbox["unsandboxed"] = "allow"
        return
    if auto_allow and client != "cli":
        raise UnsandboxedError(status.refusal("this rollout"), status.level)
    if client in EDITOR_CLIENTS and not auto_allow:
        permissions.terminal_notice = status.notice()
        sandbox["unsandboxed"] = "ask"
