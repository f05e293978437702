"""Tasks: SWE-bench compatible JSONL, one task per line, loaded into `Task`s; how to build a
task's workspace and how to read and grade its tests' outcomes. The format is the JSON Schema in
training/schemas/task.schema.json (SWE-bench's field names, plus `source`, `setup`, `test_cmd`).

    tasks = load_tasks("training/data/tasks/curated.jsonl")   # TaskError names line and field
    root = materialize(tasks[0], Path("/tmp/ws"))              # sdist/dir/git + source.patch, a git repo
    spec = base_spec(tasks[0])                                 # the same, as a training/envs base
    async with await Environment.create(Base.from_dir(root)) as env:
        run = await run_tests(tasks[0], env, tasks[0].FAIL_TO_PASS)   # in the env's sandbox
    g = grade(tasks[0], run.outcomes)                          # TaskGrade: resolved, per-test outcomes

Agents run on tasks, and are graded, on environments (training/run.py: `run_task`): the base
is `base_spec(task)` (materialized once, setup commands run once), grading applies the agent's
diff (less `protected_paths(task)`: the tests' files) and then `test_patch` to a fresh view and
runs `task.test_command(...)` there. `run_tests` runs chosen tests in an environment as it is:
task generation (training/taskgen.py) mutates a package's view and runs its tests there.

A plain SWE-bench line (no `source`) builds from https://github.com/<repo> at `base_commit`.
`FAIL_TO_PASS`/`PASS_TO_PASS` may be JSON-encoded strings (SWE-bench ships them so). A `pypi`
source is the package's sdist: found in the cache (~/.cache/composer/sdists, or $COMPOSER_SDISTS),
else fetched with `pip download --no-deps --no-binary :all: NAME==VERSION`, checked against
`sha256`. An `inline` source carries its files in the line (`"files": {path: text}`; tiny
generated repositories, nothing to fetch). Workspaces built from a dir, an sdist or inline files
become git repos with one deterministic commit (the starting state, bug included), so the
agent's `git diff` shows only its own changes.

Grading is SWE-bench's: resolved iff every FAIL_TO_PASS and every PASS_TO_PASS test passes;
outcomes come from pytest's `-rA` summary lines (PASSED/FAILED/ERROR/XFAIL/XPASS/SUBFAILED). A
`TaskGrade` whose `infra` is set is an infrastructure failure (the sandbox, the environment or the
harness failed): `resolved` is None then, never False.

Tests: .venv/bin/python -m pytest tests/training/test_tasks.py
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema

from agent.json_schema import schema_validator
from agent.unidiff import touched_paths
from training.envs import BaseSpec, Environment

SCHEMA_PATH = Path(__file__).parent / "schemas" / "task.schema.json"
DEFAULT_TEST_CMD = "python -m pytest -q -p no:cacheprovider -rA {tests}"
TEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}
"""No .pyc files: an edit that keeps a file's size within the same second as the last run would
otherwise be shadowed by the stale bytecode (pyc checks mtime in whole seconds and size)."""
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "composer", "GIT_AUTHOR_EMAIL": "composer@localhost",
                "GIT_COMMITTER_NAME": "composer", "GIT_COMMITTER_EMAIL": "composer@localhost",
                "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000"}
"""Fixed names and dates: the same tree always gives the same starting commit."""
TEST_OUTPUT_BYTES = 32 * 1024**2
"""A test command's output is read up to this (the -rA summary is at its end)."""
PASSED, FAILED, MISSING = "passed", "failed", "missing"
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SUBFAILED|SUBPASSED)(\(.*?\))? (\S.*)$")
_PASSING = {"PASSED", "XFAIL", "XPASS", "SUBPASSED"}
_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")


class TaskError(ValueError):
    """A task line that does not match the format, or a workspace that could not be built."""


@dataclass(frozen=True, kw_only=True)
class Source:
    kind: str
    """dir | git | pypi | inline"""
    path: str | None = None
    url: str | None = None
    commit: str | None = None
    name: str | None = None
    version: str | None = None
    sha256: str | None = None
    files: dict[str, str] | None = None
    """inline: {relative path: text}, the whole tree (a tiny generated repository)."""
    patch: str = ""
    """Applied after unpacking, before the starting commit (a generated task's bug)."""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass(frozen=True, kw_only=True)
