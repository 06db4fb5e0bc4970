"""Checking the ledger index against ZooKeeper (EDGE): the cheap consistency check (a listing compared
by count and :class:`~autorecovery.audit.record_index.IdDigest`, drift healed and reported), the full scan
(upstream's rescan) and the reconcile that fixes the index from it, in either following mode. A part of
:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import structlog

from autorecovery.audit.record_index import IdDigest, ReconcileReport
from autorecovery.errors import MalformedMetadataError
from autorecovery.zk.bridge import NoNodeError
from autorecovery.zk.ledger_tree.per_ledger_watches import PerLedgerWatches
from autorecovery.zk.ledger_tree.persistent_watch import PersistentWatch
from autorecovery.zk.ledger_tree.tree_state import TreePlumbing, TreeState, chunked

log = structlog.get_logger("autorecovery.auditor")


@dataclass(frozen=True)
class ConsistencyReport:
    """One consistency check: ledgers in the tree (malformed ones included), in the index (plus the
    malformed ones the index skips), and how many ids differed (0 when the digests agreed)."""

    tree: int
    index: int
    drift: int
    missing: tuple[int, ...] = ()
    extra: tuple[int, ...] = ()


class TreeChecks:
    """Consistency check, full scan and reconcile over either mode.

    Args:
        state, plumbing: the shared :class:`TreeState` and the :class:`TreePlumbing` over it.
        persistent, per_ledger: the two following modes (the one ``state.persistent`` names heals).
    """

    def __init__(self, state: TreeState, plumbing: TreePlumbing, persistent: PersistentWatch,
                 per_ledger: PerLedgerWatches) -> None:
        self.s = state
        self.p = plumbing
        self.pw = persistent
        self.pl = per_ledger

    def _index_digest(self) -> IdDigest:
        s = self.s
        d = IdDigest(s.index.digest.count, s.index.digest.total)
        for lid in s.malformed_ids:
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
        s, p = self.s, self.p
        await p.settle()
        tree = await p.tree_ids(None)
        mine = self._index_digest()
        if (tree.count, tree.total) == (mine.count, mine.total):
            return ConsistencyReport(tree.count, mine.count, 0)
        await p.settle()
        ids: set[int] = set()
        tree = await p.tree_ids(ids)
        known = set(s.index.ledger_ids()) | s.malformed_ids
        missing = sorted(ids - known)
        extra = sorted(known - ids)
        if missing or extra:
            log.warning("ledger index drifted from ZooKeeper; healing", missing=len(missing), extra=len(extra),
                        missing_ids=missing[:20], extra_ids=extra[:20])
            for lid in extra:
                s.index.remove(lid)
                s.malformed_ids.discard(lid)
                s.armed.discard(lid)
            if s.persistent:
                await self.pw.arm_tops()  # a top-level directory whose watch went missing is watched again
                await self.pw.read_batches(missing)
            else:
                await chunked(lambda lid: self.pl.load(s.paths.ledger(lid)), missing)
                # directory watches may be what was lost: re-list every known directory once
                s.lost_dirs.update(s.dirs)
                p.schedule_rearm()
            s.changed.set()
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
        s = self.s
        out: dict[int, bytes] = {}
        ids: set[int] = set()
        await self.p.tree_ids(ids)
        lids = sorted(ids)

        def keep(lid: int, path: str, data: bytes) -> None:
            with contextlib.suppress(MalformedMetadataError):
                out[lid] = s.index.record_from_znode(data, path)

        if s.persistent:
            async def batch(chunk: list[int]) -> None:
                paths = [s.paths.ledger(lid) for lid in chunk]
                async with s.batch_sem:
                    s.requests += 1
                    results = await s.zk.get_many(paths)
                s.reads += len(chunk)
                for lid, path, res in zip(chunk, paths, results, strict=True):
                    if isinstance(res, tuple):
                        keep(lid, path, res[0])
                    elif not isinstance(res, NoNodeError):
                        raise res

            b = s.batch
            await chunked(batch, [lids[i:i + b] for i in range(0, len(lids), b)], size=64)
            return out

        async def read(lid: int) -> None:
            path = s.paths.ledger(lid)
            try:
                async with s.sem:
                    s.reads += 1
                    s.requests += 1
                    data, _ = await s.zk.get(path)
            except NoNodeError:
                return
            keep(lid, path, data)

        await chunked(read, lids)
        return out

    async def reconcile(self) -> ReconcileReport:
        """Full rescan; fix the index where it differs and re-read (per-ledger mode: re-arm the watches
        of) the differing ledgers, which may have changed again while the scan ran.

        Raises:
            ZooKeeperError: the tree could not be listed or read.
        """
        s, p = self.s, self.p
        await p.settle()
        scan = await self.scan()
        rep = s.index.reconcile(scan)
        del scan
        if s.persistent:
            await self.pw.read_batches(rep.added + rep.changed)
        else:
            for lid in rep.added + rep.changed:
                p.spawn(self.pl.load(s.paths.ledger(lid)))
            # re-arm directory watches that may have been lost (e.g. on a reconnect)
            p.spawn(self.pl.walk_safe(s.paths.root, 0))
        await p.settle()
        if rep.mismatches:
            log.warning("ledger index differed from ZooKeeper", added=len(rep.added), removed=len(rep.removed),
                        changed=len(rep.changed))
        return rep
