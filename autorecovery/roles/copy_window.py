"""The bounded FIFO between a copy stream's reader and one target's writer (EDGE helper of
:mod:`autorecovery.roles.copier`)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class Window:
    """A FIFO between a copy stream's reader and one target's writer, bounded by entries and bytes.

    ``put`` waits while the window is full (it always admits an entry into an empty window);
    ``discard`` drops everything and admits every later put (the writer is gone). Waiters wake on a
    per-change event, so ``discard`` (called from a task's done-callback) needs no task of its own: a
    task spawned there could outlive the copy ("Task was destroyed but it is pending!", issue 9).
    """

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: deque = deque()
        self._bytes = 0
        self._changed = asyncio.Event()
        self._dead = False

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._changed.wait()

    async def put(self, item) -> None:
        size = len(item[1]) if item is not None else 0
        await self._wait(lambda: self._dead or not self._items or (
            len(self._items) < self.max_entries and self._bytes + size <= self.max_bytes))
        if self._dead:
            return
        self._items.append(item)
        self._bytes += size
        self._notify()

    async def put_many(self, items: list) -> None:
        """:meth:`put` of each of ``items`` (``(entry id, body)`` pairs) in order, with one wake-up of the
        writer per group that fits rather than one per entry."""
        i, n = 0, len(items)
        while i < n:
            first = len(items[i][1])
            def room(first: int = first) -> bool:
                return self._dead or not self._items or (
                    len(self._items) < self.max_entries and self._bytes + first <= self.max_bytes)

            await self._wait(room)
            if self._dead:
                return
            q, cap_n, cap_b = self._items, self.max_entries, self.max_bytes
            while i < n:
                size = len(items[i][1])
                if q and (len(q) >= cap_n or self._bytes + size > cap_b):
                    break
                q.append(items[i])
                self._bytes += size
                i += 1
            self._notify()

    async def get(self):
        await self._wait(lambda: bool(self._items))
        item = self._items.popleft()
        if item is not None:
            self._bytes -= len(item[1])
        self._notify()
        return item

    async def get_batch(self, max_bytes: int) -> list | None:
        """Everything queued now, in order, up to ``max_bytes`` of bodies (at least one entry, waiting
        for it); None at the end-of-stream marker."""
        await self._wait(lambda: bool(self._items))
        if self._items[0] is None:
            self._items.popleft()
            self._notify()
            return None
        batch: list = []
        size = 0
        while self._items and self._items[0] is not None:
            n = len(self._items[0][1])
            if batch and size + n > max_bytes:
                break
            batch.append(self._items.popleft())
            size += n
        self._bytes -= size
        self._notify()
        return batch

    def discard(self) -> None:
        self._dead = True
        self._items.clear()
        self._bytes = 0
        self._notify()