class Task:
    instance_id: str
    problem_statement: str
    source: Source
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...] = ()
    patch: str = ""
    test_patch: str = ""
    repo: str | None = None
    base_commit: str | None = None
    version: str | None = None
    setup: tuple[str, ...] = ()
    test_cmd: str = DEFAULT_TEST_CMD
    metadata: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields the format does not name (hints_text, created_at, ...), kept as they came."""

    def test_command(self, ids: list[str] | tuple[str, ...]) -> str:
        """The shell command that runs `ids`: test_cmd with {tests} replaced (or ids appended)."""
        quoted = shlex.join(ids)
        if "{tests}" in self.test_cmd:
            return self.test_cmd.replace("{tests}", quoted)
        return f"{self.test_cmd} {quoted}".rstrip()

    def to_json(self) -> dict[str, Any]:
        """The task as one JSONL object (lists as real JSON lists)."""
        out: dict[str, Any] = {"instance_id": self.instance_id, "repo": self.repo, "version": self.version,
                               "base_commit": self.base_commit, "source": self.source.to_json(),
                               "problem_statement": self.problem_statement, "patch": self.patch,
                               "test_patch": self.test_patch, "FAIL_TO_PASS": list(self.FAIL_TO_PASS),
                               "PASS_TO_PASS": list(self.PASS_TO_PASS), "setup": list(self.setup),
                               "test_cmd": self.test_cmd}
        if self.metadata:
            out["metadata"] = self.metadata
        return {k: v for k, v in out.items() if v is not None} | self.extra


# ---- loading ---------------------------------------------------------------------------------


def _where(obj: Any, where: str) -> str:
    ident = obj.get("instance_id") if isinstance(obj, dict) else None
    return f"{where} (instance_id {ident!r})" if isinstance(ident, str) else where


def _decode_lists(obj: dict[str, Any], where: str) -> dict[str, Any]:
    """SWE-bench ships FAIL_TO_PASS/PASS_TO_PASS as JSON strings: decode them to lists."""
    obj = dict(obj)
    for name in _LIST_FIELDS:
        value = obj.get(name)
        if not isinstance(value, str):
            continue
        try:
            decoded = json.loads(value)
        except ValueError as err:
            raise TaskError(f"{_where(obj, where)}: field {name!r}: a string must be a JSON list of test ids, "
                            f"got {value[:80]!r} ({err})") from None
        if not isinstance(decoded, list) or not all(isinstance(t, str) and t for t in decoded):
            raise TaskError(f"{_where(obj, where)}: field {name!r}: {value[:80]!r} is not a JSON list of "
                            "non-empty strings")
        obj[name] = decoded
    return obj


def parse_task(obj: Any, where: str = "<task>", base_dir: Path | None = None) -> Task:
    """One task from its JSON object; TaskError names `where` (file:line), the field and the
    problem. Relative `dir` sources are taken relative to `base_dir`."""
    if not isinstance(obj, dict):
        raise TaskError(f"{where}: a task must be a JSON object, got {type(obj).__name__}")
    errors = list(schema_validator(SCHEMA_PATH).iter_errors(obj))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        parts = [str(p) for p in error.absolute_path]
        if error.validator == "required" and isinstance(error.instance, dict):  # name the missing field
            parts += [next(p for p in error.validator_value if p not in error.instance)]
        path = "/".join(parts) or "(task)"
        message = error.message if len(error.message) < 300 else error.message[:300] + "..."
        if error.validator == "anyOf" and not parts:
            missing = [k for k in ("repo", "base_commit") if k not in obj]
            message = f"needs a 'source', or 'repo' and 'base_commit' (a SWE-bench line); {', '.join(missing)} missing"
        elif error.validator == "oneOf" and parts and parts[0] in _LIST_FIELDS:
            message = f"must be a list of test ids or a JSON string of one, got {error.instance!r:.80}"
        raise TaskError(f"{_where(obj, where)}: field {path!r}: {message}")
    obj = _decode_lists(obj, where)
    if not obj["FAIL_TO_PASS"]:
        raise TaskError(f"{_where(obj, where)}: field 'FAIL_TO_PASS': needs at least one test id, got []")
    raw = obj.get("source") or {"kind": "git", "url": f"https://github.com/{obj['repo']}.git",
                                "commit": obj["base_commit"]}
    source = Source(**raw)
    if source.kind == "dir" and base_dir is not None and not os.path.isabs(source.path or ""):
        source = Source(**{**raw, "path": str((base_dir / source.path).resolve())})
    known = {"instance_id", "problem_statement", "source", "FAIL_TO_PASS", "PASS_TO_PASS", "patch", "test_patch",
             "repo", "base_commit", "version", "setup", "test_cmd", "metadata"}
    return Task(
        instance_id=obj["instance_id"], problem_statement=obj["problem_statement"], source=source,
        FAIL_TO_PASS=tuple(obj["FAIL_TO_PASS"]), PASS_TO_PASS=tuple(obj.get("PASS_TO_PASS") or ()),
        patch=obj.get("patch") or "", test_patch=obj.get("test_patch") or "", repo=obj.get("repo"),
        base_commit=obj.get("base_commit"), version=obj.get("version"), setup=tuple(obj.get("setup") or ()),
        test_cmd=obj.get("test_cmd") or DEFAULT_TEST_CMD, metadata=obj.get("metadata") or {},
        extra={k: v for k, v in obj.items() if k not in known},
    )


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """Every task of a JSONL file (blank lines skipped); TaskError at the first bad line, naming
    the file, the line, the instance id and the field."""
    path = Path(path)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except ValueError as err:
                raise TaskError(f"{where}: not valid JSON ({err})") from None
            task = parse_task(obj, where, base_dir=path.parent)
            if task.instance_id in seen:
                raise TaskError(f"{where}: field 'instance_id': {task.instance_id!r} repeats line {seen[task.instance_id]}")
            seen[task.instance_id] = number
            tasks.append(task)
    return tasks


def write_tasks(path: str | os.PathLike[str], tasks: list[Task]) -> None:
    """Writes tasks as JSONL (validated: what is written loads back)."""
    lines = []
    for task in tasks:
        obj = task.to_json()
        parse_task(obj, f"task {task.instance_id}")
        lines.append(json.dumps(obj, ensure_ascii=False) + "\n")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(lines), encoding="utf-8")


# ---- building workspaces ---------------------------------------------------------------------


def sdist_cache_dir() -> Path:
    return Path(os.environ.get("COMPOSER_SDISTS") or Path.home() / ".cache" / "composer" / "sdists").expanduser()


def normal_name(name: str) -> str:
    """PEP 503 normalisation, with underscores (what sdist file names use since PEP 625)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def sdist_name_version(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of an sdist file name: `more_itertools-11.2.1.tar.gz`."""
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
    if stem == filename or "-" not in stem:
        return None
    dist, _, version = stem.rpartition("-")
    return normal_name(dist), version


def find_sdist(name: str, version: str, dirs: list[Path]) -> Path | None:
    """The sdist of name==version in one of `dirs` (either spelling of the name)."""
    for folder in dirs:
        for candidate in sorted(folder.iterdir()) if folder.is_dir() else []:
            if sdist_name_version(candidate.name) == (normal_name(name), version):
                return candidate
    return None


def fetch_sdist(name: str, version: str | None = None, *, cache_dir: Path | None = None,
                sha256: str | None = None, timeout_s: float = 300) -> Path:
    """The sdist of `name` (latest when `version` is None): from the cache, else downloaded into
    it with pip (the only network use). Checks `sha256` when given."""
    cache = Path(cache_dir) if cache_dir is not None else sdist_cache_dir()
    found = find_sdist(name, version, [cache]) if version else None
    if found is None:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            spec = f"{name}=={version}" if version else name
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                   "-d", tmp, spec]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            files = [p for p in Path(tmp).iterdir() if p.name.endswith((".tar.gz", ".zip"))]
            if done.returncode != 0 or len(files) != 1:
                raise TaskError(f"pip download of {spec} failed (exit {done.returncode}): {done.stderr[-800:]}")
            found = cache / files[0].name
            os.replace(files[0], found)
    if sha256 is not None:
        digest = hashlib.sha256(found.read_bytes()).hexdigest()
        if digest != sha256:
            raise TaskError(f"sdist {found} has sha256 {digest}, the task expects {sha256}")
    return found


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """Unpacks an sdist into `dest`, dropping its single top folder (NAME-VERSION/)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        if sdist.name.endswith(".zip"):
            with zipfile.ZipFile(sdist) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(sdist) as t:
                t.extractall(tmp, filter="data")
        tops = list(Path(tmp).iterdir())
        top = tops[0] if len(tops) == 1 and tops[0].is_dir() else Path(tmp)
        for item in top.iterdir():
            shutil.move(str(item), dest / item.name)
    return dest


def git(root: Path, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """git in `root`, with the fixed identity and no user or system config."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, input=input,
                          env=env, timeout=300)
    if check and done.returncode != 0:
        raise TaskError(f"git {' '.join(args[:3])} in {root} failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return done


def apply_patch(root: Path, diff: str, what: str = "patch") -> None:
    """Applies a unified diff (paths relative to `root`, a/ b/ prefixes) with `git apply`."""
    if not diff.strip():
        return
    if not (root / ".git").exists():
        raise TaskError(f"apply_patch needs a git repository at {root} (git apply outside one would "
                        "resolve paths against an enclosing repository)")
    done = git(root, "apply", "--whitespace=nowarn", "-", input=diff, check=False)
    if done.returncode != 0:
        raise TaskError(f"the task's {what} does not apply in {root}: {done.stderr.strip()[-800:]}")


def commit_all(root: Path, message: str) -> str:
    """Commits everything (respecting .gitignore) and returns the commit id."""
    git(root, "add", "-A")
    git(root, "-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "--no-verify", "-m", message)
    return git(root, "rev-parse", "HEAD").stdout.strip()


def write_inline(files: dict[str, str], dest: Path) -> None:
    """Writes an inline source's files under `dest`; TaskError, before anything is written, for
    a path that is absolute, climbs out (`..`), names a folder, or enters git's own folder."""
    for rel in files:
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or rel.endswith("/") or "\\" in rel or ".." in parts or ".git" in parts:
            raise TaskError(f"inline source: {rel!r} is not a relative path inside the workspace")
    for rel, text in files.items():
        path = dest.joinpath(*PurePosixPath(rel).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def materialize(task: Task, dest: Path, *, cache_dir: Path | None = None) -> Path:
    """Builds the task's starting workspace at `dest` (which must not exist or be empty): the
    source (copied, cloned, unpacked or written from the line), then source.patch, committed.
    Setup commands run separately, when the base is built (`base_spec`)."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise TaskError(f"workspace destination {dest} is not empty")
    src = task.source
    if src.kind == "git":
        dest.parent.mkdir(parents=True, exist_ok=True)
        git(dest.parent, "clone", "-q", "--no-checkout", src.url or "", str(dest))
        git(dest, "checkout", "-q", "--detach", src.commit or "")
    else:
        if src.kind == "dir":
            shutil.copytree(src.path or "", dest, symlinks=True, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".composer"))
        elif src.kind == "inline":
            write_inline(src.files or {}, dest)
        else:
            unpack_sdist(fetch_sdist(src.name or "", src.version, cache_dir=cache_dir, sha256=src.sha256), dest)
        if not (dest / ".git").exists():
            git(dest, "init", "-q", "-b", "main")
            commit_all(dest, f"{task.instance_id}: pristine source")
    if src.patch:
        apply_patch(dest, src.patch, "source.patch")
        commit_all(dest, f"{task.instance_id}: starting state")
    return dest


@dataclass(frozen=True)
class TaskSource:
    """A task's starting workspace as a training/envs base source: `fill(dest)` materializes it
    (on whichever worker builds the base); `digest` addresses it by the task's source."""

    task: Task
    cache_dir: str | None = None
    """Where sdists are looked for and kept (default: sdist_cache_dir())."""

    @property
    def digest(self) -> str:
        blob = json.dumps([self.task.instance_id, self.task.source.to_json()], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def fill(self, dest: Path) -> None:
        materialize(self.task, dest, cache_dir=Path(self.cache_dir) if self.cache_dir else None)


def base_spec(task: Task, *, cache_dir: str | os.PathLike[str] | None = None,
              setup_network: bool = False, setup_timeout_s: float = 1800) -> BaseSpec:
    """The training/envs BaseSpec of the task's workspace: materialized, then `task.setup` run
    in the sandbox (with the network only when `setup_network`)."""
    return BaseSpec(key=task.instance_id, source=TaskSource(task, str(cache_dir) if cache_dir else None),
                    setup=task.setup, setup_network=setup_network, setup_timeout_s=setup_timeout_s,
                    setup_env=TEST_ENV)


def protected_paths(task: Task) -> frozenset[str]:
    """Files the agent's changes to are dropped before grading: those `test_patch` touches and
    those holding the FAIL_TO_PASS and PASS_TO_PASS tests (a model must not pass by editing the
    tests)."""
    test_files = {test_id.split("::")[0] for test_id in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]}
    return frozenset({p for p in test_files if p} | touched_paths(task.test_patch))


# ---- running and grading tests ---------------------------------------------------------------


@dataclass(frozen=True)
class TestRun:
    __test__ = False  # not a pytest class
    command: str
    exit_code: int | None
    outcomes: dict[str, str]
    """test id -> passed | failed | missing (asked for, never reported)."""
    output: str
    timed_out: bool
    seconds: float


def _split_id(status: str, rest: str) -> str:
    """The test id of a summary line: FAILED lines end with ' - message' (ids may hold ' - '
    inside their [parameters])."""
    if status in ("PASSED", "SUBPASSED"):
        return rest.strip()
    start = 0
    while (cut := rest.find(" - ", start)) != -1:
        head = rest[:cut]
        if head.count("[") <= head.count("]"):
            return head
        start = cut + 1
    return rest.strip()


def parse_pytest_summary(output: str) -> dict[str, str]:
    """test id -> passed | failed from pytest's `-rA` short summary (a failing subtest or a
    teardown error fails the test even when a PASSED line is there too)."""
    outcomes: dict[str, str] = {}
    for line in output.splitlines():
        m = _SUMMARY.match(line.rstrip())
        if m is None:
            continue
        status, test_id = m.group(1), _split_id(m.group(1), m.group(3))
        if "::" not in test_id and status == "ERROR":
            continue  # a collection error of a whole file: its tests come out missing
        if status in _PASSING:
            outcomes.setdefault(test_id, PASSED)
        else:
            outcomes[test_id] = FAILED
    return outcomes


async def run_tests(task: Task, env: Environment, ids: list[str] | tuple[str, ...] | None = None, *,
                    timeout_s: float = 600, extra_args: str = "") -> TestRun:
    """Runs `ids` (default: FAIL_TO_PASS + PASS_TO_PASS) with the task's test_cmd in `env`'s
    sandbox, within its limits (training/envs). Ids asked for but not in the summary are
    `missing`."""
    ids = list(ids) if ids is not None else [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    command = task.test_command(ids) + (f" {extra_args}" if extra_args else "")
    result = await env.run(command, timeout_s=timeout_s, env=TEST_ENV, max_output_bytes=TEST_OUTPUT_BYTES)
    return TestRun(command, result.exit_code, test_outcomes(result.output, ids), result.output,
                   result.timed_out, result.duration_s)


def test_outcomes(output: str, ids: list[str] | tuple[str, ...]) -> dict[str, str]:
    """test id -> passed | failed | missing for `ids`, from a test command's output."""
    outcomes = parse_pytest_summary(output)
    return outcomes | {test_id: MISSING for test_id in ids if test_id not in outcomes}


@dataclass(frozen=True, kw_only=True)
class TaskGrade:
    """A task run's grade: SWE-bench's verdict and every graded test's outcome, or, when
    `infra` is set, the infrastructure failure that left the verdict unknown."""

    instance_id: str
    resolved: bool | None
    """All FAIL_TO_PASS and PASS_TO_PASS passed; None when an infrastructure failure hid it."""
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    """test id -> passed | failed | missing."""
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    infra: str | None = None
    """What failed, when the sandbox, the environment or the harness did (never the agent)."""
    infra_stage: str | None = None
    """setup | run | timeout | grade | worker (training/envs' stages, and the harness's clock)."""
    exit_code: int | None = None
    """The test command's exit status."""
    timed_out: bool = False
    """The test command ran out of time (its tests count as failed or missing)."""
    seconds: float = 0.0

    @property
    def masked(self) -> bool:
        return self.infra is not None

    def counts(self) -> dict[str, str]:
        """{"fail_to_pass": "passed/total", "pass_to_pass": ...}."""
        return {name: f"{sum(v == PASSED for v in tests.values())}/{len(tests)}"
                for name, tests in (("fail_to_pass", self.fail_to_pass), ("pass_to_pass", self.pass_to_pass))}

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()} | {"seconds": round(self.seconds, 3)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskGrade:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def outcome(self) -> dict[str, Any]:
        """The fields of this grade's `outcome` record (signal task_resolved) in a session log."""
        reward = None if self.resolved is None else float(self.resolved)
        return {"signal": "task_resolved", "value": self.resolved, "reward": reward, "masked": self.masked,
                "source": "grader", "detail": self.to_json()}


def grade(task: Task, outcomes: dict[str, str], **fields: Any) -> TaskGrade:
    """SWE-bench's verdict: resolved iff all FAIL_TO_PASS and all PASS_TO_PASS pass."""
    f2p = {t: outcomes.get(t, MISSING) for t in task.FAIL_TO_PASS}
    p2p = {t: outcomes.get(t, MISSING) for t in task.PASS_TO_PASS}
    resolved = all(v == PASSED for v in [*f2p.values(), *p2p.values()])
    return TaskGrade(instance_id=task.instance_id, resolved=resolved, fail_to_pass=f2p, pass_to_pass=p2p, **fields)


def infra_grade(task: Task, stage: str, error: str, **fields: Any) -> TaskGrade:
    """The grade of a run the infrastructure failed: unknown, masked."""
    return TaskGrade(instance_id=task.instance_id, resolved=None, infra=error, infra_stage=stage, **fields)
