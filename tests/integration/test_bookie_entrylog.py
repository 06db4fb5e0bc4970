"""The bookie's entry logs (bodies) behind its SQLite index: torn tails, rolling, the sync-before-index
rule and the migration of a schema-1 store (bodies inside SQLite) — issue 13's durability point."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

import pytest

from autorecovery.bookie.entrylog import ENTRYLOG_DIR, EntryLogError, EntryLogs, log_name
from autorecovery.bookie.group_commit import _insert_index_rows
from autorecovery.bookie.storage import CURRENT_DIR, DB_FILENAME, BookieStorage
from autorecovery.bookie.status import BookieStatusError
from autorecovery.ledger.digest import pack_entry


def body(lid: int, eid: int, payload: bytes = b"p" * 100) -> bytes:
    return pack_entry(lid, eid, eid - 1, 0, payload)


async def opened(path: Path, **kw) -> BookieStorage:
    s = BookieStorage(path, name="t", **kw)
    await asyncio.to_thread(s.open)
    return s


async def read_all(s: BookieStorage, lid: int, last: int) -> list[bytes]:
    out = []
    start = 0
    while start <= last:
        items, start, _lac = await s.read_range_chunk(lid, start, last)
        out += [i.body for i in items]
    return out


async def test_bodies_live_in_the_log_and_the_index_holds_locations(tmp_path: Path) -> None:
    s = await opened(tmp_path)
    try:
        await asyncio.gather(*(s.add_entry(1, e, b"k", body(1, e)) for e in range(50)))
        assert s.logs.appended == sum(len(body(1, e)) for e in range(50))
        assert s.logs.syncs <= s.commits  # one log sync per group, before the group's index commit
    finally:
        await s.close()
    db = sqlite3.connect(tmp_path / CURRENT_DIR / DB_FILENAME)
    cols = [r[1] for r in db.execute("PRAGMA table_info(entries)")]
    db.close()
    assert cols == ["ledger_id", "entry_id", "log_id", "offset", "length"]


async def test_torn_tail_is_ignored_and_appends_go_after_it(tmp_path: Path) -> None:
    s = await opened(tmp_path)
    await asyncio.gather(*(s.add_entry(3, e, b"k", body(3, e)) for e in range(20)))
    await s.close()
    log = tmp_path / CURRENT_DIR / ENTRYLOG_DIR / log_name(0)
    with open(log, "ab") as f:  # a crash mid-append leaves bytes no index row points at
        f.write(b"\x00garbage-of-an-unacknowledged-add" * 7)
    s = await opened(tmp_path)
    try:
        assert await read_all(s, 3, 19) == [body(3, e) for e in range(20)]
        await s.add_entry(3, 20, b"k", body(3, 20, b"after the tear"))
        (eid, got, _lac) = await s.read_entry(3, 20)
        assert eid == 20 and got == body(3, 20, b"after the tear")
    finally:
        await s.close()


async def test_logs_roll_and_reads_span_files_after_reopen(tmp_path: Path) -> None:
    s = await opened(tmp_path)
    s.logs.max_log_bytes = 4096
    try:
        for e in range(60):  # serial adds: each ~150 bytes, about 27 per file
            await s.add_entry(4, e, b"k", body(4, e))
        assert len(s.logs.log_ids()) >= 2
    finally:
        await s.close()
    s = await opened(tmp_path)
    try:
        assert await read_all(s, 4, 59) == [body(4, e) for e in range(60)]
    finally:
        await s.close()


async def test_a_failed_log_sync_acknowledges_nothing_and_indexes_nothing(tmp_path: Path) -> None:
    """Fault injection at the edge: the log's fdatasync fails for one group."""
    s = await opened(tmp_path)
    try:
        await s.add_entry(5, 0, b"k", body(5, 0))
        real = s.logs.sync

        def failing() -> None:
            raise EntryLogError("injected: disk gone")

        s.logs.sync = failing
        res = await s.submit_add(5, 1, b"k", body(5, 1))
        assert isinstance(res, BookieStatusError) and res.status == "EIO" and "disk gone" in res.detail
        s.logs.sync = real
        assert await s.list_entries(5) == [(0, 0)]  # entry 1 is not in the index
        await s.add_entry(5, 1, b"k", body(5, 1))  # and the store goes on
        assert await s.list_entries(5) == [(0, 1)]
    finally:
        await s.close()


