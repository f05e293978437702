"""Who may run what: allow / ask / deny rules for tool calls, shell commands judged part by part,
and "always" answers remembered as exact rules.

    policy = default_editor_policy(workspace_root)                                   # the preset
    policy.decide("run_terminal", {"command": "git status && rm -rf /"}).action    # "deny"
    ok = await policy.check("run_terminal", {"command": "pytest -x"}, ask)         # may ask

A rule: `{"tool": "edit_file" | "*", "action": "allow" | "ask" | "deny", "command": "git diff*",
"path": "src/**", "mode": "review"}`. `tool` globs tool names; `mode` (optional) limits the rule to
one session mode, agent or review; `command` globs one shell command (`*` matches
anything; `"pytest *"` also matches a bare `pytest`); `path` is a gitignore-style glob over
workspace-relative paths (`*` stays in a directory, `**` crosses them, no `/` matches any path
component; relative patterns never match outside the workspace, absolute ones match absolute
paths).

Each part (a shell command, a file a redirect writes, a path a file tool touches, or the call as
a whole) is judged alone: a matching deny rule denies; else the last matching rule wins (later
files and "always" answers override defaults); else read-only tools are allowed and the rest gets
the policy's default. A call is denied if any part is, asked if any part is, allowed only if all
parts are.

Two things override the rules for run_terminal, and make its questions count for that call only
(no "allow always"): review mode (`review_policy`) asks about every command, except those a rule
with `"mode": "review"` allows (the explicit way to exempt, say, `git status`); and a sandbox
weaker than bubblewrap (`terminal_notice`, set by agent/isolation.py) asks about every command
whatever any rule says, deny rules still denying.

Shell commands are split with bashlex: `&&`, `||`, `;`, `|`, `&`, `( )`, `{ }`, `$( )`, backticks,
`<( )`, function bodies, `bash -c` / `sh -c` / `eval` (recursively), wrappers (`time`, `nice`,
`timeout`, `env`, `nohup`, `exec`) and `FOO=1 cmd` (dropped, unless the variable changes what
runs: LD_PRELOAD, GIT_PAGER...). Writing redirections (`>`, `>>`, `&>`) are parts of their own,
judged as paths of `run_terminal`. What bashlex cannot parse, and commands named by an expansion
(`$CMD`, `bash -c "$X"`), are one opaque part: deny and ask patterns apply, but only an exact
pattern or a pattern-less rule allows it, never a pattern matching a prefix of it.

Rule files, the trust a workspace's own file needs before it may allow anything, and where
"always" answers are kept for later sessions: agent/permission_files.py (`load_policy`).

Tests: .venv/bin/python -m pytest tests/agent/test_permissions.py
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import bashlex

Action = Literal["allow", "ask", "deny"]
Answer = Literal["allow_once", "allow_always", "reject_once", "reject_always"]
ACTIONS: tuple[Action, ...] = ("allow", "ask", "deny")
ANSWERS: tuple[Answer, ...] = ("allow_once", "allow_always", "reject_once", "reject_always")
TERMINAL_TOOL = "run_terminal"
MODES = ("agent", "review")
READ_ONLY_TOOLS = frozenset({"read_file", "list_dir", "glob", "grep", "codebase_search", "read_lints"})
"""Tools allowed when no rule says otherwise; `decide(..., read_only=spec.read_only)` overrides."""

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
_WRAPPERS = frozenset({"time", "nohup", "exec", "builtin", "nice", "timeout", "env", "command"})
_RISKY_ENV = re.compile(
    r"(LD_|DYLD_|GIT_|BASH_|PERL5|NODE_OPTIONS$|RUBYOPT$|PYTHONSTARTUP$|PYTHONHOME$|PATH$|ENV$|"
    r"IFS$|PROMPT_COMMAND$|SHELLOPTS$|PS4$|PAGER$|EDITOR$|VISUAL$)"
)
"""Assignments (`X=... cmd`) that change what `cmd` runs; kept in the part's text."""
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_HARMLESS_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_MAX_DEPTH = 8
_TIME_KEYWORD = re.compile(r"(?:^|(?<=[;&|(!{]))\s*time(?:\s+-p)?(?=\s)")
"""bashlex does not implement bash's `time` keyword; blanked out (same length) before parsing."""


