"""A bookie's registration in ZooKeeper: ephemeral ``available/<id>`` or ``available/readonly/<id>`` (EDGE).

Upstream ``ZKRegistrationManager`` + ``BookieStateManager``:

* a writable bookie holds the EPHEMERAL znode ``<root>/available/<bookieId>``, a read-only one
  ``<root>/available/readonly/<bookieId>``; the data is a binary ``BookieServiceInfoFormat``;
* switching state creates the new znode *before* deleting the old one, so a watcher never sees the
  bookie vanish (a vanished bookie starts the auditor's lost-bookie handling);
* if the znode already exists with another session as owner (the previous incarnation of this bookie
  was killed and its session has not expired yet), wait for it to expire, up to a bound, instead of
  failing at once (upstream ``checkRegNodeAndWaitExpired``); if it does not go away, fail: another
  live bookie is using the same id.

Ours: the caller may pass ``is_dead_owner(data)``, which looks at the stale znode's data and says
whether the process that wrote it is certainly dead (the bookie server records its pid and the
machine's boot id; see ``bookie.server``). Such a znode is deleted at once (a versioned delete), so a
bookie restarted after ``kill -9`` registers immediately instead of waiting out the dead session.

Where we differ: upstream bookies shut down when their ZooKeeper session expires and rely on a
supervisor; this registration re-creates its znode as soon as kazoo has a new session (``LOST`` then
``CONNECTED``), so a bookie survives a ZooKeeper outage longer than its session timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.retry import Backoff
from autorecovery.zk.bridge import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    SessionEvent,
    ZkClient,
)
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.zk.registration")


def registration_path(paths: Paths, bookie_id: str, readonly: bool) -> str:
    """``<root>/available/readonly/<id>`` when ``readonly`` else ``<root>/available/<id>``."""
    return paths.readonly_bookie(bookie_id) if readonly else paths.available_bookie(bookie_id)


class BookieRegistration:
    """Keeps one bookie registered as writable or read-only for as long as it runs.

    Args:
        zk: a started :class:`ZkClient`.
        paths: the cluster's znode paths.
        bookie_id: ``host:port``.
        service_info: znode data (binary ``BookieServiceInfoFormat``, see ``rpc.convert.encode_service_info``).
        stale_wait_s: how long (s) to wait for a znode left by a previous session of this bookie to
            expire; default twice the session timeout plus 5 s.
        is_dead_owner: given a stale znode's data, True when its writer is certainly dead (then the
            znode is deleted instead of waited for). Default: always False (upstream behaviour).

    Raises (from :meth:`start` / :meth:`set_readonly`):
        ZooKeeperError: the znode is held by another live session after ``stale_wait_s``, or a
            ZooKeeper operation failed; names the znode path.
    """

    def __init__(
        self,
        zk: ZkClient,
        paths: Paths,
        bookie_id: str,
        service_info: bytes,
        *,
        stale_wait_s: float | None = None,
        is_dead_owner: Callable[[bytes], bool] | None = None,
    ) -> None:
        self._zk = zk
        self._is_dead_owner = is_dead_owner
        self._paths = paths
        self.bookie_id = bookie_id
        self._data = service_info
        self._readonly = False
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._in_sync = False
        self._stale_wait_s = (
            stale_wait_s if stale_wait_s is not None else 2 * zk.session_timeout_ms / 1000.0 + 5.0
        )
        #: number of times the znode was (re)created; tests watch it
        self.registrations = 0
        #: the znode path while waiting for another session's znode to go away, else None
        self.waiting_on: str | None = None

    @property
    def readonly(self) -> bool:
        """Whether the bookie is (to be) registered read-only."""
        return self._readonly

    @property
    def in_sync(self) -> bool:
        """False after a failed registration change, until a retry (:meth:`set_readonly`) succeeds."""
        return self._in_sync

    @property
    def path(self) -> str:
        """The znode this bookie should currently hold."""
        return registration_path(self._paths, self.bookie_id, self._readonly)

    async def start(self, readonly: bool = False) -> None:
        """Register (waiting out a stale znode of a previous incarnation) and start following the
        ZooKeeper session so the znode is re-created after a session loss."""
        self._readonly = readonly
        events = self._zk.session_events()
        try:
            async with self._lock:
                await self._ensure()
        except BaseException:
            self._zk.unsubscribe(events)
            raise
        self._task = asyncio.create_task(self._follow_session(events), name=f"registration-{self.bookie_id}")

    async def set_readonly(self, readonly: bool) -> None:
        """Move the registration to ``available/readonly/<id>`` (True) or ``available/<id>`` (False):
        create the new znode, then delete the old one. No-op when already there."""
        async with self._lock:
            if readonly == self._readonly and self._in_sync:
                return
            self._readonly = readonly
            log.info("bookie registration state change", bookie_id=self.bookie_id, readonly=readonly)
            await self._ensure()

    async def stop(self) -> None:
        """Stop following the session and delete this bookie's registration znodes. Idempotent;
        ZooKeeper errors are logged, not raised (the session's end removes the znodes anyway)."""
        if self._stopped:
            return
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        async with self._lock:
            for p in (self._paths.available_bookie(self.bookie_id), self._paths.readonly_bookie(self.bookie_id)):
                try:
                    await self._delete_if_ours(p)
                except (ZooKeeperError, KazooException) as exc:
                    log.warning("cannot delete registration znode", path=p, error=str(exc))

    # -- internals -----------------------------------------------------------------------------
    def _session_id(self) -> int | None:
        cid = self._zk.client_id
        return cid[0] if cid else None

    async def _delete_if_ours(self, path: str) -> None:
        stat = await self._zk.exists(path)
        if stat is not None and stat.ephemeralOwner == self._session_id():
            with contextlib.suppress(NoNodeError):
                await self._zk.delete(path, stat.version)

    async def _ensure(self) -> None:
        target = registration_path(self._paths, self.bookie_id, self._readonly)
        other = registration_path(self._paths, self.bookie_id, not self._readonly)
        self._in_sync = False
        await self._zk.ensure_path(self._paths.readonly)
        await self._create_ephemeral(target)
        with contextlib.suppress(NoNodeError):
            await self._zk.delete(other)
        self._in_sync = True

    async def _create_ephemeral(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._stale_wait_s
        while True:
            try:
                await self._zk.create(path, self._data, ephemeral=True)
                self.registrations += 1
                log.info("bookie registered", path=path, bookie_id=self.bookie_id)
                return
            except NodeExistsError:
                pass
            gone = asyncio.Event()

            def fired(_event: object, gone: asyncio.Event = gone) -> None:  # this round's own Event
                gone.set()

            stat = await self._zk.exists(path, watch=fired)
            if stat is None:
                continue
            if stat.ephemeralOwner == self._session_id():
                return  # already ours (e.g. reconnected within the same session)
            if self._is_dead_owner is not None:
                try:
                    data, stat2 = await self._zk.get(path)
                except NoNodeError:
                    continue
                if stat2.ephemeralOwner != self._session_id() and self._is_dead_owner(data):
                    log.info(
                        "deleting the registration left by a dead previous incarnation",
                        path=path,
                        owner_session=hex(stat2.ephemeralOwner),
                    )
                    with contextlib.suppress(NoNodeError, BadVersionError):
                        await self._zk.delete(path, stat2.version)
                    continue
            remaining = deadline - loop.time()
            log.info(
                "waiting for the registration of a previous session to expire",
                path=path,
                owner_session=hex(stat.ephemeralOwner),
                remaining_s=round(remaining, 3),
            )
            if remaining <= 0:
                raise ZooKeeperError(
                    f"{path} is held by session {stat.ephemeralOwner:#x} that did not expire within "
                    f"{self._stale_wait_s:.1f}s: is another bookie running with id {self.bookie_id}?"
                )
            self.waiting_on = path
            try:
                await asyncio.wait_for(gone.wait(), remaining)
            except TimeoutError:
                continue  # loop once more: re-check, then fail with the message above
            finally:
                self.waiting_on = None

    async def _follow_session(self, events: asyncio.Queue[SessionEvent]) -> None:
        try:
            while True:
                ev = await events.get()
                if ev is SessionEvent.LOST:
                    log.warning("ZooKeeper session lost; will re-register", bookie_id=self.bookie_id)
                elif ev is SessionEvent.SUSPENDED:
                    log.warning("ZooKeeper connection suspended", bookie_id=self.bookie_id)
                elif ev is SessionEvent.CONNECTED:
                    await self._reregister()
        finally:
            self._zk.unsubscribe(events)

    async def _reregister(self) -> None:
        backoff = Backoff(0.1, 2.0)
        while not self._stopped:
            try:
                async with self._lock:
                    await self._ensure()
                return
            except (ZooKeeperError, KazooException) as exc:
                if not self._zk.connected.is_set():
                    return  # the next CONNECTED event retries
                delay = backoff.next_delay()
                log.warning("re-registration failed; retrying", bookie_id=self.bookie_id, error=str(exc), delay_s=delay)
                await asyncio.sleep(delay)  # backoff between retries, not synchronisation
