"""Named exceptions of training.envs. Messages name the path or key involved and what to do.

    from training.envs.exceptions import EnvError
    try:
        env = await Environment.create(base)
    except MountError:
        ...   # the overlay could not be mounted; Environment.create already fell back to a copy
"""

from __future__ import annotations

from typing import Any


class EnvError(Exception):
    """Base class of everything training.envs raises on purpose."""


class MountError(EnvError):
    """A mount or unmount (overlay, tmpfs, fuse) failed."""


class BaseBuildError(EnvError):
    """Building a base failed: the source is missing or a setup command exited non-zero."""


class EnvClosedError(EnvError):
    """The environment was used after close()."""


class SchedulerClosedError(EnvError):
    """A job was submitted to a scheduler that is not started or already closed."""


class SetupError(EnvError):
    """An environment's own setup command exited non-zero (the environment was closed)."""


class RolloutFailed(Exception):
    """Raised by a job's rollout that failed but has something to hand back (`output`, e.g. the
    path of the session log it wrote): JobResult.output carries it. Not an EnvError: the job is
    not retried."""

    def __init__(self, message: str, output: Any = None) -> None:
        super().__init__(message)
        self.output = output
