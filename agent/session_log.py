"""Session logs: one JSONL file per session recording everything training needs to replay and
score it (the trajectory). `agent/` writes them, `training/` reads them; the record shapes are
the JSON Schema in agent/schemas/session_log.schema.json.

    log = SessionLog.open(workspace, model={"id": "composer-mini", "weight_version": 3},
                          sampler={"temperature": 1.0}, tools=registry.openai_tools(),
                          system_prompt=prompt)             # writes the `session` header
    log.write("user_message", text="fix the test")
    log.write("model_call", call_id="m1", parent=None, prompt_token_ids=[...],
              completion_token_ids=[...], logprobs=[...], text="...", finish_reason="tool_calls")
    log.write("tool_call", call_id="c1", name="read_file", arguments={"path": "a.py"},
              result="...", error=None, duration_s=0.01, group=0)
    log.rest()                                              # fsync, close; the next write reopens
    log.close()                                             # fsync
    SessionLog.reopen(log.path).write("outcome", signal="tests_passed", value=True)  # later
    records = read_session(log.path)

Where: `$COMPOSER_LOG_DIR/<workspace-slug>/<session-id>.jsonl`, else
`$XDG_DATA_HOME/composer/sessions/...`, else `~/.local/share/composer/sessions/...`.

Guarantees: files are only ever appended to (O_APPEND, one write per record, so a record is in
the kernel once `write` returns and survives a crash of the process; fsync at close); a record
torn by a crash is skipped by the reader with a warning, and a writer that reopens the file
first ends the torn line so later records stay readable. A record the disk has no room for
raises SessionLogError and is cut back off the file (no half record is left). Records are
validated against the schema when `validate=True`, when $COMPOSER_LOG_VALIDATE=1, or under
pytest, so every test that writes a log checks it.

Schema version 2 (version 1 logs stay readable): a model call logs only its new prompt ids, as a
delta against its `parent` call (the parent's prompt and completion ids, the first `prefix_len`
of them, then `prompt_token_ids`), so a log grows linearly; the fields are described in the
schema and in docs/contracts.md.

Redaction (agent/redact.py) reaches everything: strings, and token ids. Ids are decoded and the
tokens of any span that decodes to a secret are replaced by the ids of its `[REDACTED:<kind>]`
tag; the record's `redactions` lists the tags' spans, its logprobs there are null, and its routed
experts stop before the first one. Every secret found is remembered for the rest of the session
(`KnownSecrets`), so a `.env` value that the model repeats elsewhere is caught too. Without a
tokenizer the log cannot read ids, so it writes none (`extra.ids_withheld`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import subprocess
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import jsonschema

from agent.json_schema import schema_validator
from agent.redact import KnownSecrets, redact, redact_obj, redact_token_ids
from agent.tools.base import truncate

SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).parent / "schemas" / "session_log.schema.json"
RECORD_TYPES = ("session", "user_message", "model_call", "tool_call", "permission", "edit_review",
                "checkpoint", "restore", "forget", "final_diff", "outcome", "error", "cancelled")
MAX_RESULT_CHARS = 50_000
"""Tool results longer than this are cut in the log (the model may have seen more)."""

_NOT_REDACTED = frozenset({"type", "session_id", "call_id", "model_call_id", "message_id",
                           "checkpoint_id", "backup_id", "base_checkpoint_id", "base_commit",
                           "system_prompt_hash", "group", "task_id", "parent_session_id", "git",
                           "workspace", "option_id", "prompt_token_ids", "completion_token_ids",
                           "logprobs", "routed_experts", "parent", "forced", "redactions",
                           "sampler", "weight_version", "prefix_len", "routed_experts_start"})
"""Ids, hashes and numbers: never secrets, and redacting them would only cost time."""


class SessionLogError(ValueError):
    """A record that does not match the schema, a log that cannot be opened as asked, or a
    record that could not be written (a full disk)."""


class SessionLogWarning(UserWarning):
    """A line of a log that could not be read (a crash mid-write) and was skipped."""


@dataclass(frozen=True)
class SessionInfo:
    path: Path
    session_id: str
    workspace: str | None
    started: float | None
    model: str | None


def default_log_dir() -> Path:
    """The root under which sessions are grouped by workspace."""
    if os.environ.get("COMPOSER_LOG_DIR"):
        return Path(os.environ["COMPOSER_LOG_DIR"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser() / "composer" / "sessions"


def workspace_slug(workspace: str | PurePath) -> str:
    """`<folder name>-<10 hex of the absolute path's sha256>`: readable and unique per path."""
    path = str(Path(workspace).expanduser().resolve())
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(path).name).strip("-.") or "root"
    return f"{name[:40]}-{hashlib.sha256(path.encode()).hexdigest()[:10]}"


def new_session_id() -> str:
    """Sortable by start time: `20260801T120000Z-1a2b3c4d`."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(4)


