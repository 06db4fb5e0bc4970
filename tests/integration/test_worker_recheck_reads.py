"""The re-check after a pass's own copy does not read the new members again (issue 29: per-ledger cost).

A complete copy is acknowledged entry by entry by its target after the entry's digest was verified,
and swapped in by a versioned CAS; the re-check (upstream: ``getUnderreplicatedFragments`` after
``replicateLedgerFragment``) still reads every other member, and the copy's data is read back here
from the new member itself.
"""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.roles.worker import WorkerSettings
from autorecovery.zk.bridge import wait_for
from autorecovery.zk.ledgers import LedgerStore

from test_worker_support import FAST, entries_on, open_env, read_all_from, wait_marker_gone

pytestmark = pytest.mark.integration


async def test_recheck_reads_only_the_members_the_pass_did_not_write(cluster_factory):
    """8 ledgers of 3 entries E2/WQ2 on [b0, b1], b1 stopped, all marked; one worker heals them to b2.
    Check: b0's share (first and last entry: 2 reads); re-check: b0 again (2 reads), not b2. Asserts
    exactly 4 checker reads per ledger, no read sent to b2 by the checker, and every entry on b2."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        n = 8
        ids = [(await env.write(b[:2], 2, 2, 2, 3, size=64, full=True)).ledger_id for _ in range(n)]
        await env.stop_bookie(b[1])
        w = await env.start_worker(WorkerSettings(**{**FAST, "concurrent_ledgers": 1}))
        assert await wait_for(lambda: not w._busy, 10)
        to_b2: list[int] = []
        read_status = w.checker._read_status

        async def counted(bookie, ledger_id, entry_id, digest):
            if bookie == b[2]:
                to_b2.append(ledger_id)
            return await read_status(bookie, ledger_id, entry_id, digest)

        w.checker._read_status = counted
        reads0 = w.checker.reads
        await env.um.mark_many({lid: [b[1]] for lid in ids})
        for lid in ids:
            await wait_marker_gone(env, lid)
        store = LedgerStore(env.zk, env.paths)
        for lid in ids:
            md, _ = await store.read(lid)
            assert md.segments[0].ensemble == (b[0], b[2])
            assert await entries_on(env, b[2], lid) == [0, 1, 2]
            await read_all_from(env, lid, 3, size=64)
        assert to_b2 == [], f"the checker read the new member for ledgers {to_b2}"
        assert w.checker.reads - reads0 == 4 * n
    finally:
        await env.close()
