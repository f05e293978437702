"""training/rewards.py on constructed session records: task success (a correct patch beats an
incorrect one, whatever its penalties), efficiency and parallelism counted only on correct runs,
malformed tool calls (v1's evidence and v2's field, never both), unsupported claims (passing tests
with no passing run after the last edit, files said changed or present that the log does not
show), masked infrastructure failures, and the editor signals' reward.

Run: .venv/bin/python -m pytest tests/training/test_rewards.py
"""

from __future__ import annotations

import json

import pytest

from training.rewards import (
    RewardWeights,
    editor_reward,
    efficiency,
    efficiency_score,
    grade_of,
    malformed_tool_calls,
    score,
    unsupported_claims,
)
from training.tasks import TaskGrade

WS = "/work/ws"
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "edit_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "old_string": {"type": "string"},
                                         "new_string": {"type": "string"}}, "required": ["path", "old_string", "new_string"]}}},
    {"type": "function", "function": {"name": "list_dir", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "run_terminal", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}},
]


class Log:
    """Builds a session's records the way agent/ writes them (times one second apart)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.add("session", workspace=WS, tools=TOOLS, model={"id": "m"})
        self.add("user_message", text="fix add")

    def add(self, type: str, **fields) -> Log:
        self.records.append({"type": type, "version": 1, "session_id": "s", "seq": len(self.records),
                             "time": 1000.0 + len(self.records), **fields})
        return self

    def model(self, text: str = "", calls: int = 0, completion: int = 50) -> Log:
        return self.add("model_call", text=text, finish_reason="tool_calls" if calls else "stop",
                        tool_calls=[{}] * calls, prompt_token_ids=[], completion_token_ids=[], logprobs=None,
                        usage={"prompt_tokens": 400, "completion_tokens": completion}, timing={"total_s": 2.0})

    def tool(self, name: str, group: str, error: str | None = None, result: str = "ok", **args) -> Log:
        data = {"path": args["path"]} if "path" in args and name == "edit_file" else {}
        return self.add("tool_call", call_id=f"c{len(self.records)}", name=name, arguments=args, result=result,
                        error=error, duration_s=0.1, group=group, status="failed" if error else "completed", data=data)

    def test(self, group: str, exit_code: int) -> Log:
        return self.add("tool_call", call_id=f"c{len(self.records)}", name="run_terminal",
                        arguments={"command": "python -m pytest -q"}, result=f"...\n[exit code {exit_code} after 1 s]",
                        error=None, duration_s=1.0, group=group, status="completed", data={"exit_code": exit_code})


def fix_run(final: str = "Fixed add in calc.py; the tests pass.", test_after: bool = True) -> Log:
    """Reads two files side by side, edits calc.py, runs the tests, answers."""
    log = Log().model(calls=2).tool("read_file", "g1", path="calc.py").tool("read_file", "g1", path="test_calc.py")
    log.model(calls=1).tool("edit_file", "g2", path="calc.py", old_string="a - b", new_string="a + b")
    if test_after:
        log.model(calls=1).test("g3", 0)
    return log.model(final)


def graded(resolved: bool | None, infra: str | None = None) -> TaskGrade:
    return TaskGrade(instance_id="t", resolved=resolved, fail_to_pass={"t.py::a": "passed" if resolved else "failed"},
                     infra=infra, infra_stage="setup" if infra else None)


def test_a_correct_patch_beats_an_incorrect_one():
    records = fix_run().records
    right, wrong = score(records, graded(True)), score(records, graded(False))
    assert right.status == wrong.status == "scored"
    assert right.success == 1.0 and wrong.success == 0.0
    assert right.reward > wrong.reward
    # the caps keep a correct run with every penalty above an incorrect run with none
    noisy = fix_run("I updated `a.py`, `b.py` and `c.py`. All tests pass.", test_after=False)
    for _ in range(5):
        noisy.add("user_message", text="[harness] tool call 0 is not valid JSON.")
    worst = score(noisy.records, graded(True))
    assert len(worst.claims.unsupported) == 4 and worst.malformed.count == 5
    assert worst.terms["claims"] == -0.5 and worst.terms["malformed"] == -0.3
    assert worst.reward > score(fix_run().records, graded(False)).reward


def test_efficiency_and_parallelism_count_only_on_correct_runs():
    records = fix_run().records
    eff = efficiency(records)
    assert (eff.turns, eff.tool_calls, eff.parallel_calls) == (4, 4, 2)
    assert eff.parallel_share == 0.5 and eff.prompt_tokens == 1600 and eff.completion_tokens == 200
    assert eff.wall_s == len(records) - 1 and eff.model_s == 8.0 and eff.tokens_per_s == 25.0
    right, wrong = score(records, graded(True)), score(records, graded(False))
    assert right.terms["efficiency"] > 0 and right.terms["parallel"] == pytest.approx(0.05)
    assert wrong.terms["efficiency"] == wrong.terms["parallel"] == 0.0
    assert wrong.efficiency == right.efficiency  # the metrics are reported either way
    # the same fix in more turns and tokens scores lower
    slow = fix_run()
    for _ in range(10):
        slow.records.insert(3, dict(slow.records[2], usage={"prompt_tokens": 400, "completion_tokens": 900}))
    assert score(slow.records, graded(True)).reward < right.reward
    w = RewardWeights(max_turns=4, max_completion_tokens=200, max_wall_s=1000)
    assert efficiency_score(eff, w) == pytest.approx(1 - (1 + 1 + (len(records) - 1) / 1000) / 3)


def test_records_written_afterwards_do_not_stretch_wall_time_and_turns_all_count():
    log = fix_run()
    before = efficiency(log.records).wall_s
    log.add("final_diff", diff="")
    log.add("outcome", signal="task_resolved", value=True, detail={})
    log.records[-1]["time"] += 5000  # appended long after the session ended
    log.records[-2]["time"] += 4000
    assert efficiency(log.records).wall_s == before
    # an editor session: a signal at the end of the first turn, then a second turn
    log.add("user_message", text="and now?").model(calls=1).tool("read_file", "g7", path="a.py").model("All done.")
    eff = efficiency(log.records)
    assert eff.turns == 6 and eff.tool_calls == 5 and eff.wall_s == len(log.records) - 1


def test_malformed_tool_calls_v1_evidence():
    log = fix_run()
    log.tool("no_such_tool", "g9", path="x")
    log.tool("read_file", "g9", error="invalid arguments for read_file at arguments: 'path' is a required property")
    log.add("tool_call", call_id="raw", name="edit_file", arguments='{"path": "a.py", ', result="", error="not JSON",
            duration_s=0, group="g9", status="failed")
    log.add("user_message", text="[harness] tool call 1 is not valid JSON. Nothing was run for it; send the call again as valid JSON.")
    bad = malformed_tool_calls(log.records)
    assert (bad.unknown_tool, bad.bad_arguments, bad.dropped_blocks, bad.count) == (1, 2, 1, 4)
    assert malformed_tool_calls(fix_run().records).count == 0
    assert score(log.records, graded(True)).terms["malformed"] == pytest.approx(-0.3)  # capped


def test_malformed_tool_calls_v2_field_is_the_seam_and_not_double_counted():
    log = fix_run()
    log.records[2]["malformed_tool_calls"] = [{"raw": "<tool_call>{bad", "error": "not JSON"}]
    log.records[4]["malformed_tool_calls"] = []
    log.add("user_message", text="[harness] tool call 0 is not valid JSON.")  # v2 logs the correction too
    assert malformed_tool_calls(log.records).dropped_blocks == 1


@pytest.mark.parametrize(("final", "kinds"), [
    ("All tests pass.", ["tests_pass"]),
    ("The failing test now passes.", ["tests_pass"]),
    ("Done: the test suite is green.", ["tests_pass"]),
    ("Tests pass with no errors.", ["tests_pass"]),
    ("The tests should pass now.", []),            # a hedge, not a claim
    ("Run `pytest` to confirm the tests pass.", []),
    ("3 tests passed, 1 failed.", []),             # reports a failure
    ("I could not run the tests.", []),
    ("I did not change `calc.py`.", []),
])
def test_claim_detection(final, kinds):
    records = Log().model(final).records
    assert [c.kind for c in unsupported_claims(records).claims] == kinds


def test_a_claim_of_passing_tests_needs_a_passing_run_after_the_last_edit():
    claims = unsupported_claims(fix_run("All tests pass.", test_after=False).records)
    assert [c.kind for c in claims.unsupported] == ["tests_pass"]
    assert unsupported_claims(fix_run("All tests pass.").records).unsupported == ()
    # a passing run before the edit, a failing one after: unsupported
    log = Log().model(calls=1).test("g1", 0).model(calls=1)
    log.tool("edit_file", "g2", path="calc.py", old_string="a", new_string="b").model(calls=1).test("g3", 1)
    log.model("Tests pass.")
    assert len(unsupported_claims(log.records).unsupported) == 1
    assert score(log.records, graded(True)).terms["claims"] == -0.25


def test_claims_about_files_are_checked_against_the_log():
    log = fix_run("I updated `calc.py` and created pkg/new.py. README.md exists. `ghost.py` exists.")
    claims = {c.path: c for c in unsupported_claims(log.records).claims}
    assert claims["calc.py"].supported and claims["calc.py"].kind == "file_changed"
    assert not claims["pkg/new.py"].supported
    assert not claims["README.md"].supported and not claims["ghost.py"].supported
    # the final diff shows pkg/new.py, a listing shows README.md
    log = fix_run("I updated `calc.py` and created pkg/new.py. README.md exists.")
    log.tool("list_dir", "g8", path=".", result="README.md\ncalc.py\n")
    log.add("final_diff", diff="diff --git a/pkg/new.py b/pkg/new.py\nnew file mode 100644\n--- /dev/null\n"
                               "+++ b/pkg/new.py\n@@ -0,0 +1 @@\n+X = 1\n")
    assert unsupported_claims(log.records).unsupported == ()
    # an absolute path in a tool call is matched relative to the workspace
    log = Log().model(calls=1).tool("edit_file", "g1", path=f"{WS}/pkg/calc.py", old_string="a", new_string="b")
    assert unsupported_claims(log.model("Fixed pkg/calc.py.").records).unsupported == ()


def test_infrastructure_failures_are_masked_never_zero():
    records = fix_run().records
    masked = score(records, graded(None, infra="BaseBuildError: setup exited 1"))
    assert masked.status == "masked" and masked.masked and masked.reward is None and masked.success is None
    assert "setup" in masked.mask_reason
    # the grade written in the log is read back, masked or not
    log = fix_run()
    log.add("outcome", **graded(None, infra="the harness's clock ran out").outcome())
    assert grade_of(log.records).masked and score(log.records).reward is None
    log = fix_run()
    log.add("outcome", **graded(True).outcome())
    assert grade_of(log.records).resolved is True and score(log.records).reward == score(records, graded(True)).reward
    ungraded = score(records)
    assert ungraded.status == "ungraded" and ungraded.reward is None and not ungraded.masked


def test_reward_serialises_and_states_its_weights():
    data = json.loads(json.dumps(score(fix_run().records, graded(True)).to_json()))
    assert data["weights"]["success"] == 1.0 and data["efficiency"]["parallel_share"] == 0.5
    assert data["claims"]["unsupported"] == 0 and data["malformed"]["count"] == 0
    assert data["reward"] == pytest.approx(sum(data["terms"].values()))


def test_editor_reward_is_the_mean_of_stated_rewards():
    log = Log()
    assert editor_reward(log.records) is None
    log.add("outcome", signal="edit_accepted", value=True, reward=1.0)
    log.add("outcome", signal="turn_undone", value=True, reward=-1.0)
    log.add("outcome", signal="edit_kept", value=0.5, reward=0.5)
    log.add("outcome", **graded(True).outcome())  # a task grade is not an editor signal
    assert editor_reward(log.records) == pytest.approx(0.5 / 3)
