"""State and plumbing shared by the two ways of following the ledger tree (EDGE).

:class:`TreeState` is the one declared object the parts of
:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher` share (ZooKeeper client, paths,
index, semaphores, lost-watch sets, counters); :class:`TreePlumbing` works on it (tasks, session events,
lost watches, rate-limited read-failure warnings, listing the tree into an
:class:`~autorecovery.audit.record_index.IdDigest`, applying a ledger znode to the index). The helpers
:func:`chunked` and :func:`leaf_path` are used by every part.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.record_index import IdDigest
from autorecovery.errors import MalformedMetadataError, ZooKeeperError
from autorecovery.ledger.ids import is_ledger_leaf_name, is_ledger_level_name, ledger_id_from_path
from autorecovery.zk.bridge import NoNodeError, SessionEvent, ZkClient
from autorecovery.zk.session_gate import PASSED_THROUGH
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

#: What a :class:`~autorecovery.zk.bridge.ZkClient` request raises: ZooKeeperError (connection loss,
#: session expiry... translated by the bridge) or one of the kazoo errors it passes through (NoNodeError...).
READ_ERRORS: tuple[type[Exception], ...] = (ZooKeeperError, *PASSED_THROUGH)

T = TypeVar("T")


@dataclass
class TreeState:
    """Everything the parts of the ledger-tree watcher share, declared in one place.

    Args:
        zk, paths, index: the ZooKeeper client, the cluster's paths, the index kept equal to the tree.
        persistent: the following mode (see :class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`).
        concurrency: most ledger reads in flight (``auditorMaxNumberOfConcurrentOpenLedgerOperations``).
    """

    zk: ZkClient
    paths: Paths
    index: BookieLedgerIndex
    persistent: bool | None = None
    concurrency: int = 500
    sem: asyncio.Semaphore = field(init=False)
    #: persistent mode: batches of ``batch`` reads, at most concurrency // batch of them in flight
    batch: int = field(init=False)
    batch_sem: asyncio.Semaphore = field(init=False)
    # per-ledger mode: directory → its children, directories and ledgers whose watch is armed
    dirs: dict[str, set[str]] = field(default_factory=dict)
    dir_armed: set[str] = field(default_factory=set)
    armed: set[int] = field(default_factory=set)
    tasks: set[asyncio.Future[Any]] = field(default_factory=set)
    stopped: bool = False
    malformed: int = 0  # ledgers whose metadata did not decode (skipped, logged)
    malformed_ids: set[int] = field(default_factory=set)
    reads: int = 0  # metadata reads done (build + updates + reconciles), batched or not
    requests: int = 0  # ZooKeeper requests those reads took (a batch is one)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # set after each applied update
    # watches lost on a connection loss (or a failed read), re-armed once connected
    lost_dirs: set[str] = field(default_factory=set)
    lost_ledgers: set[int] = field(default_factory=set)
    rearm_task: asyncio.Future[None] | None = None
    session_q: asyncio.Queue[SessionEvent] | None = None
    session_task: asyncio.Future[None] | None = None
    rearmed: int = 0  # watches re-armed after a loss
    read_failures: int = 0  # failed tree reads (each retried)
    last_warn: float = 0.0
    suppressed: int = 0
    # persistent mode
    following: bool = False  # persistent mode set up
    #: top-level ledger directory → its persistent recursive watch
    tops: dict[str, Callable[[str, str], None]] = field(default_factory=dict)
    root_armed: bool = False  # the one-shot child watch on the root (new top-level directories)
    watch_lost: bool = False
    pending: set[int] = field(default_factory=set)  # ledgers notified CREATED/CHANGED, not yet re-read
    flusher: asyncio.Future[None] | None = None
    gen: int = 0  # numbers the read batches, in issue order
    in_flight: dict[int, int] = field(default_factory=dict)  # batch number → ledgers being read
    tombs: dict[int, int] = field(default_factory=dict)  # ledger → newest batch issued before its deletion
    events: int = 0  # ledger notifications handled (persistent mode)
    resyncs: int = 0  # full re-reads after a connection loss (persistent mode)

    def __post_init__(self) -> None:
        self.sem = asyncio.Semaphore(self.concurrency)
        self.batch = max(1, min(MAX_BATCH, self.concurrency // 4))
        self.batch_sem = asyncio.Semaphore(max(1, self.concurrency // self.batch))


class TreePlumbing:
    """What both following modes do with the :class:`TreeState`: the task set, the session follower,
    lost-watch bookkeeping, rate-limited read-failure warnings, the tree listing into an id digest, and
    applying one ledger znode to the index.

    Args:
        state: the shared state.
        rearm: ``() -> coroutine`` re-arming what was lost once connected (it needs both modes: the
            watcher supplies it).
    """

    def __init__(self, state: TreeState, rearm: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.s = state
        self._rearm = rearm

    # -- tasks ------------------------------------------------------------------------------
    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a tracked update (awaited by :meth:`settle`); closed unrun once stopped."""
        if self.s.stopped:
            coro.close()
            return
        self.track(asyncio.ensure_future(coro))

    def track(self, t: asyncio.Future[Any]) -> None:
        """Track ``t`` as an update whose failure is logged."""
        self.s.tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Future[Any]) -> None:
        self.s.tasks.discard(t)
        if not t.cancelled() and t.exception() is not None and not self.s.stopped:
            # every read handles its own failures; anything else is a bug that must not be silent
            log.error("ledger tree update failed", error=repr(t.exception()))

    def stop(self) -> None:
        """Cancel every update and the re-arm loop, stop following the session, drop the persistent
        watches (best effort, awaited by :meth:`settle`). Idempotent."""
        s = self.s
        s.stopped = True
        for t in list(s.tasks):
            t.cancel()
        for task in (s.rearm_task, s.session_task):
            if task is not None:
                task.cancel()
        if s.session_q is not None:
            s.zk.unsubscribe(s.session_q)
            s.session_q = None
        if s.following:
            s.following = False
            for top, reg in sorted(s.tops.items()):
                s.zk.forget_watch(top, reg)  # at once: a successor may add its own right after
                t = asyncio.ensure_future(s.zk.remove_watch(top, reg))
                s.tasks.add(t)
                t.add_done_callback(s.tasks.discard)
            s.tops.clear()

    def busy(self) -> bool:
        """True while watch-triggered updates are in flight."""
        return any(not t.done() for t in self.s.tasks)

    async def settle(self) -> None:
        """Wait until no watch-triggered update is in flight."""
        while self.s.tasks:
            await asyncio.gather(*list(self.s.tasks), return_exceptions=True)

    # -- session and lost watches -----------------------------------------------------------
    def watches_held(self) -> int:
        """ZooKeeper watches held: persistent mode one per top-level ledger directory plus the root's
        child watch, else one per directory and ledger."""
        s = self.s
        if s.persistent:
            return 0 if s.watch_lost else len(s.tops) + int(s.root_armed)
        return len(s.dir_armed) + len(s.armed)

    def lost_watches(self) -> int:
        """Watches lost and not yet re-armed."""
        s = self.s
        return int(s.watch_lost) + len(s.lost_dirs) + len(s.lost_ledgers)

    def follow_session(self) -> None:
        """Follow the session's events: re-arm on CONNECTED; SUSPENDED/LOST lose the persistent watches."""
        s = self.s
        if s.session_q is not None or s.stopped:
            return
        q = s.session_q = s.zk.session_events()

        async def follow() -> None:
            while not s.stopped:
                ev = await q.get()
                if ev == SessionEvent.CONNECTED:
                    self.schedule_rearm()
                elif s.persistent and s.following:
                    # SUSPENDED or LOST: the server dropped the persistent watches with the connection
                    s.watch_lost = True

        s.session_task = asyncio.ensure_future(follow())

    def lose_dir(self, path: str) -> None:
        """The watch of directory ``path`` is lost: re-list it once connected."""
        self.s.dir_armed.discard(path)
        self.s.lost_dirs.add(path)
        self.schedule_rearm()

    def lose_ledger(self, lid: int) -> None:
        """The watch (or read) of ledger ``lid`` is lost: re-read it once connected."""
        self.s.armed.discard(lid)
        self.s.lost_ledgers.add(lid)
        self.schedule_rearm()

    def schedule_rearm(self) -> None:
        """Start the re-arm loop when something is lost and it is not running."""
        s = self.s
        if s.stopped or not (s.lost_dirs or s.lost_ledgers or s.watch_lost):
            return
        if s.rearm_task is None or s.rearm_task.done():
            s.rearm_task = asyncio.ensure_future(self._rearm())

    def read_failed(self, path: str, exc: BaseException) -> None:
        """Count a failed tree read; warn at most every :data:`WARN_EVERY_S` (the rest counted)."""
        s = self.s
        s.read_failures += 1
        now = time.monotonic()
        if now - s.last_warn >= WARN_EVERY_S:
            log.warning("ledger tree read failed; will retry once connected", path=path, error=str(exc),
                        suppressed=s.suppressed)
            s.last_warn, s.suppressed = now, 0
        else:
            s.suppressed += 1

    # -- the tree's shape -------------------------------------------------------------------
    def leaf_id(self, path: str) -> int | None:
        """The ledger id of a metadata znode path, None when ``path`` is not one."""
        try:
            return ledger_id_from_path(self.s.paths.root, path)
        except ValueError:
            return None

    @staticmethod
    def split(kids: Iterable[str], depth: int) -> tuple[list[str], list[str]]:
        """Children of a directory at ``depth`` (root 0) → (sub-directories, ledger leaves)."""
        subdirs, leaves = [], []
        for n in kids:
            if depth == 0 and n in RESERVED:
                continue
            if depth > 0 and is_ledger_leaf_name(n):
                leaves.append(n)
            elif is_ledger_level_name(n) and depth < 4:
                subdirs.append(n)
        return subdirs, leaves

    def depth(self, path: str) -> int:
        """Depth of directory ``path`` below the ledger root (the root is 0)."""
        root = self.s.paths.root
        return 0 if path == root else path[len(root) + 1:].count("/") + 1

    def apply_data(self, lid: int, data: bytes, mzxid: int, path: str) -> None:
        """Put one ledger znode into the index (unchanged ``mzxid``: nothing); malformed metadata is
        logged once per ledger and the ledger left out."""
        s = self.s
        if s.index.version(lid) == mzxid:
            return  # unchanged since the read that indexed it (e.g. a re-read after a connection loss)
        try:
            s.index.put_znode(lid, data, mzxid, path)
        except MalformedMetadataError as exc:
            if lid not in s.malformed_ids:
                s.malformed += 1
                log.warning("skipping malformed ledger metadata", path=path, error=str(exc))
            s.malformed_ids.add(lid)
            s.index.remove(lid)
            return
        s.malformed_ids.discard(lid)
        s.changed.set()

    async def tree_ids(self, collect: set[int] | None, start: str | None = None) -> IdDigest:
        """List the tree (children only, no data reads, no watches) into a digest of ledger ids; also
        into ``collect`` when given. ``start``: only below this directory.

        Raises:
            ZooKeeperError: a directory could not be listed.
        """
        s = self.s
        digest = IdDigest()

        async def walk(path: str, depth: int) -> None:
            try:
                async with s.sem:
                    kids = await s.zk.get_children(path)
            except NoNodeError:
                return
            subdirs, leaves = self.split(kids, depth)
            for n in leaves:
                lid = self.leaf_id(f"{path}/{n}")
                if lid is not None:
                    digest.add(lid)
                    if collect is not None:
                        collect.add(lid)
            await asyncio.gather(*(walk(f"{path}/{n}", depth + 1) for n in subdirs))

        if start is None:
            await walk(s.paths.root, 0)
        else:
            await walk(start, self.depth(start))
        return digest


def leaf_path(path: str) -> bool:
    """Whether ``path``'s last name looks like a ledger metadata leaf (``L`` + 4 digits): the test that
    keeps notifications of markers, locks, directories and bookies on kazoo's thread."""
    return is_ledger_leaf_name(path[path.rfind("/") + 1:])


async def chunked(fn: Callable[[T], Awaitable[object]], items: list[T], size: int = 2000) -> None:
    """Await ``fn(item)`` for every item, ``size`` at a time: a level of 10k ledgers does not become
    10k live coroutines at once (peak memory), while the ZooKeeper semaphore still keeps ~500 reads
    in flight."""
    for i in range(0, len(items), size):
        await asyncio.gather(*(fn(x) for x in items[i:i + size]))