# ---- rules -------------------------------------------------------------------------------------


def parse_action(value: Any, where: str) -> Action:
    if value not in ACTIONS:
        raise ValueError(f"{where} {value!r} is not one of {', '.join(ACTIONS)}")
    return value


@dataclass(frozen=True)
class Rule:
    tool: str = "*"
    action: Action = "ask"
    command: str | None = None
    """Glob over one shell command of run_terminal (`"git diff*"`)."""
    path: str | None = None
    """Gitignore-style glob over the paths a file tool touches or a redirect writes."""
    source: str = field(default="", compare=False)
    """Where the rule came from, for reasons: a file and index, a preset, an answer."""
    mode: str | None = None
    """The session mode the rule applies in (agent or review); None: every mode."""

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Rule:
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: a rule must be an object, got {type(data).__name__}: {data!r}")
        unknown = set(data) - {"tool", "action", "command", "path", "mode"}
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; a rule has tool, action, "
                             "command, path, mode")
        if "mode" in data and data["mode"] not in MODES:
            raise ValueError(f"{where}: mode {data['mode']!r} is not one of {', '.join(MODES)}")
        action = parse_action(data.get("action"), f"{where}: action")
        for key in ("tool", "command", "path"):
            if key in data and not (isinstance(data[key], str) and data[key].strip()):
                raise ValueError(f"{where}: {key} must be a non-empty string, got {data[key]!r}")
        if "command" in data and "path" in data:
            raise ValueError(f"{where}: give either command or path, not both (use two rules)")
        return cls(data.get("tool", "*"), action, data.get("command"), data.get("path"), where, data.get("mode"))

    def to_dict(self) -> dict[str, str]:
        pairs = (("tool", self.tool), ("action", self.action), ("command", self.command), ("path", self.path),
                 ("mode", self.mode))
        return {key: value for key, value in pairs if value is not None}

    def describe(self) -> str:
        return json.dumps(self.to_dict()) + (f" ({self.source})" if self.source else "")


def escape_glob(text: str) -> str:
    """A pattern that matches exactly `text`."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _is_literal(pattern: str) -> bool:
    return not re.search(r"[*?\[]", re.sub(r"\[([*?\[])\]", "", pattern))


def _command_match(pattern: str, text: str, exact_only: bool) -> bool:
    pattern = " ".join(pattern.split())
    if exact_only and not _is_literal(pattern):
        return False
    if fnmatch.fnmatchcase(text, pattern):
        return True
    return pattern.endswith(" *") and fnmatch.fnmatchcase(text, pattern[:-2])


_GLOB_TOKEN = re.compile(r"\*\*/|\*\*|\*|\?|\[!?[^]]+\]|.", re.S)
_GLOB_REGEX = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def _glob_regex(pattern: str) -> re.Pattern[str]:
    def one(token: str) -> str:
        if token in _GLOB_REGEX:
            return _GLOB_REGEX[token]
        if token.startswith("[") and len(token) > 2:
            body = token[1:-1]
            return "[" + ("^" + re.escape(body[1:]) if body.startswith("!") else re.escape(body)) + "]"
        return re.escape(token)

    return re.compile("".join(one(t) for t in _GLOB_TOKEN.findall(pattern)))


def _exact_path(path: str) -> str:
    """A pattern that matches exactly the normalised `path`: a top-level name is anchored (`./`),
    since a pattern without `/` matches the name in every folder (`config` would match `.git/config`)."""
    return escape_glob(path) if "/" in path else "./" + escape_glob(path)


def _path_match(pattern: str, path: str) -> bool:
    """`path` is normalised: workspace-relative, or absolute / `../` when outside."""
    outside = path.startswith("/") or path == ".." or path.startswith("../")
    if pattern.startswith("/"):
        return outside and _glob_regex(pattern).fullmatch(path) is not None
    if outside:
        return False
    if "/" not in pattern.rstrip("/"):
        regex = _glob_regex(pattern.rstrip("/"))
        return any(regex.fullmatch(part) for part in path.split("/"))
    return _glob_regex(pattern.removeprefix("./")).fullmatch(path) is not None


# ---- shell parsing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ShellPart:
    kind: Literal["command", "write"]
    text: str
    """The command's words as written (assignments that matter kept), or the written path."""
    opaque: bool = False
    """Not fully understood: only exact patterns (or pattern-less rules) may allow it."""

    def __str__(self) -> str:
        return f"> {self.text}" if self.kind == "write" else self.text


