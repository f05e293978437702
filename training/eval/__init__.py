"""Composer Bench: the measure every model and harness change is judged by.

- `training.eval.suite`: benchmark suites, TOML manifests under training/data/suites/ naming a
  tasks JSONL and fixing a run's budget (steps, tokens, temperature, seeds).
- `training.eval.adherence`: does a candidate patch follow the codebase (reuse the helpers the
  reference solution uses, stay within the files and functions it touches, stay lint-clean)?

The runner (`python -m training.eval --suite NAME --policy ...`) is to come; its design is in
../shared/DESIGN.md and issue 17.
"""
