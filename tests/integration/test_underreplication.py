"""UnderreplicationManager on a real ZooKeeper (upstream TestLedgerUnderreplicationManager scenarios)."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import text_format

from autorecovery.errors import CompatibilityError, UnavailableError
from autorecovery.proto import bookkeeper_formats_pb2 as pb
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager
from autorecovery.zk.ur.formats import decode_ctime, encode_ctime

pytestmark = pytest.mark.integration


@pytest.fixture
def chroot(zk_connect):
    """A fresh chroot on the session ZooKeeper (tests/conftest.py)."""
    return zk_connect


@pytest.fixture
async def zk(chroot):
    c = await ZkClient(chroot, session_timeout_ms=4000).start()
    yield c
    await c.stop()


@pytest.fixture
async def urm(zk):
    m = UnderreplicationManager(zk, Paths("/ledgers"), lock_owner="host-a")
    await m.init()
    yield m
    await m.close()


async def test_layout_created_and_bad_layout_refused(zk, urm):
    data, _ = await zk.get("/ledgers/underreplication/LAYOUT")
    assert data == b'type: "BASIC"\nversion: 1\n'
    await zk.set("/ledgers/underreplication/LAYOUT", b'type: "FANCY"\nversion: 2\n')
    with pytest.raises(CompatibilityError, match="FANCY"):
        await UnderreplicationManager(zk, Paths("/ledgers")).init()


async def test_marker_path_and_text_format(zk):
    now = 1718000000000
    m = UnderreplicationManager(zk, Paths("/ledgers"), now_ms=lambda: now)
    await m.init()
    lid = 0x4AFEBEEF0000FEED
    await m.mark_underreplicated(lid, ["10.0.0.1:3181"])
    await m.mark_underreplicated(lid, ["10.0.0.1:3181", "10.0.0.2:3181"])
    path = f"/ledgers/underreplication/ledgers/4afe/beef/0000/feed/urL{lid:010d}"
    data, stat = await zk.get(path)
    assert data == b'replica: "10.0.0.1:3181"\nreplica: "10.0.0.2:3181"\nctime: 1718000000000\n'
    # same replicas again: no write at all
    await m.mark_underreplicated(lid, ["10.0.0.2:3181"])
    _, stat2 = await zk.get(path)
    assert stat2.version == stat.version
    # similar names are kept distinct (1.cluster.com vs 11.cluster.com)
    await m.mark_underreplicated(7, ["1.cluster.com:1"])
    await m.mark_underreplicated(7, ["11.cluster.com:1"])
    assert (await m.get_marker(7)).replicas == ["1.cluster.com:1", "11.cluster.com:1"]
    await m.close()


async def test_no_ctime_when_disabled_by_config(zk):
    m = UnderreplicationManager(zk, Paths("/ledgers"), store_ctime=False)
    await m.init()
    await m.mark_underreplicated(1, ["b:1"])
    assert (await m.get_marker(1)).ctime == -1
    await m.close()


async def test_mark_many_batches_and_merges(zk, urm):
    await urm.mark_underreplicated(5, ["old:1"])
    marks = {i: ["b:1"] for i in range(0, 300)} | {70000: ["b:1", "c:1"]}
    ops_before = zk.ops
    writes = await urm.mark_many(marks)
    # 300 new markers (level + marker each, except ledger 5 that is merged) + ledger 70000
    assert writes == 2 * 300 - 2 + 1 + 2
    assert zk.ops - ops_before < 40, "markers must be written in multi batches"
    assert (await urm.get_marker(5)).replicas == ["old:1", "b:1"]
    assert (await urm.get_marker(70000)).replicas == ["b:1", "c:1"]
    ids = await urm.list_marked_ids()
    assert ids == set(range(300)) | {70000}
    # a second identical call changes nothing
    assert await urm.mark_many(marks) == 0


async def test_mark_many_keeps_several_transactions_in_flight(zk, urm, monkeypatch):
    from autorecovery.zk.ur.formats import MULTI_BATCH_OPS, MULTI_IN_FLIGHT

    for lid in (7, 1234, 2400):  # existing markers in three different transactions: merged, not lost
        await urm.mark_underreplicated(lid, ["old:1"])
    in_flight, peak = [0], [0]
    real = zk.multi

    async def counting(ops):
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        try:
            return await real(ops)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(zk, "multi", counting)
    n = 6 * MULTI_BATCH_OPS // 2  # six transactions' worth: more than may be in flight
    await urm.mark_many({i: ["b:1"] for i in range(n)})
    assert peak[0] == MULTI_IN_FLIGHT  # not one transaction at a time
    assert await urm.list_marked_ids() == set(range(n))
    for lid in (7, 1234, 2400):
        assert (await urm.get_marker(lid)).replicas == ["old:1", "b:1"]
    assert (await urm.get_marker(2999)).replicas == ["b:1"]


async def test_acquire_release_and_session_death(chroot, urm, zk):
    await urm.mark_underreplicated(1, ["b:1"])
    other_zk = await ZkClient(chroot, session_timeout_ms=2000).start()
    other = UnderreplicationManager(other_zk, Paths("/ledgers"), lock_owner="host-b")
    await other.init()
    assert await other.poll_ledger_to_rereplicate() == 1
    assert await urm.lock_holder(1) == "host-b"
    assert await urm.poll_ledger_to_rereplicate() is None
    # the lock dies with the other session
    await other_zk.stop()
    assert await asyncio.wait_for(urm.get_ledger_to_rereplicate(), 10) == 1
    assert await urm.lock_holder(1) == "host-a"
    await urm.release(1)
    assert await urm.lock_holder(1) is None


async def test_blocking_take_wakes_on_new_marker(urm, chroot):
    waiter = asyncio.ensure_future(urm.get_ledger_to_rereplicate())
    await asyncio.sleep(0)  # let it arm its watches; correctness does not depend on it
    assert not waiter.done()
    zk2 = await ZkClient(chroot).start()
    m2 = UnderreplicationManager(zk2, Paths("/ledgers"))
    await m2.mark_underreplicated(42, ["b:1"])
    assert await asyncio.wait_for(waiter, 10) == 42
    await zk2.stop()


async def test_order_prioritises(urm):
    await urm.mark_many({i: ["b:1"] for i in (3, 9, 4)})
    assert await urm.poll_ledger_to_rereplicate(order=lambda c: sorted(c, reverse=True)) == 9
    assert await urm.poll_ledger_to_rereplicate(order=sorted) == 3


async def test_remark_while_held_survives_mark_replicated(urm, zk):
    await urm.mark_underreplicated(11, ["a:1"])
    assert await urm.acquire(11)
    # the auditor adds a replica while the worker holds the ledger
    await UnderreplicationManager(zk, Paths("/ledgers")).mark_underreplicated(11, ["b:1"])
    assert await urm.mark_replicated(11) is False
    assert (await urm.get_marker(11)).replicas == ["a:1", "b:1"]
    assert 11 not in urm.held and await urm.lock_holder(11) is None
    assert await urm.acquire(11)
    assert await urm.mark_replicated(11) is True
    assert await urm.get_marker(11) is None


async def test_hierarchy_cleanup(urm, zk):
    ids = [1, 2, 3, 0x10000]
    await urm.mark_many({i: ["b:1"] for i in ids})
    assert len(await zk.get_children("/ledgers/underreplication/ledgers/0000/0000/0000")) == 3
    for i in ids:
        assert await urm.acquire(i)
        assert await urm.mark_replicated(i)
    assert await zk.get_children("/ledgers/underreplication/ledgers") == []


async def test_disable_blocks_take_until_enable(urm, zk):
    await urm.disable()
    with pytest.raises(UnavailableError, match="already disabled"):
        await urm.disable()
    assert not await urm.is_enabled()
    await urm.mark_underreplicated(8, ["b:1"])
    waiter = asyncio.ensure_future(urm.get_ledger_to_rereplicate())
    done, _ = await asyncio.wait({waiter}, timeout=0.5)
    assert not done, "a disabled manager must not hand out ledgers"
    await urm.enable()
    with pytest.raises(UnavailableError, match="already enabled"):
        await urm.enable()
    assert await asyncio.wait_for(waiter, 10) == 8


async def test_delay_and_ctimes_and_trigger(urm, zk):
    await urm.init_lost_bookie_recovery_delay(1800)
    await urm.init_lost_bookie_recovery_delay(5)  # config only seeds: znode wins
    assert await urm.get_lost_bookie_recovery_delay() == 1800
    await urm.set_lost_bookie_recovery_delay(2400)
    assert (await zk.get("/ledgers/underreplication/lostBookieRecoveryDelay"))[0] == b"2400"
    for which in ("checkallledgers", "placementpolicycheck", "replicascheck"):
        assert await urm.get_check_ctime(which) == -1
        await urm.set_check_ctime(which, 1234567)
        assert await urm.get_check_ctime(which) == 1234567
    raw, _ = await zk.get("/ledgers/underreplication/checkallledgersctime")
    assert raw == b"\x08" + bytes([0x87, 0xAD, 0x4B]) and decode_ctime("checkallledgers", raw) == 1234567
    assert encode_ctime("replicascheck", 1) == b"\x08\x01"
    # no auditor elected yet
    with pytest.raises(UnavailableError, match="no auditor"):
        await urm.trigger_audit()
    vote = pb.AuditorVoteFormat(bookieId="x:1")
    await zk.create("/ledgers/underreplication/auditorelection/V_", text_format.MessageToString(vote).encode(),
                    ephemeral=True, sequence=True, makepath=True)
    seen = []
    await zk.exists("/ledgers/underreplication/lostBookieRecoveryDelay", watch=lambda e: seen.append(e.type))
    await urm.trigger_audit()
    assert await wait_for(lambda: bool(seen), 5)
    await urm.disable()
    with pytest.raises(UnavailableError, match="disabled"):
        await urm.trigger_audit()


async def test_list_with_predicate(urm):
    await urm.mark_many({1: ["a:1"], 2: ["b:1"], 3: ["a:1", "b:1"]})
    got = [m.ledger_id async for m in urm.list_underreplicated(lambda r: "a:1" in r)]
    assert got == [1, 3]
    got = [m.ledger_id async for m in urm.list_underreplicated(lambda r: "a:1" not in r)]
    assert got == [2]


@pytest.mark.parametrize("raw", [b"\xff\xff\xff", b"\x08", b"\x0a\x80"])
async def test_hostile_ctime_znode_reads_as_never_run(urm, zk, raw):
    # issue 15 fuzzing: garbage used to be swallowed silently; now decode_ctime with a path raises
    # UnavailableError naming the znode and get_check_ctime logs it and answers -1 (upstream auditor)
    path = "/ledgers/underreplication/checkallledgersctime"
    await zk.create(path, raw, makepath=True)
    with pytest.raises(UnavailableError, match=path):
        decode_ctime("checkallledgers", raw, path)
    assert await urm.get_check_ctime("checkallledgers") == -1
    await urm.set_check_ctime("checkallledgers", 42)  # the next run overwrites it
    assert await urm.get_check_ctime("checkallledgers") == 42


@pytest.mark.parametrize("raw", [b"\xff", b"9" * 5000, b"\xc2\xb2", b"", b"1e3"])
async def test_hostile_lost_bookie_recovery_delay(urm, zk, raw):
    path = "/ledgers/underreplication/lostBookieRecoveryDelay"
    await urm.init_lost_bookie_recovery_delay(10)
    await zk.set(path, raw)
    with pytest.raises(UnavailableError, match=path) as ei:
        await urm.get_lost_bookie_recovery_delay()
    assert len(str(ei.value)) < 500


async def test_marking_survives_a_worker_removing_the_empty_parent_levels(chroot, zk, urm):
    """Two "workers" (sessions) mark and finish ledgers that share a leaf level, as an auditor or a
    decommission marks while a worker's mark_replicated removes the levels it emptied: kazoo's create
    with makepath can then find the parent gone between its ensure_path and its create. Marking must
    make the levels again, never fail with NoNodeError (seen in CI as a decommission job failing with
    an empty error)."""
    other_zk = await ZkClient(chroot).start()
    other = UnderreplicationManager(other_zk, Paths("/ledgers"))
    await other.init()
    try:
        async def churn(m: UnderreplicationManager, lid: int) -> None:
            for _ in range(150):
                await m.mark_underreplicated(lid, ["b:1"])
                assert await m.acquire(lid)
                assert await m.mark_replicated(lid)  # deletes the marker and the levels it emptied

        await asyncio.gather(churn(urm, 0x70), churn(other, 0x71))
    finally:
        await other.close()
        await other_zk.stop()


async def test_batch_marking_survives_a_worker_removing_the_empty_upper_levels(chroot, zk, urm):
    """``mark_many`` (the auditor's and decommission's batch marking) makes the shared upper levels with
    ``ensure_path``; a worker's ``mark_replicated`` may delete a level between two of its creates. Seen
    in CI as a decommission job failing with ``NoNodeError``: the walk must start again, not fail."""
    other_zk = await ZkClient(chroot).start()
    other = UnderreplicationManager(other_zk, Paths("/ledgers"))
    await other.init()
    try:
        async def batch_marks() -> None:
            for n in range(150):
                urm._known_dirs.clear()  # every round walks the upper levels again, racing the cleaner
                await urm.mark_many({0x5_0000_0000 + n: ["b:1"]})
                assert await urm.acquire(0x5_0000_0000 + n)
                assert await urm.mark_replicated(0x5_0000_0000 + n)

        async def churn() -> None:
            for _ in range(150):  # a ledger in the same upper levels, marked and finished
                await other.mark_underreplicated(0x5_0000_1000, ["b:1"])
                assert await other.acquire(0x5_0000_1000)
                assert await other.mark_replicated(0x5_0000_1000)

        await asyncio.gather(batch_marks(), churn())
    finally:
        await other.close()
        await other_zk.stop()


async def test_a_lock_release_during_a_connection_loss_is_retried_not_forgotten(zk_server, chroot, urm):
    """Issue 26 (chaos campaign: a ledger stuck marked and locked after a ZooKeeper fault): a worker's
    release whose delete fails with ConnectionLoss must not forget the lock, since the session and
    its ephemeral lock live on. The release waits for the connection and deletes it."""
    from autorecovery.testing.tcp_proxy import TcpProxy

    proxy = TcpProxy((zk_server.host, zk_server.port)).start()
    path = chroot[chroot.index("/"):]
    wz = await ZkClient(proxy.address + path, session_timeout_ms=20000).start()
    worker = UnderreplicationManager(wz, Paths("/ledgers"), lock_owner="host-b")
    try:
        await worker.init()
        await urm.mark_underreplicated(7, ["10.0.0.1:3181"])
        assert await worker.acquire(7)
        gen = wz.session_generation
        proxy.cut()
        release = asyncio.ensure_future(worker.release(7))
        assert await wait_for(lambda: not wz.connected.is_set(), 10)
        with pytest.raises(asyncio.TimeoutError):  # it keeps retrying (the old code raised ConnectionLoss)
            await asyncio.wait_for(asyncio.shield(release), 1.0)
        assert 7 in worker.held
        proxy.restore()
        await asyncio.wait_for(release, 20)
        assert wz.session_generation == gen  # the same session: only the delete could free the lock
        assert 7 not in worker.held
        assert await urm.zk.exists(Paths("/ledgers").ur_lock(7)) is None
    finally:
        await worker.close()
        await wz.stop()
        proxy.close()


async def test_a_lock_this_session_made_but_lost_track_of_is_adopted(zk, urm):
    """Issue 26 (chaos campaign: a ledger marked and locked by nobody for minutes): a lock create that
    failed with ConnectionLoss after the server made the znode leaves a lock of this live session.
    Acquiring that ledger again adopts it instead of treating it as another worker's lock."""
    from autorecovery.proto import bookkeeper_formats_pb2 as fmt

    await urm.mark_underreplicated(9, ["10.0.0.1:3181"])
    orphan = fmt.LockDataFormat(bookieId="host-a")
    await zk.create(Paths("/ledgers").ur_lock(9), text_format.MessageToString(orphan).encode(), ephemeral=True)
    assert 9 not in urm.held
    assert await urm.acquire(9) is True and 9 in urm.held
    other = await ZkClient(zk.hosts, session_timeout_ms=4000).start()
    try:  # another session's lock is still refused
        um2 = UnderreplicationManager(other, Paths("/ledgers"), lock_owner="host-b")
        await um2.init()
        assert await um2.acquire(9) is False
        await um2.close()
    finally:
        await other.stop()


