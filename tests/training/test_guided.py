"""Guided rollouts (training/guided.py): the gold script plays the turns before the edit as
context, the model the rest (a guided attempt end to end: tests/training/test_harness_rollout.py)."""

from __future__ import annotations

import json

from add_task import add_task_line

from training.guided import guided_job, lead_turns
from training.tasks import load_tasks


def test_a_share_of_jobs_is_guided_evenly():
    assert [guided_job(k, 0.25) for k in range(8)] == [False, False, False, True] * 2
    assert not any(guided_job(k, 0.0) for k in range(8)) and all(guided_job(k, 1.0) for k in range(8))


def test_the_lead_is_the_gold_script_up_to_its_edit_and_absent_without_a_script(tmp_path):
    lines = [add_task_line(tmp_path, instance_id="named"),
             add_task_line(tmp_path, instance_id="vague", problem_statement="it is broken")]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    named, vague = load_tasks(tmp_path / "tasks.jsonl")
    lead = lead_turns(named)
    assert [[c.name for c in calls] for _, calls in lead] == [["grep"], ["read_file"]]
    assert lead_turns(vague) is None
