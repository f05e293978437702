"""Benchmark suites: a TOML manifest that names a tasks JSONL and fixes what a run may spend, so
every policy is measured on the same tasks under the same budget. The format is the JSON Schema in
training/schemas/suite.schema.json; the shipped suites are training/data/suites/*.toml.

    name = "bugfix-heldout"
    description = "..."
    tasks = "bugfix-heldout.jsonl"        # relative to the manifest
    full_run = true                       # part of `python -m training.eval` with no --suite
    difficulty = "..."                    # in words
    # instances = ["id-1", "id-2"]        # optional: only these tasks, in this order

    [budget]
    max_steps = 8                         # model calls per attempt (LoopConfig.max_steps)
    max_tokens_per_step = 512             # tokens per model call (LoopConfig.max_tokens_per_step)
    max_tokens = 3072                     # tokens generated over the whole attempt
    temperature = 0.0
    seeds = [0]                           # one attempt per seed; a task scores the mean
    timeout_s = 300                       # wall clock per attempt, grading excluded

    [scores]                              # resolved rates, checked by bench/suites.py
    perfect = 1.0                         # every task's reference patch
    trivial = 0.0                         # the untouched workspace

    suite = load_suite("bugfix-heldout")          # a name (training/data/suites/NAME.toml) or a path
    suite.budget.max_steps, suite.tasks()         # Tasks, validated (training/tasks.py)

Tests: .venv/bin/python -m pytest tests/training/test_suites.py
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from agent.json_schema import schema_validator
from training.tasks import Task, load_tasks

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "suite.schema.json"
SUITES_DIR = Path(__file__).resolve().parents[1] / "data" / "suites"


class SuiteError(ValueError):
    """A manifest that does not match the format, or names tasks that are not there."""


@dataclass(frozen=True, kw_only=True)
class Budget:
    max_steps: int
    max_tokens_per_step: int
    max_tokens: int
    temperature: float
    seeds: tuple[int, ...]
    timeout_s: float


@dataclass(frozen=True, kw_only=True)
class Suite:
    name: str
    description: str
    difficulty: str
    tasks_path: Path
    budget: Budget
    perfect: float
    """The resolved rate of the reference patches."""
    trivial: float
    """The resolved rate of the untouched workspaces."""
    instances: tuple[str, ...] = ()
    full_run: bool = False
    path: Path

    def tasks(self) -> list[Task]:
        """The suite's tasks (only `instances`, in their order, when it names some)."""
        tasks = load_tasks(self.tasks_path)
        if not self.instances:
            return tasks
        by_id = {t.instance_id: t for t in tasks}
        missing = [i for i in self.instances if i not in by_id]
        if missing:
            raise SuiteError(f"{self.path}: instance {missing[0]!r} is not in {self.tasks_path}")
        return [by_id[i] for i in self.instances]


def suite_names(folder: Path = SUITES_DIR) -> list[str]:
    """The suites shipped in `folder` (their manifests' names)."""
    return sorted(p.stem for p in folder.glob("*.toml"))


def _resolve(name_or_path: str | os.PathLike[str], folder: Path) -> Path:
    text = os.fspath(name_or_path)
    if text.endswith(".toml") or os.sep in text:
        return Path(text)
    path = folder / f"{text}.toml"
    if not path.is_file():
        raise SuiteError(f"no suite {text!r}: the suites are {', '.join(suite_names(folder)) or 'none'}")
    return path


def load_suite(name_or_path: str | os.PathLike[str], folder: Path = SUITES_DIR) -> Suite:
    """A suite by name (`folder`/NAME.toml) or by manifest path; SuiteError names the file and
    the field that is wrong."""
    path = _resolve(name_or_path, folder)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SuiteError(f"{path}: cannot read the manifest ({err.strerror})") from None
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"{path}: not valid TOML ({err})") from None
    errors = list(schema_validator(SCHEMA_PATH).iter_errors(data))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        where = "/".join(str(p) for p in error.absolute_path) or "(manifest)"
        raise SuiteError(f"{path}: field {where!r}: {error.message}")
    if data["name"] != path.stem:
        raise SuiteError(f"{path}: field 'name': {data['name']!r} is not the file's name {path.stem!r}")
    tasks_path = (path.parent / data["tasks"]).resolve()
    if not tasks_path.is_file():
        raise SuiteError(f"{path}: field 'tasks': {tasks_path} does not exist")
    budget = data["budget"]
    return Suite(
        name=data["name"], description=data["description"], difficulty=data["difficulty"], tasks_path=tasks_path,
        budget=Budget(max_steps=budget["max_steps"], max_tokens_per_step=budget["max_tokens_per_step"],
                      max_tokens=budget["max_tokens"], temperature=float(budget["temperature"]),
                      seeds=tuple(budget["seeds"]), timeout_s=float(budget["timeout_s"])),
        perfect=float(data["scores"]["perfect"]), trivial=float(data["scores"]["trivial"]),
        instances=tuple(data.get("instances", ())), full_run=bool(data.get("full_run", False)), path=path,
    )
