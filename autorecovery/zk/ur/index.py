"""The marked and locked ledger ids, kept up to date by persistent watches (EDGE; ZooKeeper 3.6+).

Part of :class:`~autorecovery.zk.underreplication.UnderreplicationManager` (issue 29 item 3). Picking
the next ledger used to walk the whole marker hierarchy through a cache of one-shot child watches:
each marker created or deleted fired the watch of its level, and the next pick listed that level again
(all the markers sharing the upper three hex levels: every ledger id below 65,536 is in one listing)
and walked every leaf in Python, so a pick cost O(markers) and the heal rate fell with the queue
(16.6 ledgers/s with a short queue, about 1/s with 3,172 queued, on a loaded machine).

Here one persistent recursive watch on ``underreplication/ledgers`` (``addWatch``) names every marker
created or deleted; the set is updated from those notifications, so a pick reads nothing to know the
candidates. The hierarchy is walked only to (re)build the set: at the first use and after every
session event (on a connection loss the server drops persistent watches, and changes made meanwhile
were not notified), each rebuild after the first a random fraction of a second later, so that the
daemons of a cluster, which all see a ZooKeeper restart at once, do not all walk at once. The walk
lists the tree in ``multiRead`` batches with a small window of requests in flight
(:data:`~autorecovery.zk.ur.formats.WALK_IN_FLIGHT`): a session's walk of K markers is about
3 + K / 1,000 requests, at most two outstanding. Notifications that arrive during that walk are replayed on top of it in server
order: each says what is true of its znode from then on, so the result is exact whatever the walk read
before or after them.

Locks are not watched as a tree. A watch on ``underreplication/locks`` sent every daemon two
notifications per ledger healed anywhere (lock created, lock deleted), a third of all it received
(issue 29: with six daemons, 12 of the 36 notifications ZooKeeper sent per ledger healed). Instead a
worker learns that another session holds a lock when its own create fails with NodeExists
(:meth:`MarkedIndex.saw_locked`); it then skips that ledger and keeps a one-shot ``exists`` watch on
the lock, whose firing (the release) puts the ledger back among the candidates and wakes the waiters.
A lock it has not met yet costs at most one failed transaction; :attr:`MarkedIndex.locked` is
therefore the locks this process has met, not every lock.

The znodes and their format are upstream's (unchanged); the watches are read-only. A server before
3.6 answers ``addWatch`` with UNIMPLEMENTED: the manager then keeps its child-watch walk.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.paths import Paths
from autorecovery.zk.ur.formats import REBUILD_JITTER_S

log = structlog.get_logger("autorecovery.underreplication")


def ur_leaf_path(path: str) -> bool:
    """Whether ``path`` ends in a marker or lock name (``urL`` + digits): the test that drops the hex
    directory levels' notifications on kazoo's thread."""
    return path.startswith("urL", path.rfind("/") + 1)


_SHARED: weakref.WeakKeyDictionary[ZkClient, dict[str, MarkedIndex]] = weakref.WeakKeyDictionary()


def shared_index(zk: ZkClient, paths: Paths, walk: Callable[[], Awaitable[set[int]]]) -> MarkedIndex:
    """The one index of ``zk``'s session for ``paths`` (a client keeps one callback per watched path, so
    the managers of one process that share a client, e.g. the auditor's and the worker's, share it)."""
    per = _SHARED.setdefault(zk, {})
    idx = per.get(paths.ur_ledgers)
    if idx is None:
        idx = per[paths.ur_ledgers] = MarkedIndex(zk, paths, walk)
    return idx


class MarkedIndex:
    """Marked ledger ids (:attr:`marked`, from a persistent watch) and the ledger ids whose lock another
    session was found holding (:attr:`locked`, see :meth:`saw_locked`).

    Args:
        zk / paths: the cluster.
        walk: coroutine returning every marked ledger id from the hierarchy (no watches).

    Subscribers (:meth:`subscribe`) are called on the event loop after every marker created or deleted,
    every release of a lock in :attr:`locked`, and every rebuild.

    Attributes:
        marked / locked: the live sets (the same objects for the index's life: callers may keep them and
            test membership; do not iterate them across an ``await``).
        generation: bumped when a ledger becomes marked (a notification or a rebuild); a caller that
            ranked :attr:`marked` may reuse its ranking while it is unchanged (deletions only remove).
        supported: False once the server refused ``addWatch`` (before 3.6).
        syncs: rebuilds so far (tests).
        rebuild_jitter_s: a rebuild after the first waits a random 0..this many seconds before it walks
            (default :data:`~autorecovery.zk.ur.formats.REBUILD_JITTER_S`; 0 = at once).
    """

    def __init__(self, zk: ZkClient, paths: Paths, walk: Callable[[], Awaitable[set[int]]]) -> None:
        self.zk, self.paths, self._walk = zk, paths, walk
        self._subscribers: list[Callable[[], None]] = []
        self.marked: set[int] = set()
        self.locked: set[int] = set()
        self.generation = 0
        self.supported = True
        self.syncs = 0
        self.rebuild_jitter_s = REBUILD_JITTER_S
        self._rng = random.Random()
        self._uppers: Counter[int] = Counter()  # id >> 16 → markers sharing the upper three hex levels
        self._ready = False
        self._epoch = 0  # invalidations so far
        self._buffer: list[tuple[str, int]] | None = None  # notifications during a rebuild
        self._lock = asyncio.Lock()
        self._regs: dict[str, Callable[[str, str], None]] = {}
        # ledger id → the token of the one-shot exists watch armed on its lock (see saw_locked); a watch
        # whose token is no longer here (rebuilt, marker gone) is a no-op when it fires
        self._lock_watch: dict[int, object] = {}

    def subscribe(self, notify: Callable[[], None]) -> None:
        self._subscribers.append(notify)

    def unsubscribe(self, notify: Callable[[], None]) -> None:
        if notify in self._subscribers:
            self._subscribers.remove(notify)

    def _notify(self) -> None:
        for cb in list(self._subscribers):
            cb()

    @property
    def ready(self) -> bool:
        return self._ready

    def invalidate(self) -> None:
        """A session event: the server may have dropped the watches; rebuild on the next :meth:`ensure`
        (a rebuild under way when this is called does not count)."""
        self._ready = False
        self._epoch += 1

    def others_under(self, ledger_id: int) -> bool:
        """True when another marked ledger shares ``ledger_id``'s upper three hex levels (valid while
        :attr:`ready`)."""
        return self._uppers.get(ledger_id >> 16, 0) > (1 if ledger_id in self.marked else 0)

    async def ensure(self) -> bool:
        """Build the sets if needed; True when they are served from the watches, False when the server
        has no persistent watches (the caller walks instead).

        Raises:
            ZooKeeperError: the watches could not be added or the hierarchy not walked (retried on the
                next call).
        """
        if self._ready:
            return True
        if not self.supported:
            return False
        async with self._lock:
            if self._ready or not self.supported:
                return self._ready
            await self._sync()
        return self._ready

    async def _sync(self) -> None:
        if self.syncs and self.rebuild_jitter_s > 0:
            # a rebuild after a session event: every daemon of the cluster saw that event (a ZooKeeper
            # restart or leader change) at about the same moment, so their walks are spread out
            await asyncio.sleep(self._rng.uniform(0, self.rebuild_jitter_s))
        epoch = self._epoch
        self._buffer = []
        try:
            path = self.paths.ur_ledgers
            try:
                self._regs[path] = await self.zk.add_watch(path, self._on_event, recursive=True,
                                                           accept=ur_leaf_path)
            except ServerTooOld:
                log.info("ZooKeeper has no persistent watches (before 3.6): the marker hierarchy is walked "
                         "for each pick")
                self.supported = False
                await self.close()
                return
            marked = await self._walk()
            self.marked.clear()
            self.marked.update(marked)
            self.locked.clear()  # relearned as creates fail (the watches armed before may be gone)
            self._lock_watch.clear()
            self._uppers = Counter(lid >> 16 for lid in marked)
            buffered, self._buffer = self._buffer, None
            for etype, lid in buffered:
                self._apply(etype, lid)
            self.generation += 1
            self.syncs += 1
            self._ready = epoch == self._epoch  # invalidated meanwhile: the watches may be gone again
        finally:
            self._buffer = None
        self._notify()

    def _on_event(self, etype: str, path: str) -> None:
        if etype not in ("CREATED", "DELETED"):
            return
        try:
            lid = ledger_id_from_ur_leaf(path[path.rfind("/") + 1:])
        except ValueError:
            return
        if self._buffer is not None:
            self._buffer.append((etype, lid))
        elif self._ready:
            self._apply(etype, lid)
        self._notify()

    async def saw_locked(self, ledger_id: int) -> None:
        """Another session holds ``ledger_id``'s lock (a create of it failed with NodeExists): keep the
        ledger in :attr:`locked` until the lock goes, told by a one-shot ``exists`` watch on it (which
        also wakes the subscribers). Nothing is recorded when the lock is already gone or ZooKeeper
        cannot be asked (the next pick tries the ledger again: one more failed transaction at worst)."""
        if not self._ready or ledger_id in self._lock_watch:
            return
        token = object()
        fired = False
        self._lock_watch[ledger_id] = token

        def released(_event: object) -> None:  # event loop
            nonlocal fired
            fired = True
            if self._lock_watch.get(ledger_id) is token:
                del self._lock_watch[ledger_id]
                self.locked.discard(ledger_id)
                self._notify()

        try:
            stat = await self.zk.exists(self.paths.ur_lock(ledger_id), watch=released)
        except ZooKeeperError:
            stat = None
        if self._lock_watch.get(ledger_id) is not token:
            return  # rebuilt meanwhile
        if stat is None or fired:  # released already (the watch, armed on a missing znode, stays harmless)
            del self._lock_watch[ledger_id]
            return
        self.locked.add(ledger_id)

    def _apply(self, etype: str, lid: int) -> None:
        if etype == "CREATED":
            if lid not in self.marked:
                self.marked.add(lid)
                self._uppers[lid >> 16] += 1
            self.generation += 1
        elif lid in self.marked:
            self.marked.discard(lid)
            self.locked.discard(lid)  # healed: its lock went in the same transaction
            self._lock_watch.pop(lid, None)
            self._uppers[lid >> 16] -= 1
            if self._uppers[lid >> 16] <= 0:
                del self._uppers[lid >> 16]

    async def close(self) -> None:
        """Drop the watches (best effort)."""
        self._ready = False
        for path, reg in list(self._regs.items()):
            await self.zk.remove_watch(path, reg)
        self._regs.clear()
