"""The reference bookie over real gRPC and a real ZooKeeper, through the real BookieClient.

Bookies run in the test's process (``BookieServer``) for speed; the process-level behaviour (signals,
kill -9, exit codes) is in test_bookie_process.py.
"""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.bookie.cookie import ClusterNotFormattedError
from autorecovery.bookie.disk import DiskThresholds, write_fake_disk
from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.errors import BookieError, BookieUnavailableError, CookieError, LedgerFencedError
from autorecovery.ledger.digest import pack_entry
from autorecovery.rpc.results import BookieInfo
from autorecovery.rpc.transport import BookieClient
from autorecovery.rpc.convert import decode_service_info
from autorecovery.testing.bookie_proc import format_test_cluster
from autorecovery.testing.zk_server import free_port
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for

pytestmark = pytest.mark.integration

# ``zk_server`` is the session-wide ZooKeeper of tests/conftest.py; each test formats its own chroot.

MK = b"master-key"


@pytest.fixture
async def cluster(zk_server):
    """Connect string of a fresh chroot holding a formatted (INSTANCEID) /ledgers."""
    return await format_test_cluster(zk_server.connect_string)


@pytest.fixture
async def zk(cluster):
    client = await ZkClient(cluster).start()
    yield client
    await client.stop()


@pytest.fixture
async def start_bookie(cluster, tmp_path):
    started: list[BookieServer] = []

    async def start(name: str = "b1", **kw) -> BookieServer:
        kw.setdefault("port", 0)
        srv = BookieServer(BookieConfig(zk=kw.pop("zk", cluster), data_dir=tmp_path / name, **kw))
        await srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        await srv.stop()


def entry(lid: int, eid: int, lac: int = -1, payload: bytes = b"payload") -> bytes:
    return pack_entry(lid, eid, lac, 0, payload)


async def status_of(coro) -> str:
    with pytest.raises(BookieError) as ei:
        await coro
    return ei.value.status


async def test_unknown_ledger_is_enoledger(start_bookie, client) -> None:
    b = (await start_bookie()).bookie_id
    assert await status_of(client.read_entry(b, 42, 0)) == "ENOLEDGER"
    assert await status_of(client.read_entry(b, 42, -1)) == "ENOLEDGER"
    assert await status_of(client.read_lac(b, 42)) == "ENOLEDGER"
    assert await status_of(client.get_list_of_entries(b, 42)) == "ENOLEDGER"
    with pytest.raises(BookieError) as ei:
        async for _ in client.read_entries(b, 42, 0, 10):
            pass
    assert ei.value.status == "ENOLEDGER"


async def test_entry_reads_missing_entry_and_last_entry(start_bookie, client) -> None:
    b = (await start_bookie()).bookie_id
    for e in (0, 1, 3):
        await client.add_entry(b, 1, e, MK, entry(1, e, e - 1))
    r = await client.read_entry(b, 1, 1)
    assert (r.entry_id, r.body, r.lac) == (1, entry(1, 1, 0), 2)
    assert await status_of(client.read_entry(b, 1, 2)) == "ENOENTRY"
    assert (await client.read_entry(b, 1, -1)).entry_id == 3
    assert await client.read_lac(b, 1) == 2
    # idempotent re-add of an existing entry id (upstream recovery re-adds)
    await client.add_entry(b, 1, 1, MK, entry(1, 1, 0, b"again"), recovery=True)
    assert (await client.read_entry(b, 1, 1)).body == entry(1, 1, 0, b"again")


async def test_wrong_master_key_is_eua(start_bookie, client) -> None:
    b = (await start_bookie()).bookie_id
    await client.add_entry(b, 2, 0, MK, entry(2, 0))
    assert await status_of(client.add_entry(b, 2, 1, b"wrong", entry(2, 1))) == "EUA"
    assert await status_of(client.read_entry(b, 2, -1, fence=True, master_key=b"wrong")) == "EUA"
    # the failed fence did not fence
    await client.add_entry(b, 2, 1, MK, entry(2, 1))


