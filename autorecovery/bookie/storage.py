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

Modules. This one holds the layout, opening (and the schema-1 migration), closing and the write API
(``submit_*``, ``fence``, ``sync``); the writer and committer threads are :mod:`bookie.group_commit`,
the readers :mod:`bookie.store_reads`, the refusal type :mod:`bookie.status`. Their public names
(``BookieStatusError``, ``SKIPPED``, ``StoredEntry``) still resolve from here.

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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from autorecovery.bookie.entrylog import ENTRYLOG_DIR, EntryLogError, EntryLogs
from autorecovery.bookie.group_commit import _STOP, GroupCommit, _Ledger, _Op
from autorecovery.bookie.status import BookieStatusError, StreamState
from autorecovery.bookie.store_reads import StoreReads
from autorecovery.ledger.digest import peek_ids

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


class BookieStorage(GroupCommit, StoreReads):
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

    def open(self) -> BookieStorage:
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

    def new_stream(self) -> StreamState:
        """State shared by the adds of one AddEntries stream (see :meth:`submit_add`)."""
        return StreamState()

    def submit_add(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: bytes,
        *,
        recovery: bool = False,
        stream: StreamState | None = None,
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
        stream: StreamState | None = None,
        lacs: Sequence[int] | None = None,
        nbytes: int | None = None,
    ) -> asyncio.Future:
        """Queue the adds of ``entries`` (``(entry id, body)``, at least one, all of ``ledger_id``) as one
        operation: one queue hand-off, one ``writev`` of the bodies, one future. It resolves like
        :meth:`submit_add`'s, for all of them: the ledger checks (master key, fencing) are the same for
        every entry of one ledger, and a storage failure fails the whole group anyway. Used by the
        batched handlers (AddStream, PullEntries), whose per-entry cost this keeps out of the event loop.

        ``lacs`` (one per entry) and ``nbytes`` (the bodies' total length) are what a caller that has
        already read each entry's header (``peek_ids``) and sized the bodies passes, so they are not
        read again on the event loop (issue 29); the bodies must then be ``bytes`` (immutable: they
        are written by another thread). Without them the bodies are copied to ``bytes`` if need be
        and their headers read here.

        Raises:
            ValueError: ``entries`` is empty, or ``lacs`` is not one per entry (nothing is queued).
        """
        if not entries:
            raise ValueError(f"ledger {ledger_id}: no entries to add")
        eids = [eid for eid, _body in entries]
        if lacs is None:
            bodies = [bytes(body) for _eid, body in entries]
            lacs = [peek_ids(body)[2] for body in bodies]
        else:
            if len(lacs) != len(entries):
                raise ValueError(f"ledger {ledger_id}: {len(lacs)} LACs for {len(entries)} entries")
            bodies = [body for _eid, body in entries]
        if nbytes is None:
            nbytes = sum(map(len, bodies))
        return self._submit(_Op("add", ledger_id=ledger_id, eids=eids, bodies=bodies, lac=max(lacs),
                                master_key=bytes(master_key), recovery=recovery, stream=stream, size=nbytes))

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


def database_exists(data_dir: Path) -> bool:
    """Whether ``data_dir`` already holds an entry database (used by the cookie check)."""
    return os.path.exists(Path(data_dir) / CURRENT_DIR / DB_FILENAME)
