"""Worker locks on under-replicated ledgers (the ReplicationWorker's side of
:mod:`autorecovery.zk.underreplication`). EDGE.

Locks ``R/underreplication/locks/urL{id:010d}``: EPHEMERAL, text ``LockDataFormat`` with the owner's
name. Round trips per ledger (issue 29): locking is one ``multiRead`` of the marker and the ledger's
metadata plus one ``multi`` (check both versions, create the lock), and the pass's following reads of
the marker (:meth:`get_marker`) and the metadata (:meth:`take_metadata_read`) are served by that
read; :meth:`LockingMixin.acquire_many` locks several ledgers in the same two round trips;
:meth:`LockingMixin.mark_replicated` deletes marker, leaf level and lock in one ``multi``. Upstream:
``exists`` + ``create`` + ``getData`` to lock and read the marker, another ``getData`` for the
metadata, then a delete per znode.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.proto import bookkeeper_formats_pb2 as pb
from autorecovery.zk.bridge import BadVersionError, NoNodeError, NodeExistsError, NotEmptyError, Op, ZkClient
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.paths import Paths
from autorecovery.zk.ur.formats import NO_MARKER, first_failure, text_bytes
from autorecovery.zk.ur.index import MarkedIndex

log = structlog.get_logger("autorecovery.underreplication")


class LockingMixin:
    """Lock, release and mark-replicated of :class:`~autorecovery.zk.underreplication.UnderreplicationManager`."""

    zk: ZkClient
    paths: Paths
    lock_owner: str
    held: dict[int, int]
    ops_multi: int
    lost_races: int
    _cache: dict[str, list[str]]
    _known_dirs: set[str]
    _marker_read: dict[int, tuple[bytes, object]]
    _md_read: dict[int, tuple[bytes, object]]
    _multi_read_lock: bool
    _index: MarkedIndex

    async def acquire(self, ledger_id: int, *, require_marker: bool = True, owner: str | None = None) -> bool:
        """Lock one ledger: remember the marker's version, create the ephemeral lock
        (upstream ``ZkLedgerUnderreplicationManager.tryGetLedgerToRereplicate``'s lock step).

        Args:
            require_marker: the worker locks marked ledgers only (default). The admin ``recover`` locks
                any ledger it is about to change (``False``), so it never races a worker; the marker
                version is then remembered as -1 (``mark_replicated`` deletes nothing).
            owner: the lock's ``bookieId`` text (default :attr:`lock_owner`).

        Returns False when the ledger is not marked (with ``require_marker``) or somebody else holds
        the lock (see :meth:`lock_holder`).
        """
        if ledger_id in self.held:
            return True
        lock = pb.LockDataFormat()
        lock.bookieId = owner or self.lock_owner
        if require_marker:
            return await self._lock_marked(ledger_id, text_bytes(lock))
        try:
            await self.zk.create(self.paths.ur_lock(ledger_id), text_bytes(lock), ephemeral=True)
        except NodeExistsError:
            if not await self._own_lock(ledger_id):
                return False
        except ZooKeeperError:
            # ConnectionLoss: the server may have made the lock anyway, under this live session, and
            # nobody would ever release it (issue 26: found by the chaos campaign). Look once connected.
            if not await self._own_lock(ledger_id, wait=True):
                raise
        except NoNodeError:
            await self.zk.ensure_path(self.paths.ur_locks)
            try:  # the admin path: the locks directory was missing; one more try
                await self.zk.create(self.paths.ur_lock(ledger_id), text_bytes(lock), ephemeral=True)
            except NodeExistsError:
                return False
        self.held[ledger_id] = NO_MARKER
        return True

    async def _read_for_lock(self, ledger_ids: list[int]) -> list[tuple[tuple[bytes, object] | None,
                                                                         tuple[bytes, object] | None]]:
        """Per ledger: its marker read and its ledger metadata read, ``(data, stat)`` each or None when
        the znode is missing, in one ``multiRead`` (ZooKeeper 3.6+); before 3.6 the markers alone, a
        request each, and no metadata (the pass reads it).

        Raises:
            ZooKeeperError: a read failed for another reason than a missing znode.
        """
        if self._multi_read_lock:
            try:
                got = await self.zk.get_many([self.paths.ur_marker(lid) for lid in ledger_ids]
                                             + [self.paths.ledger(lid) for lid in ledger_ids])
            except ServerTooOld:
                self._multi_read_lock = False
            else:
                out = []
                for res in got:
                    if isinstance(res, Exception) and not isinstance(res, NoNodeError):
                        raise res
                n = len(ledger_ids)
                for marker, md in zip(got[:n], got[n:], strict=True):
                    out.append((None if isinstance(marker, Exception) else marker,
                                None if isinstance(md, Exception) else md))
                return out
        reads: list[tuple[tuple[bytes, object] | None, tuple[bytes, object] | None]] = []
        for lid in ledger_ids:
            try:
                reads.append((await self.zk.get(self.paths.ur_marker(lid)), None))
            except NoNodeError:
                reads.append((None, None))
        return reads

    def take_metadata_read(self, ledger_id: int) -> tuple[bytes, object] | None:
        """The ledger metadata ``(data, stat)`` read with the marker when :meth:`acquire` locked
        ``ledger_id``, once (None: not read, or taken already). The lock's transaction checked its
        version, so it was current when the lock was made (the pass's metadata-version CAS covers any
        change since, as for a read of its own)."""
        return self._md_read.pop(ledger_id, None)

    async def _lock_marked(self, ledger_id: int, data: bytes) -> bool:
        """The worker's lock: read the marker (data and version) and the ledger's metadata in one
        ``multiRead``, then one ``multi`` checks that both still have the versions read and creates
        the ephemeral lock (upstream: ``exists``, ``create``, and the worker's later reads of the marker
        and the metadata: four round trips; here two, and the lock is only made on the versions
        remembered). Both reads are handed to the pass (:meth:`get_marker`,
        :meth:`take_metadata_read`) instead of being read again."""
        path = self.paths.ur_marker(ledger_id)
        for _ in range(3):
            (marker, md), = await self._read_for_lock([ledger_id])
            if marker is None:
                self.lost_races += 1  # healed by another worker since the index showed it
                return False
            body, stat = marker
            ops = [Op("check", path, version=stat.version)]  # type: ignore[attr-defined]
            if md is not None:
                ops.append(Op("check", self.paths.ledger(ledger_id), version=md[1].version))  # type: ignore[attr-defined]
            ops.append(Op("create", self.paths.ur_lock(ledger_id), data, ephemeral=True))
            lock_op = len(ops) - 1
            try:
                results = await self.zk.multi(ops)
            except ZooKeeperError:
                # ConnectionLoss: the server may have made the lock anyway, under this live session, and
                # nobody would ever release it (issue 26: found by the chaos campaign). Look once connected.
                if not await self._own_lock(ledger_id, wait=True):
                    raise
                failed = None
            else:
                failed = first_failure(results)
            if failed is None:
                self.ops_multi += 1
                self.held[ledger_id] = stat.version  # type: ignore[attr-defined]
                self._marker_read[ledger_id] = (body, stat)
                if md is not None:
                    self._md_read[ledger_id] = md
                return True
            i, err = failed
            if i < lock_op and isinstance(err, (BadVersionError, NoNodeError)):
                continue  # re-marked, or the metadata changed or went, since the read: read again
            if i == lock_op and isinstance(err, NodeExistsError) and await self._own_lock(ledger_id):
                self.held[ledger_id] = stat.version  # type: ignore[attr-defined]
                return True
            if i == lock_op and isinstance(err, NoNodeError):
                await self.zk.ensure_path(self.paths.ur_locks)  # the locks directory was missing
            elif i == lock_op and isinstance(err, NodeExistsError):
                self.lost_races += 1  # another worker locked it first: skipped until its release
                await self._index.saw_locked(ledger_id)
            return False
        return False

    async def acquire_many(self, ledger_ids: list[int]) -> list[int]:
        """Lock several marked ledgers: one ``multiRead`` of their markers and metadata, then one ``multi``
        that checks each one's version and creates each ephemeral lock, all or none (the worker's lock
        for every ledger, as :meth:`acquire`, in two round trips instead of two per ledger; issue 29).

        When the transaction fails, the ledger whose op failed (re-marked since the read, or locked by
        another worker) goes through :meth:`acquire` alone and the others are tried again together
        (at most three transactions; then each alone). Ledgers already held count as locked; a marker
        gone since the index showed it is a lost race. Servers before 3.6 (no ``multiRead``): each alone.

        Returns the ids locked, in the given order.

        Raises:
            ZooKeeperError: ZooKeeper unreachable and none of the locks is this session's.
        """
        out = [lid for lid in ledger_ids if lid in self.held]
        todo = [lid for lid in dict.fromkeys(ledger_ids) if lid not in self.held]
        alone: list[int] = []
        if len(todo) > 1 and not self._multi_read_lock:
            alone, todo = todo, []
        elif len(todo) > 1:
            read: dict[int, tuple[bytes, object]] = {}
            mds: dict[int, tuple[bytes, object]] = {}
            for lid, (marker, md) in zip(todo, await self._read_for_lock(todo), strict=True):
                if marker is None:
                    self.lost_races += 1  # healed by another worker since the index showed it
                    continue
                read[lid] = marker
                if md is not None:
                    mds[lid] = md
            todo = list(read)
            for _ in range(3):
                if len(todo) < 2:
                    break
                failed = await self._lock_read(todo, read, mds)
                if failed is None:
                    out.extend(todo)
                    todo = []
                    break
                lid, what, err = failed
                todo.remove(lid)
                if what == "lock" and isinstance(err, NodeExistsError) and await self._own_lock(lid):
                    self.held[lid] = read[lid][1].version  # type: ignore[attr-defined]
                    out.append(lid)
                elif what == "lock" and isinstance(err, NodeExistsError):
                    self.lost_races += 1  # locked by another worker since the read
                    await self._index.saw_locked(lid)  # skipped until its release
                elif what == "marker" and isinstance(err, NoNodeError):
                    self.lost_races += 1  # healed by another worker since the read
                else:
                    # re-marked, or its metadata changed, since the read (or the locks directory is
                    # missing): alone, reading again
                    alone.append(lid)
        alone.extend(todo)
        for lid in alone:
            if await self.acquire(lid):
                out.append(lid)
        order = {lid: i for i, lid in enumerate(ledger_ids)}
        return sorted(set(out), key=order.__getitem__)

    async def _lock_read(self, lids: list[int], read: dict[int, tuple[bytes, object]],
                         mds: dict[int, tuple[bytes, object]]) -> tuple[int, str, Exception] | None:
        """One ``multi``: check each marker of ``lids`` at its version in ``read`` (and its ledger
        metadata at its version in ``mds``, when read) and create its lock. None when every lock was
        made (they are then :attr:`held`, their reads kept for :meth:`get_marker` and
        :meth:`take_metadata_read`); else ``(ledger id, what, error)`` of the op that failed (nothing
        was made; ``what``: ``"marker"``, ``"metadata"`` or ``"lock"``)."""
        data = pb.LockDataFormat()
        data.bookieId = self.lock_owner
        body = text_bytes(data)
        ops: list[Op] = []
        owners: list[tuple[int, str]] = []
        for lid in lids:
            ops.append(Op("check", self.paths.ur_marker(lid), version=read[lid][1].version))  # type: ignore[attr-defined]
            owners.append((lid, "marker"))
            if lid in mds:
                ops.append(Op("check", self.paths.ledger(lid), version=mds[lid][1].version))  # type: ignore[attr-defined]
                owners.append((lid, "metadata"))
            ops.append(Op("create", self.paths.ur_lock(lid), body, ephemeral=True))
            owners.append((lid, "lock"))
        try:
            results = await self.zk.multi(ops)
        except ZooKeeperError:
            # ConnectionLoss: the server may have applied the transaction anyway (all of it: a multi is
            # atomic), under this live session (issue 26); look once connected
            if not await self._own_lock(lids[0], wait=True):
                raise
            failed = None
        else:
            failed = first_failure(results)
        if failed is None:
            self.ops_multi += 1
            for lid in lids:
                self.held[lid] = read[lid][1].version  # type: ignore[attr-defined]
                self._marker_read[lid] = read[lid]
                if lid in mds:
                    self._md_read[lid] = mds[lid]
            return None
        lid, what = owners[failed[0]]
        return lid, what, failed[1]

    async def _own_lock(self, ledger_id: int, *, wait: bool = False) -> bool:
        """True when ``ledger_id``'s lock exists and belongs to this ZooKeeper session (a lock this
        instance made but lost track of). With ``wait``, first waits for the connection (up to the
        session timeout); False when still disconnected or on any ZooKeeper error."""
        if wait:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.zk.connected.wait(), self.zk.session_timeout_ms / 1000.0)
        cid = self.zk.client_id
        if cid is None:
            return False
        try:
            stat = await self.zk.exists(self.paths.ur_lock(ledger_id))
        except ZooKeeperError:
            return False
        if stat is None or stat.ephemeralOwner != cid[0]:
            return False
        log.info("adopted this session's earlier lock", ledger_id=ledger_id)
        return True

    async def mark_replicated(self, ledger_id: int) -> bool:
        """Delete the marker with the version seen at acquire, clean empty parent levels, release.

        One ``multi`` deletes the marker (versioned), its leaf level (one ledger per leaf) and the lock
        (upstream: three or more round trips); the upper levels are deleted only when the watch cache
        does not show other children in them. Any failure of the transaction other than a re-mark
        falls back to the step-by-step deletes.

        Returns False (marker kept) when it was re-marked meanwhile (BadVersion: a new replica was
        added, so the ledger must be checked again) or when this instance does not hold the lock.
        """
        version = self.held.get(ledger_id)
        if version is None:
            return False
        if version == NO_MARKER:  # locked without a marker (admin): nothing to delete
            await self.release(ledger_id)
            return False
        path = self.paths.ur_marker(ledger_id)
        leaf = path.rsplit("/", 1)[0]
        upper = leaf.rsplit("/", 1)[0]
        if self._index.ready:  # before the delete: others sharing the upper levels keep them
            siblings: list[str] | None = [leaf.rsplit("/", 1)[1], "other"] if self._index.others_under(ledger_id) \
                else [leaf.rsplit("/", 1)[1]]
        else:
            siblings = self._cache.get(upper)  # before the delete: its watch drops the entry
        try:
            results: list | None = await self.zk.multi([
                Op("delete", path, version=version), Op("delete", leaf), Op("delete", self.paths.ur_lock(ledger_id))])
        except ZooKeeperError:
            results = None  # maybe applied: the step-by-step path below copes with either
        failed = first_failure(results) if results is not None else (-1, None)
        if failed is None:
            self.ops_multi += 1
            self.held.pop(ledger_id, None)
            self._marker_read.pop(ledger_id, None)
            self._md_read.pop(ledger_id, None)
            self._known_dirs.discard(leaf)
            if siblings is None or set(siblings) == {leaf.rsplit("/", 1)[1]}:
                await self._delete_empty_levels(upper, 3)
            return True
        if failed[0] == 0 and isinstance(failed[1], BadVersionError):
            await self.release(ledger_id)
            return False
        deleted = True
        try:
            await self.zk.delete(path, version)
        except BadVersionError:
            deleted = False
        except NoNodeError:
            pass
        if deleted:
            await self._delete_empty_levels(leaf, 4)
        await self.release(ledger_id)
        return deleted

    async def _delete_empty_levels(self, level: str, n: int) -> None:
        """Delete ``level`` and up to ``n - 1`` levels above it while they are empty."""
        for _ in range(n):
            try:
                await self.zk.delete(level)
            except (NotEmptyError, NoNodeError):
                break
            self._known_dirs.discard(level)
            level = level.rsplit("/", 1)[0]

    async def release(self, ledger_id: int) -> None:
        """Delete this instance's lock on ``ledger_id`` (missing lock ignored).

        A connection loss does not end the session, so the ephemeral lock outlives a failed delete:
        the delete is retried (0.1 s backoff, once connected again) while the session is the same, for
        up to two session timeouts. Forgetting the lock after one failed delete left it held by nobody
        until the daemon's session ended (issue 26: found by the chaos campaign, a ledger stuck marked
        and locked). Past that bound the session may still live: during a quorum loss no server can
        expire it, and the new leader renews every session, so the caller must keep the lock in mind
        (the worker retries in the background: :class:`~autorecovery.roles.lock_steps.LockSteps`).

        Raises:
            ZooKeeperError: the delete still fails after that bound (the lock stays in :attr:`held`).
        """
        path = self.paths.ur_lock(ledger_id)
        generation = self.zk.session_generation
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self.zk.session_timeout_ms / 1000.0
        while True:
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
            except ZooKeeperError:
                if self.zk.session_generation != generation:
                    pass  # a new session: the old one's ephemeral lock is gone
                elif loop.time() >= deadline:
                    raise
                else:
                    await asyncio.sleep(0.1)  # retry backoff
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.zk.connected.wait(), max(0.1, deadline - loop.time()))
                    continue
            break
        self.held.pop(ledger_id, None)
        self._marker_read.pop(ledger_id, None)
        self._md_read.pop(ledger_id, None)

    async def release_own(self, ledger_id: int) -> None:
        """One more try of a :meth:`release` that failed: delete the lock only if this session made it
        (ephemeral owner and version checked: a delete that was applied but whose answer was lost may
        have let another worker lock the ledger since), then forget it; forgotten too when it is gone
        or another session's.

        Raises:
            ZooKeeperError: ZooKeeper unreachable (the lock stays in :attr:`held`).
        """
        path = self.paths.ur_lock(ledger_id)
        stat = await self.zk.exists(path)
        cid = self.zk.client_id
        if cid is None:
            raise ZooKeeperError(f"ZooKeeper operation on {path} failed: no session (disconnected)")
        if stat is not None and stat.ephemeralOwner == cid[0]:
            with contextlib.suppress(NoNodeError, BadVersionError):
                await self.zk.delete(path, stat.version)
        self.held.pop(ledger_id, None)
        self._marker_read.pop(ledger_id, None)
        self._md_read.pop(ledger_id, None)

    async def release_all(self) -> None:
        for lid in list(self.held):
            await self.release(lid)
