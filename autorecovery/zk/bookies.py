"""Live view of bookie registrations: writable and read-only sets from ZooKeeper watches (EDGE).

Source: upstream ``BookieWatcherImpl`` / ``ZKRegistrationClient``. Writable bookies are the children of
``<root>/available`` other than ``readonly``; read-only bookies are the children of
``<root>/available/readonly``. Listeners are called on the event loop with ``(writable, readonly)``
after every change (and once right after :meth:`BookieWatcher.start`).

Every listener gets every change: one that raises is logged and the others are still called (issue 9:
the state was updated before the listeners ran, so a raising listener made the rest miss the change for
good). A refresh that fails is logged (rate-limited) and retried with back-off until it succeeds; a
reconnect refreshes at once (kazoo forgets watches on a connection loss).

The registration data of every bookie is read once when it appears: what it advertises chooses the
transport calls to it take (:func:`autorecovery.rpc.transport.choose_transport`: ``grpc`` → ours;
``bookie-rpc``, as stock BookKeeper bookies advertise, or nothing, as they did before 4.12 → upstream's).
Never false-mark (issue 9): a bookie that advertises neither protocol is listed in
:attr:`BookieWatcher.foreign` with what it advertises: the checks skip its copies instead of reading
them over a protocol it does not speak, and ``/readyz`` names it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from autorecovery.aio import wait_condition
from autorecovery.retry import Backoff
from autorecovery.rpc.convert import advertised_protocols, speaks_a_known_protocol
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.paths import Paths

Listener = Callable[[frozenset[str], frozenset[str]], object]

log = structlog.get_logger("autorecovery.zk.bookies")

#: Back-off (s) between retries of a failed refresh: doubles from the first value to the cap.
RETRY_BACKOFF_S = (0.2, 10.0)


async def registered_protocols(zk: ZkClient, paths: Paths, bookie_id: str) -> tuple[str, ...] | None:
    """What the registration of ``bookie_id`` (``available/<id>``, else ``available/readonly/<id>``)
    advertises, None when neither znode exists."""
    for path in (paths.available_bookie(bookie_id), paths.readonly_bookie(bookie_id)):
        try:
            data, _ = await zk.get(path)
        except NoNodeError:
            continue
        return advertised_protocols(data)
    return None


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
        self._retry_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        #: a watch-triggered refresh is queued and has not read yet (it will see any later change too)
        self._queued = False
        self._notified_once = False
        #: bookie id → protocols its registration advertises, for every available bookie
        self.protocols: dict[str, tuple[str, ...]] = {}
        self._last_warn = 0.0
        #: refreshes that failed (each retried); listener calls that raised
        self.refresh_failures = 0
        self.listener_failures = 0

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(writable, readonly)`` after every change; a coroutine result is awaited."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener`` (no error when it was not registered)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    @property
    def foreign(self) -> dict[str, tuple[str, ...]]:
        """Available bookies whose registration advertises neither our gRPC protocol nor upstream's
        ``bookie-rpc`` → what it advertises. Their copies cannot be read or checked here."""
        return {b: p for b, p in self.protocols.items() if not speaks_a_known_protocol(p)}

    async def advertised(self, bookie_id: str) -> tuple[str, ...] | None:
        """What ``bookie_id``'s registration advertises (the resolver of
        :class:`~autorecovery.rpc.transport.BookieClient`): from the live view, else read from
        ZooKeeper; None when it is not registered."""
        known = self.protocols.get(bookie_id)
        if known is not None:
            return known
        return await registered_protocols(self.zk, self.paths, bookie_id)

    async def _read_protocols(self, writable: frozenset[str], readonly: frozenset[str]) -> dict[str, tuple[str, ...]]:
        """Protocols of every available bookie; registration data is read once per appearance."""
        out: dict[str, tuple[str, ...]] = {}
        todo: list[tuple[str, str]] = []
        for b in writable | readonly:
            if b in self.protocols:
                out[b] = self.protocols[b]
            else:
                path = self.paths.readonly_bookie(b) if b in readonly and b not in writable else \
                    self.paths.available_bookie(b)
                todo.append((b, path))

        async def read(b: str, path: str) -> None:
            try:
                data, _ = await self.zk.get(path)
            except NoNodeError:  # gone again meanwhile: the next change re-reads it
                return
            out[b] = advertised_protocols(data)

        await asyncio.gather(*(read(b, p) for b, p in todo))
        return out

    @property
    def available(self) -> frozenset[str]:
        """Writable ∪ read-only: the bookies that are not lost (upstream Auditor)."""
        return self.writable | self.readonly

    async def start(self) -> BookieWatcher:
        await self.zk.ensure_path(self.paths.readonly)
        await self.refresh()
        q = self._session_queue = self.zk.session_events()

        async def on_session() -> None:
            while not self._stopped:
                ev = await q.get()
                if ev.value == "CONNECTED":  # watches are lost on a connection loss: re-arm
                    await self._safe_refresh()

        self._session_task = asyncio.ensure_future(on_session())
        return self

    async def stop(self) -> None:
        """Stop following changes; cancels and awaits every refresh this watcher started. Idempotent."""
        self._stopped = True
        tasks = [t for t in (self._session_task, self._retry_task, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session_task:
            self.zk.unsubscribe(self._session_queue)
            self._session_task = None

    def _on_watch(self, _event) -> None:
        """A watch fired: queue one refresh unless one is queued already. Every refresh re-arms both
        watches and kazoo fires each armed callback once per event (and all of them on a connection
        loss), so refreshing per event piled up refreshes waiting for the lock under churn (the hour's
        chaos runner spent its time in them, at 2.7 GB)."""
        if self._stopped or self._queued:
            return
        self._queued = True
        t = asyncio.ensure_future(self._safe_refresh())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _safe_refresh(self) -> None:
        """Refresh; on failure log (at most every 10 s) and keep retrying with back-off until one
        succeeds, so a failed read never leaves the watch unarmed."""
        try:
            await self.refresh()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried below
            self.refresh_failures += 1
            now = time.monotonic()
            if now - self._last_warn >= 10.0:
                self._last_warn = now
                log.warning("reading bookie registrations failed; retrying", path=self.paths.available,
                            error=str(exc))
            if not self._stopped and (self._retry_task is None or self._retry_task.done()):
                self._retry_task = asyncio.ensure_future(self._retry())

    async def _retry(self) -> None:
        backoff = Backoff(*RETRY_BACKOFF_S)
        while not self._stopped:
            await backoff.sleep()  # back-off between retries, not synchronisation
            await self.zk.connected.wait()
            try:
                await self.refresh()
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - counted, retried
                self.refresh_failures += 1

    async def refresh(self) -> None:
        """Re-read both sets (re-arming the watches) and notify listeners if anything changed."""
        async with self._refreshing:
            self._queued = False  # a change from here on queues the next refresh
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
            if not self._notified_once or writable != self.writable or readonly != self.readonly:
                protocols = await self._read_protocols(writable, readonly)
                before = self.protocols
                self._notified_once = True
                self.writable, self.readonly = writable, readonly
                self.protocols = protocols
                for b, p in self.foreign.items():
                    if b in before:
                        continue  # said once when it appeared
                    log.warning("bookie advertises neither our gRPC protocol nor upstream's bookie-rpc; its "
                                "copies will not be checked or read here", bookie_id=b, advertised=list(p))
                for listener in list(self._listeners):
                    try:
                        res = listener(writable, readonly)
                        if asyncio.iscoroutine(res):
                            await res
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the other listeners still get the change
                        self.listener_failures += 1
                        log.error("a bookie membership listener failed; the others were still notified",
                                  listener=getattr(listener, "__qualname__", repr(listener)), error=repr(exc))
                async with self.changed:
                    self.changed.notify_all()

    async def wait_until(self, predicate: Callable[[BookieWatcher], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(self)`` holds or ``timeout_s`` s pass; returns whether it holds."""
        return await wait_condition(self.changed, lambda: predicate(self), timeout_s)
