"""The ledger tree as an incremental bookie → ledgers index, kept current by ZooKeeper watches (EDGE).

Better than upstream's ``BookieLedgerIndexer``, which re-reads every ledger's metadata on each audit:
:class:`LedgerTreeWatcher` reads the tree once (on election), then follows changes, feeding the pure,
compact :class:`~autorecovery.audit.index.BookieLedgerIndex`. A full reconcile checks it against ZooKeeper.

Two ways to follow the tree:

* **Persistent** (ZooKeeper 3.6+, the default; issue 13): a persistent recursive watch per top-level
  ledger directory (``00``, ``01``..., and ``000``... for long ids: a handful) plus a one-shot child
  watch on the root for new top-level directories (:meth:`~autorecovery.zk.bridge.ZkClient.add_watch`),
  instead of a watch per ledger and per directory; reads batched into ``multiRead`` requests
  (:meth:`~autorecovery.zk.bridge.ZkClient.get_many`) instead of a request per ledger: the build is a
  listing of the directories plus one request per batch of ledgers. Not on the root itself, so the
  markers, locks and stream slots under ``underreplication`` (busy while workers replicate) never
  notify this session (measured: a recursive watch on the root made marker writes ~4x slower).
  A CREATED or CHANGED notification of a ledger znode queues it for a batched re-read, DELETED drops
  it; notifications of directories are filtered on kazoo's thread by the leaf name (``L`` + 4 digits).
  Every record keeps the znode's ``mzxid``: a read older than what the index holds is ignored, and a
  read issued before a deletion was seen never brings the ledger back (a tombstone per deletion, kept
  while older reads are in flight). After a connection loss the server has dropped the watches and
  nothing tells what changed meanwhile: once connected the watches are added again *first*, then the
  tree is listed and every ledger re-read in batches (unchanged ``mzxid``: no decode), ledgers no longer
  in the tree are re-read to confirm and dropped. That is the build's cost, once per connection loss;
  the per-ledger watches below paid a single read per ledger for the same, 1M requests at 1M ledgers.
* **Per-ledger watches** (the fallback, for servers older than 3.6, whose answer to the ``multiRead``
  probe is UNIMPLEMENTED or a dropped connection; logged as an error): child watches on every hierarchy level and a data watch on every
  ledger znode, one read per ledger.

Connection losses, per-ledger mode (issue 9): on SUSPENDED kazoo fires every watch once with ``EventType.NONE`` and
forgets it. Like kazoo's own ``ChildrenWatch``, the watcher remembers which directories and ledgers lost
their watch and, once the connection is back, re-reads exactly those (re-arming their watches): a
directory re-listed shows ledgers created or deleted meanwhile, a ledger re-read shows a close or an
ensemble change. A read that fails is logged (rate-limited) and retried with back-off instead of
dying silently. :meth:`LedgerTreeWatcher.check_consistency` compares the count and an
:class:`~autorecovery.audit.index.IdDigest` of the ledger ids in the tree with the index's on a short
schedule and heals what differs, so drift is never silent (``autorecovery_auditor_index_drift_ledgers``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from autorecovery.audit.index import BookieLedgerIndex, IdDigest, ReconcileReport
from autorecovery.errors import MalformedMetadataError, ZooKeeperError
from autorecovery.ledger.ids import is_ledger_leaf_name, is_ledger_level_name, ledger_id_from_path
from autorecovery.zk.bridge import ConnectionLoss, EventType, NoNodeError, ServerTooOld, SessionEvent, ZkClient
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


@dataclass(frozen=True)
class ConsistencyReport:
    """One consistency check: ledgers in the tree (malformed ones included), in the index (plus the
    malformed ones the index skips), and how many ids differed (0 when the digests agreed)."""

    tree: int
    index: int
    drift: int
    missing: tuple[int, ...] = ()
    extra: tuple[int, ...] = ()


class LedgerTreeWatcher:
    """Keeps a :class:`BookieLedgerIndex` equal to the ledger metadata in ZooKeeper.

    Persistent mode (ZooKeeper 3.6+): a persistent recursive watch per top-level ledger directory and
    a child watch on the root, batched ``multiRead`` reads. Per-ledger mode (older servers): child watches on the root and every hierarchy
    level notice created and deleted ledgers; a data watch on every ledger znode notices closes and
    ensemble changes; each is one-shot and re-armed by the read that follows it. ZooKeeper work is
    bounded by ``concurrency`` (``auditorMaxNumberOfConcurrentOpenLedgerOperations``): at most that
    many ledger reads in flight, as single reads or in batches.

    Args:
        persistent: None (default) probes the server and falls back to per-ledger watches when it is
            older than 3.6; True insists (:meth:`build` raises ``ServerTooOld``); False forces per-ledger
            watches. After :meth:`build` it says which mode runs.

    Attributes:
        malformed: ledgers whose metadata did not decode (skipped, logged).
        reads: metadata reads done (build + updates + reconciles), batched or not.
        requests: ZooKeeper requests those reads took (a batch is one).
    """

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
        self._tops: dict[str, object] = {}  # top-level ledger directory → its persistent recursive watch
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
        for t in (self._rearm_task, self._session_task):
            if t is not None:
                t.cancel()
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
        """Re-read every directory and ledger whose watch was lost, once connected; repeat with
        back-off while reads fail. Directories first: a re-listed directory also loads new ledgers."""
        backoff = REARM_BACKOFF_S[0]
        while not self._stopped and (self._lost_dirs or self._lost_ledgers or self._watch_lost):
            await self.zk.connected.wait()
            if self.persistent:
                if not await self._rearm_persistent():
                    await asyncio.sleep(backoff)  # back-off between retries, not synchronisation
                    backoff = min(REARM_BACKOFF_S[1], backoff * 2)
                else:
                    backoff = REARM_BACKOFF_S[0]
                continue
            dirs, self._lost_dirs = sorted(self._lost_dirs), set()
            lids, self._lost_ledgers = sorted(self._lost_ledgers), set()
            await _chunked(self._refresh_dir, dirs)
            await _chunked(lambda lid: self._load(self.paths.ledger(lid)), lids)
            failed = len(self._lost_dirs) + len(self._lost_ledgers)
            self.rearmed += len(dirs) + len(lids) - failed
            if dirs or lids:
                log.info("re-armed ledger tree watches after a connection loss", directories=len(dirs),
                         ledgers=len(lids), failed=failed)
            if failed:
                await asyncio.sleep(backoff)  # back-off between retries, not synchronisation
                backoff = min(REARM_BACKOFF_S[1], backoff * 2)
            else:
                backoff = REARM_BACKOFF_S[0]

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

    # -- build ------------------------------------------------------------------------------
    async def build(self) -> int:
        """Read the whole tree and start following it (persistent watch, or every per-ledger watch
        armed), and follow the session from now on (re-arming lost watches on reconnect); returns the
        number of ledgers indexed.

        Raises:
            ZooKeeperError: a directory could not be listed (the build is incomplete).
            ServerTooOld: ``persistent=True`` and the server is older than 3.6.
        """
        self._follow_session()
        if self.persistent is not False:
            try:
                await self._probe()
                self.persistent = True
                self._following = True
                await self._arm_tops()
            except ServerTooOld as exc:
                if self.persistent:
                    raise
                log.error("ZooKeeper is older than 3.6 (no persistent watches / multiRead): falling back to a "
                          "data watch per ledger and a read per ledger; upgrade ZooKeeper for a 1M-ledger "
                          "auditor", error=str(exc))
                self.persistent = False
        if self.persistent:
            await self._full_read()
        else:
            # after a refused addWatch an older server also closes the connection: a walk that loses it
            # is redone once connected (it is idempotent)
            for attempt in range(1, 4):
                try:
                    await self._walk(self.paths.root, 0)
                    break
                except ZooKeeperError as exc:
                    if not isinstance(exc.__cause__, ConnectionLoss) or attempt == 3:
                        raise
                    await asyncio.sleep(0)  # let the SUSPENDED state published with the loss land
                    await asyncio.wait_for(self.zk.connected.wait(), self.zk.session_timeout_ms / 1000 * 3)
        await self.settle()
        return len(self.index)

    async def _list(self, path: str) -> list[str] | None:
        watch = None
        if path not in self._dir_armed:
            self._dir_armed.add(path)
            watch = self._dir_watch(path)
        try:
            async with self._sem:
                return await self.zk.get_children(path, watch=watch)
        except NoNodeError:
            self._dir_armed.discard(path)
            return None
        except BaseException:
            self._dir_armed.discard(path)
            raise

    async def _walk(self, path: str, depth: int) -> None:
        kids = await self._list(path)
        if kids is None:
            self._forget_dir(path)
            return
        self._dirs[path] = set(kids)
        subdirs, leaves = self._split(kids, depth)
        await asyncio.gather(_chunked(lambda n: self._load(f"{path}/{n}"), leaves),
                             _chunked(lambda n: self._walk(f"{path}/{n}", depth + 1), subdirs))

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

    async def _load(self, path: str, arm: bool = True) -> None:
        lid = self._leaf_id(path)
        if lid is None:
            return
        watch = None
        if arm and lid not in self._armed:
            self._armed.add(lid)
            watch = self._data_watch(path, lid)
        try:
            async with self._sem:
                self.reads += 1
                self.requests += 1
                data, stat = await self.zk.get(path, watch=watch)
        except NoNodeError:
            self._armed.discard(lid)
            self._malformed_ids.discard(lid)
            self.index.remove(lid)
            self.changed.set()
            return
        except asyncio.CancelledError:
            if watch is not None:
                self._armed.discard(lid)
            raise
        except Exception as exc:  # noqa: BLE001 - connection loss etc.: retried, never silent
            self._read_failed(path, exc)
            self._lose_ledger(lid)
            return
        self._apply_data(lid, data, stat.mzxid, path)

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

    # -- persistent mode ----------------------------------------------------------------------
    async def _probe(self, attempts: int = 3) -> None:
        """Whether the server has ZooKeeper 3.6's requests: a multiRead of the root. A server before 3.6
        answers UNIMPLEMENTED and closes the connection (``UnimplementedRequestProcessor``): the answer
        or the connection loss may come first; a connection lost right at this request ``attempts``
        times in a row is taken for that answer.

        Raises:
            ServerTooOld: as above. ZooKeeperError: any other failure.
        """
        for attempt in range(1, attempts + 1):
            try:
                await self.zk.get_many([self.paths.root])
                return
            except ServerTooOld:
                raise
            except ZooKeeperError as exc:
                if not isinstance(exc.__cause__, ConnectionLoss):
                    raise
                if attempt == attempts:
                    raise ServerTooOld(f"ZooKeeper at {self.zk.hosts} dropped the connection on multiRead "
                                       f"{attempts} times in a row (a server before 3.6 does)") from exc
                await asyncio.sleep(0)  # let the SUSPENDED state published with the loss land
                await asyncio.wait_for(self.zk.connected.wait(), self.zk.session_timeout_ms / 1000 * 3)

    async def _arm_tops(self, again: bool = False) -> list[str]:
        """List the root with a one-shot child watch and keep a persistent recursive watch on every
        top-level ledger directory (``00``, ``01``... and ``000``... for long ids); not on the root
        itself, so the markers, locks and stream slots under ``underreplication`` (busy while workers
        replicate) never send this session a notification. ``again``: re-add every watch (after a
        connection loss). Returns the directories whose watch is new (their ledgers still to be read).

        Raises:
            ZooKeeperError: the root could not be listed or a watch not added.
        """
        watch = None
        if again or not self._root_armed:  # again: kazoo's NONE for the lost one may still be on its way
            self._root_armed = True
            watch = self._root_watch
        try:
            kids = await self.zk.get_children(self.paths.root, watch=watch)
        except BaseException:
            if watch is not None:
                self._root_armed = False
            raise
        tops = {f"{self.paths.root}/{n}" for n in self._split(kids, 0)[0]}
        new = []
        for top in sorted(tops):
            if again or top not in self._tops:
                reg = await self.zk.add_watch(top, self._on_event, recursive=True, accept=_leaf_path)
                if top not in self._tops:
                    new.append(top)
                self._tops[top] = reg
        for top in sorted(set(self._tops) - tops):
            # emptied and deleted: every ledger below sent its DELETED already
            await self.zk.remove_watch(top, self._tops.pop(top))
        return new

    def _root_watch(self, event) -> None:
        self._root_armed = False
        if self._stopped or event.type == EventType.NONE:
            return  # a connection loss: the resync after it re-arms everything
        self._spawn(self._refresh_tops())

    async def _refresh_tops(self) -> None:
        """A top-level directory appeared (or went): watch it first, then read what it already holds."""
        try:
            new = await self._arm_tops()
            ids: set[int] = set()
            for top in new:
                await self._tree_ids(ids, top)
            await self._read_batches(sorted(ids))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a full resync re-does it, never silent
            self._read_failed(self.paths.root, exc)
            self._watch_lost = True
            self._schedule_rearm()

    def _on_event(self, etype: str, path: str) -> None:
        """A notification of a persistent watch (event loop, in server order)."""
        if self._stopped:
            return
        lid = self._leaf_id(path)
        if lid is None:
            return  # a directory, a marker, a lock, a stream slot, a bookie... not ledger metadata
        self.events += 1
        if etype == "DELETED":
            if self._in_flight:
                self._tombs[lid] = self._gen
            self._pending.discard(lid)
            self._malformed_ids.discard(lid)
            self._lost_ledgers.discard(lid)
            if self.index.remove(lid):
                self.changed.set()
        elif etype in ("CREATED", "CHANGED"):
            self._pending.add(lid)
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.ensure_future(self._flush())
                self._tasks.add(self._flusher)
                self._flusher.add_done_callback(self._task_done)

    async def _flush(self) -> None:
        """Re-read notified ledgers in batches until none is pending."""
        while self._pending and not self._stopped:
            lids = sorted(self._pending)
            self._pending.clear()
            await self._read_batches(lids)

    async def _read_batches(self, lids: list[int]) -> None:
        """Read ``lids`` in multiRead batches (several in flight) and apply what they say; ledgers whose
        read failed go to the lost set (re-read once connected)."""
        async def one(chunk: list[int]) -> None:
            async with self._batch_sem:
                await self._read_batch(chunk)

        b = self._batch
        await _chunked(one, [lids[i:i + b] for i in range(0, len(lids), b)], size=64)

    async def _read_batch(self, lids: list[int]) -> None:
        self._gen += 1
        gen = self._gen
        self._in_flight[gen] = len(lids)
        paths = [self.paths.ledger(lid) for lid in lids]
        try:
            try:
                self.requests += 1
                results: list = await self.zk.get_many(paths)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - connection loss etc.: retried, never silent
                self._read_failed(paths[0], exc)
                self._lost_ledgers.update(lids)
                self._schedule_rearm()
                return
            self.reads += len(lids)
            tombs = self._tombs
            for lid, path, res in zip(lids, paths, results):
                t = tombs.get(lid)
                if t is not None and t >= gen:
                    continue  # read before its deletion was seen: it must not come back
                if isinstance(res, tuple):
                    self._apply_data(lid, res[0], res[1].mzxid, path)
                elif isinstance(res, NoNodeError):
                    self._malformed_ids.discard(lid)
                    if self.index.remove(lid):
                        self.changed.set()
                else:
                    self._read_failed(path, res)
                    self._lost_ledgers.add(lid)
                    self._schedule_rearm()
        finally:
            del self._in_flight[gen]
            if not self._in_flight:
                self._tombs.clear()
            elif self._tombs:
                oldest = min(self._in_flight)
                for lid in [lid for lid, t in self._tombs.items() if t < oldest]:
                    del self._tombs[lid]

    async def _full_read(self) -> None:
        """List the tree and read every ledger in it in batches; ledgers of the index that the listing
        does not show are re-read (a ledger created after the listing must not be dropped) and dropped
        when gone. The build, and the resync after a connection loss.

        Raises:
            ZooKeeperError: a directory could not be listed.
        """
        ids: set[int] = set()
        await self._tree_ids(ids)
        missing = [lid for lid in self.index.ledger_ids() if lid not in ids]
        await self._read_batches(sorted(ids) + missing)

    async def _rearm_persistent(self) -> bool:
        """Add the persistent watch again (after a connection loss), then resync; re-read ledgers whose
        read failed. Returns False when something failed (retried with back-off)."""
        if self._watch_lost:
            self._watch_lost = False
            try:
                await self._arm_tops(again=True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried with back-off, never silent
                self._watch_lost = True
                self._read_failed(self.paths.root, exc)
                return False
            self._lost_ledgers.clear()  # the resync reads everything
            try:
                await self._full_read()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                self._read_failed(self.paths.root, exc)
                self._watch_lost = True  # redo the whole resync
                return False
            self.rearmed += len(self._tops) + 1
            self.resyncs += 1
            log.info("re-added the persistent ledger tree watches after a connection loss and re-read the tree",
                     ledgers=len(self.index), failed=len(self._lost_ledgers))
        lids, self._lost_ledgers = sorted(self._lost_ledgers), set()
        if lids:
            await self._read_batches(lids)
            self.rearmed += len(lids) - len(self._lost_ledgers)
        return not (self._lost_ledgers or self._watch_lost)

    # -- watches ----------------------------------------------------------------------------
    def _dir_watch(self, path: str):
        def cb(event) -> None:
            self._dir_armed.discard(path)
            if self._stopped:
                return
            if event.type == EventType.NONE:  # connection lost: kazoo forgot the watch
                self._lose_dir(path)
            elif event.type in (EventType.CHILD, EventType.DELETED, EventType.CREATED):
                self._spawn(self._refresh_dir(path))
        return cb

    def _data_watch(self, path: str, lid: int):
        def cb(event) -> None:
            self._armed.discard(lid)
            if self._stopped:
                return
            if event.type == EventType.NONE:  # connection lost: kazoo forgot the watch
                self._lose_ledger(lid)
            elif event.type == EventType.DELETED:
                self._malformed_ids.discard(lid)
                self.index.remove(lid)
                self.changed.set()
            elif event.type == EventType.CHANGED:
                self._spawn(self._load(path))
        return cb

    async def _refresh_dir(self, path: str) -> None:
        try:
            kids = await self._list(path)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection loss etc.: retried, never silent
            self._read_failed(path, exc)
            self._lose_dir(path)
            return
        if kids is None:
            self._forget_dir(path)
            self.changed.set()
            return
        old = self._dirs.get(path, set())
        new = set(kids)
        self._dirs[path] = new
        depth = self._depth(path)
        subdirs, leaves = self._split(new - old, depth)
        for n in old - new:
            child = f"{path}/{n}"
            if is_ledger_leaf_name(n):
                lid = self._leaf_id(child)
                if lid is not None:
                    self.index.remove(lid)
                    self._armed.discard(lid)
                    self._malformed_ids.discard(lid)
                    self._lost_ledgers.discard(lid)
            else:
                self._forget_dir(child)
        await asyncio.gather(_chunked(lambda n: self._load(f"{path}/{n}"), leaves),
                             _chunked(lambda n: self._walk_safe(f"{path}/{n}", depth + 1), subdirs))
        self.changed.set()

    async def _walk_safe(self, path: str, depth: int) -> None:
        """:meth:`_walk` for a directory found by a watch: a failed listing is retried, not raised."""
        try:
            await self._walk(path, depth)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            self._read_failed(path, exc)
            self._lose_dir(path)

    def _forget_dir(self, path: str) -> None:
        prefix = path + "/"
        for d in [d for d in self._dirs if d == path or d.startswith(prefix)]:
            del self._dirs[d]
        for lid in [lid for lid in self.index.ledger_ids() if self.paths.ledger(lid).startswith(prefix)]:
            self.index.remove(lid)
            self._armed.discard(lid)
        for lid in [lid for lid in self._malformed_ids if self.paths.ledger(lid).startswith(prefix)]:
            self._malformed_ids.discard(lid)

    # -- consistency check ------------------------------------------------------------------
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

    def _index_digest(self) -> IdDigest:
        d = IdDigest(self.index.digest.count, self.index.digest.total)
        for lid in self._malformed_ids:
            d.add(lid)
        return d

    async def check_consistency(self) -> ConsistencyReport:
        """Compare the ids in the tree with the index (count + :class:`IdDigest`; ZooKeeper cost: one
        getChildren per directory, no metadata reads). On a difference, look again after in-flight
        updates settle (a change may have been racing the listing); a difference that stays is drift:
        it is logged, healed (missing ledgers loaded with their watch, extra ones dropped) and reported.

        Raises:
            ZooKeeperError: the tree could not be listed.
        """
        await self.settle()
        tree = await self._tree_ids(None)
        mine = self._index_digest()
        if (tree.count, tree.total) == (mine.count, mine.total):
            return ConsistencyReport(tree.count, mine.count, 0)
        await self.settle()
        ids: set[int] = set()
        tree = await self._tree_ids(ids)
        known = set(self.index.ledger_ids()) | self._malformed_ids
        missing = sorted(ids - known)
        extra = sorted(known - ids)
        if missing or extra:
            log.warning("ledger index drifted from ZooKeeper; healing", missing=len(missing), extra=len(extra),
                        missing_ids=missing[:20], extra_ids=extra[:20])
            for lid in extra:
                self.index.remove(lid)
                self._malformed_ids.discard(lid)
                self._armed.discard(lid)
            if self.persistent:
                await self._arm_tops()  # a top-level directory whose watch went missing is watched again
                await self._read_batches(missing)
            else:
                await _chunked(lambda lid: self._load(self.paths.ledger(lid)), missing)
                # directory watches may be what was lost: re-list every known directory once
                for d in list(self._dirs):
                    self._lost_dirs.add(d)
                self._schedule_rearm()
            self.changed.set()
        return ConsistencyReport(tree.count, len(known), len(missing) + len(extra), tuple(missing), tuple(extra))

    # -- reconcile --------------------------------------------------------------------------
    async def scan(self) -> dict[int, bytes]:
        """Read every ledger's metadata (no watches): the upstream-style full rescan. Returns ledger id →
        compact record of the index (:meth:`BookieLedgerIndex.record_from_znode`, version 0), so a 1M
        ledger scan holds records, not metadata objects; malformed and vanished ledgers are left out.
        Batched ``multiRead`` in persistent mode, a read per ledger otherwise.

        Raises:
            ZooKeeperError: the tree could not be listed.
        """
        out: dict[int, bytes] = {}
        ids: set[int] = set()
        await self._tree_ids(ids)
        lids = sorted(ids)

        def keep(lid: int, path: str, data: bytes) -> None:
            try:
                out[lid] = self.index.record_from_znode(data, path)
            except MalformedMetadataError:
                pass

        if self.persistent:
            async def batch(chunk: list[int]) -> None:
                paths = [self.paths.ledger(lid) for lid in chunk]
                async with self._batch_sem:
                    self.requests += 1
                    results = await self.zk.get_many(paths)
                self.reads += len(chunk)
                for lid, path, res in zip(chunk, paths, results):
                    if isinstance(res, tuple):
                        keep(lid, path, res[0])
                    elif not isinstance(res, NoNodeError):
                        raise res

            b = self._batch
            await _chunked(batch, [lids[i:i + b] for i in range(0, len(lids), b)], size=64)
            return out

        async def read(lid: int) -> None:
            path = self.paths.ledger(lid)
            try:
                async with self._sem:
                    self.reads += 1
                    self.requests += 1
                    data, _ = await self.zk.get(path)
            except NoNodeError:
                return
            keep(lid, path, data)

        await _chunked(read, lids)
        return out

    async def reconcile(self) -> ReconcileReport:
        """Full rescan; fix the index where it differs and re-read (per-ledger mode: re-arm the watches
        of) the differing ledgers, which may have changed again while the scan ran."""
        await self.settle()
        scan = await self.scan()
        rep = self.index.reconcile(scan)
        del scan
        if self.persistent:
            await self._read_batches(rep.added + rep.changed)
        else:
            for lid in rep.added + rep.changed:
                self._spawn(self._load(self.paths.ledger(lid)))
            # re-arm directory watches that may have been lost (e.g. on a reconnect)
            self._spawn(self._walk_safe(self.paths.root, 0))
        await self.settle()
        if rep.mismatches:
            log.warning("ledger index differed from ZooKeeper", added=len(rep.added), removed=len(rep.removed),
                        changed=len(rep.changed))
        return rep


def _leaf_path(path: str) -> bool:
    """Whether ``path``'s last name looks like a ledger metadata leaf (``L`` + 4 digits): the test that
    keeps notifications of markers, locks, directories and bookies on kazoo's thread."""
    return is_ledger_leaf_name(path[path.rfind("/") + 1:])


async def _chunked(fn, items: list, size: int = 2000) -> None:
    """Await ``fn(item)`` for every item, ``size`` at a time: a level of 10k ledgers does not become
    10k live coroutines at once (peak memory), while the ZooKeeper semaphore still keeps ~500 reads
    in flight."""
    for i in range(0, len(items), size):
        await asyncio.gather(*(fn(x) for x in items[i:i + size]))
