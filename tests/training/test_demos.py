"""Gold-patch demonstrations (training/demos.py): acted out in the real harness on a task,
resolved by its hidden tests, read back as off-policy samples whose trained tokens are exactly
the scripted replies in the model's format, and made only of steps the policy could take from
what it sees."""

from __future__ import annotations

import json
import math
import zlib

import pytest
from add_task import add_task_line

from agent.session_log import read_session
from agent.unidiff import parse_diff
from training.demos import (
    READ_WINDOW,
    RETRY_EVERY,
    gold_demonstrations,
    gold_script,
    gold_turns,
    rendered_ids,
    smallest_edits,
    window_start,
)
from training.tasks import load_tasks


async def test_gold_patches_become_resolved_token_exact_demonstrations(real_tokenizer, tmp_path):
    lines = [add_task_line(tmp_path, instance_id="function"),
             add_task_line(tmp_path, instance_id="file", problem_statement="the sum is wrong (pkg/__init__.py)")]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    tasks = load_tasks(tmp_path / "tasks.jsonl")
    samples = await gold_demonstrations(tasks, real_tokenizer, tmp_path / "demos")
    logs = sorted((tmp_path / "demos" / "sessions").rglob("*.jsonl"))
    assert len(logs) == 2 and len(samples) == 2
    for sample in samples:
        assert sample.off_policy and sample.reward >= 1.0 and sample.weight_version == -1
        assert all(math.isnan(x) for x in sample.behaviour_logprobs)
        assert sample.stats["tool_calls"] >= 3
    expected = []
    for log in logs:
        records = read_session(log)
        task = next(t for t in tasks if t.instance_id == records[0]["task_id"])
        assert next(r for r in records if r["type"] == "outcome")["value"] in (1, 1.0, True)
        assert_every_argument_was_visible(records)
        calls = [r["name"] for r in records if r["type"] == "tool_call"]
        assert calls == (["grep"] if task.instance_id == "function" else []) + ["read_file", "edit_file", "run_terminal"]
        read = next(r["arguments"] for r in records if r.get("name") == "read_file")
        assert read == ({"path": "pkg/__init__.py", "offset": 1, "limit": READ_WINDOW} if task.instance_id == "function"
                        else {"path": "pkg/__init__.py"})
        edit = next(r["arguments"] for r in records if r.get("name") == "edit_file")
        assert (edit["old_string"], edit["new_string"]) == ("    return a - b", "    return a + b")
        expected.append([i for content, calls in gold_turns(task) for i in rendered_ids(real_tokenizer, content, calls)])
    trained = [[t for t, m in zip(s.tokens, s.mask, strict=True) if m] for s in samples]
    assert sorted(trained) == sorted(expected)
    assert real_tokenizer.decode(expected[0]).count("<tool_call>") >= 3


def assert_every_argument_was_visible(records: list[dict]) -> None:
    """Each path a call names was in the request or an earlier tool result, each grep's function
    name in the request, each read's first line in the grep result, each edit's old_string in the
    file as read (less its line numbers)."""
    request = next(r["text"] for r in records if r["type"] == "user_message")
    seen = request
    for record in (r for r in records if r["type"] == "tool_call"):
        args = record["arguments"]
        if "path" in args:
            assert args["path"] in seen, f"{record['name']} names {args['path']!r}, which the policy never saw"
        if record["name"] == "grep":
            assert args["pattern"].removeprefix("def ") in request
        if "offset" in args:
            assert f"\n{args['offset']}:" in seen
        if record["name"] == "edit_file":
            shown = "\n".join(line.split("\t", 1)[-1] for line in seen.splitlines())
            assert args["old_string"] in shown
        seen += "\n" + record["result"]


INC_BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
           "@@ -1,2 +1,2 @@\n def inc(a):\n-    return a + 1\n+    return a + 2\n")