async def test_malformed_and_oversized_entries_are_ebadreq(start_bookie, client) -> None:
    b = (await start_bookie(max_entry_size=64 * 1024)).bookie_id
    # just over the limit: reaches the bookie's own check, which names both sizes
    big = entry(3, 0, payload=b"x" * (64 * 1024))
    with pytest.raises(BookieError) as ei:
        await client.add_entry(b, 3, 0, MK, big)
    assert ei.value.status == "EBADREQ"
    assert f"{len(big)} bytes" in str(ei.value) and "65536 bytes" in str(ei.value)
    # far over the limit: refused by gRPC's receive limit, still EBADREQ for the caller
    with pytest.raises(BookieError) as ei:
        await client.add_entry(b, 3, 0, MK, entry(3, 0, payload=b"x" * (2 * 1024 * 1024)))
    assert ei.value.status == "EBADREQ" and "RESOURCE_EXHAUSTED" in str(ei.value)
    assert await status_of(client.add_entry(b, 3, 0, MK, b"short")) == "EBADREQ"
    assert await status_of(client.add_entry(b, 3, 0, MK, entry(3, 1))) == "EBADREQ"  # ids differ
    assert await status_of(client.add_entry(b, 3, 0, MK, entry(4, 0))) == "EBADREQ"
    assert await status_of(client.read_entry(b, 3, 0)) == "ENOLEDGER"  # nothing was stored


async def test_fenced_ledger_refuses_adds_but_accepts_recovery_adds(start_bookie, client) -> None:
    b = (await start_bookie()).bookie_id
    for e in range(3):
        await client.add_entry(b, 5, e, MK, entry(5, e, e - 1))
    r = await client.read_entry(b, 5, -1, fence=True, master_key=MK)
    assert (r.entry_id, r.lac) == (2, 1)
    with pytest.raises(LedgerFencedError) as ei:
        await client.add_entry(b, 5, 3, MK, entry(5, 3, 2))
    assert ei.value.status == "EFENCED" and ei.value.bookie_id == b
    await client.add_entry(b, 5, 3, MK, entry(5, 3, 2), recovery=True)
    assert (await client.read_entry(b, 5, 3)).lac == 2
    # fencing a ledger the bookie never saw creates it fenced: a late writer cannot start
    assert await status_of(client.read_entry(b, 6, -1, fence=True, master_key=MK)) == "ENOENTRY"
    with pytest.raises(LedgerFencedError):
        await client.add_entry(b, 6, 0, MK, entry(6, 0))


async def test_fence_persists_across_restart(start_bookie, client, tmp_path) -> None:
    srv = await start_bookie("bf")
    b, port = srv.bookie_id, srv.port
    await client.add_entry(b, 7, 0, MK, entry(7, 0))
    await client.read_entry(b, 7, -1, fence=True, master_key=MK)
    await srv.stop()
    srv2 = await start_bookie("bf", port=port)  # same data dir, same id
    assert srv2.bookie_id == b
    assert await status_of(client.add_entry(b, 7, 1, MK, entry(7, 1))) == "EFENCED"
    assert (await client.read_entry(b, 7, 0)).body == entry(7, 0)


