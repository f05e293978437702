"""The agent loop's write locks: tool calls of one reply run side by side, except that writes to
one path run one at a time and a call that may write anywhere (a terminal command) runs alone
among writers. Read-only calls take no lock. A file write under way finishes before a stop
takes effect (`finish_started`), so what the stop reports is what the disk and editor hold.

    locks = WriteLocks()
    async with locks.hold(["src/app.py"]):   # None: may write anywhere
        ...
    result = await finish_started(write(), grace_s=10)   # a cancel lets a write under way land
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


class WriteLocks:
    """Writes to one path run one at a time; a call that may write anywhere (a terminal
    command) runs alone among writers. Read-only calls take no lock."""

    def __init__(self) -> None:
        self._paths: dict[str, asyncio.Lock] = {}
        self._writers = 0
        self._exclusive = False
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, paths: list[str] | None):
        async with self._changed:
            if paths is None:
                await self._changed.wait_for(lambda: not self._exclusive and self._writers == 0)
                self._exclusive = True
            else:
                await self._changed.wait_for(lambda: not self._exclusive)
                self._writers += 1
        locks = [self._paths.setdefault(p, asyncio.Lock()) for p in sorted(set(paths or []))]
        try:
            async with contextlib.AsyncExitStack() as stack:
                for lock in locks:
                    await stack.enter_async_context(lock)
                yield
        finally:
            async with self._changed:
                if paths is None:
                    self._exclusive = False
                else:
                    self._writers -= 1
                self._changed.notify_all()


def write_paths(tool: Any, arguments: Any) -> list[str] | None:
    """The paths a write call locks (None: it may write anywhere, a command); arguments of the
    wrong shape lock nothing, since the registry refuses them before the tool runs."""
    try:
        paths = tool.paths(arguments)
    except Exception:
        return []
    return None if paths is None else [p for p in paths if isinstance(p, str)]


async def finish_started(work: Awaitable[T], grace_s: float) -> T:
    """Runs `work`; a cancel while it runs (repeated or not: a step stopping its calls, a client
    sending two) lets it finish first, up to `grace_s`, and its result stands, so a write under
    way lands and is reported rather than landing unseen after the stop. Past the grace the work
    is cancelled and the cancel goes on."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await wait_through_cancels({task}, grace_s)
        if not task.done():
            task.cancel()
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # nobody is left to read it
            raise
        return task.result()


async def wait_through_cancels(futures: Iterable[asyncio.Future], timeout_s: float) -> bool:
    """Waits up to `timeout_s` for `futures` to end, a cancel of the waiting task included;
    returns whether one came (the caller decides when to let it through)."""
    loop = asyncio.get_running_loop()
    deadline, cancelled = loop.time() + timeout_s, False
    pending = {f for f in futures if not f.done()}
    while pending and (left := deadline - loop.time()) > 0:
        try:
            _, pending = await asyncio.wait(pending, timeout=left)
        except asyncio.CancelledError:
            cancelled = True
    return cancelled