def make_v1_store(path: Path, bodies: dict[tuple[int, int], bytes]) -> None:
    """A store as schema 1 wrote it: bodies inside SQLite."""
    (path / CURRENT_DIR).mkdir(parents=True)
    db = sqlite3.connect(path / CURRENT_DIR / DB_FILENAME)
    db.executescript("""
        PRAGMA journal_mode=WAL;
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ledgers (ledger_id INTEGER PRIMARY KEY, master_key BLOB NOT NULL,
                              fenced INTEGER NOT NULL DEFAULT 0, lac INTEGER NOT NULL DEFAULT -1);
        CREATE TABLE entries (ledger_id INTEGER NOT NULL, entry_id INTEGER NOT NULL, body BLOB NOT NULL,
                              PRIMARY KEY (ledger_id, entry_id));
        INSERT INTO meta VALUES ('schema_version', '1');
    """)
    for lid in {lid for lid, _ in bodies}:
        db.execute("INSERT INTO ledgers VALUES (?, ?, 1, 7)", (lid, b"k"))
    db.executemany("INSERT INTO entries VALUES (?, ?, ?)", [(lid, e, b) for (lid, e), b in bodies.items()])
    db.commit()
    db.close()


async def test_schema1_store_is_migrated_on_open(tmp_path: Path, monkeypatch) -> None:
    from autorecovery.bookie import storage

    monkeypatch.setattr(storage, "_MIGRATE_CHUNK", 7)  # several chunks
    bodies = {(lid, e): body(lid, e) for lid in (10, 11) for e in range(25)}
    make_v1_store(tmp_path, bodies)
    s = await opened(tmp_path)
    try:
        assert s.migrated_entries == 50
        assert await read_all(s, 10, 24) == [bodies[(10, e)] for e in range(25)]
        assert await read_all(s, 11, 24) == [bodies[(11, e)] for e in range(25)]
        assert await s.ledger_state(10) == (True, 7)  # ledger state kept (fenced, LAC)
    finally:
        await s.close()
    db = sqlite3.connect(tmp_path / CURRENT_DIR / DB_FILENAME)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("2",)
    assert db.execute("SELECT name FROM sqlite_master WHERE name='entries_v1'").fetchone() is None
    db.close()


async def test_an_interrupted_migration_resumes_without_loss_or_doubles(tmp_path: Path, monkeypatch) -> None:
    from autorecovery.bookie import storage

    bodies = {(12, e): body(12, e) for e in range(30)}
    make_v1_store(tmp_path, bodies)
    monkeypatch.setattr(storage, "_MIGRATE_CHUNK", 10)
    calls = {"n": 0}
    real_sync = EntryLogs.sync

    def crash_on_second_chunk(self) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise EntryLogError("injected crash during migration")
        real_sync(self)

    monkeypatch.setattr(EntryLogs, "sync", crash_on_second_chunk)
    with pytest.raises(BookieStatusError, match="injected crash"):
        await opened(tmp_path)
    monkeypatch.setattr(EntryLogs, "sync", real_sync)
    db = sqlite3.connect(tmp_path / CURRENT_DIR / DB_FILENAME)
    assert db.execute("SELECT COUNT(*) FROM entries_v1").fetchone() == (20,)  # first chunk moved
    assert db.execute("SELECT COUNT(*) FROM entries").fetchone() == (10,)
    db.close()
    s = await opened(tmp_path)
    try:
        assert s.migrated_entries == 20
        assert await read_all(s, 12, 29) == [bodies[(12, e)] for e in range(30)]
        assert await s.list_entries(12) == [(0, 29)]
    finally:
        await s.close()


# -- append_many: few writev calls per run, exact offsets even after short or failed writes -----------
def open_logs(tmp_path: Path) -> EntryLogs:
    return EntryLogs(tmp_path / ENTRYLOG_DIR).open()


def test_append_many_writes_a_run_in_few_calls_at_contiguous_offsets(tmp_path: Path, monkeypatch) -> None:
    import os

    from autorecovery.bookie import entrylog

    calls: list[int] = []
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, bufs: calls.append(len(bufs)) or real(fd, bufs))
    monkeypatch.setattr(entrylog, "WRITEV_MAX_BUFFERS", 16)
    logs = open_logs(tmp_path)
    try:
        bodies = [body(7, e, bytes([e]) * (1000 + e)) for e in range(40)]
        locs = logs.append_many(bodies)
        assert calls == [16, 16, 8]  # not one system call (and one GIL round trip) per body
        assert [logs.read(lid, off, len(b)) for (lid, off), b in zip(locs, bodies, strict=True)] == bodies
        assert [off for _lid, off in locs] == [sum(len(b) for b in bodies[:i]) for i in range(40)]
        assert logs.appended == sum(len(b) for b in bodies)
    finally:
        logs.close()