def validate_record(record: dict[str, Any]) -> None:
    """Raises SessionLogError naming the record type, the field and the problem."""
    errors = list(schema_validator(SCHEMA_PATH).iter_errors(record))
    specific = [e for e in errors if e.validator != "unevaluatedProperties"]  # a failed `then` leaves all unevaluated
    if errors:
        error = jsonschema.exceptions.best_match(specific or errors)
        where = "/".join(str(p) for p in error.absolute_path) or "(record)"
        raise SessionLogError(f"invalid {record.get('type')!r} record at {where}: {error.message}")
    if record["type"] == "model_call":
        tokens = record["completion_token_ids"]
        for name in ("logprobs", "forced"):
            values = record.get(name)
            if values is not None and len(values) != len(tokens):
                raise SessionLogError(f"model_call has {len(values)} {name} for {len(tokens)} completion tokens")


def git_info(workspace: str | PurePath) -> dict[str, Any] | None:
    """The workspace's git commit, branch and whether it has uncommitted changes; None outside
    a git repository (or without git)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(workspace), *args], capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--verify", "-q", "HEAD")
    if commit is None and git("rev-parse", "--git-dir") is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "branch": git("symbolic-ref", "-q", "--short", "HEAD"),
            "dirty": bool(status)}


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: non-finite floats (a -inf logprob) become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"{type(value).__name__} is not JSON serializable: {value!r:.80}")


def _encode(record: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(record, separators=(",", ":"), allow_nan=False, default=_json_default)
    except ValueError:
        text = json.dumps(_finite(record), separators=(",", ":"), default=_json_default)
    return text.encode() + b"\n"


def _last_seq(path: Path) -> int:
    """The seq of the last readable record, -1 for an empty file. Reads only the tail."""
    size = path.stat().st_size
    block = 1 << 20
    while True:
        with open(path, "rb") as f:
            f.seek(max(0, size - block))
            lines = f.read().split(b"\n")
        if block < size:
            lines = lines[1:]  # the first line of a tail is partial
        for line in reversed(lines):
            try:
                return int(json.loads(line)["seq"])
            except (ValueError, KeyError, TypeError):
                continue
        if block >= size:
            return -1
        block *= 8


class SessionLog:
    """An append-only writer of one session's records. Use `open` (new session) or `reopen`."""

    def __init__(self, path: Path, session_id: str, *, new: bool, validate: bool | None = None,
                 redact: bool = True, max_result_chars: int = MAX_RESULT_CHARS, tokenizer: Any = None) -> None:
        self.path = Path(path)
        self.tokenizer = tokenizer
        """Decodes token ids for redaction (model/tokenizer.py); None: ids are not written."""
        self.known = KnownSecrets()
        self.session_id = session_id
        self.validate = validate if validate is not None else (
            os.environ.get("COMPOSER_LOG_VALIDATE") == "1" or "PYTEST_CURRENT_TEST" in os.environ)
        self.redact = redact
        self.max_result_chars = max_result_chars
        self._lock = threading.Lock()
        self._resting = False
        if new:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
            self._seq = 0
        else:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            self._seq = _last_seq(self.path) + 1
            size = os.fstat(self._fd).st_size
            if size and os.pread(self._fd, 1, size - 1) != b"\n":
                os.write(self._fd, b"\n")  # end a line torn by a crash; the reader skips it

    @classmethod
    def open(cls, workspace: str | PurePath, *, model: dict[str, Any], sampler: dict[str, Any],
             tools: list[dict[str, Any]], system_prompt: str, session_id: str | None = None,
             log_dir: str | PurePath | None = None, validate: bool | None = None,
             redact: bool = True, tokenizer: Any = None, **header: Any) -> SessionLog:
        """Starts a new session file and writes its `session` header. `header` adds optional
        header fields (client, task_id, parent_session_id, composer_version, git)."""
        workspace = Path(workspace).expanduser().resolve()
        session_id = session_id or new_session_id()
        if not re.fullmatch(r"[A-Za-z0-9._-]+", session_id):
            raise SessionLogError(f"session id {session_id!r} must be letters, digits, '.', '_' or '-'")
        root = Path(log_dir) if log_dir is not None else default_log_dir()
        path = root / workspace_slug(workspace) / f"{session_id}.jsonl"
        if path.exists():
            raise SessionLogError(f"session log {path} already exists; use SessionLog.reopen to append")
        if "git" not in header:
            header["git"] = git_info(workspace)
        log = cls(path, session_id, new=True, validate=validate, redact=redact, tokenizer=tokenizer)
        try:
            log.write("session", workspace=str(workspace), model=model, sampler=sampler, tools=tools,
                      system_prompt_hash="sha256:" + hashlib.sha256(system_prompt.encode()).hexdigest(),
                      system_prompt=system_prompt, **header)
        except BaseException:  # a bad header: leave no headless file behind
            log.close()
            path.unlink()
            raise
        return log

    @classmethod
    def reopen(cls, path: str | PurePath, *, validate: bool | None = None,
               redact: bool = True, tokenizer: Any = None) -> SessionLog:
        """Appends to an existing session (outcomes known after it ended), continuing its seq."""
        path = Path(path)
        if not path.is_file():
            raise SessionLogError(f"no session log at {path}")
        header = next(iter(read_session(path, limit=1)), None)
        session_id = header["session_id"] if header else path.stem
        return cls(path, session_id, new=False, validate=validate, redact=redact, tokenizer=tokenizer)

    @property
    def closed(self) -> bool:
        return self._fd < 0 and not self._resting

    def rest(self) -> None:
        """Flushes (fsync) and closes the file until the next write reopens it: an idle session
        holds no file descriptor. Sessions rest between turns."""
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd, self._resting = -1, True

    def write(self, type: str, /, **fields: Any) -> dict[str, Any]:
        """Appends one record and returns it as written (redacted, truncated)."""
        if self.closed:
            raise SessionLogError(f"session log {self.path} is closed; reopen it to append")
        if type not in RECORD_TYPES:
            raise SessionLogError(f"unknown record type {type!r}; known: {', '.join(RECORD_TYPES)}")
        if reserved := fields.keys() & {"version", "session_id", "seq", "time"}:
            raise SessionLogError(f"{', '.join(sorted(reserved))} are set by the log, not by write()")
        with self._lock:
            if self._resting:
                try:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                except OSError as err:
                    raise SessionLogError(f"session log {self.path} cannot be reopened: {err}") from err
                self._resting = False
            return self._write(type, fields)

    def _write(self, type: str, fields: dict[str, Any]) -> dict[str, Any]:
        record = {"type": type, "version": SCHEMA_VERSION, "session_id": self.session_id,
                  "seq": self._seq, "time": round(time.time(), 6), **fields}
        if type == "tool_call":
            record = self._cut_result(record)
        if self.redact:
            args = record.get("arguments")
            source = args.get("path") if isinstance(args, dict) and isinstance(args.get("path"), str) else None
            record = redact_obj(record, _NOT_REDACTED, path=source, known=self.known)
            if type == "model_call":
                record = self._redact_ids(record)
        if self.validate:
            validate_record(record)
        data = _encode(record)
        view, size = memoryview(data), os.fstat(self._fd).st_size
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as err:  # ENOSPC, EDQUOT, EIO: no half record is left to break readers
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise SessionLogError(f"session log {self.path}: could not append a {type!r} record: {err}; "
                                  "the records before it are intact") from err
        self._seq += 1
        return record

    def redact_text(self, text: str, path: str | None = None) -> str:
        """`text` as this log would write it (the session's known secrets included)."""
        return redact(text, path, self.known) if self.redact else text

    def _redact_ids(self, record: dict[str, Any]) -> dict[str, Any]:
        prompt, completion = record.get("prompt_token_ids") or [], record.get("completion_token_ids") or []
        for name, ids in (("prompt_token_ids", prompt), ("completion_token_ids", completion)):
            if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
                raise SessionLogError(f"invalid 'model_call' record at {name}: token ids must be a list of integers")
        if not prompt and not completion:
            return record
        if self.tokenizer is None:
            extra = {**record.get("extra", {}), "ids_withheld": "the log has no tokenizer to redact them"}
            return {**record, "prompt_token_ids": [], "completion_token_ids": [], "logprobs": None,
                    "forced": None, "routed_experts": None, "extra": extra}
        new_prompt, in_prompt = redact_token_ids(prompt, self.tokenizer, self.known)
        new_completion, in_completion = redact_token_ids(completion, self.tokenizer, self.known)
        if not in_prompt and not in_completion:
            return record
        offset = record.get("prefix_len") or 0
        first = offset + (in_prompt[0][0] if in_prompt else len(prompt) + in_completion[0][0])
        rows = record.get("routed_experts")
        if rows is not None:  # routing after a secret was computed on tokens the log does not hold
            rows = rows[: max(0, first - record.get("routed_experts_start", offset))]
        return {**record, "prompt_token_ids": new_prompt, "completion_token_ids": new_completion,
                "logprobs": _realign(record.get("logprobs"), in_completion, None),
                "forced": _realign(record.get("forced"), in_completion, 0), "routed_experts": rows,
                "redactions": {"prompt": [[a, b] for *_, a, b in in_prompt],
                               "completion": [[a, b] for *_, a, b in in_completion]}}

    def _cut_result(self, record: dict[str, Any]) -> dict[str, Any]:
        result = record.get("result")
        if isinstance(result, str) and len(result) > self.max_result_chars:
            cut, _ = truncate(result, self.max_result_chars, "The log keeps the head of the result.")
            record.update(result=cut, truncated=True, result_chars=len(result))
        return record

    def close(self) -> None:
        with self._lock:
            self._resting = False
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)


