"""The ReplicationWorker's view of the under-replication backlog (EDGE).

What the worker knows about the marked ledgers between passes, and the records it keeps about them:

* markers (version, ctime, missing replicas) and metadata of the marked ledgers, refreshed from
  ZooKeeper (new markers at once, everything every 60 s), and their priorities
  (:func:`~autorecovery.plan.priority.ledger_priority`) and estimated bytes to copy;
* the candidate order for the next lock (:func:`~autorecovery.plan.priority.order_candidates`):
  most endangered first, ledgers that just failed after the others, ledgers being worked on, surfaced
  as unrecoverable or failed with an error retrying cannot fix left out;
* unrecoverable records: the side znode ``<root>/underreplication/unrecoverable/urL<id>`` (JSON
  ``{"ledger", "entries", "bookies", "waiting_for", "time", "marker_version", "marker_ctime", ...}``),
  written when a pass finds entries no replica holds, read back from every worker (watched), and
  removed when the ledger is done; a ledger is retried when the record is deleted, the ledger is
  marked again, or a bookie it waits for registers;
* ledgers whose pass failed with an error retrying will not fix (``errors.is_retriable``): skipped
  until the ledger is marked again (a new marker version or ctime).

Upstream has none of this: its worker picks a random marked ledger each time (#3917 and the
reference's "random task order" weakness).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Collection, Iterable, Iterator

import structlog

from autorecovery.errors import AutoRecoveryError, NoSuchLedgerError
from autorecovery.ledger.ids import ledger_id_from_ur_leaf, ur_leaf_name
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.plan.priority import LedgerPriority, ledger_priority, order_candidates
from autorecovery.plan.progress import estimate_copy_bytes, unrecoverable_reason
from autorecovery.plan import entry_runs
from autorecovery.plan.entry_runs import Gap
from autorecovery.ledger.formats import deserialize as decode_metadata
from autorecovery.zk.bridge import NoNodeError, NodeExistsError, ZkClient
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.ledgers import LedgerStore, now_ms
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

log = structlog.get_logger("autorecovery.worker")

#: Full re-read of every marker and its metadata, s.
FULL_REFRESH_S = 60.0
#: Markers read per refresh (the rest on the next one).
REFRESH_BATCH = 5000
#: Znodes per multiRead request of a refresh (markers and metadata of half as many ledgers).
READ_BATCH = 1000


class Backlog:
    """Markers, metadata, priorities and records of the marked ledgers.

    Args:
        zk / paths / um / store: the worker's ZooKeeper edges.
        clock: monotonic seconds.
        on_change: called when something happened that may make a skipped ledger eligible again (a
            side znode removed, a ledger marked again).
        salt: this worker's tie-break among candidates of equal stake
            (:func:`~autorecovery.plan.priority.order_candidates`); None: by ledger id.

    Attributes:
        markers: ledger id → (marker version, marker ctime, missing replicas).
        mds: ledger id → metadata read at the last refresh.
        known: ledger id → priority.
        later: ledger id → clock time before which it is tried after the others (it just failed).
        not_retriable: ledger id → ((marker version, ctime) when it failed, reason).
        unrecoverable: ledger id → the side znode's document.
        active: ledgers a pass is working on now (never handed out again).
    """

    def __init__(self, zk: ZkClient, paths: Paths, um: UnderreplicationManager, store: LedgerStore, *,
                 clock: Callable[[], float], on_change: Callable[[], None] = lambda: None,
                 salt: int | None = None) -> None:
        self.zk, self.paths, self.um, self.store = zk, paths, um, store
        self.salt = salt
        self.clock = clock
        self.on_change = on_change
        self.markers: dict[int, tuple[int, int, list[str]]] = {}
        self.mds: dict[int, LedgerMetadata] = {}
        self.known: dict[int, LedgerPriority] = {}
        self.later: dict[int, float] = {}
        self.not_retriable: dict[int, tuple[tuple[int, int], str]] = {}
        self.unrecoverable: dict[int, dict] = {}
        self.active: set[int] = set()
        self._last_full = -1e18
        self._unrec_names: list[str] | None = None  # the side znodes' last listing, until its watch fires
        self._unrec_gen = 0  # watch events of that listing seen
        # per marked ledger: (marker tuple, metadata, priority, bytes to copy) computed from those very
        # objects for the membership ``_costed_for``; a refresh recomputes only what changed (issue 29:
        # recomputing every marked ledger's priority twice a second was half the daemon's CPU)
        self._costs: dict[int, tuple[tuple[int, int, list[str]], LedgerMetadata, LedgerPriority, int]] = {}
        self._costed_for: frozenset[str] | None = None
        # what the refresh returns, kept between refreshes and updated for the ledgers whose marker or
        # metadata object changed since (``_dirty``): a refresh costs O(changes), not O(backlog)
        self._dirty: set[int] = set()
        self._est: dict[int, int] = {}
        self._placement: set[int] = set()
        self._multi_read = True  # False once the server refused multiRead (before 3.6)
        # ledger id → the mzxid of the marker / metadata znode its ``markers`` / ``mds`` entry was decoded
        # from: a full refresh re-reads them but decodes (and re-costs) only what was written since
        # (issue 29: decoding every marked ledger's metadata each minute in every worker)
        self._marker_zxid: dict[int, int] = {}
        self._md_zxid: dict[int, int] = {}
        # the candidate ranking reused between picks (see order)
        self._rank_gen = 0
        self._rank_sig: tuple | None = None
        self._rank_ids: Collection[int] | None = None  # the set ranked (kept: its identity is compared)
        self._ranked: list[int] = []
        self._keys: dict[int, tuple[LedgerPriority, tuple]] = {}  # order_candidates' key cache
        self._cursor = 0
        self.rankings = 0  # rankings computed (tests)

    # -- refresh -----------------------------------------------------------------------------------
    async def refresh(self, available: Collection[str]) -> tuple[dict[int, int], int]:
        """Read new markers (all of them every :data:`FULL_REFRESH_S`) and their metadata; recompute
        priorities; sync the unrecoverable records.

        Returns ``(bytes to copy per marked ledger, markers without missing replicas)`` (the latter are
        the auditor's placement marks).

        Raises:
            ZooKeeperError and other retriable errors (the caller retries on its next round).
        """
        ids = set(await self.um.watched_marked_ids())
        now = self.clock()
        full = now - self._last_full > FULL_REFRESH_S
        if full:
            self._last_full = now
        for lid in list(self.not_retriable):
            if lid not in ids:
                self.not_retriable.pop(lid, None)
        for lid in self.markers.keys() - ids:
            self.markers.pop(lid, None)
            self.mds.pop(lid, None)
            self.known.pop(lid, None)
            self._costs.pop(lid, None)
            self._marker_zxid.pop(lid, None)
            self._md_zxid.pop(lid, None)
            self._est.pop(lid, None)
            self._placement.discard(lid)
            self._keys.pop(lid, None)
        todo = sorted(ids) if full else sorted((ids - self.markers.keys()) | (ids & self.not_retriable.keys()))
        batch = todo[:REFRESH_BATCH]
        if not await self._load_many(batch, full):
            sem = asyncio.Semaphore(32)
            await asyncio.gather(*(self._load_one(lid, full, sem) for lid in batch))
        if any(not self.skip_not_retriable(lid) for lid in list(self.not_retriable)):
            self.on_change()  # a ledger was marked again: let the slots look at it
        changed = False
        avail = frozenset(available)
        if avail != self._costed_for:  # membership changed: every priority may have
            self._costs.clear()
            self._costed_for = avail
            dirty: Iterable[int] = list(self.markers)
        else:
            dirty = self._dirty & self.markers.keys()
        self._dirty = set()
        costs = self._costs
        for lid in dirty:
            marker = self.markers[lid]
            md = self.mds.get(lid)
            if md is None:
                self._est[lid] = 0  # still marked (metadata unreadable or gone): counted, size unknown
                self._placement.discard(lid)
                continue
            c = costs.get(lid)
            if c is None or c[0] is not marker or c[1] is not md:  # new, re-read or re-marked
                p = ledger_priority(lid, md, marker[2], avail, marker[1])
                c = costs[lid] = (marker, md, p, estimate_copy_bytes(md, p.lost))
            p = c[2]
            old = self.known.get(lid)
            if old is not p and old != p:  # the cached object itself: no field-by-field comparison
                changed = True
            self.known[lid] = p
            self._est[lid] = c[3]
            if marker[2]:
                self._placement.discard(lid)
            else:
                self._placement.add(lid)
        if changed:
            self._rank_gen += 1  # the next pick ranks again
        await self.sync_unrecoverable(relist=full)
        return dict(self._est), len(self._placement)

    async def _load_one(self, lid: int, full: bool, sem: asyncio.Semaphore) -> None:
        """Marker and (if needed) metadata of one ledger, a request each (servers before 3.6)."""
        async with sem:
            try:
                marker = await self.um.get_marker(lid)
            except AutoRecoveryError as exc:
                if exc.retriable:
                    raise
                # one garbage marker must not freeze the whole backlog (and progress) forever
                log.warning("unreadable under-replication marker; left out of the backlog", ledger_id=lid,
                            error=str(exc))
                return
            if marker is None:
                return
            self.markers[lid] = (marker.version, marker.ctime, list(marker.replicas))
            self._dirty.add(lid)
            self._marker_zxid.pop(lid, None)
            if full or lid not in self.mds:
                self._md_zxid.pop(lid, None)
                try:
                    self.mds[lid], _ = await self.store.read(lid)
                except (NoSuchLedgerError, AutoRecoveryError):
                    self.mds.pop(lid, None)

    async def _load_many(self, lids: list[int], full: bool) -> bool:
        """Markers and metadata of ``lids`` in ``multiRead`` requests of :data:`READ_BATCH` znodes
        (issue 29: every worker reads every new marker and its ledger's metadata; a request per znode
        was two ZooKeeper operations per ledger per worker). False when the server has no multiRead
        (before 3.6): nothing was read.

        Raises:
            ZooKeeperError: a request failed (retriable: the next round reads again).
        """
        if not self._multi_read or not lids:
            return self._multi_read
        paths = self.um.paths
        for i in range(0, len(lids), READ_BATCH // 2):
            chunk = lids[i:i + READ_BATCH // 2]
            want_md = [lid for lid in chunk if full or lid not in self.mds]
            try:
                got = await self.zk.get_many([paths.ur_marker(lid) for lid in chunk] +
                                             [paths.ledger(lid) for lid in want_md])
            except ServerTooOld:
                self._multi_read = False
                return False
            mds = dict(zip(want_md, got[len(chunk):], strict=True))
            for lid, res in zip(chunk, got[:len(chunk)], strict=True):
                if isinstance(res, NoNodeError):
                    continue
                if isinstance(res, Exception):
                    raise res
                zxid = getattr(res[1], "mzxid", None)
                if zxid is None or lid not in self.markers or self._marker_zxid.get(lid) != zxid:
                    try:
                        marker = self.um.marker_from(lid, *res)
                    except AutoRecoveryError as exc:
                        log.warning("unreadable under-replication marker; left out of the backlog", ledger_id=lid,
                                    error=str(exc))
                        continue
                    self.markers[lid] = (marker.version, marker.ctime, list(marker.replicas))
                    self._dirty.add(lid)
                    self._set_zxid(self._marker_zxid, lid, zxid)
                md = mds.get(lid)
                if md is None:
                    continue
                if isinstance(md, tuple):
                    zxid = getattr(md[1], "mzxid", None)
                    if zxid is not None and lid in self.mds and self._md_zxid.get(lid) == zxid:
                        continue  # the very znode version decoded before: same object, same costs
                    self._dirty.add(lid)
                    try:
                        self.mds[lid] = decode_metadata(md[0], paths.ledger(lid))
                        self._set_zxid(self._md_zxid, lid, zxid)
                        continue
                    except AutoRecoveryError:
                        pass
                elif not isinstance(md, NoNodeError):
                    raise md
                self._dirty.add(lid)
                self.mds.pop(lid, None)
                self._md_zxid.pop(lid, None)
        return True

    def remember_marker(self, lid: int, version: int, ctime: int, replicas: list[str]) -> None:
        """The marker as a pass read it."""
        self.markers[lid] = (version, ctime, list(replicas))
        self._dirty.add(lid)
        self._marker_zxid.pop(lid, None)  # decoded again at the next full refresh

    @staticmethod
    def _set_zxid(zxids: dict[int, int], lid: int, zxid: int | None) -> None:
        if zxid is None:
            zxids.pop(lid, None)
        else:
            zxids[lid] = zxid

    # -- candidate order ---------------------------------------------------------------------------
    def order(self, ids: Collection[int], rng, available: Collection[str]) -> Iterator[int]:
        """Candidates in the order to try them, lazily (the ``order`` callback of
        ``UnderreplicationManager.poll_ledger_to_rereplicate``; ``ids`` is the manager's set of marked
        ids).

        The ranking (:func:`~autorecovery.plan.priority.order_candidates`, O(n log n)) is kept and reused
        while nothing that orders it changed: the priorities (a refresh), the ledgers to skip or try
        later, and no ledger newly marked (``um.marked_generation``); markers deleted meanwhile only
        leave it, and a cursor steps past them for good, so a pick costs O(1) amortised, not O(queue)
        (issue 29: the heal rate fell with the queue length). Only the manager's live set is ranked
        once for many picks; any other collection is ranked afresh."""
        now = self.clock()
        for lid, until in list(self.later.items()):
            if until <= now:
                del self.later[lid]
        records = set(self.unrecoverable) | set(self.not_retriable)
        skip = frozenset(lid for lid in records if lid in ids and (
            self.still_unrecoverable(lid, available) or self.skip_not_retriable(lid)))
        sig = (self._rank_gen, self.um.marked_generation, skip, frozenset(self.later))
        if sig != self._rank_sig or ids is not self._rank_ids:  # another set (not the live one): rank it
            self._ranked = order_candidates(ids, self.known, skip=skip, later=set(self.later), rng=rng,
                                            salt=self.salt, keys=self._keys)
            self._rank_sig, self._rank_ids, self._cursor = sig, ids, 0
            self.rankings += 1
        return self._walk_ranking(ids)

    def _walk_ranking(self, ids: Collection[int]) -> Iterator[int]:
        ranked = self._ranked
        i = self._cursor
        while i < len(ranked) and ranked[i] not in ids:  # healed since the ranking: gone for good
            i += 1
        self._cursor = i
        for j in range(i, len(ranked)):
            lid = ranked[j]
            if lid in ids and lid not in self.active:
                yield lid

    def try_later(self, lid: int, delay_s: float) -> None:
        """Try ``lid`` after the other candidates for ``delay_s`` seconds."""
        self.later[lid] = self.clock() + delay_s

    def forget_failures(self, lid: int) -> None:
        self.later.pop(lid, None)
        self.not_retriable.pop(lid, None)

    # -- not retriable -----------------------------------------------------------------------------
    def record_not_retriable(self, lid: int, marker_key: tuple[int, int], reason: str) -> None:
        self.not_retriable[lid] = (marker_key, reason)

    def skip_not_retriable(self, lid: int) -> bool:
        """True while the ledger's last pass failed with a non-retriable error and it was not re-marked."""
        entry = self.not_retriable.get(lid)
        if entry is None:
            return False
        marker = self.markers.get(lid)
        if marker is not None and (marker[0], marker[1]) != entry[0]:
            self.not_retriable.pop(lid, None)  # marked again (new version or ctime): try once more
            return False
        return True

    # -- unrecoverable records ---------------------------------------------------------------------
    async def sync_unrecoverable(self, relist: bool = False) -> None:
        """Read the side znodes (watched: a removal or a new record calls ``on_change``). The listing is
        read again only once its child watch fired, or with ``relist`` (the full refresh, every
        :data:`FULL_REFRESH_S`, in case a watch was lost with a session): issue 29, a listing per refresh
        was a ZooKeeper request per worker twice a second while healing."""
        def on_event(_e) -> None:
            self._unrec_names = None
            self._unrec_gen += 1
            self.on_change()

        names = self._unrec_names
        if names is None or relist:
            gen = self._unrec_gen
            try:
                names = await self.zk.get_children(self.paths.unrecoverable, watch=on_event)
            except NoNodeError:
                names = None  # no directory, no watch: list again next time
            # a watch that fired while the answer came back makes the answer stale
            self._unrec_names = names if gen == self._unrec_gen else None
        names = names or []
        present = set()
        for n in names:
            try:
                lid = ledger_id_from_ur_leaf(n)
            except ValueError:
                continue
            present.add(lid)
            if lid not in self.unrecoverable:
                try:
                    data, _ = await self.zk.get(f"{self.paths.unrecoverable}/{n}")
                    self.unrecoverable[lid] = json.loads(data.decode() or "{}")
                except (NoNodeError, ValueError):
                    continue
        for lid in list(self.unrecoverable):
            if lid not in present:
                log.info("unrecoverable side znode removed; the ledger will be retried", ledger_id=lid)
                self.unrecoverable.pop(lid, None)
                self.on_change()

    def still_unrecoverable(self, lid: int, available: Collection[str]) -> bool:
        """True while ``lid`` has a record, was not marked again since, and none of the bookies it
        waits for is registered."""
        info = self.unrecoverable.get(lid)
        if info is None:
            return False
        marker = self.markers.get(lid)
        if marker is not None and (marker[0], marker[1]) != (info.get("marker_version"), info.get("marker_ctime")):
            return False  # re-marked since it was surfaced
        return not any(b in available for b in info.get("waiting_for", []))

    async def surface_unrecoverable(self, lid: int, unrecoverable: Iterable[Gap], worker: str,
                                    reason: str = "") -> dict:
        """Write (or overwrite) the side znode for ``lid``; returns its document.

        ``unrecoverable``: runs of entries no replica holds, with the reasons per bookie
        (:class:`~autorecovery.plan.entry_runs.Gap`). The document stays small whatever their length:
        ``entries`` are exact id ranges up to ``entry_runs.EXACT_LIST_LIMIT`` entries, else the spans
        of the runs; ``reasons`` names at most 100 runs (key: first entry id, or ``"first-last"``);
        ``reason`` is one line for people (the kinds of answers the bookies gave).
        """
        gaps = list(unrecoverable)
        entry_count = entry_runs.count(gaps)
        bookies = sorted({b for g in gaps for b in g.why})
        waiting = sorted({b for g in gaps for b, r in g.why.items() if r == "NOT_REGISTERED"})
        reasons: dict[str, dict[str, str]] = {}
        for g in gaps[:100]:
            lo, hi = g.run.bounds()
            reasons[str(lo) if lo == hi else f"{lo}-{hi}"] = dict(g.why)
        if not reason:
            kinds = sorted({r for g in gaps for r in g.why.values()})
            reason = f"{entry_count} entries that no bookie of the ensemble holds (answers: {', '.join(kinds)})"
        marker = self.markers.get(lid, (-1, -1, []))
        doc = {
            "ledger": lid,
            "entries": entry_runs.spans(gaps),
            "entry_count": entry_count,
            "bookies": bookies,
            "waiting_for": waiting,
            "reason": reason,
            "reasons": reasons,
            "time": now_ms(),
            "marker_version": marker[0],
            "marker_ctime": marker[1],
            "worker": worker,
        }
        path = self.record_path(lid)
        data = json.dumps(doc, sort_keys=True).encode()
        try:
            await self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            await self.zk.set(path, data)
        self.unrecoverable[lid] = json.loads(data)
        return self.unrecoverable[lid]

    async def clear_unrecoverable(self, lid: int) -> None:
        """Delete ``lid``'s side znode if this worker knows one."""
        if self.unrecoverable.pop(lid, None) is not None:
            with contextlib.suppress(NoNodeError):
                await self.zk.delete(self.record_path(lid))

    def record_path(self, lid: int) -> str:
        return f"{self.paths.unrecoverable}/{ur_leaf_name(lid)}"

    def blocked_reasons(self) -> dict[int, str]:
        """Reasons for ledgers blocked by a record (progress)."""
        extra: dict[int, str] = {}
        for lid, info in self.unrecoverable.items():
            extra[lid] = unrecoverable_reason(info)
        for lid, (_v, reason) in self.not_retriable.items():
            extra[lid] = reason
        return extra