def test_append_many_finishes_a_short_write(tmp_path: Path, monkeypatch) -> None:
    import os


    real = os.writev
    short = [True]

    def half_first(fd, bufs):  # the kernel may write less than asked; only the first call does here
        if short[0]:
            short[0] = False
            data = b"".join(bytes(b) for b in bufs)
            return os.write(fd, data[: len(data) // 2 + 3])
        return real(fd, bufs)

    monkeypatch.setattr(os, "writev", half_first)
    logs = open_logs(tmp_path)
    try:
        bodies = [body(8, e, bytes([e]) * 500) for e in range(6)]
        locs = logs.append_many(bodies)
        assert [logs.read(lid, off, len(b)) for (lid, off), b in zip(locs, bodies, strict=True)] == bodies
    finally:
        logs.close()


def test_a_failed_append_does_not_shift_later_offsets(tmp_path: Path, monkeypatch) -> None:
    import errno
    import os


    real = os.writev
    fail = [True]

    def partial_then_enospc(fd, bufs):  # part of the chunk reaches the file, then the disk is full
        if fail[0]:
            fail[0] = False
            os.write(fd, bytes(bufs[0])[:77])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, bufs)

    monkeypatch.setattr(os, "writev", partial_then_enospc)
    logs = open_logs(tmp_path)
    try:
        first = logs.append(body(9, 0))
        with pytest.raises(EntryLogError, match=r"00000000\.log at offset \d+: .*No space left"):
            logs.append_many([body(9, 1), body(9, 2)])
        later = [body(9, 3, b"after the failure"), body(9, 4)]
        locs = logs.append_many(later)
        assert [logs.read(lid, off, len(b)) for (lid, off), b in zip(locs, later, strict=True)] == later
        assert logs.read(*first, len(body(9, 0))) == body(9, 0)
    finally:
        logs.close()


async def test_a_stored_run_goes_out_in_one_writev(tmp_path: Path, monkeypatch) -> None:
    import os


    calls: list[int] = []
    real = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, bufs: calls.append(len(bufs)) or real(fd, bufs))
    s = await opened(tmp_path)
    try:
        run = [(e, body(5, e)) for e in range(100)]
        assert await s.submit_adds(5, b"k", run) is None
        assert calls == [100]
        assert await read_all(s, 5, 99) == [b for _e, b in run]
    finally:
        await s.close()


def test_index_rows_are_inserted_many_per_statement_and_the_last_copy_wins() -> None:
    from autorecovery.bookie import storage

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(storage._ENTRIES_V2)
    steps: list[str] = []
    conn.set_trace_callback(steps.append)
    rows = [(1, e, 0, e * 10, 10) for e in range(300)] + [(1, 7, 3, 999, 12)]  # entry 7 re-added
    _insert_index_rows(conn, rows)
    # 301 rows = 2 x 128 + 1 x 32 + 1 x 8 + 5 x 1: nine statements, not one step per row
    assert len(steps) == 9
    assert conn.execute("SELECT count(*) FROM entries").fetchone()[0] == 300
    assert conn.execute("SELECT log_id, offset, length FROM entries WHERE entry_id=7").fetchone() == (3, 999, 12)
    assert conn.execute("SELECT offset FROM entries WHERE entry_id=299").fetchone() == (2990,)


def test_read_many_reads_each_back_to_back_run_with_one_pread(tmp_path: Path, monkeypatch) -> None:
    from autorecovery.bookie import entrylog
    from autorecovery.bookie.entrylog import EntryLogs

    logs = EntryLogs(tmp_path).open()
    try:
        bodies = [bytes([i]) * (1000 + i) for i in range(10)]
        locs = [(lid, off, len(b)) for (lid, off), b in zip(logs.append_many(bodies), bodies, strict=True)]
        locs += [(lid, off, ln) for lid, off, ln in locs[:2]]  # a run that starts over: a second pread
        locs.insert(5, locs[8])  # out of order: the run is cut before and after it
        want = [bytes(logs.read(*loc)) for loc in locs]
        calls = []
        real = os.pread
        monkeypatch.setattr(os, "pread", lambda fd, n, off: calls.append((n, off)) or real(fd, n, off))
        got = logs.read_many(locs)
        assert [bytes(g) for g in got] == want and all(isinstance(g, memoryview) for g in got)
        assert [n for n, _off in calls] == [sum(len(b) for b in bodies[a:b + 1]) for a, b in ((0, 4), (8, 8), (5, 9), (0, 1))]
        monkeypatch.setattr(entrylog, "READ_RUN_MAX_BYTES", 2500)  # runs are cut at the byte bound
        calls.clear()
        assert [bytes(g) for g in logs.read_many(locs[:5])] == bodies[:5]
        assert len(calls) == 3  # 0-1, 2-3, 4
    finally:
        logs.close()