async def test_read_entries_round_robin_filter_and_gaps(start_bookie, client) -> None:
    b = (await start_bookie()).bookie_id
    present = [e for e in range(20) if e not in (4, 7, 8)]
    for e in present:
        await client.add_entry(b, 8, e, MK, entry(8, e, e - 1))
    got = [(r.entry_id if not isinstance(r, BookieError) else ("missing", r.status))
           async for r in client.read_entries(b, 8, 2, 12)]
    assert got == [2, 3, ("missing", "ENOENTRY"), 5, 6, ("missing", "ENOENTRY"), ("missing", "ENOENTRY"),
                   9, 10, 11, 12]
    # E=3, WQ=2, index 1 stores entries e with (1 - e) mod 3 < 2, i.e. e mod 3 in {0, 1}
    items = [r async for r in client.read_entries(b, 8, 0, 23, ensemble_size=3, write_quorum=2, bookie_index=1)]
    ids = [r.entry_id for r in items if not isinstance(r, BookieError)]
    missing = [r for r in items if isinstance(r, BookieError)]
    assert ids == [0, 1, 3, 6, 9, 10, 12, 13, 15, 16, 18, 19]
    assert len(missing) == 4 and all(m.status == "ENOENTRY" for m in missing)  # 4, 7, 21, 22
    assert "entry 4 " in str(missing[0]) and "entry 22 " in str(missing[-1])
    # a long range streams in chunks and can be abandoned midway
    n = 0
    async for _ in client.read_entries(b, 8, 0, 999_999):
        n += 1
        if n == 700:
            break
    assert n == 700
    with pytest.raises(BookieError) as ei:
        async for _ in client.read_entries(b, 8, 0, 1_000_000):
            pass
    assert ei.value.status == "EBADREQ" and "1000001" in str(ei.value)


async def test_add_entries_stream(start_bookie, client) -> None:
    srv = await start_bookie()
    b = srv.bookie_id
    n = 300
    written, nbytes = await client.add_entries(b, 9, MK, ((e, entry(9, e, e - 1)) for e in range(n)))
    assert (written, nbytes) == (n, n * len(entry(9, 0)))
    assert srv.storage.commits < n  # streamed into group commits, not one transaction per entry
    assert await client.get_list_of_entries(b, 9) == [(0, n - 1)]

    async def gen():
        for e in range(n, n + 10):
            yield e, entry(9, e) if e != n + 5 else entry(9, 12345)  # a body for the wrong entry id
    with pytest.raises(BookieError) as ei:
        await client.add_entries(b, 9, MK, gen())
    err = ei.value
    assert err.status == "EBADREQ" and err.failed_entry_id == n + 5 and err.entries_written == 5
    assert await client.get_list_of_entries(b, 9) == [(0, n + 4)]  # before the failure: durable; after: nothing
    # fenced ledger: a normal stream is refused, a recovery stream (the default) is accepted
    await client.read_entry(b, 9, -1, fence=True, master_key=MK)
    with pytest.raises(LedgerFencedError) as ei:
        await client.add_entries(b, 9, MK, [(n + 5, entry(9, n + 5))], recovery=False)
    assert ei.value.failed_entry_id == n + 5 and ei.value.entries_written == 0
    assert await client.add_entries(b, 9, MK, [(n + 5, entry(9, n + 5))]) == (1, len(entry(9, n + 5)))


async def test_get_list_of_entries_ranges(start_bookie, client) -> None:
    b = (await start_bookie()).bookie_id
    for e in [0, 1, 2, 3, 7, 9, 10, 100]:
        await client.add_entry(b, 10, e, MK, entry(10, e))
    assert await client.get_list_of_entries(b, 10) == [(0, 3), (7, 7), (9, 10), (100, 100)]
    assert await status_of(client.read_entry(b, 11, -1, fence=True, master_key=MK)) == "ENOENTRY"  # now known, empty
    assert await client.get_list_of_entries(b, 11) == []


async def test_get_bookie_info(start_bookie, client) -> None:
    srv = await start_bookie(fake_disk_total_bytes=10_000_000, fake_disk_free_bytes=4_000_000)
    b = srv.bookie_id
    assert await client.get_bookie_info(b) == BookieInfo(10_000_000, 4_000_000)
    assert await client.get_bookie_info(b, requested=2) == BookieInfo(0, 4_000_000)
    assert await client.get_bookie_info(b, requested=1) == BookieInfo(10_000_000, 0)
    write_fake_disk(srv.data_dir, free_bytes=123)
    assert await client.get_bookie_info(b) == BookieInfo(10_000_000, 123)
    real = await client.get_bookie_info((await start_bookie("real")).bookie_id)  # os.statvfs
    assert real.total_disk_space > real.free_disk_space > 0


