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
:class:`~autorecovery.audit.record_index.IdDigest` of the ledger ids in the tree with the index's on a short
schedule and heals what differs, so drift is never silent (``autorecovery_auditor_index_drift_ledgers``).
"""

from __future__ import annotations

import asyncio

import structlog

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.record_index import ReconcileReport
from autorecovery.errors import ZooKeeperError
from autorecovery.retry import Backoff
from autorecovery.zk.bridge import ConnectionLoss, ZkClient
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.ledger_tree.per_ledger_watches import PerLedgerWatches
from autorecovery.zk.ledger_tree.persistent_watch import PersistentWatch
from autorecovery.zk.ledger_tree.tree_checks import ConsistencyReport, TreeChecks
from autorecovery.zk.ledger_tree.tree_state import REARM_BACKOFF_S, TreePlumbing, TreeState, chunked
from autorecovery.zk.paths import Paths

log = structlog.get_logger("autorecovery.auditor")

__all__ = ["LedgerTreeWatcher"]


class LedgerTreeWatcher:
    """Keeps a :class:`BookieLedgerIndex` equal to the ledger metadata in ZooKeeper.

    Persistent mode (ZooKeeper 3.6+): a persistent recursive watch per top-level ledger directory and
    a child watch on the root, batched ``multiRead`` reads. Per-ledger mode (older servers): child watches on the root and every hierarchy
    level notice created and deleted ledgers; a data watch on every ledger znode notices closes and
    ensemble changes; each is one-shot and re-armed by the read that follows it. ZooKeeper work is
    bounded by ``concurrency`` (``auditorMaxNumberOfConcurrentOpenLedgerOperations``): at most that
    many ledger reads in flight, as single reads or in batches.

    Composed of parts that share one :class:`~autorecovery.zk.ledger_tree.tree_state.TreeState`: the
    plumbing (:class:`~autorecovery.zk.ledger_tree.tree_state.TreePlumbing`), the two following modes
    (:class:`~autorecovery.zk.ledger_tree.persistent_watch.PersistentWatch`,
    :class:`~autorecovery.zk.ledger_tree.per_ledger_watches.PerLedgerWatches`) and the checks
    (:class:`~autorecovery.zk.ledger_tree.tree_checks.TreeChecks`).

    Args:
        zk, paths, index: the ZooKeeper client, the cluster's paths, the index to keep.
        concurrency: most ledger reads in flight.
        persistent: None (default) probes the server and falls back to per-ledger watches when it is
            older than 3.6; True insists (:meth:`build` raises ``ServerTooOld``); False forces per-ledger
            watches. After :meth:`build` it says which mode runs.

    Attributes:
        malformed: ledgers whose metadata did not decode (skipped, logged).
        reads: metadata reads done (build + updates + reconciles), batched or not.
        requests: ZooKeeper requests those reads took (a batch is one).
        rearmed, resyncs, read_failures, events: watches re-armed after a loss, full re-reads after a
            connection loss (persistent mode), failed tree reads (each retried), ledger notifications
            handled (persistent mode).
        changed: an :class:`asyncio.Event` set after each applied update.
    """

    def __init__(self, zk: ZkClient, paths: Paths, index: BookieLedgerIndex, *, concurrency: int = 500,
                 persistent: bool | None = None) -> None:
        self._state = s = TreeState(zk, paths, index, persistent, concurrency)
        self._plumbing = p = TreePlumbing(s, self._rearm_loop)
        self._persistent = PersistentWatch(s, p)
        self._per_ledger = PerLedgerWatches(s, p)
        self._checks = TreeChecks(s, p, self._persistent, self._per_ledger)

    # -- the shared state, read through ---------------------------------------------------------
    @property
    def zk(self) -> ZkClient:
        return self._state.zk

    @property
    def paths(self) -> Paths:
        return self._state.paths

    @property
    def index(self) -> BookieLedgerIndex:
        return self._state.index

    @property
    def persistent(self) -> bool | None:
        return self._state.persistent

    @persistent.setter
    def persistent(self, value: bool | None) -> None:
        self._state.persistent = value

    @property
    def malformed(self) -> int:
        return self._state.malformed

    @property
    def reads(self) -> int:
        return self._state.reads

    @property
    def requests(self) -> int:
        return self._state.requests

    @property
    def rearmed(self) -> int:
        return self._state.rearmed

    @property
    def resyncs(self) -> int:
        return self._state.resyncs

    @property
    def read_failures(self) -> int:
        return self._state.read_failures

    @property
    def events(self) -> int:
        return self._state.events

    @property
    def changed(self) -> asyncio.Event:
        return self._state.changed

    @property
    def watches_held(self) -> int:
        """ZooKeeper watches this watcher holds: in persistent mode one per top-level ledger directory
        (``00``, ``01``...) plus the root's child watch, else one per directory and ledger."""
        return self._plumbing.watches_held()

    @property
    def lost_watches(self) -> int:
        """Watches lost and not yet re-armed: the persistent watch (0 or 1) plus directories and
        ledgers (per-ledger mode) or ledgers whose read failed (persistent mode)."""
        return self._plumbing.lost_watches()

    @property
    def busy(self) -> bool:
        """True while watch-triggered updates are in flight."""
        return self._plumbing.busy()

    async def settle(self) -> None:
        """Wait until no watch-triggered update is in flight."""
        await self._plumbing.settle()

    def stop(self) -> None:
        """Cancel every update and the re-arm loop, and stop following the session. Idempotent."""
        self._plumbing.stop()

    # -- checks -----------------------------------------------------------------------------
    async def check_consistency(self) -> ConsistencyReport:
        """See :meth:`~autorecovery.zk.ledger_tree.tree_checks.TreeChecks.check_consistency`.

        Raises:
            ZooKeeperError: the tree could not be listed.
        """
        return await self._checks.check_consistency()

    async def scan(self) -> dict[int, bytes]:
        """See :meth:`~autorecovery.zk.ledger_tree.tree_checks.TreeChecks.scan` (ledger id → record).

        Raises:
            ZooKeeperError: the tree could not be listed.
        """
        return await self._checks.scan()

    async def reconcile(self) -> ReconcileReport:
        """See :meth:`~autorecovery.zk.ledger_tree.tree_checks.TreeChecks.reconcile`.

        Raises:
            ZooKeeperError: the tree could not be listed or read.
        """
        return await self._checks.reconcile()

    # -- build ------------------------------------------------------------------------------
    async def build(self) -> int:
        """Read the whole tree and start following it (persistent watch, or every per-ledger watch
        armed), and follow the session from now on (re-arming lost watches on reconnect); returns the
        number of ledgers indexed.

        Raises:
            ZooKeeperError: a directory could not be listed (the build is incomplete).
            ServerTooOld: ``persistent=True`` and the server is older than 3.6.
        """
        s = self._state
        self._plumbing.follow_session()
        if s.persistent is not False:
            try:
                await self._persistent.probe()
                s.persistent = True
                s.following = True
                await self._persistent.arm_tops()
            except ServerTooOld as exc:
                if s.persistent:
                    raise
                log.error("ZooKeeper is older than 3.6 (no persistent watches / multiRead): falling back to a "
                          "data watch per ledger and a read per ledger; upgrade ZooKeeper for a 1M-ledger "
                          "auditor", error=str(exc))
                s.persistent = False
        if s.persistent:
            await self._persistent.full_read()
        else:
            # after a refused addWatch an older server also closes the connection: a walk that loses it
            # is redone once connected (it is idempotent)
            for attempt in range(1, 4):
                try:
                    await self._per_ledger.walk(s.paths.root, 0)
                    break
                except ZooKeeperError as exc:
                    if not isinstance(exc.__cause__, ConnectionLoss) or attempt == 3:
                        raise
                    await asyncio.sleep(0)  # let the SUSPENDED state published with the loss land
                    await asyncio.wait_for(s.zk.connected.wait(), s.zk.session_timeout_ms / 1000 * 3)
        await self.settle()
        return len(s.index)

    async def _rearm_loop(self) -> None:
        """Re-read every directory and ledger whose watch was lost, once connected; repeat with
        back-off while reads fail. Directories first: a re-listed directory also loads new ledgers."""
        s = self._state
        backoff = Backoff(*REARM_BACKOFF_S)
        while not s.stopped and (s.lost_dirs or s.lost_ledgers or s.watch_lost):
            await s.zk.connected.wait()
            if s.persistent:
                if not await self._persistent.rearm():
                    await backoff.sleep()  # back-off between retries, not synchronisation
                else:
                    backoff.reset()
                continue
            dirs, s.lost_dirs = sorted(s.lost_dirs), set()
            lids, s.lost_ledgers = sorted(s.lost_ledgers), set()
            await chunked(self._per_ledger.refresh_dir, dirs)
            await chunked(lambda lid: self._per_ledger.load(s.paths.ledger(lid)), lids)
            failed = len(s.lost_dirs) + len(s.lost_ledgers)
            s.rearmed += len(dirs) + len(lids) - failed
            if dirs or lids:
                log.info("re-armed ledger tree watches after a connection loss", directories=len(dirs),
                         ledgers=len(lids), failed=failed)
            if failed:
                await backoff.sleep()  # back-off between retries, not synchronisation
            else:
                backoff.reset()
