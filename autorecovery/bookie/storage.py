"""The reference bookie's entry store: entry logs for bodies, a SQLite index, one writer thread with
group commit (EDGE).

Layout (next to the cookie ``current/VERSION``, as upstream keeps its ledger files under ``current/``)::

    current/entrylogs/<log id>.log   entry bodies, appended back to back (bookie/entrylog.py)
    current/ledgers.db               SQLite (WAL) index:
        ledgers(ledger_id PK, master_key BLOB, fenced INT, lac INT)
        entries(ledger_id, entry_id, log_id, offset, length, PRIMARY KEY (ledger_id, entry_id))

Durability. The writer thread takes every operation queued at that moment (up to ``max_batch_ops``
operations or ``max_batch_bytes`` bytes of bodies) as one group, checks it against the ledger state
and appends its bodies to the entry log; the committer thread then writes the group's index rows,
``fdatasync``s the log, commits the rows in one SQLite transaction (``synchronous=FULL``: the WAL is
fsynced) and only then resolves the callers' futures. While the committer waits for the disk, the
writer appends the next group (upstream splits its journal the same way: the journal thread writes,
the ForceWriteThread syncs), so ingest does not stop for each sync. Groups commit in order; when one
fails, the groups checked after it fail too (they saw its state), and the cached state is dropped. An acknowledged
add therefore survives ``kill -9`` and power loss, like upstream's journal (an add is acknowledged only
after its journal write is synced). Bodies are written once, sequentially; the SQLite commit carries
only small index rows (schema 2; a schema-1 store, bodies inside SQLite, is migrated on open).

Threads. Writes (adds, fencing) go through the single writer thread, which owns the authoritative
ledger state (master key, fenced flag, LAC) and keeps an LRU cache of it (ahead of the database by at
most six groups), and the committer thread, which alone writes the database. Reads run on a small pool of
reader threads, each with its own connection; WAL readers see only committed transactions and never
wait for the writer. The asyncio loop only awaits futures: it never runs SQLite.

Per-ledger semantics (upstream ``BookieImpl``/``LedgerDescriptorImpl``/``HandleFactoryImpl``):

* the first add (or fence) of a ledger records its master key; a different key later → ``EUA``;
* a fenced ledger refuses normal adds (``EFENCED``) but accepts recovery adds;
* re-adding an existing entry id overwrites it (recovery re-adds are idempotent);
* the LAC is the largest piggy-backed LAC of any stored entry's header (``digest.peek_ids``);
* fencing is durable before it is acknowledged; fencing an unknown ledger creates it, fenced, with the
  fencing request's master key, so a late writer cannot start writing to this bookie.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autorecovery.bookie.entrylog import ENTRYLOG_DIR, EntryLogError, EntryLogs
from autorecovery.errors import AutoRecoveryError
from autorecovery.ledger.digest import peek_ids
from autorecovery.rpc.convert import stored_on

DB_FILENAME = "ledgers.db"
CURRENT_DIR = "current"
SCHEMA_VERSION = "2"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id INTEGER PRIMARY KEY,
    master_key BLOB NOT NULL,
    fenced INTEGER NOT NULL DEFAULT 0,
    lac INTEGER NOT NULL DEFAULT -1
);
"""

_ENTRIES_V2 = """
CREATE TABLE IF NOT EXISTS entries (
    ledger_id INTEGER NOT NULL,
    entry_id INTEGER NOT NULL,
    log_id INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (ledger_id, entry_id)
) WITHOUT ROWID
"""

#: rows moved per transaction when a schema-1 store is migrated
_MIGRATE_CHUNK = 1000


class BookieStatusError(AutoRecoveryError):
    """A request the bookie answers with a non-OK protocol status.

    Attributes:
        status: protocol status name (``ENOLEDGER``, ``ENOENTRY``, ``EUA``, ``EFENCED``, ``EBADREQ``,
            ``EREADONLY``, ``EIO``).
        detail: human-readable reason naming the ledger/entry; sent to the client as ``message``.
        lac: the ledger's LAC on this bookie when known (``ENOENTRY`` answers carry it), else -1.
    """

    def __init__(self, status: str, detail: str, lac: int = -1) -> None:
        self.status = status
        self.detail = detail
        self.lac = lac
        super().__init__(f"{status}: {detail}")