async def test_registration_moves_to_readonly_and_back(start_bookie, client, zk) -> None:
    srv = await start_bookie(
        fake_disk_total_bytes=1_000_000,
        fake_disk_free_bytes=900_000,
        thresholds=DiskThresholds(usage_threshold=0.95, usage_lwm_threshold=0.90, readonly_free_bytes=20_000),
        disk_check_interval_s=0.05,
    )
    b = srv.bookie_id
    writable = f"/ledgers/available/{b}"
    readonly = f"/ledgers/available/readonly/{b}"
    assert await zk.exists(writable) and not await zk.exists(readonly)
    data, _ = await zk.get(writable)
    assert decode_service_info(data) == ("127.0.0.1", srv.port)
    await client.add_entry(b, 12, 0, MK, entry(12, 0))

    write_fake_disk(srv.data_dir, free_bytes=10_000)  # below the 20,000-byte floor
    async def moved(ro: bool) -> bool:
        return bool(await zk.exists(readonly)) == ro and bool(await zk.exists(writable)) == (not ro)
    assert await wait_for(lambda: moved(True), 10.0)
    assert await status_of(client.add_entry(b, 12, 1, MK, entry(12, 1))) == "EREADONLY"
    assert await status_of(client.add_entry(b, 12, 1, MK, entry(12, 1), recovery=True)) == "EREADONLY"
    assert (await client.read_entry(b, 12, 0)).entry_id == 0  # reads still served

    write_fake_disk(srv.data_dir, free_bytes=60_000)  # above the floor but 94% used: stays read-only (LWM)
    checks = srv.disk_checks
    assert await wait_for(lambda: srv.disk_checks >= checks + 2, 5.0)
    assert srv.readonly and await moved(True)

    write_fake_disk(srv.data_dir)  # back to the 900,000 free given on the command line
    assert await wait_for(lambda: moved(False), 10.0)
    await client.add_entry(b, 12, 1, MK, entry(12, 1))


async def test_registration_waits_for_a_live_holder_of_its_znode(cluster, zk) -> None:
    """Upstream checkRegNodeAndWaitExpired: a znode held by another live session is waited for, never
    stolen; if it never goes away the start fails naming the znode."""
    from autorecovery.errors import ZooKeeperError
    from autorecovery.zk.paths import Paths
    from autorecovery.zk.registration import BookieRegistration

    path = "/ledgers/available/10.9.9.9:3181"
    other = await ZkClient(cluster).start()
    await other.create(path, b"", ephemeral=True, makepath=True)
    holder = (await zk.exists(path)).ephemeralOwner
    me = await ZkClient(cluster).start()
    try:
        reg = BookieRegistration(me, Paths(), "10.9.9.9:3181", b"", stale_wait_s=30.0,
                                 is_dead_owner=lambda data: False)
        task = asyncio.create_task(reg.start())
        assert await wait_for(lambda: reg.waiting_on == path, 5.0)
        assert (await zk.exists(path)).ephemeralOwner == holder  # not stolen
        await other.stop()  # the holder goes away
        await asyncio.wait_for(task, 10.0)
        assert (await zk.exists(path)).ephemeralOwner == me.client_id[0]
        await reg.stop()
        assert await zk.exists(path) is None

        other = await ZkClient(cluster).start()
        await other.create(path, b"", ephemeral=True)
        reg2 = BookieRegistration(me, Paths(), "10.9.9.9:3181", b"", stale_wait_s=0.3)
        with pytest.raises(ZooKeeperError, match=r"another bookie running with id 10.9.9.9:3181"):
            await reg2.start()
    finally:
        await other.stop()
        await me.stop()