def _realign(values: list[Any] | None, edits: list[tuple[int, int, int, int]], fill: Any) -> list[Any] | None:
    """A per-token list after `edits` replaced spans of the tokens: `fill` for the new tokens."""
    if values is None or not edits:
        return values
    out: list[Any] = []
    kept = 0
    for start, end, new_start, new_end in edits:
        out += values[kept:start] + [fill] * (new_end - new_start)
        kept = end
    return out + values[kept:]


def read_session(path: str | PurePath, limit: int | None = None) -> list[dict[str, Any]]:
    """The records of a session file, in order. Lines that are not complete JSON objects (a
    record torn by a crash) are skipped with a SessionLogWarning."""
    records: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if limit is not None and len(records) >= limit:
                break
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("not an object")
            except ValueError:
                torn = "torn last line" if not line.endswith(b"\n") else "unreadable line"
                warnings.warn(f"{path}:{number}: skipping {torn} ({len(line)} bytes; "
                              "the writer probably crashed mid-record)", SessionLogWarning, stacklevel=2)
                continue
            records.append(record)
    return records


def list_sessions(workspace: str | PurePath | None = None,
                  log_dir: str | PurePath | None = None) -> list[SessionInfo]:
    """Sessions under the log directory (of one workspace, when given), oldest first."""
    root = Path(log_dir) if log_dir is not None else default_log_dir()
    folders = [root / workspace_slug(workspace)] if workspace is not None else sorted(root.glob("*"))
    found = []
    for folder in folders:
        for path in sorted(folder.glob("*.jsonl")):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SessionLogWarning)
                header = next(iter(read_session(path, limit=1)), {})
            model = header.get("model")
            found.append(SessionInfo(path, header.get("session_id", path.stem), header.get("workspace"),
                                     header.get("time"), model.get("id") if isinstance(model, dict) else None))
    return sorted(found, key=lambda s: (s.started or 0.0, s.session_id))
