"""Following the ledger tree with a watch per directory and per ledger (EDGE; the fallback for ZooKeeper
before 3.6): child watches on every hierarchy level notice created and deleted ledgers, a data watch on
every ledger znode notices closes and ensemble changes; each is one-shot and re-armed by the read that
follows it, and a watch lost with the connection is remembered and re-read once connected. Part of
:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`.
"""

import asyncio

import structlog

from autorecovery.ledger.ids import is_ledger_leaf_name
from autorecovery.zk.bridge import EventType, NoNodeError
from autorecovery.zk.ledger_tree.tree_state import TreeBase, chunked

log = structlog.get_logger("autorecovery.auditor")


class PerLedgerWatches(TreeBase):
    """The per-ledger-watch mode of the watcher (one read per ledger)."""

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
        await asyncio.gather(chunked(lambda n: self._load(f"{path}/{n}"), leaves),
                             chunked(lambda n: self._walk(f"{path}/{n}", depth + 1), subdirs))

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
        await asyncio.gather(chunked(lambda n: self._load(f"{path}/{n}"), leaves),
                             chunked(lambda n: self._walk_safe(f"{path}/{n}", depth + 1), subdirs))
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