async def test_reregisters_after_session_expiry(start_bookie, zk, zk_server, cluster) -> None:
    from kazoo.client import KazooClient  # test-only: the classic session-expiry trick

    srv = await start_bookie(zk_session_timeout_ms=2000)
    path = f"/ledgers/available/{srv.bookie_id}"
    before = (await zk.exists(path)).ephemeralOwner
    session_id, password = srv.zk.client_id
    kz = KazooClient(hosts=cluster, client_id=(session_id, password))
    await asyncio.to_thread(kz.start)
    await asyncio.to_thread(kz.stop)  # closing the shared session expires it for the bookie too
    await asyncio.to_thread(kz.close)

    async def reregistered() -> bool:
        st = await zk.exists(path)
        return st is not None and st.ephemeralOwner not in (0, before)
    assert await wait_for(reregistered, 20.0)
    assert srv.registration.registrations >= 2


@pytest.mark.filterwarnings("ignore:No chroot path exists")
async def test_unformatted_cluster_and_cookie_mismatch_refuse_to_start(start_bookie, zk_server, tmp_path) -> None:
    with pytest.raises(ClusterNotFormattedError, match="INSTANCEID"):
        await start_bookie("u", zk=zk_server.connect_string + "/not-formatted")
    srv = await start_bookie("c1")
    port = srv.port
    await srv.stop()
    # the same bookie id with another data directory: the ZK cookie names the old directory
    (tmp_path / "c2" / "current").mkdir(parents=True)
    with pytest.raises(CookieError) as ei:
        await start_bookie("c2", port=port)
    assert srv.bookie_id in str(ei.value)


async def test_client_maps_unreachable_bookie_to_unavailable() -> None:
    c = BookieClient(timeout_s=2.0)
    try:
        with pytest.raises(BookieUnavailableError) as ei:
            await c.read_lac(f"127.0.0.1:{free_port()}", 1)
        assert ei.value.status == "UNAVAILABLE"
    finally:
        await c.close()


async def test_fencing_or_reading_a_negative_ledger_id_is_ebadreq_and_creates_nothing(start_bookie, client) -> None:
    """Issue 15 regression: fencing ledger -5 used to create it."""
    srv = await start_bookie()
    b = srv.bookie_id
    assert await status_of(client.read_entry(b, -5, -1, fence=True, master_key=MK)) == "EBADREQ"
    with pytest.raises(BookieError) as ei:
        async for _ in client.read_entries(b, -5, 0, 3):
            pass
    assert ei.value.status == "EBADREQ" and "ledger id -5" in str(ei.value)
    # nothing was created, and the bookie keeps serving
    assert await status_of(client.read_entry(b, -5 + 10, -1)) in ("ENOLEDGER", "ENOENTRY")
    await client.add_entry(b, 5, 0, MK, entry(5, 0))
    assert (await client.read_entry(b, 5, 0)).entry_id == 0


async def test_non_utf8_cookie_znode_instanceid_and_file_are_cookie_errors(start_bookie, zk, tmp_path) -> None:
    """Issue 15 regression: a non-UTF-8 byte in a cookie used to escape as UnicodeDecodeError."""
    from autorecovery.bookie.cookie import read_dir_cookie

    srv = await start_bookie("n1")
    port, bid = srv.port, srv.bookie_id
    await srv.stop()
    await zk.set(f"/ledgers/cookies/{bid}", b"\xff\xfe not utf-8")
    with pytest.raises(CookieError, match=f"/ledgers/cookies/{bid}.*not UTF-8"):
        await start_bookie("n1", port=port)
    await zk.set("/ledgers/INSTANCEID", b"\xff\xfe")
    with pytest.raises(CookieError, match=r"INSTANCEID.*not UTF-8"):
        await start_bookie("n2")
    d = tmp_path / "bad"
    (d / "current").mkdir(parents=True)
    (d / "current" / "VERSION").write_bytes(b"4\n\xff\xfe")
    with pytest.raises(CookieError, match="VERSION is not UTF-8"):
        read_dir_cookie(d)