def _matching_paren(text: str, start: int) -> int | None:
    """Index of the `)` closing the `(` at `start`, skipping quoted text; None if unbalanced."""
    depth, quote, i = 0, None, start
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            i += 1
        elif quote or c in "'\"":
            quote = None if c == quote else quote or c
        elif c in "()":
            depth += 1 if c == "(" else -1
            if depth == 0:
                return i
        i += 1
    return None


def _substitutions(text: str) -> list[tuple[int, int]] | None:
    """Spans of the outermost `$( )`, `<( )`, `>( )` outside single quotes; None if unbalanced."""
    spans, quote, i = [], None, 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = None if c == "'" else quote
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = None if quote == c else quote or c
        elif text.startswith("(", i + 1) and not text.startswith("((", i + 1) and (c == "$" or (c in "<>" and not quote)):
            end = _matching_paren(text, i + 1)
            if end is None:
                return None
            spans.append((i, end + 1))
            i = end
        i += 1
    return spans


class _Splitter:
    def __init__(self, source: str, depth: int, masked: list[tuple[int, int]] = ()) -> None:
        self.source, self.depth = source, depth
        self.masked = masked
        """Substitutions blanked out before parsing (bashlex fails on `$(a && b)`)."""
        self.parts: list[ShellPart] = []

    def _expands(self, node: Any) -> bool:
        start, end = node.pos
        return any(p.kind in ("parameter", "commandsubstitution", "processsubstitution")
                   for p in getattr(node, "parts", [])) or any(s < end and start < e for s, e in self.masked)

    def visit(self, node: Any) -> None:
        kind = node.kind
        if kind == "command":
            self._command(node)
        elif kind in ("commandsubstitution", "processsubstitution"):
            self.visit(node.command)
        elif kind == "redirect":
            self._redirect(node)
        else:
            for child in [*getattr(node, "parts", []), *getattr(node, "list", []),
                          *getattr(node, "redirects", [])]:
                if hasattr(child, "kind"):
                    self.visit(child)

    def _unquoted(self, word: Any) -> str:
        """The word's value: shlex's quote removal of its source (bashlex gets `'a'"'"'b'` wrong)."""
        try:
            values = shlex.split(self.source[word.pos[0] : word.pos[1]])
        except ValueError:
            return word.word
        return values[0] if len(values) == 1 else word.word

    def _redirect(self, node: Any) -> None:
        target = node.output
        if hasattr(target, "kind"):
            self.visit(target)
        if node.type not in _WRITE_REDIRECTS or not hasattr(target, "word"):
            return
        if target.word not in _HARMLESS_TARGETS and not target.word.startswith("/dev/fd/"):
            self.parts.append(ShellPart("write", target.word, opaque=self._expands(target)))

    def _command(self, node: Any) -> None:
        words, kept = [], []
        for child in node.parts:
            if child.kind == "redirect":
                self._redirect(child)
                continue
            if child.kind in ("word", "assignment"):
                self.visit(child)  # substitutions inside run too
            if child.kind == "assignment" and not words:
                if _RISKY_ENV.match(child.word.split("=", 1)[0]):
                    kept.append(child)
            elif child.kind == "word":
                words.append(child)
        if words:
            self._judge_words(kept, words)

    def _judge_words(self, kept: list[Any], words: list[Any]) -> None:
        words = _strip_wrappers(words)
        name = os.path.basename(words[0].word)
        text = " ".join(self.source[w.pos[0] : w.pos[1]] for w in [*kept, *words])
        if self._expands(words[0]):
            self.parts.append(ShellPart("command", text, opaque=True))
        elif name in SHELLS and (script := _shell_script(words)) is not None:
            self._nested(self._unquoted(script), text, opaque=self._expands(script))
        elif name == "eval" and len(words) > 1:
            self._nested(" ".join(map(self._unquoted, words[1:])), text, opaque=any(map(self._expands, words[1:])))
        else:
            self.parts.append(ShellPart("command", text))

    def _nested(self, script: str, text: str, opaque: bool) -> None:
        if opaque or self.depth >= _MAX_DEPTH:
            self.parts.append(ShellPart("command", text, opaque=True))
        else:
            self.parts.extend(parse_shell_command(script, _depth=self.depth + 1))


