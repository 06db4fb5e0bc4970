"""Live view of bookie registrations: writable and read-only sets from ZooKeeper watches (EDGE).

Source: upstream ``BookieWatcherImpl`` / ``ZKRegistrationClient``. Writable bookies are the children of
``<root>/available`` other than ``readonly``; read-only bookies are the children of
``<root>/available/readonly``. Listeners are called on the event loop with ``(writable, readonly)``
after every change (and once right after :meth:`BookieWatcher.start`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from autorecovery.aio import wait_condition
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

Listener = Callable[[frozenset[str], frozenset[str]], object]


class BookieWatcher:
    """Keeps ``writable`` and ``readonly`` current with one-shot watches re-armed on each change.

    Attributes:
        writable: bookie ids registered under ``available`` (read-only excluded).
        readonly: bookie ids registered under ``available/readonly``.
        changed: an asyncio.Condition notified after every refresh (tests and loops wait on it).
    """

    def __init__(self, zk: ZkClient, paths: Paths) -> None:
        self.zk = zk
        self.paths = paths
        self.writable: frozenset[str] = frozenset()
        self.readonly: frozenset[str] = frozenset()
        self.changed = asyncio.Condition()
        self._listeners: list[Listener] = []
        self._stopped = False
        self._refreshing = asyncio.Lock()
        self._session_task: asyncio.Task | None = None

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(writable, readonly)`` after every change; a coroutine result is awaited."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (no error when it was not registered)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    @property
    def available(self) -> frozenset[str]:
        """Writable ∪ read-only: the bookies that are not lost (upstream Auditor)."""
        return self.writable | self.readonly

    async def start(self) -> "BookieWatcher":
        await self.zk.ensure_path(self.paths.readonly)
        await self.refresh()
        q = self._session_queue = self.zk.session_events()

        async def on_session() -> None:
            while not self._stopped:
                ev = await q.get()
                if ev.value == "CONNECTED":  # watches are gone after a new session: re-arm
                    try:
                        await self.refresh()
                    except Exception:  # noqa: BLE001 - next event retries
                        pass

        self._session_task = asyncio.ensure_future(on_session())
        return self

    async def stop(self) -> None:
        self._stopped = True
        if self._session_task:
            self._session_task.cancel()
            self.zk.unsubscribe(self._session_queue)

    def _on_watch(self, _event) -> None:
        if not self._stopped:
            asyncio.ensure_future(self._safe_refresh())

    async def _safe_refresh(self) -> None:
        try:
            await self.refresh()
        except Exception:  # noqa: BLE001 - a session event re-arms
            pass

    async def refresh(self) -> None:
        """Re-read both sets (re-arming the watches) and notify listeners if anything changed."""
        async with self._refreshing:
            try:
                children = await self.zk.get_children(self.paths.available, watch=self._on_watch)
            except NoNodeError:
                children = []
            try:
                ro = await self.zk.get_children(self.paths.readonly, watch=self._on_watch)
            except NoNodeError:
                ro = []
            writable = frozenset(c for c in children if c != "readonly")
            readonly = frozenset(ro)
            first = not hasattr(self, "_notified_once")
            if first or writable != self.writable or readonly != self.readonly:
                self._notified_once = True
                self.writable, self.readonly = writable, readonly
                for listener in list(self._listeners):
                    res = listener(writable, readonly)
                    if asyncio.iscoroutine(res):
                        await res
                async with self.changed:
                    self.changed.notify_all()

    async def wait_until(self, predicate: Callable[["BookieWatcher"], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(self)`` holds or ``timeout_s`` s pass; returns whether it holds."""
        return await wait_condition(self.changed, lambda: predicate(self), timeout_s)
