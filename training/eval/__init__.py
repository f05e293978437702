"""Composer Bench: the measure every model and harness change is judged by.

- `training.eval.suite`: benchmark suites, TOML manifests under training/data/suites/ naming a
  tasks JSONL and fixing a run's budget (steps, tokens, temperature, seeds).
- `training.eval.adherence`: does a candidate patch follow the codebase (reuse the helpers the
  reference solution uses, stay within the files and functions it touches, stay lint-clean)?
- `training.eval.runner`: runs a policy on a suite, each attempt a job through training/run.py
  (the harness in a sandboxed environment, hidden-test grading), scored by training/rewards.py;
  append-only records, resumable.
- `training.eval.report`: the report (JSON, Markdown, PNG) and the comparison of two.
- `python -m training.eval` (training/eval/__main__.py): the command line.
"""
