"""The marked/locked index of the UnderreplicationManager and the worker's reused ranking: a pick costs
the same whatever the queue length (issue 29 item 3), on a real ZooKeeper."""

from __future__ import annotations

import random
import time

import pytest

from autorecovery.roles.backlog import Backlog
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration

PATHS = Paths("/ledgers")


@pytest.fixture
async def zk(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=4000).start()
    yield c
    await c.stop()


@pytest.fixture
async def other(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=4000).start()
    yield c
    await c.stop()


class CountingZk:
    """Counts the reads a ZkClient sends, by kind (wraps the real client)."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self.listings = 0
        self.listed_names = 0

    def __getattr__(self, name):
        return getattr(self._zk, name)

    async def get_children(self, path, watch=None):
        kids = await self._zk.get_children(path, watch=watch)
        self.listings += 1
        self.listed_names += len(kids)
        return kids


async def _picks(um: UnderreplicationManager, order, n: int) -> list[int]:
    done = []
    for _ in range(n):
        lid = await um.poll_ledger_to_rereplicate(order)
        assert lid is not None
        assert await um.get_marker(lid) is not None
        assert await um.mark_replicated(lid)
        done.append(lid)
    return done


@pytest.mark.parametrize("queue", [50, 1500])
async def test_a_pick_reads_nothing_to_know_the_candidates(zk, other, queue):
    """With ``queue`` markers (every id below 65,536, so all in one upper level: the old walk listed
    that level again after every delete and walked every leaf), 30 picks cost 3 ZooKeeper operations
    each (marker read, lock multi, delete multi) and no listing at all; the ranking is computed once."""
    auditor = UnderreplicationManager(other, PATHS)
    await auditor.init()
    await auditor.mark_many({lid: ["b:3181"] for lid in range(1, queue + 1)})
    counting = CountingZk(zk)
    um = UnderreplicationManager(counting, PATHS)  # type: ignore[arg-type]
    await um.init()
    backlog = Backlog(counting, PATHS, um, LedgerStore(zk, PATHS), clock=time.monotonic)  # type: ignore[arg-type]
    rng = random.Random(1)
    assert len(await um.watched_marked_ids()) == queue  # builds the index (one walk)
    listings, ops = counting.listings, zk.ops
    done = await _picks(um, lambda ids: backlog.order(ids, rng, set()), 30)
    assert len(set(done)) == 30
    assert counting.listings == listings, f"{counting.listings - listings} listings in 30 picks"
    assert zk.ops - ops == 3 * 30
    assert backlog.rankings == 1
    assert set(await um.watched_marked_ids()) == set(range(1, queue + 1)) - set(done)
    await um.close()
    await auditor.close()


async def test_index_follows_other_sessions_and_is_shared_per_client(zk, other):
    """Markers made by another session appear and disappear in the index of both managers of one
    client (the worker's and the auditor's share the client's one watch per path); a lock held by
    another session is learned when a create of it fails, and leaves with its marker; a newly marked
    ledger changes ``marked_generation`` (rankings are redone), a deletion does not."""
    a = UnderreplicationManager(zk, PATHS, lock_owner="a")
    b = UnderreplicationManager(zk, PATHS, lock_owner="b")
    remote = UnderreplicationManager(other, PATHS, lock_owner="remote")
    for m in (a, b, remote):
        await m.init()
    await remote.mark_many({3: ["x:1"], 70000: ["x:1"]})
    assert sorted(await a.watched_marked_ids()) == [3, 70000]
    assert sorted(await b.watched_marked_ids()) == [3, 70000]
    gen = a.marked_generation
    await remote.mark_underreplicated(9, ["x:1"])
    assert await wait_for(lambda: 9 in a._index.marked and 9 in b._index.marked, 10)
    assert a.marked_generation != gen
    assert await remote.acquire(3)
    assert 3 not in a._index.locked  # no watch on the locks: nothing heard yet
    assert await a.poll_ledger_to_rereplicate(sorted) == 9  # 3 is locked by the other session
    assert 3 in a._index.locked and 3 in b._index.locked  # learned from the failed create
    gen = a.marked_generation
    assert await remote.mark_replicated(3)
    assert await wait_for(lambda: 3 not in b._index.marked and 3 not in b._index.locked, 10)
    assert a.marked_generation == gen
    await a.close()
    assert 70000 in b._index.marked  # a's close leaves b's index alone
    await remote.mark_underreplicated(11, ["x:1"])
    assert await wait_for(lambda: 11 in b._index.marked, 10)
    await b.close()
    await remote.close()


async def test_index_rebuilt_after_a_session_event(zk, other):
    """Changes made while the index is invalid (as after a connection loss) are found by the rebuild."""
    um = UnderreplicationManager(zk, PATHS)
    remote = UnderreplicationManager(other, PATHS)
    await um.init()
    await remote.init()
    await remote.mark_many({1: ["x:1"], 2: ["x:1"]})
    assert sorted(await um.watched_marked_ids()) == [1, 2]
    syncs = um._index.syncs
    um._index.invalidate()
    await um._index.close()  # the server forgets the watches, as on a connection loss
    await remote.mark_underreplicated(5, ["x:1"])
    assert await remote.acquire(1) and await remote.mark_replicated(1)
    assert sorted(await um.watched_marked_ids()) == [2, 5]
    assert um._index.syncs == syncs + 1
    await remote.mark_underreplicated(6, ["x:1"])
    assert await wait_for(lambda: 6 in um._index.marked, 10)  # watching again
    await um.close()
    await remote.close()


async def test_a_session_event_during_the_rebuild_leaves_the_index_to_rebuild(zk, other):
    """An invalidation that lands while the hierarchy is walked (a connection loss then) must not be
    overwritten by that walk's end: the next use walks again."""
    um = UnderreplicationManager(zk, PATHS)
    remote = UnderreplicationManager(other, PATHS)
    await um.init()
    await remote.init()
    await remote.mark_many({1: ["x:1"]})
    index = um._index
    walk = index._walk

    async def walk_then_lose():
        got = await walk()
        index.invalidate()
        return got

    index._walk = walk_then_lose
    assert await index.ensure() is False and not index.ready
    index._walk = walk
    assert await index.ensure() is True
    assert index.marked == {1}
    await um.close()
    await remote.close()


async def test_refresh_recomputes_only_what_changed(zk, other, monkeypatch):
    """A refresh computes the priority of a marked ledger once, not on every refresh (issue 29: that was
    half the daemon's CPU while many small ledgers healed); a membership change or a re-marked ledger
    is computed again, and the priorities follow it."""
    from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
    from autorecovery.plan.priority import WorkKind
    from autorecovery.roles import backlog as backlog_mod

    calls: list[int] = []
    real = backlog_mod.ledger_priority

    def counting(lid, *a, **kw):
        calls.append(lid)
        return real(lid, *a, **kw)

    monkeypatch.setattr(backlog_mod, "ledger_priority", counting)
    auditor = UnderreplicationManager(other, PATHS)
    await auditor.init()
    store = LedgerStore(other, PATHS)
    md = LedgerMetadata(ensemble_size=3, write_quorum=2, ack_quorum=2, segments=(Segment(0, ("a:1", "b:1", "c:1")),),
                        state=LedgerState.CLOSED, last_entry_id=9, length=1000)
    ids = list(range(1, 41))
    for lid in ids:
        await store.create(lid, md)
    await auditor.mark_many({lid: ["a:1"] for lid in ids})
    um = UnderreplicationManager(zk, PATHS)
    await um.init()
    backlog = Backlog(zk, PATHS, um, LedgerStore(zk, PATHS), clock=time.monotonic)
    live = {"b:1", "c:1"}
    sizes, _ = await backlog.refresh(live)
    assert sorted(calls) == ids and sorted(sizes) == ids
    for _ in range(3):
        assert (await backlog.refresh(live))[0] == sizes
    assert sorted(calls) == ids  # nothing changed: nothing computed again
    assert all(p.kind == WorkKind.DATA_LOSS and p.copies_left == 1 for p in backlog.known.values())
    calls.clear()
    await backlog.refresh({"b:1"})  # c:1 lost too: every priority may change
    assert sorted(calls) == ids
    assert all(p.kind == WorkKind.NO_COPY_LEFT for p in backlog.known.values())
    calls.clear()
    await auditor.mark_underreplicated(7, ["a:1", "b:1"])  # re-marked: a new marker version
    backlog._last_full = -1e18  # the next refresh re-reads every marker (as every 60 s)
    kept = dict(backlog.mds)
    await backlog.refresh({"b:1"})
    assert 7 in calls and backlog.markers[7][2] == ["a:1", "b:1"]
    # the full refresh decodes only what was written since (mzxid): the other ledgers keep their
    # metadata objects and priorities (issue 29)
    assert calls == [7]
    assert all(backlog.mds[lid] is kept[lid] for lid in ids)
    calls.clear()
    md9, v9 = await store.read(9)
    await store.write(9, md9.with_segment_replaced(0, {"c:1": "d:1"}), v9)  # healed elsewhere in part
    backlog._last_full = -1e18
    await backlog.refresh({"b:1"})
    assert calls == [9] and backlog.mds[9].segments[0].ensemble == ("a:1", "b:1", "d:1")
    assert backlog.mds[9] is not kept[9] and all(backlog.mds[lid] is kept[lid] for lid in ids if lid != 9)
    await um.close()
    await auditor.close()


async def test_a_lock_met_is_skipped_until_released_and_its_release_wakes(zk, other):
    """A worker that finds a ledger locked by another session skips it without asking again, and the
    lock's release (its one-shot exists watch) puts it back and wakes the worker's waiters; a
    rebuild forgets what was met (the watch may be gone with the connection)."""
    um = UnderreplicationManager(zk, PATHS, lock_owner="me")
    remote = UnderreplicationManager(other, PATHS, lock_owner="remote")
    await um.init()
    await remote.init()
    await remote.mark_many({4: ["x:1"]})
    assert await remote.acquire(4)
    assert sorted(await um.watched_marked_ids()) == [4]
    assert await um.poll_ledger_to_rereplicate(sorted) is None
    assert um._index.locked == {4}
    ops = zk.ops
    assert await um.poll_ledger_to_rereplicate(sorted) is None
    assert zk.ops == ops  # known locked: no request
    woken = um.subscribe()
    woken.clear()
    await remote.release(4)  # released, the marker stays (as a deferred pass does)
    assert await wait_for(lambda: woken.is_set() and 4 not in um._index.locked, 10)
    assert await um.poll_ledger_to_rereplicate(sorted) == 4
    await um.release(4)
    assert await remote.acquire(4)
    assert await um.poll_ledger_to_rereplicate(sorted) is None
    assert um._index.locked == {4}
    um._index.invalidate()
    assert sorted(await um.watched_marked_ids()) == [4] and await um.watched_marked_count() == 1  # rebuilt
    assert um._index.locked == set()
    await um.close()
    await remote.close()


class RacingZk:
    """The real client, except that right after its first ``multiRead`` another session rewrites the
    ledger metadata znode (a writer's ensemble change landing between the lock's read and its
    transaction)."""

    def __init__(self, zk: ZkClient, other: ZkClient, path: str) -> None:
        self._zk, self._other, self._path = zk, other, path
        self.raced = False

    def __getattr__(self, name):
        return getattr(self._zk, name)

    async def get_many(self, paths):
        got = await self._zk.get_many(paths)
        if not self.raced:
            self.raced = True
            await self._other.set(self._path, b"changed")
        return got


@pytest.mark.parametrize("batch", [1, 2], ids=["one", "batched"])
async def test_the_lock_reads_the_metadata_and_checks_its_version(zk, other, batch):
    """The lock reads each ledger's metadata with its marker and its transaction checks both versions:
    a metadata change between the read and the lock makes it read again, so the read handed to the
    pass (``take_metadata_read``, once) is the znode as it was when the lock was made."""
    lids = [21, 22][:batch]
    for lid in lids:
        await other.ensure_path(PATHS.ledger(lid).rsplit("/", 1)[0])
        await other.create(PATHS.ledger(lid), b"v0")
    racing = RacingZk(zk, other, PATHS.ledger(lids[0]))
    um = UnderreplicationManager(racing, PATHS, lock_owner="me")  # type: ignore[arg-type]
    remote = UnderreplicationManager(other, PATHS)
    await um.init()
    await remote.init()
    await remote.mark_many({lid: ["x:1"] for lid in lids})
    got = await um.poll_ledgers_to_rereplicate(sorted, batch) if batch > 1 else \
        [await um.poll_ledger_to_rereplicate(sorted)]
    assert got == lids and racing.raced
    data, stat = um.take_metadata_read(lids[0])
    now, now_stat = await other.get(PATHS.ledger(lids[0]))
    assert data == now == b"changed" and stat.version == now_stat.version == 1
    assert um.take_metadata_read(lids[0]) is None  # once
    await um.close()
    await remote.close()
