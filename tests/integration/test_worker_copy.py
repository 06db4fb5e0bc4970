"""Copy-path behaviour of the ReplicationWorker on real bookies: a corrupt source copy is never written
(the next replica serves it) whatever the ledger's digest type, and a lost bookie that comes back
cancels the copy (#2766), before it starts and in the middle of it."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.ledger.digest import ledger_digest, master_key
from autorecovery.config.sections import WorkerSettings
from autorecovery.testing.bookie_tamper import flip_entry_bytes
from autorecovery.aio import wait_for

from test_worker_support import FAST, entries_on, index_of, open_env, read_all_from, wait_marker_gone

pytestmark = pytest.mark.integration


def corrupt(cluster, bookie_id: str, ledger_id: int, entry_ids: list[int]) -> int:
    """Flip four payload bytes of the given entries in the bookie's store (length unchanged)."""
    data_dir = cluster.bookies[index_of(cluster, bookie_id)].data_dir
    return flip_entry_bytes(data_dir, ledger_id, entry_ids, at=40, count=4)


@pytest.mark.parametrize("digest", ["CRC32C", "CRC32", "MAC"])
@pytest.mark.parametrize("pull", [True, False], ids=["target-pulls", "through-worker"])
async def test_corrupt_source_entry_is_never_copied(cluster_factory, pull, digest):
    """Both copy paths: the new bookie pulls from the source itself (PullEntries, reports the corrupt
    copies as DIGEST and the worker fetches them from the other replica), or, started with
    ``--no-pull-entries``, the worker copies through itself. Each digest type is verified as upstream
    packs it; an HMAC ledger is never pulled (a bookie cannot verify it without the password)."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        lh = await env.write(b, 3, 3, 2, 10, full=True, digest=digest)
        dg = ledger_digest(lh.metadata)
        assert dg.name == ("HMAC" if digest == "MAC" else digest) and lh.master_key == master_key(lh.metadata.password)
        # entries 3, 4, 5 (one of each residue) are corrupt on b1; b1's first and last entries are fine,
        # so the checker does not flag b1 and it is used as a source for at least one residue
        assert corrupt(cluster, b[1], lh.ledger_id, [3, 4, 5]) == 3
        new = await env.start_bookie(3, None if pull else ["--no-pull-entries"])
        await env.stop_bookie(b[0])
        await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        w = await env.start_worker()
        await wait_marker_gone(env, lh.ledger_id)
        assert await entries_on(env, new, lh.ledger_id) == list(range(10))
        assert (w.copier.pulls > 0) == (pull and digest != "MAC")
        for e in range(10):  # every copy on the target verifies
            r = await env.bk.bookies.read_entry(new, lh.ledger_id, e)
            dg.verify(r.body, lh.ledger_id, e, source=new)
        assert w.m.entries_written.value == 10
        # the plan spread the three residues over b1 and b2, so b1's corrupt copies were met and refused
        assert w.m.corrupt_source_entries.value >= 1
        await env.stop_bookie(b[1])
        await env.stop_bookie(b[2])
        await read_all_from(env, lh.ledger_id, 10)  # the new bookie alone serves every entry
    finally:
        await env.close()


@pytest.mark.parametrize("pull", [True, False], ids=["target-pulls", "through-worker"])
async def test_dummy_digest_ledger_is_copied(cluster_factory, pull):
    """DUMMY entries carry no digest (a 32-byte header, then the payload): copied either way."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        lh = await env.write(b, 3, 3, 2, 10, full=True, digest="DUMMY")
        new = await env.start_bookie(3, None if pull else ["--no-pull-entries"])
        await env.stop_bookie(b[0])
        await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        w = await env.start_worker()
        await wait_marker_gone(env, lh.ledger_id)
        assert await entries_on(env, new, lh.ledger_id) == list(range(10))
        assert (w.copier.pulls > 0) == pull
        r = await env.bk.bookies.read_entry(new, lh.ledger_id, 9)
        assert len(r.body) == 32 + 100
        await env.stop_bookie(b[1])
        await env.stop_bookie(b[2])
        await read_all_from(env, lh.ledger_id, 10)  # the new bookie alone serves every entry
    finally:
        await env.close()


async def test_bookie_back_before_copy_clears_marker_without_copying(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=4)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        lh = await env.write(b[:3], 3, 3, 2, 10, full=True)
        await env.stop_bookie(b[0])
        await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        await env.start_bookie(0)
        w = await env.start_worker()
        await wait_marker_gone(env, lh.ledger_id)
        assert w.m.entries_written.value == 0
        md, _ = await env.bk.ledgers.read(lh.ledger_id)
        assert md.segments[0].ensemble == tuple(b[:3])
    finally:
        await env.close()


async def test_bookie_back_mid_copy_aborts_the_copy(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        lh = await env.write([b[0], b[1]], 2, 2, 2, 128, size=32 * 1024, full=True)
        await env.stop_bookie(b[0])
        await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        # 4 MiB at 1 MiB/s: the copy runs for ~4 s
        w = await env.start_worker(WorkerSettings(**{**FAST, "rate_bytes_per_s": 1024 * 1024}))
        assert await wait_for(lambda: w.tracker.bytes_copied > 0, 20)
        await env.start_bookie(0)
        await wait_marker_gone(env, lh.ledger_id)
        assert w.m.copies_cancelled.value >= 1
        assert w.tracker.bytes_copied < 128 * 32 * 1024  # stopped early
        md, _ = await env.bk.ledgers.read(lh.ledger_id)
        assert md.segments[0].ensemble == (b[0], b[1])  # b0 kept its place: nothing was swapped
        await read_all_from(env, lh.ledger_id, 128, size=32 * 1024)
    finally:
        await env.close()


async def test_stop_mid_copy_changes_nothing_and_releases_locks(cluster_factory):
    """stop() while a (throttled) copy runs: the copy is aborted after the drain timeout, the metadata
    is untouched (no CAS happened), the lock znode is gone, the marker stays; stop() is idempotent."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        lh = await env.write([b[0], b[1]], 2, 2, 2, 128, size=32 * 1024, full=True)
        await env.stop_bookie(b[0])
        await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        w = await env.start_worker(WorkerSettings(**{**FAST, "rate_bytes_per_s": 1024 * 1024}))
        assert await wait_for(lambda: w.tracker.bytes_copied > 0, 20)
        assert await env.um.lock_holder(lh.ledger_id) == "worker-0"
        await asyncio.wait_for(w.stop(drain_timeout_s=0.2), 15)
        await asyncio.wait_for(w.stop(), 5)
        assert not w.running
        assert await env.um.lock_holder(lh.ledger_id) is None
        assert await env.um.get_marker(lh.ledger_id) is not None
        md, _ = await env.bk.ledgers.read(lh.ledger_id)
        assert md.segments[0].ensemble == (b[0], b[1])
        assert w.m.replicated.value == 0
    finally:
        await env.close()
