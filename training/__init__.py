"""The RL side of Composer: task environments and their scheduler (`training.envs`), task loading,
generation and replay (`training.tasks`, `training.taskgen`, `training.replay`).

Tests: .venv/bin/python -m pytest tests/training
"""
