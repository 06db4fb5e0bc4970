"""Checking the ledger index against ZooKeeper (EDGE): the cheap consistency check (a listing compared
by count and :class:`~autorecovery.audit.record_index.IdDigest`, drift healed and reported), the full scan
(upstream's rescan) and the reconcile that fixes the index from it, in either following mode. Part of
:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`.
"""

import contextlib
from dataclasses import dataclass

import structlog

from autorecovery.audit.record_index import IdDigest, ReconcileReport
from autorecovery.errors import MalformedMetadataError
from autorecovery.zk.bridge import NoNodeError
from autorecovery.zk.ledger_tree.tree_state import chunked
from autorecovery.zk.ledger_tree.persistent_watch import PersistentWatch
from autorecovery.zk.ledger_tree.per_ledger_watches import PerLedgerWatches

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


class TreeChecks(PersistentWatch, PerLedgerWatches):
    """Consistency check, full scan and reconcile over either mode."""

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
                await chunked(lambda lid: self._load(self.paths.ledger(lid)), missing)
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
            with contextlib.suppress(MalformedMetadataError):
                out[lid] = self.index.record_from_znode(data, path)

        if self.persistent:
            async def batch(chunk: list[int]) -> None:
                paths = [self.paths.ledger(lid) for lid in chunk]
                async with self._batch_sem:
                    self.requests += 1
                    results = await self.zk.get_many(paths)
                self.reads += len(chunk)
                for lid, path, res in zip(chunk, paths, results, strict=True):
                    if isinstance(res, tuple):
                        keep(lid, path, res[0])
                    elif not isinstance(res, NoNodeError):
                        raise res

            b = self._batch
            await chunked(batch, [lids[i:i + b] for i in range(0, len(lids), b)], size=64)
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

        await chunked(read, lids)
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
