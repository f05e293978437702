"""The hand-written requests suite: developer requests (feature additions and refactors) on real
PyPI packages, each with a curated reference solution that reuses the package's existing helpers,
written as readable edits in training/data/suites/src/requests.toml and built here into tasks
(training/data/suites/requests.jsonl, training/tasks.py format).

    python -m training.eval.handwritten            # rebuilds requests.jsonl
    python -m training.eval.handwritten --check    # exit 1 when requests.jsonl differs from a rebuild

A request in the source:
  id, package, version        the task's instance_id and its pinned sdist (sha256 recorded)
  kind                        feature | refactor
  helpers                     dotted names of existing functions the reference calls
                              (metadata.helpers; training/eval/adherence.py checks them)
  statement                   the request, as a developer would write it
  [[request.before]]          edits making the starting state (a refactor's duplicated code):
                              {file, old, new}, `old` occurring exactly once
  [[request.reference]]       the reference solution's edits, on the starting state
  [[request.tests]]           hidden tests appended to a test file: {file, append}
  hide                        existing tests (FILE::[CLASS::]NAME) taken out of the workspace
  fail_to_pass, pass_to_pass  test ids

The starting workspace is the sdist with `before` applied and `hide` removed (source.patch); the
appended and hidden tests come back at grading (test_patch); the reference edits are `patch`.
bench/suites.py grades every reference and every untouched workspace in the sandbox.

Tests: .venv/bin/python -m pytest tests/training/test_suites.py -k requests
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from training.patches import file_diff, without_tests
from training.taskgen import TEST_CMD
from training.tasks import (
    Source,
    Task,
    TaskError,
    fetch_sdist,
    load_tasks,
    unpack_sdist,
    write_tasks,
)

SOURCE = Path(__file__).resolve().parents[1] / "data" / "suites" / "src" / "requests.toml"
OUT = SOURCE.parent.parent / "requests.jsonl"


def _edit(text: str, edit: dict[str, str], where: str) -> str:
    old, new = edit["old"].lstrip("\n"), edit["new"].lstrip("\n")
    count = text.count(old)
    if count != 1:
        raise TaskError(f"{where}: the edit's `old` text occurs {count} times in {edit['file']}, not once")
    return text.replace(old, new)


def _apply(files: dict[str, str], edits: list[dict[str, str]], where: str) -> dict[str, str]:
    out = dict(files)
    for edit in edits:
        out[edit["file"]] = _edit(out[edit["file"]], edit, where)
    return out


def _diffs(old: dict[str, str], new: dict[str, str]) -> str:
    return "".join(file_diff(path, old[path], new[path]) for path in sorted(old) if old[path] != new[path])


def build_task(spec: dict[str, Any], root: Path, sha256: str) -> Task:
    """One request as a task; `root` is the unpacked sdist."""
    where = f"request {spec['id']}"
    tests = spec.get("tests", [])
    hide: dict[str, set[str]] = {}
    for test_id in spec.get("hide", []):
        path, _, name = test_id.partition("::")
        hide.setdefault(path, set()).add(name)
    paths = {e["file"] for e in [*spec.get("before", []), *spec.get("reference", []), *tests]} | set(hide)
    try:
        pristine = {path: (root / path).read_text(encoding="utf-8") for path in paths}
    except FileNotFoundError as err:
        raise TaskError(f"{where}: {err.filename} is not in the sdist") from None
    start = _apply(pristine, spec.get("before", []), where)
    if any(start[p] != pristine[p] for p in {t["file"] for t in tests} | set(hide)):
        raise TaskError(f"{where}: `before` edits a test file; tests change only through `tests` and `hide`")
    visible = {p: without_tests(t, hide[p], p) if p in hide else t for p, t in start.items()}
    graded = dict(start)
    for test in tests:
        graded[test["file"]] = graded[test["file"]].rstrip("\n") + "\n" + test["append"].rstrip("\n") + "\n"
    solved = _apply(start, spec.get("reference", []), where)
    return Task(
        instance_id=spec["id"], problem_statement=spec["statement"].strip() + "\n",
        source=Source(kind="pypi", name=spec["package"], version=spec["version"], sha256=sha256,
                      patch=_diffs(pristine, visible)),
        FAIL_TO_PASS=tuple(spec["fail_to_pass"]), PASS_TO_PASS=tuple(spec.get("pass_to_pass", [])),
        patch=_diffs(start, solved), test_patch=_diffs(visible, graded), repo=f"pypi/{spec['package']}",
        version=spec["version"], test_cmd=TEST_CMD,
        metadata={"generator": "training.eval.handwritten", "kind": spec["kind"], "helpers": spec["helpers"]},
    )


def build(source: Path = SOURCE, cache_dir: Path | None = None) -> list[Task]:
    """Every request of the source file, in order."""
    specs = tomllib.loads(source.read_text(encoding="utf-8"))["request"]
    tasks = []
    with tempfile.TemporaryDirectory(prefix="composer-requests-") as tmp:
        unpacked: dict[tuple[str, str], tuple[Path, str]] = {}
        for spec in specs:
            key = (spec["package"], spec["version"])
            if key not in unpacked:
                sdist = fetch_sdist(*key, cache_dir=cache_dir)
                root = unpack_sdist(sdist, Path(tmp) / f"{key[0]}-{key[1]}")
                unpacked[key] = root, hashlib.sha256(sdist.read_bytes()).hexdigest()
            tasks.append(build_task(spec, *unpacked[key]))
    return tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.eval.handwritten", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    tasks = build()
    if args.check:
        same = args.out.is_file() and load_tasks(args.out) == tasks
        print(f"{args.out}: {'matches' if same else 'differs from'} a rebuild of {SOURCE}")
        return 0 if same else 1
    write_tasks(args.out, tasks)
    print(f"{args.out}: {len(tasks)} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
