"""ZooKeeper 3.6+ requests added on top of kazoo 2.11 (autorecovery/zk/kazoo_ext.py), against the real
server: a persistent recursive watch, multiRead, and the fallback when the server does not know them."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.errors import ZooKeeperError
from autorecovery.ledger import formats
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.zk import kazoo_ext
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.kazoo_ext import ServerTooOld
from autorecovery.zk.ledger_tree.tree_watcher import LedgerTreeWatcher
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
B = [f"98.98.96.{i}:3181" for i in range(4)]


def closed(ensemble) -> LedgerMetadata:
    return LedgerMetadata(len(ensemble), 2, 2, (Segment(0, tuple(ensemble)),), state=LedgerState.CLOSED,
                          last_entry_id=9, length=40, password=b"pw")


@pytest.fixture
async def zk(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    await init_cluster(c, P)
    yield c
    await c.stop()


async def test_persistent_recursive_watch_sees_every_change_below_its_root_in_order(zk, zk_connect):
    other = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    seen: list[tuple[str, str]] = []
    try:
        await zk.add_watch("/ledgers/00", lambda t, p: seen.append((t, p)))
        await other.create("/ledgers/00/0000/L0001", b"a", makepath=True)
        await other.set("/ledgers/00/0000/L0001", b"b")
        await other.create("/ledgers/elsewhere", b"")  # outside the watched path: not seen
        await other.delete("/ledgers/00/0000/L0001")
        assert await wait_for(lambda: len(seen) >= 5, 5), seen
        assert seen == [("CREATED", "/ledgers/00"), ("CREATED", "/ledgers/00/0000"),
                        ("CREATED", "/ledgers/00/0000/L0001"), ("CHANGED", "/ledgers/00/0000/L0001"),
                        ("DELETED", "/ledgers/00/0000/L0001")], "chroot stripped, server order, and it stays armed"
        # removed: no callback any more. A one-shot watch set after the removal fires after any
        # notification the persistent watch would have had (the server keeps the order)
        await zk.remove_watch("/ledgers/00")
        fired = asyncio.Event()
        await zk.exists("/ledgers/00/0000/L0002", watch=lambda ev: fired.set())
        await other.create("/ledgers/00/0000/L0002", b"c")
        await asyncio.wait_for(fired.wait(), 5)
        assert len(seen) == 5
    finally:
        await other.stop()


async def test_multiread_answers_in_order_with_errors_in_place(zk):
    await zk.create("/ledgers/00/0000/L0001", b"one", makepath=True)
    await zk.create("/ledgers/00/0000/L0003", b"", makepath=True)
    got = await zk.get_many(["/ledgers/00/0000/L0001", "/ledgers/00/0000/L0002", "/ledgers/00/0000/L0003"])
    assert got[0][0] == b"one" and got[0][1].dataLength == 3
    assert isinstance(got[1], NoNodeError)
    assert got[2][0] == b""
    assert await zk.get_many([]) == []


async def test_an_older_server_is_refused_loudly_and_the_tree_falls_back_to_per_ledger_watches(zk, monkeypatch):
    """A server before 3.6 answers an unknown opcode with UNIMPLEMENTED (and 3.8 also drops the
    connection, as an older one may): simulated with an opcode no server knows."""
    store = LedgerStore(zk, P)
    await store.create(1, closed(B[:2]))
    monkeypatch.setattr(kazoo_ext.AddWatch, "type", 9999)
    monkeypatch.setattr(kazoo_ext.MultiRead, "type", 9998)
    # the UNIMPLEMENTED answer (ServerTooOld) or the connection loss right after it, whichever kazoo sees first
    with pytest.raises(ZooKeeperError):
        await zk.add_watch(P.root, lambda t, p: None)
    assert await wait_for(lambda: zk.connected.is_set(), 15)
    with pytest.raises(ZooKeeperError):
        await zk.get_many([P.root])
    assert await wait_for(lambda: zk.connected.is_set(), 15)
    index = BookieLedgerIndex()
    tree = LedgerTreeWatcher(zk, P, index)
    try:
        assert await tree.build() == 1
        assert tree.persistent is False and tree.watches_held >= 4  # root, 00, 00/0000 and the ledger
        await store.update(1, lambda md: closed([B[0], B[3]]))
        assert await wait_for(lambda: B[3] in index.get(1).all_bookies(), 10)
    finally:
        tree.stop()
        await tree.settle()
    strict = LedgerTreeWatcher(zk, P, BookieLedgerIndex(), persistent=True)
    with pytest.raises(ServerTooOld):
        await strict.build()
    strict.stop()


async def test_persistent_tree_ignores_markers_and_survives_a_deletion_racing_its_reads(zk):
    store = LedgerStore(zk, P)
    for lid in range(1, 40):
        await store.create(lid, closed(B[:2]))
    index = BookieLedgerIndex()
    tree = LedgerTreeWatcher(zk, P, index, concurrency=8)  # batches of 2: many reads in flight
    try:
        # one persistent recursive watch on the only top-level directory (00) + the root's child watch
        assert await tree.build() == 39 and tree.persistent and tree.watches_held == 2
        assert tree.requests < 39  # batched
        # a burst of changes and deletions: every change is re-read, no deleted ledger comes back
        await asyncio.gather(*(store.update(lid, lambda md: closed(B[2:])) for lid in range(1, 40, 2)))
        await asyncio.gather(*(store.delete(lid) for lid in range(2, 40, 2)))
        await zk.create(f"{P.root}/underreplication/ledgers/0000/0000/0000/0001/urL0000000001", b"", makepath=True)
        await zk.set(P.ledger(1), formats.serialize(closed([B[1], B[3]])))

        def done() -> bool:
            return (not tree.busy and sorted(index.ledger_ids()) == list(range(1, 40, 2))
                    and index.get(1).segments[0].ensemble == (B[1], B[3])
                    and all(index.get(lid).segments[0].ensemble == tuple(B[2:]) for lid in range(3, 40, 2)))
        assert await wait_for(done, 10)
        await tree.settle()
        assert sorted(index.ledger_ids()) == list(range(1, 40, 2))
        assert tree.malformed == 0
        # new top-level directories (01 for 10^8, 002 for a long id) are watched when they appear
        await store.create(10**8, closed(B[:2]))
        await store.create(2**31 + 7, closed(B[:2]))
        assert await wait_for(lambda: 10**8 in index and 2**31 + 7 in index, 10)
        assert tree.watches_held == 4
        await store.update(2**31 + 7, lambda md: closed(B[2:]))
        assert await wait_for(lambda: index.get(2**31 + 7).segments[0].ensemble == tuple(B[2:]), 10)
    finally:
        tree.stop()
        await tree.settle()


async def test_a_successor_keeps_its_watches_when_the_predecessor_stops(zk):
    """Auditors come and go on one session (election): the old watcher's removal of its watches,
    still in flight when the new one adds the same ones, must not take the new one's away."""
    store = LedgerStore(zk, P)
    await store.create(1, closed(B[:2]))
    old = LedgerTreeWatcher(zk, P, BookieLedgerIndex())
    await old.build()
    old.stop()  # its server-side removals are still queued
    index = BookieLedgerIndex()
    new = LedgerTreeWatcher(zk, P, index)
    try:
        assert await new.build() == 1 and new.persistent
        await old.settle()
        await store.update(1, lambda md: closed(B[2:]))
        await store.create(2, closed(B[:2]))
        assert await wait_for(lambda: 2 in index and index.get(1).segments[0].ensemble == tuple(B[2:]), 10)
    finally:
        new.stop()
        await new.settle()