class _StreamState:
    """Shared by the operations of one AddEntries stream: after the first failure the writer skips
    the stream's remaining operations, so nothing after a failed entry is written."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed = False


#: Result of an operation skipped because an earlier entry of its stream failed.
SKIPPED = BookieStatusError("EIO", "skipped: an earlier entry of this stream failed")


@dataclass(slots=True)
class _Ledger:
    master_key: bytes = field(repr=False)  # a secret: never in repr (issue 25)
    fenced: bool
    lac: int


@dataclass(slots=True)
class _Op:
    kind: str  # "add" | "fence" | "sync"
    ledger_id: int = 0
    #: an add's entries, in order: ``(entry id, body, piggy-backed LAC)``
    entries: Sequence[tuple[int, bytes, int]] = ()
    master_key: bytes = field(default=b"", repr=False)
    recovery: bool = False
    stream: _StreamState | None = None
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
    rows: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """An entry as read from the store: ``body`` is the packed entry (None when the entry is missing)."""

    entry_id: int
    body: bytes | None


#: index rows one INSERT statement carries at most (5 parameters each: 640, below SQLite's old 999 cap)
_ROWS_PER_INSERT = 128
_INSERT_SQLS = {size: "INSERT OR REPLACE INTO entries(ledger_id, entry_id, log_id, offset, length) VALUES "
                      + ",".join(["(?,?,?,?,?)"] * size) for size in (_ROWS_PER_INSERT, 32, 8, 1)}


def _insert_index_rows(conn: sqlite3.Connection, rows: list[tuple[int, int, int, int, int]]) -> None:
    """``INSERT OR REPLACE`` the ``(ledger id, entry id, log id, offset, length)`` rows, many per
    statement: ``executemany`` steps once per row and gives up the GIL at every step, and each time the
    committer must win it back from the event loop. Statements are for 128, 32, 8 and 1 rows only, so
    SQLite's statement cache keeps them all."""
    i, n = 0, len(rows)
    for size, sql in _INSERT_SQLS.items():  # largest first
        while n - i >= size:
            conn.execute(sql, [v for row in rows[i:i + size] for v in row])
            i += size


