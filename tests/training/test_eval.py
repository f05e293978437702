"""The benchmark's runner (python -m training.eval): a scripted policy (a stand-in for the model;
everything else is real: the harness, sandboxed environments on the scheduler, hidden-test
grading, the rewards module, adherence) runs a small suite; records, report and plot come out
with the metrics the issue asks for; a killed run continues without rerunning or duplicating
what it recorded; a run directory refuses another run; two reports compare per task.

Run: .venv/bin/python -m pytest tests/training/test_eval.py
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import ClassVar

import pytest
from scripted_policy import calls

from agent.policy import Reply
from training.eval.__main__ import main as eval_main
from training.eval.report import build_report, compare, load_report, paired, rate_ci, write_report
from training.eval.runner import RunDir, loop_config, parse_policy, run_suite, todo
from training.eval.suite import load_suite
from training.tasks import DEFAULT_TEST_CMD, Task

TEST_CMD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 " + DEFAULT_TEST_CMD
STATS = ("def _total(xs):\n    t = 0\n    for x in xs:\n        t += x\n    return t\n\n\n"
         "def add(a, b):\n    return a - b\n")
TESTS = "from pkg.stats import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
BUG_FIXED = STATS.replace("a - b", "a + b")
HIDDEN_ADD = ("diff --git a/tests/test_add.py b/tests/test_add.py\nnew file mode 100644\n--- /dev/null\n"
              "+++ b/tests/test_add.py\n@@ -0,0 +1,5 @@\n+from pkg.stats import add\n+\n+\n"
              "+def test_add():\n+    assert add(2, 3) == 5\n")


def diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


FIX = diff("pkg/stats.py", STATS, BUG_FIXED)
MEAN_CALLS = "    return _total(xs) / len(xs)\n"
MEAN_LOOP = "    t = 0\n    for x in xs:\n        t += x\n    return t / len(xs)\n"
HIDDEN_MEAN = ("diff --git a/tests/test_mean.py b/tests/test_mean.py\nnew file mode 100644\n--- /dev/null\n"
               "+++ b/tests/test_mean.py\n@@ -0,0 +1,5 @@\n+from pkg.stats import mean\n+\n+\n"
               "+def test_mean():\n+    assert mean([1, 2, 3]) == 2\n")


def mean_patch(body: str) -> str:
    return diff("pkg/stats.py", STATS, STATS + "\n\ndef mean(xs):\n" + body)


def write_suite(tmp_path: Path) -> Path:
    files = {"pkg/__init__.py": "", "pkg/stats.py": STATS, "tests/test_stats.py": TESTS}
    common = {"source": {"kind": "inline", "files": files}, "test_cmd": TEST_CMD,
              "PASS_TO_PASS": ["tests/test_stats.py::test_zero"]}
    lines = [
        common | {"instance_id": "fix-add", "problem_statement": "FIX add(2, 3) gives -1 in pkg/stats.py",
                  "patch": FIX, "test_patch": HIDDEN_ADD, "FAIL_TO_PASS": ["tests/test_add.py::test_add"],
                  "PASS_TO_PASS": [], "metadata": {"level": 1}},
        common | {"instance_id": "idle-add", "problem_statement": "IDLE add(2, 3) gives -1 in pkg/stats.py",
                  "patch": FIX, "test_patch": HIDDEN_ADD, "FAIL_TO_PASS": ["tests/test_add.py::test_add"],
                  "PASS_TO_PASS": [], "metadata": {"level": 0}},
        common | {"instance_id": "mean", "problem_statement": "MEAN add mean(xs) to pkg/stats.py",
                  "patch": mean_patch(MEAN_CALLS), "test_patch": HIDDEN_MEAN,
                  "FAIL_TO_PASS": ["tests/test_mean.py::test_mean"], "metadata": {"helpers": ["pkg.stats._total"]}},
    ]
    (tmp_path / "tiny.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    manifest = tmp_path / "tiny.toml"
    manifest.write_text('name = "tiny"\ntasks = "tiny.jsonl"\ndescription = "three tiny tasks"\n'
                        'difficulty = "trivial"\n[budget]\nmax_steps = 4\nmax_tokens_per_step = 64\n'
                        'max_tokens = 256\ntemperature = 0.0\nseeds = [0]\ntimeout_s = 120\n'
                        '[scores]\nperfect = 1.0\ntrivial = 0.0\n')
    return manifest


SCRIPTS = {
    "FIX": [calls(("edit_file", {"path": "pkg/stats.py", "old_string": "a - b", "new_string": "a + b"})),
            Reply("Fixed add in pkg/stats.py.", [], "stop")],
    "IDLE": [Reply("I fixed pkg/stats.py and all tests pass.", [], "stop")],  # two unsupported claims
    "MEAN": [calls(("edit_file", {"path": "pkg/stats.py", "old_string": "    return a - b\n",
                                  "new_string": "    return a - b\n\n\ndef mean(xs):\n" + MEAN_LOOP})),
             Reply("Added mean to pkg/stats.py.", [], "stop")],
}


class ByTask:
    """A scripted policy that follows the script named by the request's first word."""

    model_id = "scripted"
    context_window = 100_000
    started: ClassVar[list[str]] = []

    def __init__(self) -> None:
        self.replies: list[Reply] | None = None

    def count_tokens(self, messages, tools) -> int:
        return 1

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, on_text=None, **sampler) -> Reply:
        if self.replies is None:
            request = next(m["content"] for m in messages if m["role"] == "user")
            ByTask.started.append(request.split()[0])
            self.replies = [Reply(r.content, list(r.tool_calls), r.finish_reason) for r in SCRIPTS[request.split()[0]]]
        return self.replies.pop(0) if self.replies else Reply("done", [], "stop")


