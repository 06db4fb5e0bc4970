"""State and plumbing shared by the two ways of following the ledger tree (EDGE): :class:`TreeBase`
(tasks, session events, lost watches, read-failure warnings, listing the tree into an
:class:`~autorecovery.audit.record_index.IdDigest`, applying a ledger znode to the index) and the helpers
:func:`chunked` and :func:`leaf_path`. The watcher is :mod:`autorecovery.zk.ledger_tree.tree_watcher`.
"""

import asyncio
import time
from collections.abc import Callable

import structlog

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.record_index import IdDigest
from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger.ids import is_ledger_leaf_name, is_ledger_level_name, ledger_id_from_path
from autorecovery.zk.bridge import NoNodeError, SessionEvent, ZkClient
from autorecovery.zk.ledgers import RESERVED
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.auditor")

#: Back-off (s) between re-arm passes that still had failures: doubles from the first value to the cap.
REARM_BACKOFF_S = (0.2, 30.0)
#: At most one warning per this many seconds about failed ledger-tree reads (the rest are counted).
WARN_EVERY_S = 10.0
#: Most ledgers read by one multiRead request (persistent mode); the answer is one packet of roughly
#: this many metadata znodes (~100-300 bytes each for typical ensembles).
MAX_BATCH = 1000


class TreeBase:
    """The state and plumbing both ways of following the ledger tree share (see
    :class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`, which documents the arguments): the task set,
    the session follower, lost-watch bookkeeping, rate-limited read-failure warnings, the tree listing
    into an id digest, and applying one ledger znode to the index."""

    def __init__(self, zk: ZkClient, paths: Paths, index: BookieLedgerIndex, *, concurrency: int = 500,
                 persistent: bool | None = None) -> None:
        self.zk = zk
        self.paths = paths
        self.index = index
        self.persistent = persistent
        self._sem = asyncio.Semaphore(concurrency)
        # persistent mode: batches of ``_batch`` reads, at most concurrency // _batch of them in flight
        self._batch = max(1, min(MAX_BATCH, concurrency // 4))
        self._batch_sem = asyncio.Semaphore(max(1, concurrency // self._batch))
        self._dirs: dict[str, set[str]] = {}
        self._dir_armed: set[str] = set()
        self._armed: set[int] = set()
        self._tasks: set[asyncio.Task] = set()
        self._stopped = False
        self.malformed = 0
        self._malformed_ids: set[int] = set()
        self.reads = 0
        self.requests = 0
        self.changed = asyncio.Event()  # set after each applied update (tests wait on it)
        # watches lost on a connection loss (or a failed read), re-armed once connected
        self._lost_dirs: set[str] = set()
        self._lost_ledgers: set[int] = set()
        self._rearm_task: asyncio.Task | None = None
        self._session_q: asyncio.Queue | None = None
        self._session_task: asyncio.Task | None = None
        self.rearmed = 0  # watches re-armed after a loss
        self.read_failures = 0  # failed tree reads (each retried)
        self._last_warn = 0.0
        self._suppressed = 0
        # persistent mode
        self._following = False  # persistent mode set up
        self._tops: dict[str, Callable[[str, str], None]] = {}  # top-level ledger directory → its persistent recursive watch
        self._root_armed = False  # the one-shot child watch on the root (new top-level directories)
        self._watch_lost = False
        self._pending: set[int] = set()  # ledgers notified CREATED/CHANGED, not yet re-read
        self._flusher: asyncio.Task | None = None
        self._gen = 0  # numbers the read batches, in issue order
        self._in_flight: dict[int, int] = {}  # batch number → ledgers being read
        self._tombs: dict[int, int] = {}  # ledger → newest batch number issued before its deletion was seen
        self.events = 0  # ledger notifications handled (persistent mode)
        self.resyncs = 0  # full re-reads after a connection loss (persistent mode)

    @property
    def watches_held(self) -> int:
        """ZooKeeper watches this watcher holds: in persistent mode one per top-level ledger directory
        (``00``, ``01``...) plus the root's child watch, else one per directory and ledger."""
        if self.persistent:
            return 0 if self._watch_lost else len(self._tops) + int(self._root_armed)
        return len(self._dir_armed) + len(self._armed)

    # -- plumbing ---------------------------------------------------------------------------
    def _spawn(self, coro) -> None:
        if self._stopped:
            coro.close()
            return
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None and not self._stopped:
            # every read handles its own failures; anything else is a bug that must not be silent
            log.error("ledger tree update failed", error=repr(t.exception()))

    def stop(self) -> None:
        """Cancel every update and the re-arm loop, and stop following the session. Idempotent."""
        self._stopped = True
        for t in list(self._tasks):
            t.cancel()
        for task in (self._rearm_task, self._session_task):
            if task is not None:
                task.cancel()
        if self._session_q is not None:
            self.zk.unsubscribe(self._session_q)
            self._session_q = None
        if self._following:
            # no callback from now on; the server drops the watches (best effort, awaited by settle())
            self._following = False
            for top, reg in sorted(self._tops.items()):
                self.zk.forget_watch(top, reg)  # at once: a successor may add its own right after
                t = asyncio.ensure_future(self.zk.remove_watch(top, reg))
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
            self._tops.clear()

    @property
    def lost_watches(self) -> int:
        """Watches lost and not yet re-armed: the persistent watch (0 or 1) plus directories and
        ledgers (per-ledger mode) or ledgers whose read failed (persistent mode)."""
        return int(self._watch_lost) + len(self._lost_dirs) + len(self._lost_ledgers)

    def _follow_session(self) -> None:
        if self._session_q is not None or self._stopped:
            return
        q = self._session_q = self.zk.session_events()

        async def follow() -> None:
            while not self._stopped:
                ev = await q.get()
                if ev == SessionEvent.CONNECTED:
                    self._schedule_rearm()
                elif self.persistent and self._following:
                    # SUSPENDED or LOST: the server dropped the persistent watches with the connection
                    self._watch_lost = True

        self._session_task = asyncio.ensure_future(follow())

    def _lose_dir(self, path: str) -> None:
        self._dir_armed.discard(path)
        self._lost_dirs.add(path)
        self._schedule_rearm()

    def _lose_ledger(self, lid: int) -> None:
        self._armed.discard(lid)
        self._lost_ledgers.add(lid)
        self._schedule_rearm()

    def _schedule_rearm(self) -> None:
        if self._stopped or not (self._lost_dirs or self._lost_ledgers or self._watch_lost):
            return
        if self._rearm_task is None or self._rearm_task.done():
            self._rearm_task = asyncio.ensure_future(self._rearm_loop())

    async def _rearm_loop(self) -> None:
        """Re-arm what was lost, once connected (:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`
        defines it: it needs both following modes)."""
        raise NotImplementedError

    def _read_failed(self, path: str, exc: BaseException) -> None:
        self.read_failures += 1
        now = time.monotonic()
        if now - self._last_warn >= WARN_EVERY_S:
            log.warning("ledger tree read failed; will retry once connected", path=path, error=str(exc),
                        suppressed=self._suppressed)
            self._last_warn, self._suppressed = now, 0
        else:
            self._suppressed += 1

    @property
    def busy(self) -> bool:
        """True while watch-triggered updates are in flight."""
        return any(not t.done() for t in self._tasks)

    async def settle(self) -> None:
        """Wait until no watch-triggered update is in flight."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _leaf_id(self, path: str) -> int | None:
        try:
            return ledger_id_from_path(self.paths.root, path)
        except ValueError:
            return None

    def _split(self, kids, depth: int) -> tuple[list[str], list[str]]:
        subdirs, leaves = [], []
        for n in kids:
            if depth == 0 and n in RESERVED:
                continue
            if depth > 0 and is_ledger_leaf_name(n):
                leaves.append(n)
            elif is_ledger_level_name(n) and depth < 4:
                subdirs.append(n)
        return subdirs, leaves

    def _depth(self, path: str) -> int:
        return 0 if path == self.paths.root else path[len(self.paths.root) + 1:].count("/") + 1

    def _apply_data(self, lid: int, data: bytes, mzxid: int, path: str) -> None:
        if self.index.version(lid) == mzxid:
            return  # unchanged since the read that indexed it (e.g. a re-read after a connection loss)
        try:
            self.index.put_znode(lid, data, mzxid, path)
        except MalformedMetadataError as exc:
            if lid not in self._malformed_ids:
                self.malformed += 1
                log.warning("skipping malformed ledger metadata", path=path, error=str(exc))
            self._malformed_ids.add(lid)
            self.index.remove(lid)
            return
        self._malformed_ids.discard(lid)
        self.changed.set()

    # -- listing ----------------------------------------------------------------------------
    async def _tree_ids(self, collect: set[int] | None, start: str | None = None) -> IdDigest:
        """List the tree (children only, no data reads, no watches) into a digest of ledger ids;
        also into ``collect`` when given. ``start``: only below this directory."""
        digest = IdDigest()

        async def walk(path: str, depth: int) -> None:
            try:
                async with self._sem:
                    kids = await self.zk.get_children(path)
            except NoNodeError:
                return
            subdirs, leaves = self._split(kids, depth)
            for n in leaves:
                lid = self._leaf_id(f"{path}/{n}")
                if lid is not None:
                    digest.add(lid)
                    if collect is not None:
                        collect.add(lid)
            await asyncio.gather(*(walk(f"{path}/{n}", depth + 1) for n in subdirs))

        if start is None:
            await walk(self.paths.root, 0)
        else:
            await walk(start, self._depth(start))
        return digest


def leaf_path(path: str) -> bool:
    """Whether ``path``'s last name looks like a ledger metadata leaf (``L`` + 4 digits): the test that
    keeps notifications of markers, locks, directories and bookies on kazoo's thread."""
    return is_ledger_leaf_name(path[path.rfind("/") + 1:])


async def chunked(fn, items: list, size: int = 2000) -> None:
    """Await ``fn(item)`` for every item, ``size`` at a time: a level of 10k ledgers does not become
    10k live coroutines at once (peak memory), while the ZooKeeper semaphore still keeps ~500 reads
    in flight."""
    for i in range(0, len(items), size):
        await asyncio.gather(*(fn(x) for x in items[i:i + size]))