class BookieStorage:
    """SQLite-backed entry store of one bookie. See the module docstring for layout and semantics.

    Args:
        data_dir: the bookie's data directory; the database lives in ``data_dir/current/``.
        name: label (the bookie id) used in error messages and thread names.
        max_batch_ops: most operations per group-commit transaction.
        max_batch_bytes: most body bytes per group-commit transaction (a single larger entry still
            goes in a transaction of its own).
        reader_threads: size of the read connection pool.
        synchronous: SQLite ``synchronous`` pragma, ``FULL`` by default (see module docstring).

    Every async method raises :class:`BookieStatusError` for protocol-level refusals and ``EIO`` for
    SQLite failures, and ``RuntimeError`` when called on a closed store.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        name: str = "bookie",
        max_batch_ops: int = 512,
        max_batch_bytes: int = 16 * 1024 * 1024,
        reader_threads: int = 4,
        synchronous: str = "FULL",
        ledger_cache_size: int = 65536,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.db_path = self.data_dir / CURRENT_DIR / DB_FILENAME
        self.logs = EntryLogs(self.data_dir / CURRENT_DIR / ENTRYLOG_DIR)
        self.name = name
        self.max_batch_ops = max_batch_ops
        self.max_batch_bytes = max_batch_bytes
        self.reader_threads = reader_threads
        self.synchronous = synchronous
        self._cache: OrderedDict[int, _Ledger | None] = OrderedDict()
        # the cache runs ahead of the database by up to six groups (four waiting, one being committed,
        # one being prepared): an entry they changed must not be evicted before they commit
        self._cache_size = max(ledger_cache_size, 8 * max_batch_ops)
        self._handoff: queue.Queue[Any] = queue.Queue(maxsize=4)  # writer → committer: groups waiting
        self._conn_lock = threading.Lock()  # the writer connection is used by one thread at a time
        self._stage = threading.Condition()  # guards _epoch, _poisoned, _in_commit
        self._epoch = 0
        self._poisoned = -1  # the epoch in which a group failed (its later groups fail too)
        self._in_commit = 0  # groups handed to the committer and not yet resolved
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._wconn: sqlite3.Connection | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_local = threading.local()
        self._conns_lock = threading.Lock()
        self._closed = False
        self._opened = False
        #: number of group-commit transactions so far (for tests and benchmarks)
        self.commits = 0
        #: entries moved out of SQLite by a schema-1 → 2 migration on open (0 when none)
        self.migrated_entries = 0

    # -- lifecycle -----------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def open(self) -> "BookieStorage":
        """Create or open the database and start the writer thread and the reader pool (blocking:
        call with ``asyncio.to_thread``).

        Raises:
            BookieStatusError: ``EIO`` naming the database path (or entry log) when it cannot be opened,
                or the store has a schema version this code does not know.
        """
        if self._opened:
            return self
        (self.data_dir / CURRENT_DIR).mkdir(parents=True, exist_ok=True)
        try:
            self.logs.open()
            conn = self._connect()
            conn.execute("PRAGMA page_size=16384")  # only takes effect on a new database
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot switch {self.db_path} to WAL mode (got {mode})")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA journal_size_limit=67108864")
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                conn.execute(_ENTRIES_V2)
                conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            elif row[0] == "1":
                self._migrate_v1(conn)
            elif row[0] != SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"schema version {row[0]} in {self.db_path}, expected {SCHEMA_VERSION}")
        except (sqlite3.Error, EntryLogError) as exc:
            self.logs.close()
            raise BookieStatusError("EIO", f"bookie {self.name}: cannot open {self.db_path}: {exc}") from exc
        self._wconn = conn
        self._writer = threading.Thread(target=self._writer_main, name=f"bookie-writer-{self.name}", daemon=True)
        self._writer.start()
        self._readers = ThreadPoolExecutor(
            max_workers=self.reader_threads,
            thread_name_prefix=f"bookie-reader-{self.name}",
        )
        self._opened = True
        return self

    def _migrate_v1(self, conn: sqlite3.Connection) -> None:
        """Move a schema-1 store (bodies inside SQLite) to schema 2 (bodies in entry logs), in chunks that
        are each durable (log synced, then index rows inserted and old rows deleted in one transaction),
        so an interrupted migration resumes where it stopped and nothing is lost or doubled."""
        conn.execute("BEGIN IMMEDIATE")
        has_old = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='entries_v1'").fetchone()
        if not has_old:
            conn.execute("ALTER TABLE entries RENAME TO entries_v1")
        conn.execute(_ENTRIES_V2)
        conn.execute("COMMIT")
        moved = 0
        while True:
            rows = conn.execute("SELECT ledger_id, entry_id, body FROM entries_v1 ORDER BY ledger_id, entry_id "
                                "LIMIT ?", (_MIGRATE_CHUNK,)).fetchall()
            if not rows:
                break
            locs = [(lid, eid, *self.logs.append(bytes(body)), len(body)) for lid, eid, body in rows]
            self.logs.sync()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT OR REPLACE INTO entries(ledger_id, entry_id, log_id, offset, length) "
                             "VALUES (?, ?, ?, ?, ?)", locs)
            conn.executemany("DELETE FROM entries_v1 WHERE ledger_id=? AND entry_id=?",
                             [(lid, eid) for lid, eid, _b in rows])
            conn.execute("COMMIT")
            moved += len(rows)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TABLE entries_v1")
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
        self.migrated_entries = moved

    async def close(self) -> None:
        """Finish queued writes, stop the threads and close every connection. Idempotent."""
        if self._closed or not self._opened:
            self._closed = True
            return
        self._closed = True
        self._queue.put(_STOP)
        if self._writer is not None:
            await asyncio.to_thread(self._writer.join)
        if self._readers is not None:
            await asyncio.to_thread(self._readers.shutdown, True)
        with self._conns_lock:
            for c in self._reader_conns:
                c.close()
            self._reader_conns.clear()
        self.logs.close()

    # -- writes --------------------------------------------------------------------------------
    def _submit(self, op: _Op) -> asyncio.Future:
        if self._closed or not self._opened:
            raise RuntimeError(f"bookie {self.name}: storage is closed")
        loop = asyncio.get_running_loop()
        op.loop = loop
        op.future = loop.create_future()
        self._queue.put(op)
        return op.future

    def new_stream(self) -> _StreamState:
        """State shared by the adds of one AddEntries stream (see :meth:`submit_add`)."""
        return _StreamState()

    def submit_add(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        *,
        recovery: bool = False,
        stream: _StreamState | None = None,
    ) -> asyncio.Future:
        """Queue an add and return a future resolved after the add's transaction committed durably.

        The future's result is ``None`` on success, or a :class:`BookieStatusError` *value* (not
        raised) for ``EUA`` / ``EFENCED`` / ``EIO``; with ``stream``, operations queued after a failed
        one of the same stream resolve to :data:`SKIPPED` without being written. Adds are applied in
        submission order. The caller has already validated the body (``peek_ids`` must succeed).
        """
        return self.submit_adds(ledger_id, master_key, ((entry_id, body),), recovery=recovery, stream=stream)

    def submit_adds(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[tuple[int, bytes]],
        *,
        recovery: bool = False,
        stream: _StreamState | None = None,
    ) -> asyncio.Future:
        """Queue the adds of ``entries`` (``(entry id, body)``, at least one, all of ``ledger_id``) as one
        operation: one queue hand-off, one ``writev`` of the bodies, one future. It resolves like
        :meth:`submit_add`'s, for all of them: the ledger checks (master key, fencing) are the same for
        every entry of one ledger, and a storage failure fails the whole group anyway. Used by the
        batched handlers (PullEntries), whose per-entry cost this keeps out of the event loop.
        """
        items = [(eid, bytes(body), peek_ids(body)[2]) for eid, body in entries]
        if not items:
            raise ValueError(f"ledger {ledger_id}: no entries to add")
        return self._submit(_Op("add", ledger_id=ledger_id, entries=items, master_key=bytes(master_key),
                                recovery=recovery, stream=stream, size=sum(len(b) for _e, b, _l in items)))

    async def add_entry(
        self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *, recovery: bool = False
    ) -> None:
        """Store one entry durably (see :meth:`submit_add`).

        Raises:
            BookieStatusError: ``EUA`` (other master key), ``EFENCED`` (fenced, not a recovery add),
                ``EIO`` (SQLite failure).
        """
        res = await self.submit_add(ledger_id, entry_id, master_key, body, recovery=recovery)
        if isinstance(res, BookieStatusError):
            raise res

    async def fence(self, ledger_id: int, master_key: bytes) -> None:
        """Durably mark the ledger fenced (creating it, fenced, if unknown) before returning.

        Raises:
            BookieStatusError: ``EUA`` when ``master_key`` differs from the ledger's; ``EIO``.
        """
        res = await self._submit(_Op("fence", ledger_id=ledger_id, master_key=bytes(master_key)))
        if isinstance(res, BookieStatusError):
            raise res

    async def sync(self) -> None:
        """Wait until every write queued before this call has been committed (a barrier)."""
        await self._submit(_Op("sync"))

    # -- writer thread -------------------------------------------------------------------------
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
        try:
            self._wconn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
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
        for op, res in zip(batch, results):
            if op.loop is not None and op.future is not None:
                by_loop.setdefault(op.loop, []).append((op.future, res))
        for loop, pairs in by_loop.items():
            if not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(_settle_all, pairs)
                except RuntimeError:  # loop closed in between
                    pass

    def _failed_batch(self, batch: list[_Op], failure: str | None) -> BookieStatusError:
        for op in batch:
            if op.stream is not None:
                op.stream.failed = True
        return BookieStatusError("EIO", f"bookie {self.name}: storage write failed: "
                                        f"{failure or 'an earlier group failed'}")

    def _fail_group(self, prep: "_Prepared", failure: str) -> list[Any]:
        with self._stage:
            self._poisoned = prep.epoch
        err = self._failed_batch(prep.batch, failure)
        return [err] * len(prep.batch)

    def _commit(self, preps: list["_Prepared"]) -> str | None:
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
                        if prep.rows:
                            _insert_index_rows(conn, prep.rows)
                    self.logs.sync()  # the bodies are durable before the index rows that point at them
                    conn.execute("COMMIT")
                except BaseException:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                    raise
            self.commits += 1
        except (sqlite3.Error, EntryLogError) as exc:
            return str(exc)
        return None

    def _prepare(self, batch: list[_Op]) -> "_Prepared":
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

    def _apply_add(self, prep: "_Prepared", op: _Op) -> BookieStatusError | None:
        if op.stream is not None and op.stream.failed:
            return SKIPPED
        entries = op.entries
        lac = max(e[2] for e in entries)
        st = self._ledger(op.ledger_id)
        if st is None:
            prep.statements.append(("INSERT INTO ledgers(ledger_id, master_key, fenced, lac) VALUES (?, ?, 0, ?)",
                                    (op.ledger_id, op.master_key, lac)))
            self._cache[op.ledger_id] = _Ledger(op.master_key, False, lac)
        else:
            what = f"entry {entries[0][0]}" if len(entries) == 1 else f"entries {entries[0][0]}..{entries[-1][0]}"
            if st.master_key != op.master_key:
                return self._fail(op, "EUA", f"ledger {op.ledger_id}: master key does not match ({what})")
            if st.fenced and not op.recovery:
                return self._fail(op, "EFENCED", f"ledger {op.ledger_id} is fenced ({what})")
            if lac > st.lac:
                prep.lacs[op.ledger_id] = lac  # one update per ledger per group
                st.lac = lac
        # a run's bodies go out in a few writev calls (EntryLogs.append_many: each system call costs this
        # thread a wait for the GIL), the index rows follow
        locs = self.logs.append_many([body for _eid, body, _lac in entries])
        lid = op.ledger_id
        prep.rows.extend((lid, e[0], log_id, offset, len(e[1])) for e, (log_id, offset) in zip(entries, locs))
        return None

    @staticmethod
    def _fail(op: _Op, status: str, detail: str) -> BookieStatusError:
        if op.stream is not None:
            op.stream.failed = True
        return BookieStatusError(status, detail)

    def _apply_fence(self, prep: "_Prepared", op: _Op) -> BookieStatusError | None:
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

    # -- reads ---------------------------------------------------------------------------------
    def _reader_conn(self) -> sqlite3.Connection:
        conn = getattr(self._reader_local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=1")
            self._reader_local.conn = conn
            with self._conns_lock:
                self._reader_conns.append(conn)
        return conn

    async def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if self._closed or not self._opened or self._readers is None:
            raise RuntimeError(f"bookie {self.name}: storage is closed")

        def run() -> Any:
            conn = self._reader_conn()
            conn.execute("BEGIN")  # one snapshot for the whole read
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._readers, run)
        except (sqlite3.Error, EntryLogError) as exc:
            raise BookieStatusError("EIO", f"bookie {self.name}: storage read failed: {exc}") from exc

    @staticmethod
    def _ledger_row(conn: sqlite3.Connection, ledger_id: int) -> tuple[bool, int] | None:
        row = conn.execute("SELECT fenced, lac FROM ledgers WHERE ledger_id=?", (ledger_id,)).fetchone()
        return (bool(row[0]), int(row[1])) if row else None

    async def read_entry(self, ledger_id: int, entry_id: int) -> tuple[int, bytes, int]:
        """``(entry_id, body, lac)`` of one entry; ``entry_id == -1`` reads the highest stored entry.

        Raises:
            BookieStatusError: ``ENOLEDGER`` (unknown ledger), ``ENOENTRY`` (entry not stored; the
                detail carries the LAC), ``EIO``.
        """

        def fn(conn: sqlite3.Connection) -> tuple[int, bytes, int]:
            led = self._ledger_row(conn, ledger_id)
            if led is None:
                raise BookieStatusError("ENOLEDGER", f"ledger {ledger_id} not found")
            if entry_id == -1:
                row = conn.execute(
                    "SELECT entry_id, log_id, offset, length FROM entries WHERE ledger_id=? "
                    "ORDER BY entry_id DESC LIMIT 1",
                    (ledger_id,),
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT entry_id, log_id, offset, length FROM entries WHERE ledger_id=? AND entry_id=?",
                    (ledger_id, entry_id),
                ).fetchone()
            if row is None:
                what = "has no entries" if entry_id == -1 else f"entry {entry_id} not found"
                raise BookieStatusError("ENOENTRY", f"ledger {ledger_id} {what}", lac=led[1])
            return int(row[0]), self.logs.read(row[1], row[2], row[3]), led[1]

        return await self._read(fn)

    async def read_lac(self, ledger_id: int) -> int:
        """The ledger's LAC on this bookie (-1 when no entry carried one).

        Raises:
            BookieStatusError: ``ENOLEDGER``; ``EIO``.
        """

        def fn(conn: sqlite3.Connection) -> int:
            led = self._ledger_row(conn, ledger_id)
            if led is None:
                raise BookieStatusError("ENOLEDGER", f"ledger {ledger_id} not found")
            return led[1]

        return await self._read(fn)

    async def ledger_state(self, ledger_id: int) -> tuple[bool, int] | None:
        """``(fenced, lac)`` of the ledger as committed, or None when unknown."""
        return await self._read(lambda conn: self._ledger_row(conn, ledger_id))

    async def read_range_chunk(
        self,
        ledger_id: int,
        start: int,
        last: int,
        *,
        ensemble_size: int = 0,
        write_quorum: int = 0,
        bookie_index: int = 0,
        max_count: int = 256,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> tuple[list[StoredEntry], int, int]:
        """One bounded chunk of a range read.

        Returns ``(items, next_start, lac)``: ``items`` are the entry ids from ``start`` up to at most
        ``last`` that index ``bookie_index`` stores under round-robin striping (all ids when
        ``ensemble_size`` is 0), in order, with ``body=None`` for ids the bookie lacks; at most
        ``max_count`` items and about ``max_bytes`` bytes of bodies. ``next_start`` is where the next
        chunk begins (``> last`` when done).

        Raises:
            BookieStatusError: ``ENOLEDGER``; ``EIO``.
        """
        striped = ensemble_size > 0

        def wanted(e: int) -> bool:
            return stored_on(e, ensemble_size, write_quorum, bookie_index)

        def fn(conn: sqlite3.Connection) -> tuple[list[StoredEntry], int, int]:
            led = self._ledger_row(conn, ledger_id)
            if led is None:
                raise BookieStatusError("ENOLEDGER", f"ledger {ledger_id} not found")
            if striped:
                cur = conn.execute(
                    "SELECT entry_id, log_id, offset, length FROM entries WHERE ledger_id=? AND entry_id "
                    "BETWEEN ? AND ? AND ((? - entry_id) % ? + ?) % ? < ? ORDER BY entry_id LIMIT ?",
                    (ledger_id, start, last, bookie_index, ensemble_size, ensemble_size, ensemble_size,
                     write_quorum, max_count),
                )
            else:
                cur = conn.execute(
                    "SELECT entry_id, log_id, offset, length FROM entries WHERE ledger_id=? AND entry_id "
                    "BETWEEN ? AND ? ORDER BY entry_id LIMIT ?",
                    (ledger_id, start, last, max_count),
                )
            items: list[StoredEntry] = []
            nbytes = 0
            nxt = start
            try:
                for eid, log_id, offset, length in cur:
                    # ids between nxt and eid are missing here
                    while nxt < eid and len(items) < max_count:
                        if wanted(nxt):
                            items.append(StoredEntry(nxt, None))
                        nxt += 1
                    if len(items) >= max_count or nbytes >= max_bytes:
                        break
                    items.append(StoredEntry(int(eid), self.logs.read(log_id, offset, length)))
                    nbytes += length
                    nxt = eid + 1
                    if len(items) >= max_count or nbytes >= max_bytes:
                        break
                else:
                    # no more stored entries in range: the rest (up to the chunk limit) are gaps
                    while nxt <= last and len(items) < max_count:
                        if wanted(nxt):
                            items.append(StoredEntry(nxt, None))
                        nxt += 1
            finally:
                cur.close()
            return items, nxt, led[1]

        return await self._read(fn)

    async def list_entries(self, ledger_id: int) -> list[tuple[int, int]]:
        """Sorted, disjoint, inclusive ``(first, last)`` ranges of the entry ids stored for the ledger.

        Raises:
            BookieStatusError: ``ENOLEDGER``; ``EIO``.
        """

        def fn(conn: sqlite3.Connection) -> list[tuple[int, int]]:
            if self._ledger_row(conn, ledger_id) is None:
                raise BookieStatusError("ENOLEDGER", f"ledger {ledger_id} not found")
            rows = conn.execute(
                "SELECT MIN(entry_id), MAX(entry_id) FROM ("
                "  SELECT entry_id, entry_id - ROW_NUMBER() OVER (ORDER BY entry_id) AS grp"
                "  FROM entries WHERE ledger_id=?"
                ") GROUP BY grp ORDER BY 1",
                (ledger_id,),
            ).fetchall()
            return [(int(a), int(b)) for a, b in rows]

        return await self._read(fn)

    async def ledger_ids(self) -> list[int]:
        """Every ledger id this bookie knows (including ledgers created by fencing)."""
        return await self._read(
            lambda conn: [int(r[0]) for r in conn.execute("SELECT ledger_id FROM ledgers ORDER BY ledger_id")]
        )


def _settle_all(pairs: list[tuple[asyncio.Future, Any]]) -> None:
    for fut, res in pairs:
        if not fut.done():
            fut.set_result(res)


def database_exists(data_dir: Path) -> bool:
    """Whether ``data_dir`` already holds an entry database (used by the cookie check)."""
    return os.path.exists(Path(data_dir) / CURRENT_DIR / DB_FILENAME)