@pytest.fixture
def tiny(tmp_path):
    ByTask.started = []
    return load_suite(write_suite(tmp_path)), tmp_path


async def run(suite, tmp_path, run_dir, tasks=None):
    options = {"state_dir": str(tmp_path / "state"), "base_dir": str(tmp_path / "bases")}
    return await run_suite(suite, parse_policy("composer-mini"), run_dir, tasks=tasks, parallel=2,
                           policy_factory=lambda: ByTask(), scheduler_options=options)


async def test_a_suite_runs_scored_with_every_metric_and_reported(tiny):
    suite, tmp_path = tiny
    run_dir = RunDir(tmp_path / "out")
    records = {r["instance_id"]: r for r in await run(suite, tmp_path, run_dir)}
    assert sorted(records) == ["fix-add", "idle-add", "mean"] and sorted(ByTask.started) == ["FIX", "IDLE", "MEAN"]
    fix, idle, mean = records["fix-add"], records["idle-add"], records["mean"]
    # correctness from the hidden tests: the fix and the mean resolve, the idle answer does not
    assert (fix["resolved"], idle["resolved"], mean["resolved"]) == (True, False, True)
    assert fix["grade"]["fail_to_pass"] == {"tests/test_add.py::test_add": "passed"}
    assert fix["reward"]["reward"] > idle["reward"]["reward"]  # a correct patch beats an incorrect one
    # efficiency: turns and tool calls from the session log
    assert (fix["reward"]["efficiency"]["turns"], fix["reward"]["efficiency"]["tool_calls"]) == (2, 1)
    assert (idle["reward"]["efficiency"]["turns"], idle["reward"]["efficiency"]["tool_calls"]) == (1, 0)
    # unsupported claims: "I fixed pkg/stats.py and all tests pass" with no edit and no test run
    assert idle["reward"]["claims"]["unsupported"] == 2 and fix["reward"]["claims"]["unsupported"] == 0
    # adherence where the reference names helpers: the loop that rewrites _total is caught
    assert mean["adherence"]["rewritten"] == ["pkg.stats._total"] and mean["adherence"]["reused"] == []
    assert fix["adherence"] is None
    assert all(Path(r["log"]).is_file() and Path(r["log"]).is_relative_to(run_dir.sessions) for r in records.values())
    report = build_report(run_dir.meta(), list(records.values()), suite=suite)
    s = report["summary"]
    assert (s["resolved"], s["resolved_count"], s["scored"], s["masked"]) == (0.6667, 2, 3, 0)
    assert s["unsupported_claims"] == 2 and s["adherence_count"] == 1 and report["complete"]
    assert report["groups"]["level"]["0"]["resolved"] == 0.0 and report["groups"]["level"]["1"]["resolved"] == 1.0
    paths = write_report(report, run_dir.path)
    assert [p.name for p in paths] == ["report.json", "report.md", "report.png"]
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths[1].read_text()
    assert "| idle-add | 0 |" in md and "| fix-add | 1 |" in md
    assert load_report(paths[0])["summary"] == json.loads(json.dumps(s))


async def test_a_killed_run_continues_without_rerunning_or_duplicating(tiny):
    suite, tmp_path = tiny
    run_dir = RunDir(tmp_path / "out")
    await run(suite, tmp_path, run_dir, tasks=suite.tasks()[:2])  # stopped after two tasks...
    with open(run_dir.records_path, "a") as f:
        f.write('{"format": "composer-eval-record/1", "instance_id": "mean", "se')  # ...mid-write
    ByTask.started = []
    with pytest.raises(ValueError, match="holds another run: its instances"):
        await run(suite, tmp_path, run_dir)  # the whole suite is another run than the first two
    run_dir = RunDir(tmp_path / "out2")
    await run(suite, tmp_path, run_dir, tasks=suite.tasks()[:2])
    lines = run_dir.records_path.read_text().splitlines()
    run_dir.records_path.write_text("\n".join(lines[:1]) + "\n" + lines[1][:40])  # killed while writing the 2nd
    ByTask.started = []
    records = await run(suite, tmp_path, run_dir, tasks=suite.tasks()[:2])
    assert len(ByTask.started) == 1  # only the attempt without a whole record ran again
    assert sorted(r["instance_id"] for r in records) == ["fix-add", "idle-add"]
    ByTask.started = []
    assert len(await run(suite, tmp_path, run_dir, tasks=suite.tasks()[:2])) == 2 and ByTask.started == []


