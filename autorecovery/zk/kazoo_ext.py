"""Two ZooKeeper 3.6+ requests kazoo 2.11 does not have: ``addWatch`` and ``multiRead`` (EDGE).

kazoo 2.11 (pinned) knows neither persistent watches nor batched reads; ZooKeeper 3.6 added both to the
wire protocol (``ZooDefs.OpCode.addWatch`` = 106, ``multiRead`` = 22). This module is the whole
extension, kept apart from :mod:`autorecovery.zk.bridge` so it is easy to drop once kazoo has them:

* :class:`AddWatch` / :class:`RemoveWatches`: request records in kazoo's style (``type``,
  ``serialize``, ``deserialize``) for ``AddWatchRequest{path, mode}`` (mode 0 PERSISTENT, 1
  PERSISTENT_RECURSIVE) and ``RemoveWatchesRequest{path, type}`` (type 4 Persistent, 5
  PersistentRecursive), sent with kazoo's own request queue (``KazooClient._call``).
* :class:`MultiRead`: ``MultiOperationRecord`` of ``GetDataRequest``/``GetChildrenRequest`` ops (no
  watch flag); the answer is one result per op, a failed op an exception in its place (upstream
  ``ZooKeeper.multi`` for read ops, ``OpResult.ErrorResult``).
* :func:`install_event_hook`: kazoo hands a watch notification to ``_read_watch_event``, which only
  knows one-shot watches; the hook offers every notification to a persistent-watch table first and then
  lets kazoo do its usual work, so one-shot watches are untouched. A persistent watch lives on the
  server *connection*: after a connection loss the server has dropped it (and kazoo never re-sends
  it), so its owner adds it again once connected and re-reads what it covers.

An older server answers both opcodes with ``UNIMPLEMENTED`` (kazoo's ``UnimplementedError``);
:class:`~autorecovery.zk.bridge.ZkClient` turns that into :class:`ServerTooOld`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    Watch,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

from autorecovery.errors import ZooKeeperError

ADD_WATCH = 106
MULTI_READ = 22
GET_DATA = 4
GET_CHILDREN = 8
REMOVE_WATCHES = 18
MODE_PERSISTENT = 0
MODE_PERSISTENT_RECURSIVE = 1
WATCHER_TYPE_PERSISTENT = 4
WATCHER_TYPE_PERSISTENT_RECURSIVE = 5
#: kazoo's notification types (``EventType``): created, deleted, changed, child
EVENT_TYPES = {1: "CREATED", 2: "DELETED", 3: "CHANGED", 4: "CHILD"}


class ServerTooOld(ZooKeeperError):
    """The ZooKeeper server answered a 3.6+ request (addWatch, multiRead) with UNIMPLEMENTED."""


class AddWatch:
    """``AddWatchRequest``: a persistent (recursive) watch on ``path`` (a full, chrooted path)."""

    type = ADD_WATCH

    def __init__(self, path: str, mode: int) -> None:
        self.path = path
        self.mode = mode

    def serialize(self) -> bytearray:
        b = bytearray(write_string(self.path))
        b.extend(int_struct.pack(self.mode))
        return b

    @classmethod
    def deserialize(cls, buf, offset) -> bool:
        return True  # an ErrorResponse{err = 0}: errors come in the reply header


class RemoveWatches:
    """``RemoveWatchesRequest``: drop this connection's watch of ``watcher_type`` on ``path``."""

    type = REMOVE_WATCHES

    def __init__(self, path: str, watcher_type: int) -> None:
        self.path = path
        self.watcher_type = watcher_type

    def serialize(self) -> bytearray:
        b = bytearray(write_string(self.path))
        b.extend(int_struct.pack(self.watcher_type))
        return b

    @classmethod
    def deserialize(cls, buf, offset) -> bool:
        return True