async def test_lock_and_marker_round_trips(urm, zk):
    """Issue 29: the lock costs a marker read and one multi, the worker's get_marker right after it
    none, and mark_replicated one multi (marker, its leaf level and the lock) when the watch cache
    shows the level above holding other markers."""
    await urm.mark_many({5: ["b:1"], 6: ["b:1"]})
    await urm.watched_marked_ids()  # the worker's walk fills the watch cache
    ops = zk.ops
    assert await urm.acquire(5)
    assert zk.ops - ops == 2
    m = await urm.get_marker(5)
    assert m is not None and m.replicas == ["b:1"] and urm.held[5] == m.version
    assert zk.ops - ops == 2
    ops = zk.ops
    assert await urm.mark_replicated(5)
    assert zk.ops - ops == 1
    assert await zk.exists(urm.paths.ur_marker(5).rsplit("/", 1)[0]) is None  # leaf level gone
    assert await zk.get_children(urm.paths.ur_locks) == []
    assert await urm.get_marker(6) is not None
    assert await urm.get_marker(5) is None  # read again, not the acquire's copy


async def test_lock_only_on_the_marker_version_read(urm, zk, monkeypatch):
    """A re-mark between acquire's read and its multi fails the version check: the marker is read
    again and the lock is taken on the new version (so the re-mark is not lost)."""
    await urm.mark_underreplicated(7, ["a:1"])
    other = UnderreplicationManager(zk, Paths("/ledgers"))
    orig_multi, remarked = zk.multi, []

    async def multi(ops):
        if not remarked:
            remarked.append(1)
            await other.mark_underreplicated(7, ["b:1"])
        return await orig_multi(ops)

    monkeypatch.setattr(zk, "multi", multi)
    assert await urm.acquire(7)
    m = await urm.get_marker(7)
    assert m.replicas == ["a:1", "b:1"] and urm.held[7] == m.version


async def test_enabled_answer_is_kept_under_its_watch(urm, zk):
    await urm.wait_while_disabled()
    ops = zk.ops
    await urm.wait_while_disabled()
    assert zk.ops == ops  # no read while the exists-watch has not fired
    other = UnderreplicationManager(zk, Paths("/ledgers"))
    await other.disable()
    assert await wait_for(lambda: not urm._enabled_seen, 10)
    waiter = asyncio.ensure_future(urm.wait_while_disabled())
    done, _ = await asyncio.wait({waiter}, timeout=0.3)
    assert not done
    await other.enable()
    await asyncio.wait_for(waiter, 10)