def test_the_budget_reaches_the_loop_and_policies_parse(tiny, tmp_path):
    suite, _ = tiny
    loop = loop_config(suite, 7)
    assert (loop.max_steps, loop.max_tokens_per_step, loop.max_turn_tokens, loop.temperature, loop.seed) == (4, 64, 256, 0.0, 7)
    assert parse_policy("http://127.0.0.1:8000/v1/", model_name="m").session() == \
        {"endpoint": "http://127.0.0.1:8000/v1", "model": "m", "api_key": None, "tokenizer": None}
    assert parse_policy("composer-mini").session() == {"model": None, "quantize": "int4"}
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(ValueError, match=r"needs a config\.json"):
        parse_policy(str(tmp_path / "ckpt"))
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    assert parse_policy(str(tmp_path / "ckpt")).model == str((tmp_path / "ckpt").resolve())
    with pytest.raises(ValueError, match="not composer-mini"):
        parse_policy("gpt-5")
    with pytest.raises(ValueError, match=r"no tokenizer\.json"):
        parse_policy("http://127.0.0.1:8000/v1", tokenizer=str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="for endpoints"):
        parse_policy("composer-mini", tokenizer=str(tmp_path / "ckpt"))
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{}")
    with_ids = parse_policy("http://127.0.0.1:8000/v1", tokenizer=str(tmp_path / "ckpt"))
    assert with_ids.session()["tokenizer"] == str((tmp_path / "ckpt").resolve())


def test_attempts_start_spread_over_the_suite_and_skip_recorded_ones():
    tasks = [Task(instance_id=f"t{i}", problem_statement="p", FAIL_TO_PASS=("x",), source=None) for i in range(9)]
    pending = todo(tasks, (0, 1), [{"instance_id": "t4", "seed": 0}])
    assert [(t.instance_id, s) for t, s in pending[:8]] == [
        ("t0", 0), ("t8", 0), ("t1", 0), ("t5", 0), ("t2", 0), ("t6", 0), ("t3", 0), ("t7", 0)]
    assert len(pending) == 17 and pending[8] == (tasks[0], 1)


def fake_report(resolved: dict[str, float], spec: str) -> dict:
    records = [{"instance_id": i, "seed": 0, "status": "scored", "resolved": bool(v), "adherence": None,
                "stop_reason": "end_turn", "metadata": {},
                "reward": {"reward": v, "claims": {"unsupported": 0}, "malformed": {"count": 0},
                           "efficiency": {"turns": 2, "tool_calls": 1, "parallel_calls": 0, "completion_tokens": 10,
                                          "prompt_tokens": 100, "wall_s": 1.0, "model_s": 0.5}}}
               for i, v in resolved.items()]
    meta = {"suite": "s", "instances": list(resolved), "budget": {"seeds": [0]}, "policy": {"spec": spec}}
    return build_report(meta, records)


def test_a_success_rate_interval_is_wilsons_and_never_a_point():
    assert rate_ci([0.0] * 120) == [0.0, 0.031]  # 0 of 120 still allows up to 3.1%
    assert rate_ci([1.0] * 10 + [0.0] * 10) == [0.2993, 0.7007]
    assert rate_ci([1.0] * 5) == [0.5655, 1.0]
    assert rate_ci([]) is None


def test_compare_shows_per_task_changes_and_a_paired_interval(tmp_path, capsys):
    a = fake_report({"t1": 0, "t2": 1, "t3": 0, "t4": 1}, "A")
    b = fake_report({"t1": 1, "t2": 0, "t3": 1, "t4": 1}, "B")
    p = paired(a, b)
    assert [c["instance_id"] for c in p["fixed"]] == ["t1", "t3"] and [c["instance_id"] for c in p["broken"]] == ["t2"]
    assert p["delta"] == 0.25 and p["delta_ci95"][0] <= 0.25 <= p["delta_ci95"][1]
    text = compare(a, b)
    assert "| resolved | 0.5 | 0.75 | 0.25 |" in text and "| t2 | 1 | 0 |" in text
    write_report(a, tmp_path)
    (tmp_path / "b").mkdir()
    write_report(b, tmp_path / "b")
    assert eval_main(["--compare", str(tmp_path / "report.json"), str(tmp_path / "b" / "report.json")]) == 0
    assert "2 fixed, 1 broken" in capsys.readouterr().out


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    assert eval_main(["--suite", "no-such-suite", "--policy", "composer-mini", "--out", str(tmp_path)]) == 2
    assert "no suite 'no-such-suite'" in capsys.readouterr().err
    assert eval_main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert "not a readable report" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written
