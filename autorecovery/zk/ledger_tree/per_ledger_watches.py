"""Following the ledger tree with a watch per directory and per ledger (EDGE; the fallback for ZooKeeper
before 3.6): child watches on every hierarchy level notice created and deleted ledgers, a data watch on
every ledger znode notices closes and ensemble changes; each is one-shot and re-armed by the read that
follows it, and a watch lost with the connection is remembered and re-read once connected. A part of
:class:`~autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from autorecovery.ledger.ids import is_ledger_leaf_name
from autorecovery.zk.bridge import EventType, NoNodeError, WatchedEvent
from autorecovery.zk.ledger_tree.tree_state import READ_ERRORS, TreePlumbing, TreeState, chunked


class PerLedgerWatches:
    """The per-ledger-watch mode of the watcher (one read per ledger).

    Args:
        state: the shared :class:`TreeState`; plumbing: the :class:`TreePlumbing` over it.
    """

    def __init__(self, state: TreeState, plumbing: TreePlumbing) -> None:
        self.s = state
        self.p = plumbing

    async def _list(self, path: str) -> list[str] | None:
        """The children of ``path`` (arming its child watch when not armed), None when it is gone.

        Raises:
            ZooKeeperError: the listing failed.
        """
        s = self.s
        watch = None
        if path not in s.dir_armed:
            s.dir_armed.add(path)
            watch = self._dir_watch(path)
        listed = False
        try:
            async with s.sem:
                kids = await s.zk.get_children(path, watch=watch)
            listed = True
            return kids
        except NoNodeError:
            return None
        finally:
            if not listed:
                s.dir_armed.discard(path)  # gone, failed or cancelled: no watch armed

    async def walk(self, path: str, depth: int) -> None:
        """List ``path`` (at ``depth``) and everything below it, loading every ledger with its watch.

        Raises:
            ZooKeeperError: a directory could not be listed.
        """
        kids = await self._list(path)
        if kids is None:
            self._forget_dir(path)
            return
        self.s.dirs[path] = set(kids)
        subdirs, leaves = self.p.split(kids, depth)
        await asyncio.gather(chunked(lambda n: self.load(f"{path}/{n}"), leaves),
                             chunked(lambda n: self.walk(f"{path}/{n}", depth + 1), subdirs))

    async def load(self, path: str, arm: bool = True) -> None:
        """Read one ledger znode (arming its data watch) into the index; a failed read is counted,
        warned about and retried once connected."""
        s = self.s
        lid = self.p.leaf_id(path)
        if lid is None:
            return
        watch = None
        if arm and lid not in s.armed:
            s.armed.add(lid)
            watch = self._data_watch(path, lid)
        try:
            async with s.sem:
                s.reads += 1
                s.requests += 1
                data, stat = await s.zk.get(path, watch=watch)
        except NoNodeError:
            s.armed.discard(lid)
            s.malformed_ids.discard(lid)
            s.index.remove(lid)
            s.changed.set()
            return
        except asyncio.CancelledError:
            if watch is not None:
                s.armed.discard(lid)
            raise
        except READ_ERRORS as exc:  # connection loss etc.: retried, never silent
            self.p.read_failed(path, exc)
            self.p.lose_ledger(lid)
            return
        self.p.apply_data(lid, data, stat.mzxid, path)

    # -- watches ----------------------------------------------------------------------------
    def _dir_watch(self, path: str) -> Callable[[WatchedEvent], None]:
        s = self.s

        def cb(event: WatchedEvent) -> None:
            s.dir_armed.discard(path)
            if s.stopped:
                return
            if event.type == EventType.NONE:  # connection lost: kazoo forgot the watch
                self.p.lose_dir(path)
            elif event.type in (EventType.CHILD, EventType.DELETED, EventType.CREATED):
                self.p.spawn(self.refresh_dir(path))
        return cb

    def _data_watch(self, path: str, lid: int) -> Callable[[WatchedEvent], None]:
        s = self.s

        def cb(event: WatchedEvent) -> None:
            s.armed.discard(lid)
            if s.stopped:
                return
            if event.type == EventType.NONE:  # connection lost: kazoo forgot the watch
                self.p.lose_ledger(lid)
            elif event.type == EventType.DELETED:
                s.malformed_ids.discard(lid)
                s.index.remove(lid)
                s.changed.set()
            elif event.type == EventType.CHANGED:
                self.p.spawn(self.load(path))
        return cb

    async def refresh_dir(self, path: str) -> None:
        """Re-list ``path`` (re-arming its watch): load new ledgers and directories, drop gone ones; a
        failed listing is counted, warned about and retried once connected."""
        s = self.s
        try:
            kids = await self._list(path)
        except READ_ERRORS as exc:  # connection loss etc.: retried, never silent
            self.p.read_failed(path, exc)
            self.p.lose_dir(path)
            return
        if kids is None:
            self._forget_dir(path)
            s.changed.set()
            return
        old = s.dirs.get(path, set())
        new = set(kids)
        s.dirs[path] = new
        depth = self.p.depth(path)
        subdirs, leaves = self.p.split(new - old, depth)
        for n in old - new:
            child = f"{path}/{n}"
            if is_ledger_leaf_name(n):
                lid = self.p.leaf_id(child)
                if lid is not None:
                    s.index.remove(lid)
                    s.armed.discard(lid)
                    s.malformed_ids.discard(lid)
                    s.lost_ledgers.discard(lid)
            else:
                self._forget_dir(child)
        await asyncio.gather(chunked(lambda n: self.load(f"{path}/{n}"), leaves),
                             chunked(lambda n: self.walk_safe(f"{path}/{n}", depth + 1), subdirs))
        s.changed.set()

    async def walk_safe(self, path: str, depth: int) -> None:
        """:meth:`walk` for a directory found by a watch: a failed listing is retried, not raised."""
        try:
            await self.walk(path, depth)
        except READ_ERRORS as exc:  # retried once connected, never silent
            self.p.read_failed(path, exc)
            self.p.lose_dir(path)

    def _forget_dir(self, path: str) -> None:
        s = self.s
        prefix = path + "/"
        for d in [d for d in s.dirs if d == path or d.startswith(prefix)]:
            del s.dirs[d]
        for lid in [lid for lid in s.index.ledger_ids() if s.paths.ledger(lid).startswith(prefix)]:
            s.index.remove(lid)
            s.armed.discard(lid)
        for lid in [lid for lid in s.malformed_ids if s.paths.ledger(lid).startswith(prefix)]:
            s.malformed_ids.discard(lid)
