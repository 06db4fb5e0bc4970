"""Following the ledger tree with persistent recursive watches (EDGE; ZooKeeper 3.6+, the default): one
watch per top-level ledger directory plus a one-shot child watch on the root, notifications queued for
batched ``multiRead`` re-reads, tombstones so a read issued before a deletion never brings a ledger back,
and the resync after a connection loss. Part of :class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`.
"""

import asyncio

import structlog

from autorecovery.errors import ZooKeeperError
from autorecovery.zk.bridge import ConnectionLoss, EventType, NoNodeError
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.ledger_tree.tree_state import TreeBase, chunked, leaf_path

log = structlog.get_logger("autorecovery.auditor")


class PersistentWatch(TreeBase):
    """The persistent-watch mode of the watcher (batched reads)."""

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
                reg = await self.zk.add_watch(top, self._on_event, recursive=True, accept=leaf_path)
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
        await chunked(one, [lids[i:i + b] for i in range(0, len(lids), b)], size=64)

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
            for lid, path, res in zip(lids, paths, results, strict=True):
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
