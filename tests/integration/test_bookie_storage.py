"""The bookie's SQLite store on its own: semantics, group commit, chunked reads, durability on reopen."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from autorecovery.bookie.storage import BookieStorage
from autorecovery.bookie.status import SKIPPED, BookieStatusError
from autorecovery.ledger.digest import pack_entry
from autorecovery.aio import wait_for


def body(lid: int, eid: int, lac: int = -1, payload: bytes = b"p") -> bytes:
    return pack_entry(lid, eid, lac, 0, payload)


@pytest.fixture
async def store(tmp_path: Path):
    s = BookieStorage(tmp_path, name="test-bookie")
    await asyncio.to_thread(s.open)
    yield s
    await s.close()


async def test_concurrent_adds_are_group_committed(store: BookieStorage) -> None:
    n = 500
    results = await asyncio.gather(*(store.submit_add(1, e, b"k", body(1, e, e - 1)) for e in range(n)))
    assert results == [None] * n
    assert store.commits < n  # fewer fsyncs than adds
    assert await store.list_entries(1) == [(0, n - 1)]
    assert await store.read_lac(1) == n - 2


async def test_master_key_fence_and_recovery_add(store: BookieStorage) -> None:
    await store.add_entry(1, 0, b"k", body(1, 0))
    with pytest.raises(BookieStatusError) as ei:
        await store.add_entry(1, 1, b"other", body(1, 1))
    assert ei.value.status == "EUA"
    with pytest.raises(BookieStatusError) as ei:
        await store.fence(1, b"other")
    assert ei.value.status == "EUA"
    await store.fence(1, b"k")
    with pytest.raises(BookieStatusError) as ei:
        await store.add_entry(1, 1, b"k", body(1, 1))
    assert ei.value.status == "EFENCED"
    await store.add_entry(1, 1, b"k", body(1, 1, 0), recovery=True)
    assert (await store.read_entry(1, 1))[0] == 1
    # fencing an unknown ledger creates it, fenced, with the fencing key
    await store.fence(2, b"k2")
    assert await store.ledger_state(2) == (True, -1)
    with pytest.raises(BookieStatusError) as ei:
        await store.read_entry(2, -1)
    assert ei.value.status == "ENOENTRY"


async def test_lac_is_max_piggybacked_and_overwrite_is_allowed(store: BookieStorage) -> None:
    await store.add_entry(3, 5, b"k", body(3, 5, 4))
    await store.add_entry(3, 2, b"k", body(3, 2, 1))
    assert await store.read_lac(3) == 4
    await store.add_entry(3, 2, b"k", body(3, 2, 1, b"new"))
    eid, b, lac = await store.read_entry(3, 2)
    assert (eid, b, lac) == (2, body(3, 2, 1, b"new"), 4)
    assert (await store.read_entry(3, -1))[0] == 5
    with pytest.raises(BookieStatusError) as ei:
        await store.read_entry(3, 3)
    assert ei.value.status == "ENOENTRY" and ei.value.lac == 4
    with pytest.raises(BookieStatusError) as ei:
        await store.read_lac(99)
    assert ei.value.status == "ENOLEDGER"


async def test_stream_stops_after_first_failure(store: BookieStorage) -> None:
    await store.fence(4, b"k")
    stream = store.new_stream()
    # recovery adds succeed, the normal add fails, and nothing after it is written
    futs = [
        store.submit_add(4, 0, b"k", body(4, 0), recovery=True, stream=stream),
        store.submit_add(4, 1, b"k", body(4, 1), recovery=False, stream=stream),
        store.submit_add(4, 2, b"k", body(4, 2), recovery=True, stream=stream),
    ]
    res = await asyncio.gather(*futs)
    assert res[0] is None and res[1].status == "EFENCED" and res[2] is SKIPPED
    assert await store.list_entries(4) == [(0, 0)]


async def test_range_chunks_are_bounded_and_report_gaps(store: BookieStorage) -> None:
    for e in [0, 1, 2, 5, 9]:
        await store.add_entry(6, e, b"k", body(6, e, payload=b"x" * 1000))
    items, nxt, _ = await store.read_range_chunk(6, 0, 9, max_count=4)
    assert [(i.entry_id, i.body is not None) for i in items] == [(0, True), (1, True), (2, True), (3, False)]
    assert nxt == 4
    items, nxt, _ = await store.read_range_chunk(6, nxt, 9, max_count=100)
    assert [(i.entry_id, i.body is not None) for i in items] == [
        (4, False), (5, True), (6, False), (7, False), (8, False), (9, True)]
    assert nxt == 10
    items, nxt, _ = await store.read_range_chunk(6, 0, 9, max_count=100, max_bytes=1500)
    assert [i.entry_id for i in items] == [0, 1] and nxt == 2  # byte bound
    items, _, _ = await store.read_range_chunk(6, 0, 9, ensemble_size=3, write_quorum=2, bookie_index=0)
    assert [(i.entry_id, i.body is not None) for i in items] == [
        (0, True), (2, True), (3, False), (5, True), (6, False), (8, False), (9, True)]


async def test_acknowledged_adds_and_fence_survive_reopen(tmp_path: Path) -> None:
    s = BookieStorage(tmp_path, name="a")
    await asyncio.to_thread(s.open)
    await asyncio.gather(*(s.add_entry(7, e, b"k", body(7, e)) for e in range(50)))
    await s.fence(7, b"k")
    await s.close()
    # the WAL is fsynced per commit (synchronous=FULL): check the settings, then reopen
    conn = sqlite3.connect(s.db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    s2 = BookieStorage(tmp_path, name="b")
    await asyncio.to_thread(s2.open)
    try:
        assert await s2.list_entries(7) == [(0, 49)]
        assert await s2.ledger_state(7) == (True, -1)
        with pytest.raises(BookieStatusError):
            await s2.add_entry(7, 50, b"k", body(7, 50))
    finally:
        await s2.close()


class _GatedSync:
    """Replaces ``EntryLogs.sync``: each call announces itself and waits to be let through (or fails)."""

    def __init__(self, real) -> None:
        import threading

        self.real = real
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.fail_next = False

    def __call__(self) -> None:
        from autorecovery.bookie.entrylog import EntryLogError

        self.entered.release()
        self.release.acquire()
        if self.fail_next:
            self.fail_next = False
            raise EntryLogError("injected: fdatasync failed")
        self.real()


async def test_the_next_group_is_appended_while_the_previous_one_syncs(store: BookieStorage) -> None:
    """Upstream's journal/force-write split: bodies keep being appended while the disk syncs; nothing is
    acknowledged before the sync that covers it."""
    gate = _GatedSync(store.logs.sync)
    store.logs.sync = gate
    first = store.submit_add(1, 0, b"k", body(1, 0, payload=b"a" * 1000))
    assert await asyncio.to_thread(gate.entered.acquire, True, 10)  # group 1 is syncing, held
    before = store.logs.appended
    rest = [store.submit_add(1, e, b"k", body(1, e, e - 1, payload=b"b" * 1000)) for e in range(1, 6)]
    want = before + sum(len(body(1, e, e - 1, payload=b"b" * 1000)) for e in range(1, 6))
    assert await wait_for(lambda: store.logs.appended >= want, 10), "the writer did not append while the sync waited"
    assert not first.done() and not any(f.done() for f in rest)  # appended is not acknowledged
    gate.release.release()  # group 1's sync completes
    assert await first is None
    assert await asyncio.to_thread(gate.entered.acquire, True, 10)
    gate.release.release()
    assert await asyncio.gather(*rest) == [None] * 5
    assert await store.list_entries(1) == [(0, 5)] and await store.read_lac(1) == 4


async def test_a_failed_group_fails_the_groups_checked_after_it_and_the_store_recovers(store: BookieStorage) -> None:
    gate = _GatedSync(store.logs.sync)
    store.logs.sync = gate
    first = store.submit_add(1, 0, b"k", body(1, 0))  # creates ledger 1 with key k
    assert await asyncio.to_thread(gate.entered.acquire, True, 10)
    second = store.submit_add(1, 1, b"k", body(1, 1, 0))  # checked against ledger 1 as group 1 left it
    assert await wait_for(lambda: store.logs.appended >= 2 * len(body(1, 0)), 10)
    gate.fail_next = True
    gate.release.release()
    for fut in (first, second):
        res = await fut
        assert isinstance(res, BookieStatusError) and res.status == "EIO", res
    assert "injected" in str(await first)
    # nothing of either group was committed, and the cached state was dropped: ledger 1 is unknown again,
    # so a different master key now creates it
    gate.release.release()
    store.logs.sync = gate.real
    assert await store.submit_add(1, 0, b"other", body(1, 0)) is None
    assert await store.list_entries(1) == [(0, 0)]
    with pytest.raises(BookieStatusError) as ei:
        await store.add_entry(1, 1, b"k", body(1, 1, 0))
    assert ei.value.status == "EUA"


async def test_a_batch_of_adds_is_one_operation_with_one_outcome(store: BookieStorage) -> None:
    # stored in order, LAC the largest piggy-backed, one future for all of them
    res = await store.submit_adds(8, b"k", [(e, body(8, e, e - 1, b"b%d" % e)) for e in range(50)])
    assert res is None
    assert await store.list_entries(8) == [(0, 49)] and await store.read_lac(8) == 48
    assert (await store.read_entry(8, 17))[1] == body(8, 17, 16, b"b17")
    # a batch under another master key fails as a whole and stores nothing
    res = await store.submit_adds(8, b"other", [(e, body(8, e)) for e in range(50, 60)])
    assert isinstance(res, BookieStatusError) and res.status == "EUA" and "entries 50..59" in res.detail
    assert await store.list_entries(8) == [(0, 49)]
    # fenced: a normal batch is refused, a recovery batch is stored; a stream skips what follows a failure
    await store.fence(8, b"k")
    stream = store.new_stream()
    refused = store.submit_adds(8, b"k", [(60, body(8, 60))], stream=stream)
    skipped = store.submit_adds(8, b"k", [(61, body(8, 61))], recovery=True, stream=stream)
    assert (await refused).status == "EFENCED" and await skipped is SKIPPED
    assert await store.submit_adds(8, b"k", [(60, body(8, 60)), (61, body(8, 61))], recovery=True) is None
    assert await store.list_entries(8) == [(0, 49), (60, 61)]
    with pytest.raises(ValueError, match="ledger 8"):
        store.submit_adds(8, b"k", [])


async def test_adds_whose_headers_the_caller_read_keep_their_lacs_and_sizes(store: BookieStorage) -> None:
    """``submit_adds(lacs=, nbytes=)`` (the service read each header once already): the ledger's LAC is
    the largest of ``lacs``, the entries are stored as given; LACs not one per entry are refused."""
    entries = [(e, body(9, e, e - 1)) for e in range(5)]
    lacs = [e - 1 for e in range(5)]
    assert await store.submit_adds(9, b"k", entries, lacs=lacs, nbytes=sum(len(b) for _e, b in entries)) is None
    assert await store.read_lac(9) == 3
    assert [(await store.read_entry(9, e))[1] for e in range(5)] == [b for _e, b in entries]
    with pytest.raises(ValueError, match="ledger 9: 1 LACs for 2 entries"):
        store.submit_adds(9, b"k", entries[:2], lacs=[0])
