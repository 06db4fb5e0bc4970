"""The bookie store's read path: a pool of reader threads, each with its own read-only SQLite
connection, answering point, range and listing reads from committed index rows and the entry logs
(EDGE; see ``bookie.storage``). WAL readers see only committed transactions and never wait for the
writer; the asyncio loop only awaits their futures.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from autorecovery.bookie.entrylog import EntryLogError, EntryLogs
from autorecovery.bookie.status import BookieStatusError
from autorecovery.rpc.convert import stored_on


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """An entry as read from the store: ``body`` is the packed entry (None when the entry is missing);
    from :meth:`StoreReads.read_range_chunk`, a read-only ``memoryview`` (of the run read with it)."""

    entry_id: int
    body: bytes | memoryview | None



class StoreReads:
    """The read half of a :class:`~autorecovery.bookie.storage.BookieStorage` (a mixin: the
    attributes below are set by the store's ``__init__`` and ``open``). Every method raises
    :class:`BookieStatusError` (``ENOLEDGER``, ``ENOENTRY``, ``EIO`` naming the bookie) and
    ``RuntimeError`` on a closed store."""

    name: str
    logs: EntryLogs
    _closed: bool
    _opened: bool
    _readers: ThreadPoolExecutor | None
    _reader_conns: list[sqlite3.Connection]
    _reader_local: threading.local
    _conns_lock: threading.Lock

    def _connect(self) -> sqlite3.Connection:
        raise NotImplementedError  # BookieStorage._connect

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
            # entry ids in order (None body: missing here) and where the stored ones are; the bodies
            # are read afterwards, a run of back-to-back bodies with one pread (EntryLogs.read_many)
            ids: list[tuple[int, bool]] = []
            locs: list[tuple[int, int, int]] = []
            nbytes = 0
            nxt = start
            try:
                for eid, log_id, offset, length in cur:
                    # ids between nxt and eid are missing here
                    while nxt < eid and len(ids) < max_count:
                        if wanted(nxt):
                            ids.append((nxt, False))
                        nxt += 1
                    if len(ids) >= max_count or nbytes >= max_bytes:
                        break
                    ids.append((int(eid), True))
                    locs.append((log_id, offset, length))
                    nbytes += length
                    nxt = eid + 1
                    if len(ids) >= max_count or nbytes >= max_bytes:
                        break
                else:
                    # no more stored entries in range: the rest (up to the chunk limit) are gaps
                    while nxt <= last and len(ids) < max_count:
                        if wanted(nxt):
                            ids.append((nxt, False))
                        nxt += 1
            finally:
                cur.close()
            bodies = iter(self.logs.read_many(locs))
            items = [StoredEntry(eid, next(bodies) if stored else None) for eid, stored in ids]
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
