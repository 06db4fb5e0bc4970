"""The re-check after a pass's own copy reads the new members back, and not what the pass's check read
moments before (issue 29: per-ledger cost).

A member the pass's check read without a failure less than ``RECHECK_TRUST_S`` ago is taken as good
(a member lost since is no longer registered, which the re-check still judges). The new members are
read back as upstream's re-check (``getUnderreplicatedFragments`` after ``replicateLedgerFragment``)
reads them: an acknowledgement is not a read (the stock hour lost entries that a full stock bookie had
acknowledged and then served as EIO, because the re-check trusted the copy). The copy's data is read
back here from the new member itself.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from autorecovery.roles import pass_steps
from autorecovery.config.sections import WorkerSettings
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore

from test_worker_support import FAST, entries_on, open_env, read_all_from, wait_marker_gone

pytestmark = pytest.mark.integration


N = 8  # ledgers healed per test


async def _heal(env, entries: int):
    """``N`` ledgers of ``entries`` entries (E2/WQ2 on [b0, b1]), b1 stopped, one worker (one slot)
    started with its checker's reads and its bookie listings recorded, every ledger marked and healed
    to b2, each read back from its new ensemble. Returns ``(bookies, worker, ledger ids, bookie of
    every checker read, bookie of every listing asked)``."""
    b = env.cluster.bookie_ids()
    ids = [(await env.write(b[:2], 2, 2, 2, entries, size=64, full=True)).ledger_id for _ in range(N)]
    await env.stop_bookie(b[1])
    w = await env.start_worker(WorkerSettings(**{**FAST, "concurrent_ledgers": 1}))
    assert await wait_for(lambda: not w._busy, 10)
    reads: list[str] = []
    listed: list[str] = []
    read_status, list_entries = w.checker._read_status, w.bookies.get_list_of_entries

    async def counted(bookie, ledger_id, entry_id, digest):
        reads.append(bookie)
        return await read_status(bookie, ledger_id, entry_id, digest)

    async def counted_listing(bookie, ledger_id, *args, **kwargs):
        listed.append(bookie)
        return await list_entries(bookie, ledger_id, *args, **kwargs)

    w.checker._read_status = counted
    w.bookies.get_list_of_entries = counted_listing
    await env.um.mark_many({lid: [b[1]] for lid in ids})
    for lid in ids:
        await wait_marker_gone(env, lid)
    store = LedgerStore(env.zk, env.paths)
    for lid in ids:
        md, _ = await store.read(lid)
        assert md.segments[0].ensemble == (b[0], b[2])
        assert await entries_on(env, b[2], lid) == list(range(entries))
        await read_all_from(env, lid, entries, size=64)
    return b, w, ids, reads, listed


@pytest.mark.parametrize("trust_s,reads", [(pass_steps.RECHECK_TRUST_S, 2), (0.0, 4)], ids=["trusted", "expired"])
async def test_recheck_reads_only_what_the_pass_did_not_just_verify(cluster_factory, monkeypatch, trust_s, reads):
    """8 ledgers of 3 entries E2/WQ2 on [b0, b1], b1 stopped, all marked; one worker heals them to b2.
    Check: b0's share (first and last entry: 2 reads); re-check: the new member b2 read back (first
    and last: 2 reads), b0 not again (read moments ago), or b0 again (2 reads) once the trust window
    is 0. Asserts exactly ``reads`` checker reads of b0 and 2 of b2 per ledger, and every entry on b2."""
    monkeypatch.setattr(pass_steps, "RECHECK_TRUST_S", trust_s)
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b, _w, _ids, got, _listed = await _heal(env, 3)
        assert Counter(got) == {b[0]: reads * N, b[2]: 2 * N}
    finally:
        await env.close()


async def test_one_entry_ledger_heals_with_one_read_per_member(cluster_factory):
    """8 ledgers of one entry E2/WQ2 on [b0, b1], b1 stopped, all marked; one worker heals them to b2.
    The last fragment has one entry, so the check probes it first (upstream ``EntryExistsCallback``):
    the stopped b1 would answer an error ("may exist"), so the probe sends nothing; the fragment check
    reads b0 once; the re-check finds b0 read moments ago (so its probe sends nothing) and reads the
    new member b2 back once. Asserts exactly one checker read of b0 and one of b2 per ledger
    (upstream: probe 2, check 1, re-check probe 2 and check 2), none to b1, no listing asked (the check
    read b0's whole share), and the entry on b2; then, with every member up, a check of a one-entry ledger reads each member once (the
    probe's reads stand for the fragment's)."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b, w, ids, got, listed = await _heal(env, 1)
        assert got == [b[0], b[2]] * N
        assert listed == []
        got.clear()
        md, _ = await LedgerStore(env.zk, env.paths).read(ids[0])
        assert await w.checker.check(ids[0], md) == []
        assert sorted(got) == [b[0], b[2]]
    finally:
        await env.close()


async def test_new_member_that_does_not_read_back_is_not_taken_as_healed(cluster_factory):
    """A target that acknowledges every entry of the copy and then serves EIO for them (a stock 4.17
    bookie after its ledger disk filled mid-flush: its entry logger publishes stale locations) must not
    end the heal. 4 ledgers of 3 entries E2/WQ2 on [b0, b1], b1 stopped, all marked, one worker; the
    first bookie the worker copies to is made to answer EIO to every checker read. Asserts every
    ledger ends on b0 and the other spare (never the poisoned one), its entries read back from there,
    and the poisoned bookie excluded as a target. The re-check that took the copy's acknowledgements
    as proof left the ledgers on the poisoned bookie."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=4)
    env = await open_env(cluster)
    try:
        b = env.cluster.bookie_ids()
        ids = [(await env.write(b[:2], 2, 2, 2, 3, size=64, full=True)).ledger_id for _ in range(4)]
        await env.stop_bookie(b[1])
        w = await env.start_worker(WorkerSettings(**{**FAST, "concurrent_ledgers": 1}))
        assert await wait_for(lambda: not w._busy, 10)
        poisoned: list[str] = []
        replicate, read_status = w.replicator.replicate, w.checker._read_status

        async def first_target_recorded(*args, **kwargs):
            r = await replicate(*args, **kwargs)
            if not poisoned and r.replaced:
                poisoned.extend(r.replaced.values())
            return r

        async def poisoned_reads_fail(bookie, ledger_id, entry_id, digest):
            return "EIO" if bookie in poisoned else await read_status(bookie, ledger_id, entry_id, digest)

        w.replicator.replicate = first_target_recorded
        w.checker._read_status = poisoned_reads_fail
        await env.um.mark_many({lid: [b[1]] for lid in ids})
        for lid in ids:
            await wait_marker_gone(env, lid)
        assert len(poisoned) == 1 and poisoned[0] in b[2:]
        spare = next(x for x in b[2:] if x not in poisoned)
        store = LedgerStore(env.zk, env.paths)
        for lid in ids:
            md, _ = await store.read(lid)
            assert md.segments[0].ensemble == (b[0], spare), (lid, md.segments[0].ensemble, poisoned)
            assert await entries_on(env, spare, lid) == [0, 1, 2]
        assert poisoned[0] in w.steps.bad_targets
    finally:
        await env.close()
