"""Every ZooKeeper step the ReplicationWorker takes on a ledger's lock and marker, in one place (EDGE).

Upstream source: ``ReplicationWorker`` with ``LedgerUnderreplicationManager`` (``getLedgerToRereplicate``,
``markLedgerReplicated``, ``releaseUnderreplicatedLedger``, the deferred release of a failed ledger's
lock). The znodes and their protocol (``locks/urL…`` ephemeral locks, the marker's version remembered
at acquire, versioned delete) are :class:`~autorecovery.zk.underreplication.UnderreplicationManager`'s;
this class is the worker's only way to them during a pass, so batching these steps (a ZooKeeper
``multi``) changes this module alone:

* :meth:`LockSteps.lock_next` — lock the best candidate; when other slots wait for work too, lock
  one candidate for each in one batch (two round trips for the batch, issue 29) and hand the others
  out to the next calls;
* :meth:`LockSteps.marker` — read the marker;
* :meth:`LockSteps.delete_marker` — versioned delete of the marker, then release the lock;
* :meth:`LockSteps.release` / :meth:`LockSteps.release_after` — release the lock now or after a delay;
* :meth:`LockSteps.hold_while` — keep the lock while a task runs (the open-ledger grace), then release.

A release that fails is retried in the background for as long as the lock is held (issue 26, the
chaos campaign: a ZooKeeper quorum lost for 340 s; every session outlived it, since nobody can expire a
session without a quorum and the new leader renews them all, but each worker's release had given up
after two session timeouts, so ten ledgers stayed locked by live sessions and unhealed until those
sessions ended, 10 minutes later: a held lock is never picked again by its own worker). The retry
backs off (doubling up to :data:`RELEASE_RETRY_MAX_S`), says again every
:data:`RELEASE_RETRY_LOG_EVERY` attempts that it still fails, ends when the worker stops (its stop
releases every lock), and retries only ZooKeeper failures: anything else is logged and ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.zk.underreplication import UnderreplicationManager
from autorecovery.zk.ur.formats import UnderreplicatedLedger

log = structlog.get_logger("autorecovery.worker")

#: seconds before the first retry of a release that failed; doubled after each failed retry up to
#: :data:`RELEASE_RETRY_MAX_S` (each attempt itself waits for the connection, up to two session timeouts)
RELEASE_RETRY_S = 0.5
#: the longest pause between two retries of a failed release (s)
RELEASE_RETRY_MAX_S = 8.0
#: a release still failing is logged again every this many retries (the first failure always is)
RELEASE_RETRY_LOG_EVERY = 20


class LockSteps:
    """The lock and marker steps of the worker's passes.

    Args:
        um: the worker's :class:`~autorecovery.zk.underreplication.UnderreplicationManager`.
        sleep: async sleep in seconds (tests pass a fake clock's).
        stopping: True once the worker stops (deferred releases are then left to ``stop``).
        released: called after a deferred release (wakes the worker's slots).

    Attributes:
        deferred: ledger id → the task that will release its lock (a backoff, the open-ledger grace, or
            the retry of a release that failed).
    """

    def __init__(self, um: UnderreplicationManager, *, sleep: Callable[[float], Awaitable[None]],
                 stopping: Callable[[], bool], released: Callable[[], None]) -> None:
        self.um, self.sleep, self.stopping, self.released = um, sleep, stopping, released
        self.deferred: dict[int, asyncio.Task] = {}
        #: ledgers locked by a batch for slots that asked next (oldest first); still held, no pass yet
        self.ready: list[int] = []

    async def lock_next(self, order: Callable[[Collection[int]], Iterable[int]], want: int = 1) -> int | None:
        """A locked ledger for a pass: one a batch locked earlier, else the first lockable marked ledger
        in ``order`` (with ``want`` > 1: the first ``want`` locked in one batch, the others kept in
        :attr:`ready` for the next calls; callers ask for as many as slots are waiting). None when there
        is none."""
        while self.ready:
            lid = self.ready.pop(0)
            if lid in self.um.held:  # a session loss forgets every lock
                return lid
        got = await self.um.poll_ledgers_to_rereplicate(order, max(1, want))
        if not got:
            return None
        self.ready.extend(got[1:])
        return got[0]

    async def marker(self, lid: int) -> UnderreplicatedLedger | None:
        """The ledger's marker, None when it is not marked any more."""
        return await self.um.get_marker(lid)

    def metadata_read(self, lid: int) -> tuple[bytes, object] | None:
        """The ledger metadata ``(data, stat)`` read when the ledger was locked, once (None: not read,
        or taken already); see ``UnderreplicationManager.take_metadata_read``."""
        return self.um.take_metadata_read(lid)

    async def delete_marker(self, lid: int) -> bool:
        """Versioned delete of the marker (the version seen at acquire), then release the lock.
        False when it was re-marked meanwhile (the marker stays for another pass)."""
        return await self.um.mark_replicated(lid)

    def holds(self, lid: int) -> bool:
        return lid in self.um.held

    @property
    def owner(self) -> str:
        """What this worker writes into its lock znodes (the host name by default)."""
        return self.um.lock_owner

    def held_version(self, lid: int) -> int:
        """The marker version remembered when the lock was taken (-1 when not held)."""
        return self.um.held.get(lid, -1)

    async def release(self, lid: int) -> None:
        """Release the lock if still held. When the delete fails (ZooKeeper unreachable for longer than
        :meth:`UnderreplicationManager.release` waits), the lock is not forgotten: the release is
        retried in the background (a :attr:`deferred` task) until it succeeds or the session ends
        (the manager then drops the lock from ``held``), since a live session keeps the lock however
        long the outage lasts. Never raises."""
        if lid not in self.um.held:
            return
        try:
            await self.um.release(lid)
        except Exception as exc:  # noqa: BLE001 - retried in the background, never dropped
            self._retry_release(lid, exc)

    def _retry_release(self, lid: int, first: BaseException) -> None:
        """Start the background retry of ``lid``'s failed release (replaces a deferred task of it)."""
        log.warning("lock release failed; retrying it while the session lives", ledger_id=lid,
                    error=str(first), error_type=type(first).__name__)

        async def retry() -> None:
            delay, attempts = RELEASE_RETRY_S, 0
            try:
                while lid in self.um.held:
                    if self.stopping():
                        return  # the worker's stop releases every lock it holds
                    await self.sleep(delay)
                    attempts += 1
                    try:
                        await self.um.release_own(lid)
                    except ZooKeeperError as exc:  # still unreachable: the session, and so the lock, may live on
                        delay = min(2 * delay, RELEASE_RETRY_MAX_S)
                        if attempts % RELEASE_RETRY_LOG_EVERY == 0:
                            log.warning("lock release still failing; retrying while the session lives", ledger_id=lid,
                                        attempts=attempts, retry_in_s=delay, error=str(exc))
                    except Exception as exc:  # broad: not an outage: retrying cannot help, and it is said
                        log.error("lock release failed with an unexpected error; the ledger stays locked by this "
                                  "daemon until its ZooKeeper session ends (restart the daemon to free it)",
                                  ledger_id=lid, attempts=attempts, error=str(exc), error_type=type(exc).__name__,
                                  exc_info=True)
                        return
            finally:
                if self.deferred.get(lid) is task:
                    del self.deferred[lid]
            log.info("failed lock release settled (deleted, or its session ended)", ledger_id=lid, attempts=attempts)
            self.released()

        old = self.deferred.pop(lid, None)
        if old is not None and old is not asyncio.current_task():
            old.cancel()
        task = asyncio.create_task(retry(), name=f"release-retry-{lid}")
        self.deferred[lid] = task

    def release_after(self, lid: int, delay_ms: int) -> None:
        """Keep the lock for ``delay_ms`` ms, then release it (a failed ledger's backoff); replaces an
        earlier deferred release of the ledger."""
        async def later() -> None:
            try:
                await self.sleep(delay_ms / 1000.0)
            finally:
                self.deferred.pop(lid, None)
            if not self.stopping():
                await self.release(lid)
            self.released()

        old = self.deferred.pop(lid, None)
        if old is not None:
            old.cancel()
        self.deferred[lid] = asyncio.create_task(later(), name=f"release-{lid}")

    def hold_while(self, lid: int, work: Callable[[], Awaitable[None]], *, name: str,
                   then: Callable[[], None] = lambda: None) -> None:
        """Keep the lock while ``work`` runs in its own task, then release it and call ``then``."""
        async def run() -> None:
            try:
                await work()
            finally:
                self.deferred.pop(lid, None)
                if not self.stopping():
                    await self.release(lid)
                then()
                self.released()

        self.deferred[lid] = asyncio.create_task(run(), name=name)
