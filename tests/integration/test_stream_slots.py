"""Cluster-wide per-bookie stream caps (issue 12): N workers must not open N × cap streams on one
bookie. Real ZooKeeper, one session per "worker"."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.zk.bridge import ZkClient, wait_for
from autorecovery.zk.paths import Paths
from autorecovery.zk.stream_slots import ClusterStreamSlots

pytestmark = pytest.mark.integration

S, S2, T1, T2 = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181"


async def test_slots_hold_across_workers_all_or_none_and_die_with_the_session(zk_connect):
    zks = [await ZkClient(zk_connect).start() for _ in range(3)]
    try:
        paths = Paths("/ledgers")
        a, b, c = (ClusterStreamSlots(z, paths, 1, 1, f"worker-{n}") for n, z in enumerate(zks))
        held_a = await a.acquire(S, [T1])
        assert await a.holders(S) == {"src-0": "worker-0"} and await a.holders(T1) == {"tgt-0": "worker-0"}
        # another worker wants the same source: it waits (the cap is cluster-wide, not per process)
        waiting = asyncio.ensure_future(b.acquire(S, [T2]))
        assert await wait_for(lambda: b.waits >= 1, 10)
        assert not waiting.done()
        assert await b.holders(T2) == {}  # all or none: it holds no target slot while it waits
        await a.release(held_a)
        held_b = await asyncio.wait_for(waiting, 10)
        assert await b.holders(S) == {"src-0": "worker-1"} and await b.holders(T2) == {"tgt-0": "worker-1"}
        # a worker that dies releases its slots with its session
        waiting_c = asyncio.ensure_future(c.acquire(S2, [T2]))
        assert await wait_for(lambda: c.waits >= 1, 10)
        assert await c.holders(S2) == {}
        await zks[1].stop()  # worker 1's session ends; its ephemeral slots go
        held_c = await asyncio.wait_for(waiting_c, 15)
        assert len(held_c) == 2 and held_b  # b held two slots until its session ended
        await c.release(held_c)
        assert await c.holders(S2) == {} and await c.holders(T2) == {}
    finally:
        for z in zks:
            await z.stop()


async def test_zero_cap_means_unlimited_and_writes_nothing(zk_connect):
    zk = await ZkClient(zk_connect).start()
    try:
        slots = ClusterStreamSlots(zk, Paths("/ledgers"), 0, 0, "w")
        assert await slots.acquire(S, [T1, T2]) == []
        assert await zk.exists("/ledgers/underreplication/streams") is None
    finally:
        await zk.stop()
