"""The bookie store's write path: group commit in two threads (EDGE; see ``bookie.storage``).

Stage 1, the writer thread, takes every operation queued at that moment as one group, checks it
against the ledger state (an LRU cache ahead of the database) and appends its bodies to the entry log;
stage 2, the committer thread, writes the group's index rows, ``fdatasync``s the log, commits the rows
in one SQLite transaction and only then resolves the callers' futures (upstream's journal thread and
ForceWriteThread split the same way). :class:`GroupCommit` is the half of
:class:`~autorecovery.bookie.storage.BookieStorage` that runs in these threads; the store's
``open``/``submit_*`` half owns the queue, the connection and the thread start.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autorecovery.bookie.entrylog import EntryLogError, EntryLogs
from autorecovery.bookie.status import SKIPPED, BookieStatusError, StreamState


@dataclass(slots=True)
class _Ledger:
    master_key: bytes = field(repr=False)  # a secret: never in repr (issue 25)
    fenced: bool
    lac: int


@dataclass(slots=True)
class _Op:
    kind: str  # "add" | "fence" | "sync"
    ledger_id: int = 0
    #: an add's entry ids and bodies, in order, and the largest LAC their headers carry
    eids: Sequence[int] = ()
    bodies: Sequence[bytes] = ()
    lac: int = -1
    master_key: bytes = field(default=b"", repr=False)
    recovery: bool = False
    stream: StreamState | None = None
    future: asyncio.Future | None = None
    loop: asyncio.AbstractEventLoop | None = None
    size: int = field(default=0)



_STOP = object()


def _next_group(q, max_items: int = 1 << 30, max_bytes: int = 1 << 62) -> tuple[list, bool]:
    """Wait for an item of ``q``, then take what else it holds now while the group has fewer than
    ``max_items`` items and ``max_bytes`` bytes (each item's ``size``, 0 when it has none). Returns
    ``(group, stop marker taken)``; the group is empty when the marker came first."""
    first = q.get()
    if first is _STOP:
        return [], True
    items, size = [first], getattr(first, "size", 0)
    while len(items) < max_items and size < max_bytes:
        try:
            nxt = q.get_nowait()
        except queue.Empty:
            return items, False
        if nxt is _STOP:
            return items, True
        items.append(nxt)
        size += getattr(nxt, "size", 0)
    return items, False


@dataclass(slots=True)
class _Prepared:
    """A group checked and appended by the writer, waiting for the committer: the callers' results if
    it commits, the index changes to write (in order), and the epoch it was checked in."""

    batch: list[_Op]
    results: list[Any]
    epoch: int
    statements: list[tuple[str, tuple]] = field(default_factory=list)
    lacs: dict[int, int] = field(default_factory=dict)
    #: the index rows, flat: ``ledger id, entry id, log id, offset, length`` for each entry in turn
    index_values: list[int] = field(default_factory=list)
    failure: str | None = None



#: index rows one INSERT statement carries at most (5 parameters each: 640, below SQLite's old 999 cap)
_ROWS_PER_INSERT = 128
_INSERT_SQLS = {size: "INSERT OR REPLACE INTO entries(ledger_id, entry_id, log_id, offset, length) VALUES "
                      + ",".join(["(?,?,?,?,?)"] * size) for size in (_ROWS_PER_INSERT, 32, 8, 1)}


def _insert_index_rows(conn: sqlite3.Connection, rows: list[tuple[int, int, int, int, int]]) -> None:
    """``INSERT OR REPLACE`` the ``(ledger id, entry id, log id, offset, length)`` rows, many per
    statement (:func:`_insert_index_values` on the rows laid flat)."""
    _insert_index_values(conn, [v for row in rows for v in row])


def _insert_index_values(conn: sqlite3.Connection, values: list[int]) -> None:
    """``INSERT OR REPLACE`` index rows given flat (five values per row, in row order), many rows per
    statement: ``executemany`` steps once per row and gives up the GIL at every step, and each time the
    committer must win it back from the event loop. Statements are for 128, 32, 8 and 1 rows only, so
    SQLite's statement cache keeps them all; each takes a slice of ``values`` (no per-row work)."""
    i, n = 0, len(values) // 5
    for size, sql in _INSERT_SQLS.items():  # largest first
        while n - i >= size:
            conn.execute(sql, values[5 * i:5 * (i + size)])
            i += size


class GroupCommit:
    """The writer and committer threads of a :class:`~autorecovery.bookie.storage.BookieStorage`
    (a mixin: the attributes below are set by the store's ``__init__`` and ``open``)."""

    name: str
    logs: EntryLogs
    max_batch_ops: int
    max_batch_bytes: int
    commits: int
    _queue: queue.SimpleQueue[Any]
    _handoff: queue.Queue[Any]
    _conn_lock: threading.Lock
    _stage: threading.Condition
    _epoch: int
    _poisoned: int
    _in_commit: int
    _cache: OrderedDict[int, _Ledger | None]
    _cache_size: int
    _wconn: sqlite3.Connection | None

    def _writer_main(self) -> None:
        """Stage 1 of the group commit: take the operations queued now, check them against the ledger
        state and append their bodies to the entry log (:meth:`_prepare`), then hand the group to the
        committer (stage 2), which syncs the log and commits the index rows. The next group's bodies are
        appended while the committer waits for the disk (upstream's journal thread and ForceWriteThread
        split the same way), so a bookie ingests while it syncs."""
        committer = threading.Thread(target=self._committer_main, name=f"bookie-committer-{self.name}", daemon=True)
        committer.start()
        stopping = False
        while not stopping:
            batch, stopping = _next_group(self._queue, self.max_batch_ops, self.max_batch_bytes)
            if not batch:
                break
            with self._stage:
                if self._poisoned == self._epoch:  # a group failed: wait for the failed ones to drain
                    self._stage.wait_for(lambda: self._in_commit == 0)
                    self._cache.clear()  # it may hold changes that were rolled back
                    self._epoch += 1
                self._in_commit += 1
            self._handoff.put(self._prepare(batch))
        self._handoff.put(_STOP)
        committer.join()
        # fail anything queued after the stop marker
        leftovers: list[_Op] = []
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                break
            if op is not _STOP:
                leftovers.append(op)
        if leftovers:
            err = BookieStatusError("EIO", f"bookie {self.name}: storage is closing")
            self._resolve(leftovers, [err] * len(leftovers))
        assert self._wconn is not None
        with contextlib.suppress(sqlite3.Error):
            self._wconn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._wconn.close()

    def _committer_main(self) -> None:
        """Stage 2: take every prepared group waiting (in order), write their index rows, ``fdatasync``
        the entry log (the bodies are durable before the rows that point at them), commit them in one
        transaction, then resolve the futures. A failed group fails, and so does every group prepared
        before stage 1 learnt of the failure (they were checked against state that was rolled back)."""
        stopping = False
        while not stopping:
            # the groups the writer prepared while the last sync ran share the next one
            preps, stopping = _next_group(self._handoff)
            if not preps:
                return
            outcome: list[tuple[_Prepared, list[Any]]] = []
            try:
                good: list[_Prepared] = []
                for prep in preps:
                    if self._poisoned == prep.epoch:
                        outcome.append((prep, [self._failed_batch(prep.batch, prep.failure)] * len(prep.batch)))
                    elif prep.failure is not None:
                        outcome.append((prep, self._fail_group(prep, prep.failure)))
                    elif good and good[-1].epoch != prep.epoch:  # never happens: epochs change after a drain
                        outcome.append((prep, self._fail_group(prep, "epoch changed")))
                    else:
                        good.append(prep)
                if good:
                    failure = self._commit(good)
                    for prep in good:
                        outcome.append((prep, prep.results if failure is None else self._fail_group(prep, failure)))
            except Exception as exc:  # noqa: BLE001 - a bug must fail the groups, not hang their callers
                done = {id(p) for p, _r in outcome}
                outcome += [(p, self._fail_group(p, f"{type(exc).__name__}: {exc}")) for p in preps if id(p) not in done]
            try:
                for prep, results in outcome:
                    self._resolve(prep.batch, results)
            finally:
                with self._stage:
                    self._in_commit -= len(preps)
                    self._stage.notify_all()

    @staticmethod
    def _resolve(batch: list[_Op], results: list[Any]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any]]] = {}
        for op, res in zip(batch, results, strict=True):
            if op.loop is not None and op.future is not None:
                by_loop.setdefault(op.loop, []).append((op.future, res))
        for loop, pairs in by_loop.items():
            if not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # loop closed in between
                    loop.call_soon_threadsafe(_settle_all, pairs)

    def _failed_batch(self, batch: list[_Op], failure: str | None) -> BookieStatusError:
        for op in batch:
            if op.stream is not None:
                op.stream.failed = True
        return BookieStatusError("EIO", f"bookie {self.name}: storage write failed: "
                                        f"{failure or 'an earlier group failed'}")

    def _fail_group(self, prep: _Prepared, failure: str) -> list[Any]:
        with self._stage:
            self._poisoned = prep.epoch
        err = self._failed_batch(prep.batch, failure)
        return [err] * len(prep.batch)

    def _commit(self, preps: list[_Prepared]) -> str | None:
        """Write the index changes of ``preps`` (in order), sync the entry log, commit; None on success,
        else what failed (everything is rolled back)."""
        conn = self._wconn
        assert conn is not None
        try:
            with self._conn_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for prep in preps:
                        for sql, params in prep.statements:
                            conn.execute(sql, params)
                        if prep.lacs:
                            conn.executemany("UPDATE ledgers SET lac=? WHERE ledger_id=? AND lac<?",
                                             [(lac, lid, lac) for lid, lac in prep.lacs.items()])
                        if prep.index_values:
                            _insert_index_values(conn, prep.index_values)
                    self.logs.sync()  # the bodies are durable before the index rows that point at them
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
            self.commits += 1
        except (sqlite3.Error, EntryLogError) as exc:
            return str(exc)
        return None

    def _prepare(self, batch: list[_Op]) -> _Prepared:
        """Check each operation of the group against the ledger state (the cache, which runs ahead of
        what is committed), append the bodies, and collect the index changes for the committer."""
        prep = _Prepared(batch, [None] * len(batch), self._epoch)
        try:
            for i, op in enumerate(batch):
                if op.kind == "add":
                    prep.results[i] = self._apply_add(prep, op)
                elif op.kind == "fence":
                    prep.results[i] = self._apply_fence(prep, op)
        except (sqlite3.Error, EntryLogError) as exc:
            prep.failure = str(exc)
        return prep

    def _ledger(self, ledger_id: int) -> _Ledger | None:
        if ledger_id in self._cache:
            self._cache.move_to_end(ledger_id)
            return self._cache[ledger_id]
        conn = self._wconn
        assert conn is not None
        with self._conn_lock:  # the committer may be using the connection
            row = conn.execute("SELECT master_key, fenced, lac FROM ledgers WHERE ledger_id=?", (ledger_id,)).fetchone()
        st = _Ledger(bytes(row[0]), bool(row[1]), int(row[2])) if row else None
        self._cache[ledger_id] = st
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return st

    def _apply_add(self, prep: _Prepared, op: _Op) -> BookieStatusError | None:
        if op.stream is not None and op.stream.failed:
            return SKIPPED
        eids, bodies, lac = op.eids, op.bodies, op.lac
        st = self._ledger(op.ledger_id)
        if st is None:
            prep.statements.append(("INSERT INTO ledgers(ledger_id, master_key, fenced, lac) VALUES (?, ?, 0, ?)",
                                    (op.ledger_id, op.master_key, lac)))
            self._cache[op.ledger_id] = _Ledger(op.master_key, False, lac)
        else:
            what = f"entry {eids[0]}" if len(eids) == 1 else f"entries {eids[0]}..{eids[-1]}"
            if st.master_key != op.master_key:
                return self._fail(op, "EUA", f"ledger {op.ledger_id}: master key does not match ({what})")
            if st.fenced and not op.recovery:
                return self._fail(op, "EFENCED", f"ledger {op.ledger_id} is fenced ({what})")
            if lac > st.lac:
                prep.lacs[op.ledger_id] = lac  # one update per ledger per group
                st.lac = lac
        # a run's bodies go out in a few writev calls (EntryLogs.append_many: each system call costs this
        # thread a wait for the GIL), the index rows follow
        locs = self.logs.append_many(bodies)
        lid = op.ledger_id
        values = prep.index_values
        for eid, body, (log_id, offset) in zip(eids, bodies, locs, strict=True):
            values += (lid, eid, log_id, offset, len(body))
        return None

    @staticmethod
    def _fail(op: _Op, status: str, detail: str) -> BookieStatusError:
        if op.stream is not None:
            op.stream.failed = True
        return BookieStatusError(status, detail)

    def _apply_fence(self, prep: _Prepared, op: _Op) -> BookieStatusError | None:
        st = self._ledger(op.ledger_id)
        if st is None:
            prep.statements.append(("INSERT INTO ledgers(ledger_id, master_key, fenced, lac) VALUES (?, ?, 1, -1)",
                                    (op.ledger_id, op.master_key)))
            self._cache[op.ledger_id] = _Ledger(op.master_key, True, -1)
            return None
        if st.master_key != op.master_key:
            return BookieStatusError("EUA", f"ledger {op.ledger_id}: master key does not match (fence)")
        if not st.fenced:
            prep.statements.append(("UPDATE ledgers SET fenced=1 WHERE ledger_id=?", (op.ledger_id,)))
            st.fenced = True
        return None


def _settle_all(pairs: list[tuple[asyncio.Future, Any]]) -> None:
    for fut, res in pairs:
        if not fut.done():
            fut.set_result(res)
