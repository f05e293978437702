"""The agent: the loop, the tool harness, the workspace, permissions, checkpoints and session
logs. The same code serves an editor's session and an RL rollout."""