def _strip_wrappers(words: list[Any]) -> list[Any]:
    """Drops `time`, `nice -n 5`, `timeout 10`, `env X=1`, `nohup`, `exec` before the real command."""
    while len(words) > 1 and words[0].word in _WRAPPERS:
        name, rest = words[0].word, words[1:]
        if name == "command" and rest[0].word.startswith("-"):
            break  # `command -v x` asks, it does not run
        takes_value = {"nice": {"-n"}, "timeout": {"-s", "-k"}, "env": {"-u", "-C", "-S"}, "exec": {"-a"}}
        while rest and rest[0].word.startswith("-") and len(rest) > 1:
            rest = rest[2:] if rest[0].word in takes_value.get(name, ()) else rest[1:]
        if name == "timeout" and len(rest) > 1:
            rest = rest[1:]  # the duration
        if name == "env":
            while len(rest) > 1 and "=" in rest[0].word and not rest[0].word.startswith("="):
                if _RISKY_ENV.match(rest[0].word.split("=", 1)[0]):
                    return words  # `env LD_PRELOAD=x cmd` stays whole
                rest = rest[1:]
        if not rest:
            break
        words = rest
    return words


def _shell_script(words: list[Any]) -> Any | None:
    """The script word of `bash [-opts] -c SCRIPT ...`, or None when not a -c call."""
    has_c, rest = False, words[1:]
    while rest:
        w = rest[0].word
        if w in ("-o", "+o", "-O", "+O"):
            rest = rest[2:]
            continue
        if not w.startswith(("-", "+")) or w in ("-", "+"):
            return rest[0] if has_c else None
        has_c = has_c or (not w.startswith("--") and "c" in w[1:])
        rest = rest[1:]
    return None


def parse_shell_command(command: str, *, _depth: int = 0) -> list[ShellPart]:
    """The simple commands and written files of a command line (substitutions and redirections
    before the command they belong to). Never raises: what bashlex cannot parse comes back as
    one opaque part."""
    text = command.strip()
    if not text:
        return []
    prepared = _TIME_KEYWORD.sub(lambda m: " " * len(m.group()), text)
    opaque = [ShellPart("command", " ".join(text.split()), opaque=True)]
    try:
        trees, splitter = bashlex.parse(prepared), _Splitter(text, _depth)
    except Exception:  # bashlex raises ParsingError, NotImplementedError and worse on odd input
        spans = _substitutions(prepared)
        if not spans or _depth >= _MAX_DEPTH:
            return opaque
        # Retry with each substitution blanked out (same length, so positions hold) and split
        # separately: bashlex 0.18 cannot parse `&&` or `||` inside `$( )`.
        for start, end in reversed(spans):
            prepared = prepared[:start] + "_" * (end - start) + prepared[end:]
        try:
            trees, splitter = bashlex.parse(prepared), _Splitter(text, _depth, spans)
        except Exception:
            return opaque
        for start, end in spans:
            splitter.parts.extend(parse_shell_command(text[start + 2 : end - 1], _depth=_depth + 1))
    for tree in trees:
        splitter.visit(tree)
    return splitter.parts or [ShellPart("command", " ".join(text.split()))]


