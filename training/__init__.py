"""What trains Composer's models. The RL side: task environments and their scheduler
(`training.envs`), task loading, generation and replay (`training.tasks`, `training.taskgen`,
`training.replay`), the bug-fix family (`training.bugfix`), and the benchmark's suites and
metrics (`training.eval`). The codebase-search embedder's tuning: `training.embedder`, on pairs
from `training.docpairs`.

Tests: .venv/bin/python -m pytest tests/training
"""
