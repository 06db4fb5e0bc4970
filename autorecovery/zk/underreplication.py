"""Under-replicated ledger markers, worker locks and the AutoRecovery switches on ZooKeeper (EDGE).

Upstream ``ZkLedgerUnderreplicationManager``, byte for byte on the znodes (``R`` = ledgers root):

* ``R/underreplication/LAYOUT``: text ``LedgerRereplicationLayoutFormat`` ``type: "BASIC" version: 1``;
  any other content refuses to start (:class:`CompatibilityError`).
* markers ``R/underreplication/ledgers/{4 levels of 4 lowercase hex digits}/urL{id:010d}`` holding the
  *text* ``UnderreplicatedLedgerFormat`` (``replica: "<bookie id>"`` lines, ``ctime: <ms>``);
* locks ``R/underreplication/locks/urL{id:010d}``: EPHEMERAL, text ``LockDataFormat`` with this host's
  name (upstream uses the machine host name, not the bookie id);
* ``R/underreplication/disable``: present = AutoRecovery disabled;
* ``R/underreplication/lostBookieRecoveryDelay``: decimal ASCII seconds (the znode wins over config);
* ``checkallledgersctime``, ``placementpolicycheckctime``, ``replicascheckctime``: *binary* protobuf,
  field 1 = ms since the epoch.

Better than upstream:

* :meth:`UnderreplicationManager.mark_many` writes markers in ZooKeeper ``multi`` batches (the parent
  level and the marker in one transaction; upstream issues one create per ledger, #3541);
* the marked ids are kept by a persistent watch (:mod:`.ur_index`, ZooKeeper 3.6+), and the locks
  other sessions hold are learned from failed creates and watched one by one until released: a pick
  reads nothing to know its candidates, whatever the queue length (upstream walks the hierarchy per
  pick), and no daemon hears of locks it never met; before 3.6, the walk reads it through a
  watch-invalidated cache (upstream's SubTreeCache). The caller may *order* candidates (priority)
  instead of a random walk only;
* :meth:`get_ledger_to_rereplicate` waits on watches, never polls; the ``disable`` answer is kept
  under its exists-watch (no read per lock);
* fewer round trips per healed ledger (issue 29): see :mod:`autorecovery.zk.ur.locks`.

The manager is composed of parts, each one idea: :mod:`.ur_formats` (codecs), :mod:`.ur_marking` (the
Auditor's marker writes), :mod:`.ur_locks` (the worker's locks and marker deletes),
:mod:`.ur_switches` (disable, lost-bookie delay, check ctimes); this module holds the layout, the
session handling and the watch-cached walk that picks the next ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable

import structlog
from google.protobuf import text_format

from autorecovery.errors import CompatibilityError, ZooKeeperError
from autorecovery.ledger import textformat
from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.proto import bookkeeper_formats_pb2 as pb
from autorecovery.zk.ur import formats as ur_formats
from autorecovery.zk.bridge import NoNodeError, NodeExistsError, SessionEvent, ZkClient
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.paths import UR_LAYOUT_TEXT, Paths
from autorecovery.zk.ur.formats import UNASSIGNED_CTIME, UnderreplicatedLedger, decode_marker
from autorecovery.zk.ur.index import MarkedIndex, shared_index
from autorecovery.zk.ur.locks import LockingMixin
from autorecovery.zk.ur.marking import MarkingMixin
from autorecovery.zk.ur.switches import SwitchesMixin

log = structlog.get_logger("autorecovery.underreplication")


class UnderreplicationManager(MarkingMixin, LockingMixin, SwitchesMixin):
    """Upstream ``LedgerUnderreplicationManager`` on ZooKeeper, shared by the Auditor and the worker.

    Args:
        zk: a started :class:`ZkClient`.
        paths: the cluster's znode paths.
        store_ctime: write ``ctime`` into markers (``storeSystemTimeAsLedgerUnderreplicatedMarkTime``).
        lock_owner: data of the lock znodes (upstream: the machine host name).
        now_ms: wall clock in ms since the epoch (injectable for tests).

    Attributes:
        held: ledger id → marker version seen at acquire, for every lock this instance holds.

    Errors: ``CompatibilityError`` (bad layout), ``UnavailableError`` (enable/disable/trigger refused),
    :class:`autorecovery.errors.ZooKeeperError` for other ZooKeeper failures.
    """

    def __init__(self, zk: ZkClient, paths: Paths, *, store_ctime: bool = True,
                 lock_owner: str | None = None, now_ms: Callable[[], int] | None = None,
                 rng: random.Random | None = None) -> None:
        self.zk = zk
        self.paths = paths
        self.store_ctime = store_ctime
        self.lock_owner = lock_owner if lock_owner is not None else socket.gethostname()
        self._now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._rng = rng or random.Random()
        self.held: dict[int, int] = {}
        # acquire-walk cache: znode path → children, dropped when a child watch fires
        self._cache: dict[str, list[str]] = {}
        self._watch_gen: dict[str, int] = {}  # path -> watch events seen (see _cached_children)
        self._changed = asyncio.Event()
        self._subscribers: list[asyncio.Event] = []
        self._session_q: asyncio.Queue | None = None
        self._session_task: asyncio.Task | None = None
        self._known_dirs: set[str] = set()  # upper hex levels known to exist (mark_many)
        self.ops_multi = 0  # successful multi transactions (benchmarks report it)
        self.lost_races = 0  # worker locks lost to another worker (lock held or marker gone meanwhile)
        self._marker_read: dict[int, tuple[bytes, object]] = {}  # marker read by acquire, for get_marker
        self._md_read: dict[int, tuple[bytes, object]] = {}  # metadata read by acquire, for the pass
        self._multi_read_lock = True  # False once the server refused multiRead (before 3.6)
        self._multi_read_children = True  # the same, for the walk's batched listings
        self._enabled_seen = False  # "disable" absent, and an exists-watch armed on it is still pending
        self._disable_gen = 0  # events of that watch
        self._walks = 0  # child-watch walks (without the index)
        # marked ids from a persistent watch, held locks met (ZooKeeper 3.6+): a pick reads nothing to know them
        self._index: MarkedIndex = shared_index(zk, paths, self.list_marked_ids)
        self._index.subscribe(self._notify)

    # -- set-up ---------------------------------------------------------------------------------
    async def init(self) -> None:
        """Create (or validate) ``underreplication``, its ``LAYOUT``, ``ledgers/`` and ``locks/``.

        Raises:
            CompatibilityError: naming the LAYOUT znode when it holds another type/version or garbage.
        """
        await self.zk.ensure_path(self.paths.underreplication)
        try:
            await self.zk.create(self.paths.ur_layout, UR_LAYOUT_TEXT)
        except NodeExistsError:
            data, _ = await self.zk.get(self.paths.ur_layout)
            m = pb.LedgerRereplicationLayoutFormat()
            try:
                textformat.parse(data.decode(), m)
            except (text_format.ParseError, UnicodeDecodeError) as exc:
                raise CompatibilityError(f"{self.paths.ur_layout}: unreadable layout {data[:200]!r}: {str(exc)[:500]}") from exc
            if m.type != "BASIC" or m.version != 1:
                raise CompatibilityError(
                    f"{self.paths.ur_layout}: layout type {m.type!r} version {m.version} is not supported"
                    ' (expected type: "BASIC" version: 1)'
                ) from None
        await self.zk.ensure_path(self.paths.ur_ledgers)
        await self.zk.ensure_path(self.paths.ur_locks)
        if self._session_task is None:
            self._session_q = self.zk.session_events()
            self._session_task = asyncio.ensure_future(self._on_session())

    async def _on_session(self) -> None:
        assert self._session_q is not None
        while True:
            ev = await self._session_q.get()
            # after a reconnect or a new session our watch-based cache may be stale
            self._cache.clear()
            self._index.invalidate()
            self._enabled_seen = False
            self._notify()
            if ev == SessionEvent.LOST:
                self.held.clear()  # ephemeral locks died with the session
                self._marker_read.clear()
                self._md_read.clear()

    def _notify(self) -> None:
        self._changed.set()
        for ev in self._subscribers:
            ev.set()

    def subscribe(self) -> asyncio.Event:
        """A new event of the caller's own, set whenever :attr:`changes` is (a watched marker or lock
        listing changed, or the session changed), so that several consumers (the acquire loop, a
        backlog refresher, the auditor's gauges) can clear and wait without stealing wake-ups from each
        other. Watches are armed by :meth:`watched_marked_ids` and the acquire walk.
        """
        ev = asyncio.Event()
        self._subscribers.append(ev)
        return ev

    def unsubscribe(self, ev: asyncio.Event) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(ev)

    async def watched_marked_ids(self) -> list[int]:
        """Every marked ledger id, watched: the next marker created or deleted sets :attr:`changes` and
        every :meth:`subscribe` event. Served from the persistent-watch index
        (:mod:`autorecovery.zk.ur.index`: no read once built); before ZooKeeper 3.6, read through the
        child-watch cache (only levels that changed since the last call are read again). Marker *data*
        changes (a merge into an existing marker) are not watched."""
        if await self._index.ensure():
            return list(self._index.marked)
        return await self._candidates()

    async def watched_marked_count(self) -> int:
        """How many ledgers are marked, watched as :meth:`watched_marked_ids` is, without building the
        list (a caller woken by every marker change, e.g. a benchmark waiting for an empty queue)."""
        if await self._index.ensure():
            return len(self._index.marked)
        return len(await self._candidates())

    @property
    def marked_generation(self) -> int:
        """Changes whenever a ledger may have become marked since the last look (see
        :attr:`MarkedIndex.generation`); without the index it changes on every pick. A ranking of the
        marked ids stays valid while it is unchanged: markers deleted meanwhile only leave it."""
        return self._index.generation if self._index.ready else -self._walks

    @property
    def changes(self) -> asyncio.Event:
        """Set whenever a watched marker or lock changes (or the session changes).

        A waiter clears it, polls (:meth:`poll_ledger_to_rereplicate`), and waits on it when nothing
        was found: watch-driven, no polling interval.
        """
        return self._changed

    async def close(self) -> None:
        """Release every held lock (upstream close()) and stop listening to session events."""
        try:
            await self.release_all()
        finally:
            self._index.unsubscribe(self._notify)
            if self._session_task is not None:
                self._session_task.cancel()
                self._session_task = None
            if self._session_q is not None:
                self.zk.unsubscribe(self._session_q)
                self._session_q = None

    # -- reading --------------------------------------------------------------------------------
    async def get_marker(self, ledger_id: int) -> UnderreplicatedLedger | None:
        """The marker of ``ledger_id`` or None when the ledger is not marked. The first call after
        :meth:`acquire` locked a marked ledger returns the marker that acquire read (no round trip)."""
        path = self.paths.ur_marker(ledger_id)
        read = self._marker_read.pop(ledger_id, None)
        if read is not None:
            data, stat = read
        else:
            try:
                data, stat = await self.zk.get(path)
            except NoNodeError:
                return None
        return self.marker_from(ledger_id, data, stat)

    def marker_from(self, ledger_id: int, data: bytes, stat) -> UnderreplicatedLedger:
        """The marker of ``ledger_id`` from its znode's data and stat (read elsewhere, e.g. a
        ``multiRead``). Raises the decoder's error naming the path when the text is not a marker."""
        m = decode_marker(data, self.paths.ur_marker(ledger_id))
        return UnderreplicatedLedger(ledger_id, list(m.replica), m.ctime if m.HasField("ctime") else UNASSIGNED_CTIME,
                                     stat.version)

    async def _list_children(self, dirs: list[str]) -> list[list[str]]:
        """The children of each of ``dirs`` (a missing one: none), in order: :data:`WALK_BATCH` listings
        per ``multiRead``, :data:`WALK_IN_FLIGHT` requests at once (before ZooKeeper 3.6, one
        ``getChildren`` each, :data:`WALK_IN_FLIGHT_SINGLE` at once). No watches."""
        out: list[list[str]] = []
        if self._multi_read_children and dirs:
            batches = [dirs[i:i + ur_formats.WALK_BATCH] for i in range(0, len(dirs), ur_formats.WALK_BATCH)]
            try:
                for i in range(0, len(batches), ur_formats.WALK_IN_FLIGHT):
                    answers = await asyncio.gather(
                        *(self.zk.get_children_many(b) for b in batches[i:i + ur_formats.WALK_IN_FLIGHT]))
                    for answer in answers:
                        out.extend(kids if isinstance(kids, list) else [] for kids in answer)
                return out
            except ServerTooOld:
                self._multi_read_children = False
                out = []

        async def children(p: str) -> list[str]:
            try:
                return await self.zk.get_children(p)
            except NoNodeError:
                return []

        for i in range(0, len(dirs), ur_formats.WALK_IN_FLIGHT_SINGLE):
            out.extend(await asyncio.gather(*(children(p) for p in dirs[i:i + ur_formats.WALK_IN_FLIGHT_SINGLE])))
        return out

    async def _walk_leaf_dirs(self) -> list[str]:
        """Every 4th-level hex directory under ``ledgers/``, sorted (no watches; a bounded window of
        requests, see :meth:`_list_children`: about 3 + K / :data:`WALK_BATCH` requests for K markers)."""
        level = [self.paths.ur_ledgers]
        for _ in range(4):
            kids = await self._list_children(level)
            level = [f"{p}/{k}" for p, ks in zip(level, kids, strict=True) for k in sorted(ks)]
        return level

    async def _leaves(self) -> list[tuple[str, list[str]]]:
        """(4th-level directory, its marker names sorted) for every directory of the tree."""
        dirs = await self._walk_leaf_dirs()
        return list(zip(dirs, (sorted(ks) for ks in await self._list_children(dirs)), strict=True))

    async def list_underreplicated(
        self, predicate: Callable[[list[str]], bool] | None = None
    ) -> AsyncIterator[UnderreplicatedLedger]:
        """Every marker (optionally those whose replica list satisfies ``predicate``), by ledger id
        within each hex level. Markers deleted during the walk are skipped (upstream
        listLedgersToRereplicate). The markers are read :data:`WALK_BATCH` per ``multiRead``
        (before ZooKeeper 3.6 one read each), :data:`WALK_IN_FLIGHT_SINGLE` requests at once."""
        ids: list[int] = []
        for _d, names in await self._leaves():
            for n in names:
                with contextlib.suppress(ValueError):
                    ids.append(ledger_id_from_ur_leaf(n))
        step = ur_formats.WALK_BATCH if self._multi_read_lock else ur_formats.WALK_IN_FLIGHT_SINGLE
        for i in range(0, len(ids), step):
            chunk = ids[i:i + step]
            for m in await self._read_markers(chunk):
                if m is not None and (predicate is None or predicate(m.replicas)):
                    yield m

    async def _read_markers(self, ids: list[int]) -> list[UnderreplicatedLedger | None]:
        """The markers of ``ids`` (None: gone), in order: one ``multiRead``, or one read each (at once)
        when the server has none."""
        if self._multi_read_lock:
            try:
                answers = await self.zk.get_many([self.paths.ur_marker(lid) for lid in ids])
            except ServerTooOld:
                self._multi_read_lock = False
            else:
                return [None if isinstance(a, Exception) else self.marker_from(lid, a[0], a[1])
                        for lid, a in zip(ids, answers, strict=True)]
        return list(await asyncio.gather(*(self.get_marker(lid) for lid in ids)))

    async def list_marked_ids(self) -> set[int]:
        """Ids of every marked ledger from the hierarchy alone (no data reads; see
        :meth:`_walk_leaf_dirs` for its cost)."""
        out: set[int] = set()
        for _d, names in await self._leaves():
            for n in names:
                with contextlib.suppress(ValueError):
                    out.add(ledger_id_from_ur_leaf(n))
        return out

    async def lock_holder(self, ledger_id: int) -> str | None:
        """Data (host name) of the ledger's lock, or None when nobody holds it."""
        try:
            data, _ = await self.zk.get(self.paths.ur_lock(ledger_id))
        except NoNodeError:
            return None
        m = pb.LockDataFormat()
        try:
            textformat.parse(data.decode(), m)
        except (text_format.ParseError, UnicodeDecodeError):
            return data.decode(errors="replace")
        return m.bookieId

    def _on_child_watch(self, path: str):
        def cb(_event) -> None:
            self._watch_gen[path] = self._watch_gen.get(path, 0) + 1
            self._cache.pop(path, None)
            self._notify()
        return cb

    async def _cached_children(self, path: str) -> list[str]:
        """Children of ``path`` through the watch cache.

        A watch event can reach the loop before the coroutine that issued the read resumes (both are
        handed over with call_soon_threadsafe), so a listing is cached only if no watch on ``path``
        fired while it was read; otherwise the stale listing would stay cached with its watch spent.
        """
        kids = self._cache.get(path)
        if kids is None:
            gen = self._watch_gen.get(path, 0)
            try:
                kids = await self.zk.get_children(path, watch=self._on_child_watch(path))
            except NoNodeError:
                kids = []
                # watch for its (re)creation: exists() leaves a watch on a missing node
                try:
                    if await self.zk.exists(path, watch=self._on_child_watch(path)) is not None:
                        return kids  # created meanwhile (a data watch only): read it again next time
                except ZooKeeperError as exc:  # no watch armed: the next session event drops the cache
                    log.debug("exists watch not armed on a missing marker level", path=path, error=str(exc))
            if self._watch_gen.get(path, 0) == gen:
                self._cache[path] = kids
        return kids

    async def _candidates(self) -> list[int]:
        """Every marked ledger id, read through the watch cache (servers before 3.6)."""
        self._walks += 1
        out: list[int] = []
        level = [self.paths.ur_ledgers]
        for _ in range(4):
            nxt: list[str] = []
            kids = await asyncio.gather(*(self._cached_children(p) for p in level))
            for p, ks in zip(level, kids, strict=True):
                nxt.extend(f"{p}/{k}" for k in ks)
            level = nxt
        leaves = await asyncio.gather(*(self._cached_children(p) for p in level))
        for names in leaves:
            for n in names:
                try:
                    out.append(ledger_id_from_ur_leaf(n))
                except ValueError:
                    continue
        return out

    async def poll_ledgers_to_rereplicate(
            self, order: Callable[[Collection[int]], Iterable[int]] | None = None, n: int = 1) -> list[int]:
        """Like :meth:`poll_ledger_to_rereplicate`, but up to ``n`` ledgers, locked together
        (:meth:`acquire_many`: two round trips for the batch). The first ``n`` unlocked candidates in
        ``order`` are tried; when none of them could be locked, the next ``n``, until one is or the
        candidates run out. Returns the ids locked (empty: none)."""
        if n <= 1:
            lid = await self.poll_ledger_to_rereplicate(order)
            return [] if lid is None else [lid]
        marked, locked = await self._marked_and_locked()
        seq: Iterable[int]
        if order is not None:
            seq = order(marked)
        else:
            seq = list(marked)
            self._rng.shuffle(seq)
        batch: list[int] = []
        for lid in seq:
            if lid in locked or lid in self.held:
                continue
            batch.append(lid)
            if len(batch) == n:
                got = await self.acquire_many(batch)
                if got:
                    return got
                batch = []
        return await self.acquire_many(batch) if batch else []

    async def _marked_and_locked(self) -> tuple[Collection[int], Collection[int]]:
        """The marked and the locked ledger ids: the index's live sets when it serves, else one listing
        of each level (a lock leaf that is not a ledger id is skipped)."""
        if await self._index.ensure():
            return self._index.marked, self._index.locked
        marked = set(await self._candidates())
        locked: set[int] = set()
        for name in await self._cached_children(self.paths.ur_locks):
            with contextlib.suppress(ValueError):
                locked.add(ledger_id_from_ur_leaf(name))
        return marked, locked

    async def poll_ledger_to_rereplicate(
            self, order: Callable[[Collection[int]], Iterable[int]] | None = None) -> int | None:
        """One non-blocking attempt to lock a marked ledger (upstream pollLedgerToRereplicate).

        Candidates are every marked ledger that has no lock. ``order`` is given the marked ids (a set:
        with the index, the live one, so a lazy ``order`` costs O(1) amortised per pick) and returns them
        in the order to try (the worker's priority); locked ones are skipped as they come. Without
        ``order`` they are shuffled (upstream's random walk). Returns the ledger id or None.
        """
        marked, locked = await self._marked_and_locked()
        if order is not None:
            seq: Iterable[int] = order(marked)
        else:
            seq = list(marked)
            self._rng.shuffle(seq)
        for lid in seq:
            if lid in locked or lid in self.held:
                continue
            if await self.acquire(lid):
                return lid
        return None

    async def get_ledger_to_rereplicate(
            self, order: Callable[[Collection[int]], Iterable[int]] | None = None) -> int:
        """Block until a marked ledger is locked and return its id (upstream getLedgerToRereplicate).

        Waits while AutoRecovery is disabled, and otherwise on the watches of the marker hierarchy and of
        the locks it found held (a new marker or the release of such a lock wakes it): no polling.
        """
        while True:
            await self.wait_while_disabled()
            self._changed.clear()
            lid = await self.poll_ledger_to_rereplicate(order)
            if lid is not None:
                return lid
            await self._changed.wait()


__all__ = [
    "UnderreplicationManager",
    "UnderreplicatedLedger",
    "decode_marker",
    "UNASSIGNED_CTIME",
]