def split_shell_command(command: str) -> list[str]:
    """The parts of a compound command as strings (`> path` for a redirect that writes)."""
    return [str(part) for part in parse_shell_command(command)]


# ---- decisions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartDecision:
    kind: Literal["command", "write", "path", "tool"]
    text: str
    action: Action
    reason: str
    opaque: bool = False


@dataclass(frozen=True)
class Decision:
    action: Action
    reasons: list[str]
    parts: list[PartDecision]
    once_only: bool = False
    """A question about this call offers no "allow always", and such an answer counts once."""
    notice: str | None = None
    """What the question must tell the person besides the call (a weaker sandbox's warning)."""

    @property
    def asked(self) -> list[PartDecision]:
        """The parts a person is asked about (and that an "always" answer remembers)."""
        return [p for p in self.parts if p.action == "ask"]


AskFn = Callable[[str, dict[str, Any], Decision], Awaitable[Answer]]


def _tool_paths(args: Mapping[str, Any]) -> list[str]:
    """`path`, `*_path` and `paths` arguments: what a file tool touches."""
    found = [v for k, v in args.items() if (k == "path" or k.endswith("_path")) and isinstance(v, str)]
    return found + [v for v in args.get("paths") or [] if isinstance(v, str)]


class PermissionPolicy:
    def __init__(self, rules: Iterable[Rule | Mapping[str, Any]] = (), default: Action = "ask", *,
                 read_only_tools: Iterable[str] = READ_ONLY_TOOLS,
                 workspace_root: Path | None = None, mode: str = "agent",
                 terminal_notice: str | None = None) -> None:
        parse_action(default, "default")
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        self.rules = [r if isinstance(r, Rule) else Rule.from_dict(r, f"rule {i}") for i, r in enumerate(rules)]
        self.default: Action = default
        self.read_only_tools = frozenset(read_only_tools)
        self.workspace_root = Path(workspace_root).resolve() if workspace_root else None
        self.mode = mode
        """The session's mode: rules with another `mode` do not apply."""
        self.terminal_notice = terminal_notice
        """Set when commands would run with a sandbox weaker than bubblewrap: every run_terminal
        call then asks (once only) with this warning, whatever the rules say."""
        self.learned: list[Rule] = []
        """Rules added by "always" answers, in order."""
        self.on_remember: Callable[[list[Rule]], None] | None = None
        """Called with the rules each "always" answer adds (load_policy keeps them for the workspace)."""

    def _norm(self, path: str) -> str:
        if path.startswith("~"):
            expanded = os.path.expanduser(path)  # outside the workspace, even when unexpandable
            return os.path.normpath(expanded if os.path.isabs(expanded) else "/" + path)
        if self.workspace_root is not None and os.path.isabs(path):
            with_root = os.path.normpath(path)
            rel = os.path.relpath(with_root, self.workspace_root)
            return with_root if rel == ".." or rel.startswith("../") else rel
        return os.path.normpath(path)

    def _judge(self, tool: str, kind: str, text: str, opaque: bool, read_only: bool) -> PartDecision:
        matching = []
        for rule in self.rules:
            if not fnmatch.fnmatchcase(tool, rule.tool) or rule.mode not in (None, self.mode):
                continue
            exact_only = opaque and rule.action == "allow"  # deny and ask patterns still apply
            if kind == "command":
                hit = rule.path is None and (rule.command is None or _command_match(rule.command, text, exact_only))
            elif kind == "tool":
                hit = rule.path is None and rule.command is None
            else:
                hit = rule.command is None and (rule.path is None or (
                    _path_match(rule.path, self._norm(text)) and (not exact_only or _is_literal(rule.path))))
            if hit:
                matching.append(rule)
        shown = f"> {text}" if kind == "write" else text
        denied = [r for r in matching if r.action == "deny"]
        if denied:
            return PartDecision(kind, text, "deny", f"`{shown}`: denied by {denied[0].describe()}", opaque)
        if matching:
            rule = matching[-1]
            return PartDecision(kind, text, rule.action, f"`{shown}`: {rule.action} by {rule.describe()}", opaque)
        action: Action = "allow" if read_only else self.default
        why = "read-only tool" if read_only else f"no rule matches{' (opaque)' if opaque else ''}; default"
        return PartDecision(kind, text, action, f"`{shown}`: {why} {action}", opaque)

    def decide(self, tool_name: str, args: Mapping[str, Any], *, read_only: bool | None = None) -> Decision:
        """Judges one call. `read_only` (the tool spec's) defaults to membership in read_only_tools."""
        if read_only is None:
            read_only = tool_name in self.read_only_tools
        if tool_name == TERMINAL_TOOL:
            command = str(args.get("command", ""))
            shell = parse_shell_command(command) or [ShellPart("command", command.strip())]
            parts = [self._judge(tool_name, p.kind, p.text, p.opaque, read_only) for p in shell]
        elif paths := _tool_paths(args):
            parts = [self._judge(tool_name, "path", p, False, read_only) for p in paths]
        else:
            parts = [self._judge(tool_name, "tool", tool_name, False, read_only)]
        once_only = tool_name == TERMINAL_TOOL and (self.mode == "review" or self.terminal_notice is not None)
        notice = self.terminal_notice if tool_name == TERMINAL_TOOL else None
        if notice is not None:
            parts = [replace(p, action="ask", reason=f"{p.reason}, but asked anyway: {notice}")
                     if p.action == "allow" else p for p in parts]
        actions = {p.action for p in parts}
        action: Action = "deny" if "deny" in actions else "ask" if "ask" in actions else "allow"
        return Decision(action, [p.reason for p in parts], parts, once_only, notice)

    def remember(self, tool_name: str, decision: Decision, action: Action) -> list[Rule]:
        """Adds one exact rule per asked part (what an "always" answer means); returns them."""
        source = f"answered {'allow' if action == 'allow' else 'reject'}_always"
        added = []
        for part in decision.asked:
            command = escape_glob(part.text) if part.kind == "command" else None
            path = _exact_path(self._norm(part.text)) if part.kind in ("write", "path") else None
            rule = Rule(tool_name, action, command, path, source)
            if rule not in self.rules:
                self.rules.append(rule)
                self.learned.append(rule)
                added.append(rule)
        if added and self.on_remember is not None:
            self.on_remember(added)
        return added

    async def check(self, tool_name: str, args: dict[str, Any], ask: AskFn, *,
                    read_only: bool | None = None) -> bool:
        """True when the call may run: allowed by the rules, or allowed by the person `ask`
        asks (ACP's session/request_permission). "always" answers add exact rules."""
        decision = self.decide(tool_name, args, read_only=read_only)
        if decision.action != "ask":
            return decision.action == "allow"
        answer = await ask(tool_name, args, decision)
        if answer not in ANSWERS:
            raise ValueError(f"permission answer {answer!r} is not one of {', '.join(ANSWERS)}")
        allowed = answer.startswith("allow")
        if answer.endswith("_always") and not (allowed and decision.once_only):
            self.remember(tool_name, decision, "allow" if allowed else "deny")
        return allowed

    def extended(self, rules: Iterable[Rule], default: Action | None = None, *,
                 mode: str | None = None) -> PermissionPolicy:
        """A copy with `rules` after these (so they override them) and maybe a new default or mode;
        its "always" answers are kept where this policy's are."""
        copy = PermissionPolicy([*self.rules, *rules], default or self.default,
                                read_only_tools=self.read_only_tools, workspace_root=self.workspace_root,
                                mode=mode or self.mode, terminal_notice=self.terminal_notice)
        copy.on_remember = self.on_remember
        return copy