async def test_adds_and_reads_over_the_in_progress_limits_get_etoomanyrequests(start_bookie, client) -> None:
    """Issue 15: upstream maxAddsInProgressLimit / maxReadsInProgressLimit; ETOOMANYREQUESTS was never
    produced. The budget is occupied from inside the bookie (same loop) so the refusal is deterministic."""
    from autorecovery.bookie.admission import AdmissionLimits

    srv = await start_bookie(limits=AdmissionLimits(max_adds=2, max_add_bytes=0, max_reads=1, stream_wait_s=0.3))
    b = srv.bookie_id
    adm = srv.service.admission
    await client.add_entry(b, 5, 0, MK, entry(5, 0))
    assert adm.try_add(10) and adm.try_add(10)  # two adds "in progress"
    assert await status_of(client.add_entry(b, 5, 1, MK, entry(5, 1))) == "ETOOMANYREQUESTS"
    with pytest.raises(BookieError) as ei:
        await client.add_entries(b, 5, MK, [(1, entry(5, 1))])
    assert ei.value.status == "ETOOMANYREQUESTS" and ei.value.failed_entry_id == 1
    assert "maxAddsInProgressLimit=2" in str(ei.value)
    assert adm.rejected_adds == 2
    # a stream waits for room instead of failing when room appears in time
    waiting = asyncio.ensure_future(client.add_entries(b, 5, MK, [(1, entry(5, 1)), (2, entry(5, 2))]))
    await wait_for(lambda: adm.adds == 2, 5.0)  # nothing was admitted for the stream yet
    adm.release_add(10)
    assert await asyncio.wait_for(waiting, 10) == (2, 2 * len(entry(5, 1)))
    adm.release_add(10)
    assert (adm.adds, adm.add_bytes) == (0, 0)  # everything admitted was released
    # reads: one in progress allowed
    assert adm.try_read()
    assert await status_of(client.read_entry(b, 5, 0)) == "ETOOMANYREQUESTS"
    adm.release_read()
    assert (await client.read_entry(b, 5, 0)).entry_id == 0
    assert adm.reads == 0


async def test_an_idle_add_stream_is_answered_and_closed(start_bookie, client) -> None:
    """Issue 15: 1,000 idle streams were never closed. A stream that sends nothing for the idle timeout
    is answered (what was written stays written) and closed; the bookie keeps serving."""
    srv = await start_bookie(stream_idle_timeout_s=0.5)
    b = srv.bookie_id
    never = asyncio.Event()

    async def one_then_idle():
        yield 0, entry(6, 0)
        await never.wait()  # the producer stalls; only the bookie's idle timeout ends this stream
        yield 1, entry(6, 1)

    with pytest.raises(BookieError) as ei:
        await client.add_entries(b, 6, MK, one_then_idle())
    assert ei.value.status == "EBADREQ" and "no add for 0.5 s" in str(ei.value)
    assert ei.value.entries_written == 1
    assert await client.get_list_of_entries(b, 6) == [(0, 0)]
    assert srv.service.admission.adds == 0


async def test_an_idle_add_stream_does_not_hold_the_bookies_shutdown(start_bookie, client) -> None:
    """A client keeps an AddStream open (idle); stopping the bookie ends it at once instead of waiting
    out the gRPC grace period, after acknowledging what it took."""
    srv = await start_bookie(shutdown_grace_s=30.0)
    st = await client.open_add_stream(srv.bookie_id, 21, MK)
    assert st is not None
    await asyncio.wait_for(asyncio.gather(*await st.send([(0, entry(21, 0))])), 10)
    loop = asyncio.get_running_loop()
    t = loop.time()
    await srv.stop()
    assert loop.time() - t < 10.0, "the idle stream held the 30 s grace period"
    assert await wait_for(lambda: not st.usable, 10)
    await st.close()
