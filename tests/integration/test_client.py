"""The ledger client on a real cluster: ZooKeeper + bookie processes that get killed.

Scenarios from the foundation issue: round trip with a bookie killed mid-write (ensemble change),
fencing by a recovery open, fallback on a corrupted replica, bad input; every upstream digest type
(entries packed and master keys derived as upstream's DigestManager does).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import BookieError, LedgerFencedError, MalformedMetadataError, NoSuchLedgerError
from autorecovery.ledger.digest import METADATA_LENGTH, digest_for, master_key
from autorecovery.ledger.metadata import DigestType, LedgerState
from autorecovery.testing.bookie_tamper import flip_entry_bytes
from autorecovery.workload import entry_size, payload

pytestmark = pytest.mark.integration


async def _connect(cluster) -> BookKeeper:
    bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
    ok = await bk.watcher.wait_until(lambda w: len(w.writable) == len(cluster.bookies), 10)
    assert ok, f"bookies not all registered: {bk.watcher.writable}"
    return bk


def test_round_trip_with_bookie_killed_mid_write(cluster_factory):
    cluster = cluster_factory(bookies=4)

    async def go():
        bk = await _connect(cluster)
        try:
            lh = await bk.create_ledger(3, 2, 2)
            ensemble = list(lh.metadata.last_ensemble)
            victim = cluster.bookie_ids().index(ensemble[1])
            sizes = {}
            for e in range(1000):
                size = entry_size(300, e, mixed=True)
                sizes[e] = size
                if e == 400:
                    cluster.kill_bookie(victim, signal.SIGKILL)
                assert await lh.add_entry(payload(9, lh.ledger_id, e, size)) == e
            md = await lh.close()
            assert md.state == LedgerState.CLOSED and md.last_entry_id == 999
            assert md.length == sum(sizes.values())
            assert len(md.segments) == 2, md.segments
            assert ensemble[1] not in md.segments[1].ensemble
            assert 0 < md.segments[1].first_entry_id <= 401
            rh = await bk.open_ledger(lh.ledger_id)
            entries = await rh.read_entries(0, 999)
            assert [x.entry_id for x in entries] == list(range(1000))
            assert rh.fallback_reads == 0  # streams went to the live replica of each write set
            for x in entries:
                assert x.payload == payload(9, lh.ledger_id, x.entry_id, sizes[x.entry_id])
            assert rh.digest_errors == []
        finally:
            await bk.close()

    asyncio.run(go())


def test_concurrent_adds_queue_their_first_writes_without_tasks_and_survive_a_bookie_killed_mid_window(
        cluster_factory):
    """A window of adds in flight: each replica's first write is a future on the add batcher (no task per
    replica), and writes pending on a bookie that is killed are retried through an ensemble change
    without losing or reordering an acknowledged entry."""
    cluster = cluster_factory(bookies=4)

    async def go():
        bk = await _connect(cluster)
        try:
            lh = await bk.create_ledger(3, 2, 2)
            victim_id = lh.metadata.last_ensemble[0]
            retries = []  # the handle's retry tasks (LedgerHandle._send), counted as they are created
            loop = asyncio.get_running_loop()

            def factory(loop, coro, **kw):
                if getattr(coro, "__qualname__", "") == "LedgerHandle._send":
                    retries.append(coro)
                return asyncio.Task(coro, loop=loop, **kw)

            loop.set_task_factory(factory)
            first = [asyncio.ensure_future(lh.add_entry(payload(5, lh.ledger_id, e, 500))) for e in range(200)]
            assert await asyncio.wait_for(asyncio.gather(*first), 30) == list(range(200))
            assert retries == []  # 400 replica writes, none of them a task of its own
            cluster.kill_bookie(cluster.bookie_ids().index(victim_id), signal.SIGKILL)
            after = [asyncio.ensure_future(lh.add_entry(payload(5, lh.ledger_id, e, 500))) for e in range(200, 400)]
            assert await asyncio.wait_for(asyncio.gather(*after), 60) == list(range(200, 400))
            assert retries  # the writes that failed on the killed bookie were retried
            md = await lh.close()
            assert md.last_entry_id == 399 and len(md.segments) == 2
            assert victim_id not in md.segments[1].ensemble
            assert not lh._tasks and not lh._writes
            rh = await bk.open_ledger(lh.ledger_id)
            entries = await rh.read_entries(0, 399)
            assert [x.payload for x in entries] == [payload(5, lh.ledger_id, e, 500) for e in range(400)]
        finally:
            await bk.close()

    asyncio.run(go())


def test_recovery_open_fences_active_writer(cluster_factory):
    cluster = cluster_factory(bookies=3)

    async def go():
        writer = await _connect(cluster)
        reader = await _connect(cluster)
        try:
            lh = await writer.create_ledger(3, 2, 2)
            for e in range(20):
                await lh.add_entry(b"x%d" % e)
            rh = await reader.open_ledger(lh.ledger_id, recovery=True)
            assert rh.metadata.state == LedgerState.CLOSED
            assert rh.metadata.last_entry_id == 19
            with pytest.raises(LedgerFencedError):
                await lh.add_entry(b"late")
            got = await rh.read_entries(0, 19)
            assert [x.payload for x in got] == [b"x%d" % e for e in range(20)]
            md, _ = await reader.ledgers.read(lh.ledger_id)
            assert md.state == LedgerState.CLOSED and md.last_entry_id == 19
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(go())


@pytest.mark.parametrize("digest", ["CRC32C", "CRC32", "MAC", "DUMMY"])
def test_every_digest_type_writes_fences_and_reads(cluster_factory, digest):
    cluster = cluster_factory(bookies=3)

    async def go():
        writer = await _connect(cluster)
        reader = await _connect(cluster)
        try:
            lh = await writer.create_ledger(3, 2, 2, digest=digest, password=b"pw-" + digest.encode())
            dt = DigestType.HMAC if digest == "MAC" else DigestType[digest]
            assert lh.metadata.digest_type == dt
            for e in range(20):
                await lh.add_entry(b"x%d" % e)
            b0 = lh.metadata.ensemble_at(0)[0]
            raw = await writer.bookies.read_entry(b0, lh.ledger_id, 0)
            dg = digest_for(dt, lh.metadata.password)
            assert len(raw.body) == METADATA_LENGTH + dg.mac_length + 2  # upstream's layout, byte for byte
            assert raw.body == dg.pack(lh.ledger_id, 0, -1, 2, b"x0")
            # the bookies keep upstream's master key (SHA-1 of "ledger" + password), not the password
            with pytest.raises(BookieError) as ei:
                await reader.bookies.read_entry(b0, lh.ledger_id, -1, fence=True, master_key=lh.metadata.password)
            assert ei.value.status == "EUA"
            assert lh.master_key == master_key(b"pw-" + digest.encode())
            rh = await reader.open_ledger(lh.ledger_id, recovery=True)  # fences with the derived key
            assert rh.metadata.state == LedgerState.CLOSED and rh.metadata.last_entry_id == 19
            with pytest.raises(LedgerFencedError):
                await lh.add_entry(b"late")
            got = await rh.read_entries(0, 19)
            assert [x.payload for x in got] == [b"x%d" % e for e in range(20)] and rh.digest_errors == []
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(go())


def test_recovery_of_open_ledger_without_close_and_dead_bookie(cluster_factory):
    cluster = cluster_factory(bookies=4)

    async def go():
        bk = await _connect(cluster)
        try:
            lh = await bk.create_ledger(3, 3, 2)
            for e in range(10):
                await lh.add_entry(b"e%d" % e)
            dead = lh.metadata.last_ensemble[0]
            cluster.kill_bookie(cluster.bookie_ids().index(dead))
            rh = await bk.open_ledger(lh.ledger_id, recovery=True)
            assert rh.metadata.state == LedgerState.CLOSED
            assert rh.metadata.last_entry_id == 9
            assert [x.payload for x in await rh.read_entries(0, 9)] == [b"e%d" % e for e in range(10)]
        finally:
            await bk.close()

    asyncio.run(go())


def _corrupt_entry(data_dir: Path, ledger_id: int, entry_id: int) -> None:
    """Flip the last byte of one stored entry body (its digest no longer matches)."""
    assert flip_entry_bytes(data_dir, ledger_id, [entry_id]) == 1, f"entry {ledger_id}/{entry_id} not in {data_dir}"


def test_corrupted_replica_falls_back_and_reports(cluster_factory):
    cluster = cluster_factory(bookies=3)

    async def go():
        bk = await _connect(cluster)
        try:
            lh = await bk.create_ledger(3, 3, 3)
            for e in range(5):
                await lh.add_entry(b"payload-%d" % e)
            await lh.close()
            first = lh.metadata.ensemble_at(2)[2 % 3]  # first replica tried for entry 2
            i = cluster.bookie_ids().index(first)
            cluster.kill_bookie(i, signal.SIGTERM)
            _corrupt_entry(Path(cluster.bookies[i].data_dir), lh.ledger_id, 2)
            cluster.start_bookie(i)
            await bk.watcher.wait_until(lambda w: first in w.writable, 10)
            rh = await bk.open_ledger(lh.ledger_id)
            got = await rh.read_entries(0, 4)
            assert [x.payload for x in got] == [b"payload-%d" % e for e in range(5)]
            assert [(e, b) for e, b, _ in rh.digest_errors] == [(2, first)]
            assert rh.fallback_reads == 1  # only the corrupt entry was re-read from another replica
        finally:
            await bk.close()

    asyncio.run(go())


def test_bad_input_errors(cluster_factory):
    cluster = cluster_factory(bookies=3)

    async def go():
        bk = await _connect(cluster)
        try:
            b0 = cluster.bookie_id(0)
            with pytest.raises(BookieError) as ei:
                await bk.bookies.read_entry(b0, 987654, 0)
            assert ei.value.status == "ENOLEDGER"
            lh = await bk.create_ledger(3, 3, 3, password=b"right")
            await lh.add_entry(b"a")
            from autorecovery.ledger.digest import pack_entry

            with pytest.raises(BookieError) as ei:
                await bk.bookies.add_entry(b0, lh.ledger_id, 1, b"wrong", pack_entry(lh.ledger_id, 1, 0, 2, b"b"))
            assert ei.value.status == "EUA"
            big = pack_entry(lh.ledger_id, 1, 0, 6 << 20, b"z" * (6 << 20))
            with pytest.raises(BookieError) as ei:
                await bk.bookies.add_entry(b0, lh.ledger_id, 1, lh.master_key, big)
            assert ei.value.status == "EBADREQ"
            with pytest.raises(NoSuchLedgerError, match="ledger 424242"):
                await bk.open_ledger(424242)
            path = bk.paths.ledger(555)
            await bk.zk.create(path, b"BookieMetadataFormatVersion\t3\n\x05garbage", makepath=True)
            with pytest.raises(MalformedMetadataError, match=path):
                await bk.ledgers.read(555)
            seen = [lid async for lid, _, _ in bk.ledgers.scan()]
            assert 555 not in seen and lh.ledger_id in seen and bk.ledgers.malformed == 1
        finally:
            await bk.close()

    asyncio.run(go())