# ---- presets -----------------------------------------------------------------------------------

SAFE_COMMANDS = (
    "ls", "ls *", "cat *", "head *", "tail *", "wc *", "sort *", "uniq *", "cut *", "grep *",
    "rg *", "pwd", "echo *", "which *", "true", "git status*", "git diff*", "git log*",
    "git show*", "pytest *", "python -m pytest *", "python3 -m pytest *", "ruff *",
)
"""Allowed without asking in the editor (inside the sandbox: no network, workspace-only writes)."""
RISKY_COMMANDS = ("rg *--pre*", "git * --output*", "git diff *--ext-diff*")
"""Asked about although a safe pattern matches (they run other programs or write files)."""
DENIED_COMMANDS = (
    "sudo", "sudo *", "su", "su *", "doas *",
    "rm -*[rR]* /", "rm -*[rR]* /[*]", "rm -*[rR]* ~", "rm -*[rR]* ~/", "rm -*[rR]* ~/[*]",
    "sh", "bash", "zsh", "dash", "sh -", "bash -", "sh -s*", "bash -s*", "zsh -s*",
    "mkfs*", "dd * of=/dev/*",
)
"""Never run: privilege changes, wiping / or ~, and piping text into a shell (`curl ... | sh`)."""
EDIT_TOOLS = ("edit_file", "write_file", "delete_file", TERMINAL_TOOL)
PROTECTED_PATHS = (".git/**", ".composer/**")
"""Writes there ask even when edits are allowed (git internals; Composer's own settings)."""


