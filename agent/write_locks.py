"""The agent loop's write locks: tool calls of one reply run side by side, except that writes to
one path run one at a time and a call that may write anywhere (a terminal command) runs alone
among writers. Read-only calls take no lock.

    locks = WriteLocks()
    async with locks.hold(["src/app.py"]):   # None: may write anywhere
        ...
"""

from __future__ import annotations

import asyncio
import contextlib


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
