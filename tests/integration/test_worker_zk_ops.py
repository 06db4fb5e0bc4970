"""ZooKeeper operations per healed ledger (issue 29 item 3: cut the per-ledger cost).

Counts every request the worker's own ZooKeeper client sends (``ZkClient.ops``: a ``multi`` counts as
one) from the moment the markers appear until every marked ledger is healed, for many small ledgers.
The figure includes the backlog's refresh walks and the watch-driven re-reads of the marker and lock
listings, i.e. everything the worker pays per ledger.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from autorecovery.config.sections import WorkerSettings
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore

from test_worker_support import FAST, open_env

pytestmark = pytest.mark.integration

#: Upper bound of ZooKeeper operations per healed ledger. Measured here (2 shared cores): 23.0 before
#: issue 29 item 3 (lock = exists + create, marker/leaf/lock deletes one by one, an ``exists`` of
#: ``disable`` per lock, slots taken and given back one znode at a time after a read each), 13.9-14.8
#: after (one multi each for lock, slots taken, slots released, marker + leaf + lock deleted; the
#: ``disable`` answer kept under its watch), 10.0 once the marker and lock listings came from persistent
#: watches (no re-listing per pick) and the backlog read new markers and metadata by multiRead; 6.2 with
#: the changes below (the bound is kept loose for loaded machines).
MAX_OPS_PER_LEDGER = float(os.environ.get("AR_MAX_ZK_OPS_PER_LEDGER", "13"))


#: The same with four slots: ledgers are locked in batches (one per waiting slot). Measured here (2
#: shared cores, 27 Nov, one run each): 10.8 (one slot) and 10.3 (four) at main 05ca2a2; 6.2 and 4.8
#: once small copies took no cluster-wide stream slots, the CAS and a closed ledger's re-check reused
#: the pass's metadata, and locks were taken in batches; 5.2 and 4.7 once the copy reused the check's
#: listings and the side-znode listing its watch; 4.2 and 3.3-3.7 once the lock read the metadata with
#: the marker (one ``multiRead``) and the pass used that read.
MAX_OPS_PER_LEDGER_BATCHED = float(os.environ.get("AR_MAX_ZK_OPS_PER_LEDGER_BATCHED", "7"))


@pytest.mark.parametrize("slots,bound", [(1, MAX_OPS_PER_LEDGER), (4, MAX_OPS_PER_LEDGER_BATCHED)],
                         ids=["one-slot", "four-slots"])
async def test_zookeeper_operations_per_healed_ledger(cluster_factory, slots, bound):
    """24 ledgers of 3 small entries on [b0, b1] (E2 WQ2 AQ2), b1 stopped, all marked at once; one
    worker heals them to b2/b3. Asserts every marker is gone, every lock released, and at most
    ``bound`` operations per ledger."""
    cluster = await asyncio.to_thread(cluster_factory, bookies=4)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        n = 24
        ids = [(await env.write(b[:2], 2, 2, 2, 3, size=64, full=True)).ledger_id for _ in range(n)]
        await env.stop_bookie(b[1])
        w = await env.start_worker(WorkerSettings(**{**FAST, "concurrent_ledgers": slots}))
        assert await wait_for(lambda: not w._busy, 10)
        ops0 = w.zk.ops
        await env.um.mark_many({lid: [b[1]] for lid in ids})

        async def healed() -> bool:
            return all(await asyncio.gather(*(_gone(env, lid) for lid in ids)))

        assert await wait_for(healed, 120, interval_s=0.1), w.history[-30:]
        assert await wait_for(lambda: not w.um.held, 10)
        ops = w.zk.ops - ops0
        per = ops / n
        print(f"zookeeper operations: {ops} for {n} ledgers = {per:.1f} per ledger")
        assert per <= bound, f"{per:.1f} ZooKeeper operations per healed ledger"
        assert await env.zk.get_children(env.paths.ur_locks) == []
        store = LedgerStore(env.zk, env.paths)
        for lid in ids:
            md, _ = await store.read(lid)
            assert b[1] not in md.segments[0].ensemble
    finally:
        await env.close()


async def _gone(env, lid: int) -> bool:
    return await env.um.get_marker(lid) is None
