"""Following the ledger tree with persistent recursive watches (EDGE; ZooKeeper 3.6+, the default): one
watch per top-level ledger directory plus a one-shot child watch on the root, notifications queued for
batched ``multiRead`` re-reads, tombstones so a read issued before a deletion never brings a ledger back,
and the resync after a connection loss. A part of
:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`.
"""

from __future__ import annotations

import asyncio

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.zk.bridge import ConnectionLoss, EventType, NoNodeError, WatchedEvent, ZnodeStat
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.ledger_tree.tree_state import READ_ERRORS, TreePlumbing, TreeState, chunked, leaf_path

log = structlog.get_logger("autorecovery.auditor")


class PersistentWatch:
    """The persistent-watch mode of the watcher (batched reads).

    Args:
        state: the shared :class:`TreeState`; plumbing: the :class:`TreePlumbing` over it.
    """

    def __init__(self, state: TreeState, plumbing: TreePlumbing) -> None:
        self.s = state
        self.p = plumbing

    async def probe(self, attempts: int = 3) -> None:
        """Whether the server has ZooKeeper 3.6's requests: a multiRead of the root. A server before 3.6
        answers UNIMPLEMENTED and closes the connection (``UnimplementedRequestProcessor``): the answer
        or the connection loss may come first; a connection lost right at this request ``attempts``
        times in a row is taken for that answer.

        Raises:
            ServerTooOld: as above. ZooKeeperError: any other failure.
        """
        zk = self.s.zk
        for attempt in range(1, attempts + 1):
            try:
                await zk.get_many([self.s.paths.root])
                return
            except ServerTooOld:
                raise
            except ZooKeeperError as exc:
                if not isinstance(exc.__cause__, ConnectionLoss):
                    raise
                if attempt == attempts:
                    raise ServerTooOld(f"ZooKeeper at {zk.hosts} dropped the connection on multiRead "
                                       f"{attempts} times in a row (a server before 3.6 does)") from exc
                await asyncio.sleep(0)  # let the SUSPENDED state published with the loss land
                await asyncio.wait_for(zk.connected.wait(), zk.session_timeout_ms / 1000 * 3)

    async def arm_tops(self, again: bool = False) -> list[str]:
        """List the root with a one-shot child watch and keep a persistent recursive watch on every
        top-level ledger directory (``00``, ``01``... and ``000``... for long ids); not on the root
        itself, so the markers, locks and stream slots under ``underreplication`` (busy while workers
        replicate) never send this session a notification. ``again``: re-add every watch (after a
        connection loss). Returns the directories whose watch is new (their ledgers still to be read).

        Raises:
            ZooKeeperError: the root could not be listed or a watch not added.
        """
        s = self.s
        watch = None
        if again or not s.root_armed:  # again: kazoo's NONE for the lost one may still be on its way
            s.root_armed = True
            watch = self._root_watch
        listed = False
        try:
            kids = await s.zk.get_children(s.paths.root, watch=watch)
            listed = True
        finally:
            if watch is not None and not listed:
                s.root_armed = False  # failed or cancelled: the watch was not armed
        tops = {f"{s.paths.root}/{n}" for n in self.p.split(kids, 0)[0]}
        new = []
        for top in sorted(tops):
            if again or top not in s.tops:
                reg = await s.zk.add_watch(top, self.on_event, recursive=True, accept=leaf_path)
                if top not in s.tops:
                    new.append(top)
                s.tops[top] = reg
        for top in sorted(set(s.tops) - tops):
            # emptied and deleted: every ledger below sent its DELETED already
            await s.zk.remove_watch(top, s.tops.pop(top))
        return new

    def _root_watch(self, event: WatchedEvent) -> None:
        self.s.root_armed = False
        if self.s.stopped or event.type == EventType.NONE:
            return  # a connection loss: the resync after it re-arms everything
        self.p.spawn(self._refresh_tops())

    async def _refresh_tops(self) -> None:
        """A top-level directory appeared (or went): watch it first, then read what it already holds."""
        try:
            new = await self.arm_tops()
            ids: set[int] = set()
            for top in new:
                await self.p.tree_ids(ids, top)
            await self.read_batches(sorted(ids))
        except READ_ERRORS as exc:  # a full resync re-does it, never silent
            self.p.read_failed(self.s.paths.root, exc)
            self.s.watch_lost = True
            self.p.schedule_rearm()

    def on_event(self, etype: str, path: str) -> None:
        """A notification of a persistent watch (event loop, in server order)."""
        s = self.s
        if s.stopped:
            return
        lid = self.p.leaf_id(path)
        if lid is None:
            return  # a directory, a marker, a lock, a stream slot, a bookie... not ledger metadata
        s.events += 1
        if etype == "DELETED":
            if s.in_flight:
                s.tombs[lid] = s.gen
            s.pending.discard(lid)
            s.malformed_ids.discard(lid)
            s.lost_ledgers.discard(lid)
            if s.index.remove(lid):
                s.changed.set()
        elif etype in ("CREATED", "CHANGED"):
            s.pending.add(lid)
            if s.flusher is None or s.flusher.done():
                s.flusher = asyncio.ensure_future(self._flush())
                self.p.track(s.flusher)

    async def _flush(self) -> None:
        """Re-read notified ledgers in batches until none is pending."""
        s = self.s
        while s.pending and not s.stopped:
            lids = sorted(s.pending)
            s.pending.clear()
            await self.read_batches(lids)

    async def read_batches(self, lids: list[int]) -> None:
        """Read ``lids`` in multiRead batches (several in flight) and apply what they say; ledgers whose
        read failed go to the lost set (re-read once connected)."""
        async def one(chunk: list[int]) -> None:
            async with self.s.batch_sem:
                await self._read_batch(chunk)

        b = self.s.batch
        await chunked(one, [lids[i:i + b] for i in range(0, len(lids), b)], size=64)

    async def _read_batch(self, lids: list[int]) -> None:
        s = self.s
        s.gen += 1
        gen = s.gen
        s.in_flight[gen] = len(lids)
        paths = [s.paths.ledger(lid) for lid in lids]
        try:
            try:
                s.requests += 1
                results: list[tuple[bytes, ZnodeStat] | Exception] = await s.zk.get_many(paths)
            except READ_ERRORS as exc:  # connection loss etc.: retried, never silent
                self.p.read_failed(paths[0], exc)
                s.lost_ledgers.update(lids)
                self.p.schedule_rearm()
                return
            s.reads += len(lids)
            tombs = s.tombs
            for lid, path, res in zip(lids, paths, results, strict=True):
                t = tombs.get(lid)
                if t is not None and t >= gen:
                    continue  # read before its deletion was seen: it must not come back
                if isinstance(res, tuple):
                    self.p.apply_data(lid, res[0], res[1].mzxid, path)
                elif isinstance(res, NoNodeError):
                    s.malformed_ids.discard(lid)
                    if s.index.remove(lid):
                        s.changed.set()
                else:
                    self.p.read_failed(path, res)
                    s.lost_ledgers.add(lid)
                    self.p.schedule_rearm()
        finally:
            del s.in_flight[gen]
            if not s.in_flight:
                s.tombs.clear()
            elif s.tombs:
                oldest = min(s.in_flight)
                for lid in [lid for lid, t in s.tombs.items() if t < oldest]:
                    del s.tombs[lid]

    async def full_read(self) -> None:
        """List the tree and read every ledger in it in batches; ledgers of the index that the listing
        does not show are re-read (a ledger created after the listing must not be dropped) and dropped
        when gone. The build, and the resync after a connection loss.

        Raises:
            ZooKeeperError: a directory could not be listed.
        """
        ids: set[int] = set()
        await self.p.tree_ids(ids)
        missing = [lid for lid in self.s.index.ledger_ids() if lid not in ids]
        await self.read_batches(sorted(ids) + missing)

    async def rearm(self) -> bool:
        """Add the persistent watch again (after a connection loss), then resync; re-read ledgers whose
        read failed. Returns False when something failed (retried with back-off)."""
        s = self.s
        if s.watch_lost:
            s.watch_lost = False
            try:
                await self.arm_tops(again=True)
            except READ_ERRORS as exc:  # retried with back-off, never silent
                s.watch_lost = True
                self.p.read_failed(s.paths.root, exc)
                return False
            s.lost_ledgers.clear()  # the resync reads everything
            try:
                await self.full_read()
            except READ_ERRORS as exc:  # redo the whole resync, never silent
                self.p.read_failed(s.paths.root, exc)
                s.watch_lost = True
                return False
            s.rearmed += len(s.tops) + 1
            s.resyncs += 1
            log.info("re-added the persistent ledger tree watches after a connection loss and re-read the tree",
                     ledgers=len(s.index), failed=len(s.lost_ledgers))
        lids, s.lost_ledgers = sorted(s.lost_ledgers), set()
        if lids:
            await self.read_batches(lids)
            s.rearmed += len(lids) - len(s.lost_ledgers)
        return not (s.lost_ledgers or s.watch_lost)