class MultiRead:
    """``multiRead`` of ``ops`` = [(GET_DATA | GET_CHILDREN, full path)]; answers, in order,
    ``(data, ZnodeStat)`` for a getData, ``list[str]`` for a getChildren, or the kazoo exception of a
    failed op (``NoNodeError``...)."""

    type = MULTI_READ

    def __init__(self, ops: list[tuple[int, str]]) -> None:
        self.ops = ops

    def serialize(self) -> bytearray:
        b = bytearray()
        for kind, path in self.ops:
            b.extend(multiheader_struct.pack(kind, False, -1))
            b.extend(write_string(path))
            b.append(0)  # no watch
        b.extend(multiheader_struct.pack(-1, True, -1))
        return b

    @classmethod
    def deserialize(cls, buf, offset) -> list[Any]:
        out: list[Any] = []
        unpack_header, hsize = multiheader_struct.unpack_from, multiheader_struct.size
        unpack_stat, ssize = stat_struct.unpack_from, stat_struct.size
        while True:
            kind, done, _err = unpack_header(buf, offset)
            offset += hsize
            if done:
                return out
            if kind == GET_DATA:
                data, offset = read_buffer(buf, offset)
                out.append((data if data is not None else b"", ZnodeStat._make(unpack_stat(buf, offset))))
                offset += ssize
            elif kind == GET_CHILDREN:
                count = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                kids = []
                for _ in range(max(count, 0)):
                    name, offset = read_string(buf, offset)
                    kids.append(name)
                out.append(kids)
            elif kind == -1:
                err = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                out.append(EXCEPTIONS[err]())
            else:
                raise ValueError(f"unexpected multiRead result type {kind}")


class PersistentWatches:
    """The client side of persistent watches: (unchrooted) path → (recursive, deliver). Filled and read
    on kazoo's connection thread (the hook) and the event loop, hence the lock. ``deliver(type, path)``
    runs on kazoo's thread and must only hand the event over (``loop.call_soon_threadsafe``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[str, tuple[bool, Callable[[str, str], None]]] = {}

    def add(self, path: str, recursive: bool, deliver: Callable[[str, str], None]) -> None:
        with self._lock:
            self._watches[path] = (recursive, deliver)

    def remove(self, path: str, deliver: Callable[[str, str], None] | None = None) -> bool:
        """Forget the watch on ``path`` (only if it is still ``deliver``'s, when given); True if it was."""
        with self._lock:
            got = self._watches.get(path)
            if got is None or (deliver is not None and got[1] is not deliver):
                return False
            del self._watches[path]
            return True

    def __len__(self) -> int:
        return len(self._watches)

    def __contains__(self, path: str) -> bool:
        return path in self._watches

    def offer(self, etype: str, path: str) -> None:
        with self._lock:
            targets = list(self._watches.items())
        for root, (recursive, deliver) in targets:
            if path == root or (recursive and (root == "/" or path.startswith(root + "/"))):
                deliver(etype, path)


def install_event_hook(kz, table: PersistentWatches) -> None:
    """Make ``kz``'s (a ``KazooClient``) connection offer every watch notification to ``table`` before
    kazoo's own one-shot handling (which still runs, unchanged). Idempotent per client."""
    conn = kz._connection
    if getattr(conn, "_autorecovery_hook", None) is table:
        return
    original = conn._read_watch_event

    def read_watch_event(buffer, offset):  # kazoo's connection thread
        if len(table):
            try:
                watch, _ = Watch.deserialize(buffer, offset)
                etype = EVENT_TYPES.get(watch.type)
                if etype is not None and not kz._stopped.is_set():
                    table.offer(etype, kz.unchroot(watch.path))
            except Exception:  # noqa: BLE001 - never break kazoo's reader; kazoo parses it again below
                pass
        return original(buffer, offset)

    conn._read_watch_event = read_watch_event
    conn._autorecovery_hook = table


__all__ = ["AddWatch", "MultiRead", "RemoveWatches", "PersistentWatches", "ServerTooOld", "install_event_hook",
           "GET_DATA", "GET_CHILDREN"]