def default_editor_policy(workspace_root: Path | None = None) -> PermissionPolicy:
    """Reads and edits inside the workspace allowed; a safe list of commands allowed; sudo,
    `rm -rf /` and pipes into a shell denied; everything else asks."""
    src = "default_editor_policy"
    rules = [Rule(tool, "allow", path="**", source=src) for tool in EDIT_TOOLS]
    rules += [Rule(tool, "ask", path=p, source=src) for tool in EDIT_TOOLS for p in PROTECTED_PATHS]
    rules += [Rule(TERMINAL_TOOL, "allow", command=c, source=src) for c in SAFE_COMMANDS]
    rules += [Rule(TERMINAL_TOOL, "ask", command=c, source=src) for c in RISKY_COMMANDS]
    rules += [Rule(TERMINAL_TOOL, "deny", command=c, source=src) for c in DENIED_COMMANDS]
    rules += [Rule("todo*", "allow", source=src)]
    return PermissionPolicy(rules, "ask", workspace_root=workspace_root)


def review_policy(base: PermissionPolicy) -> PermissionPolicy:
    """Review mode over `base`: every edit asks (with its diff) and every terminal command asks
    (once only), so nothing reaches a file the person has not accepted. Deny rules still deny;
    rules marked `"mode": "review"` come last, so they may exempt commands (read-only ones)."""
    asks = [Rule(tool, "ask", path="**", source="review mode") for tool in EDIT_TOOLS if tool != TERMINAL_TOOL]
    asks.append(Rule(TERMINAL_TOOL, "ask", source="review mode"))
    exempt = [rule for rule in base.rules if rule.mode == "review"]
    return base.extended([*asks, *exempt], mode="review")


def rollout_policy() -> PermissionPolicy:
    """RL rollouts: everything is allowed; the sandbox is the boundary."""
    return PermissionPolicy([Rule("*", "allow", source="rollout_policy")], "allow")