def inc_task_line(root, instance_id: str) -> dict:
    """A bug-fix family task (its metadata names the check and the mutated line): `inc` adds 2."""
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("def inc(a):\n    return a + 1\n")
    (root / "src" / "test_pkg.py").write_text("from pkg import inc\n\nONE = 1\n\ndef test_inc():\n"
                                              "    assert inc(ONE) == 2\n\ndef test_zero():\n    assert inc(-1) == 0\n")
    fix = INC_BUG.replace("-    return a + 1\n+    return a + 2", "-    return a + 2\n+    return a + 1")
    return add_task_line(root, instance_id=instance_id, problem_statement="`inc(ONE)` returns 3, so `assert inc(ONE) == 2` fails.",
                         source={"kind": "dir", "path": "src", "patch": INC_BUG}, patch=fix,
                         FAIL_TO_PASS=["test_pkg.py::test_inc"], PASS_TO_PASS=["test_pkg.py::test_zero"],
                         metadata={"mutation": {"kind": "off_by_one", "path": "pkg/__init__.py", "function": "inc",
                                                "line": 2, "old": "1", "new": "2"},
                                   "check": {"test": "test_inc", "statement": "assert inc(ONE) == 2", "actual": "returns 3"}})


async def test_a_retry_demonstration_runs_the_check_after_a_wrong_fix_and_trains_only_the_recovery(real_tokenizer, tmp_path):
    instance_id = next(f"retry-{i}" for i in range(64) if zlib.crc32(f"retry-{i}".encode()) % RETRY_EVERY == 0)
    (tmp_path / "tasks.jsonl").write_text(json.dumps(inc_task_line(tmp_path, instance_id)) + "\n")
    [task] = load_tasks(tmp_path / "tasks.jsonl")
    script = gold_script(task)
    [sample] = await gold_demonstrations([task], real_tokenizer, tmp_path / "demos")
    [log] = (tmp_path / "demos" / "sessions").rglob("*.jsonl")
    records = read_session(log)
    assert next(r for r in records if r["type"] == "outcome")["value"] in (1, 1.0, True)
    calls = [r for r in records if r["type"] == "tool_call"]
    assert [c["name"] for c in calls] == ["grep", "read_file", "edit_file", "run_terminal", "edit_file", "run_terminal"]
    wrong, fix = (c["arguments"] for c in calls if c["name"] == "edit_file")
    assert (wrong["old_string"], wrong["new_string"]) == ("    return a + 2", "    return a + 3")  # the bug's own spot first
    assert (fix["old_string"], fix["new_string"]) == ("    return a + 3", "    return a + 1")
    checks = [c for c in calls if c["name"] == "run_terminal"]
    assert "from test_pkg import *" in checks[0]["arguments"]["command"]
    assert [c["data"]["exit_code"] for c in checks] == [1, 0] and "AssertionError" in checks[0]["result"]
    assert script.untrained == {2}
    trained = [t for t, m in zip(sample.tokens, sample.mask, strict=True) if m]
    assert trained == [i for n, (content, turn_calls) in enumerate(script.turns) if n not in script.untrained
                       for i in rendered_ids(real_tokenizer, content, turn_calls)]


def test_a_request_without_the_path_or_a_function_gets_a_clear_error(tmp_path):
    (tmp_path / "tasks.jsonl").write_text(json.dumps(add_task_line(tmp_path, problem_statement="it is broken")) + "\n")
    with pytest.raises(ValueError, match=r"names neither pkg/__init__\.py nor a function"):
        gold_turns(load_tasks(tmp_path / "tasks.jsonl")[0])


def test_an_edit_quotes_the_changed_lines_and_only_the_context_that_makes_them_unique():
    text = "def f(x):\n    y = x\n    return y\n\n\ndef g(x):\n    y = x\n    return y + 1\n"
    diff = parse_diff("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,8 +1,8 @@\n def f(x):\n"
                      "     y = x\n     return y\n \n \n def g(x):\n-    y = x\n+    y = -x\n     return y + 1\n")
    [(old, new)] = smallest_edits(diff[0], text)
    assert (old, new) == ("    y = x\n    return y + 1", "    y = -x\n    return y + 1")
    assert text.count(old) == 1
    unique = text.replace("    y = x\n    return y + 1", "    z = x\n    return z + 1")
    diff = parse_diff("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -6,3 +6,3 @@\n def g(x):\n"
                      "-    z = x\n+    z = -x\n     return z + 1\n")
    assert smallest_edits(diff[0], unique) == [("    z = x", "    z = -x")]


def test_a_read_is_the_window_from_the_def_only_when_the_fix_lies_in_it():
    text = "import os\n\n\ndef f(x):\n" + "    x += 1\n" * (READ_WINDOW - 2) + "    return x\n    # end\n"
    assert window_start(text, "f", ["    return x"]) == 4
    assert window_start(text, "f", ["    return x", "    # end"]) == 0
    assert window_start(text, "g", ["    return x"]) == 0
