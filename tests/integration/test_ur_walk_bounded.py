"""The marker-tree walk keeps few requests outstanding per session, on a real ZooKeeper.

Daemons that (re)start together with a backlog queued each walk the marker tree to build their index.
Each marker has its own fourth-level directory (upstream's layout), so a walk that lists directories one
request each, all at once, cost about one request per marker and put hundreds in flight per session
(20 daemons with 500 markers: 2,804 outstanding). The walk lists them in ``multiRead`` batches with a
window of ``WALK_IN_FLIGHT`` requests per session.
"""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.zk.ur import formats as ur_formats
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration

P = Paths("/ledgers")


async def test_restart_walk_of_a_backlog_is_bounded_per_session_and_batched(zk_connect):
    admin = await ZkClient(zk_connect, session_timeout_ms=8000).start()
    fresh: list[ZkClient] = []
    managers: list[UnderreplicationManager] = []
    try:
        urm = UnderreplicationManager(admin, P)
        await urm.init()
        k = 1500  # ids spread over two third-level directories (65,536 ids each)
        ids = set(range(1, 1001)) | set(range(70_000, 70_500))
        assert len(ids) == k
        await urm.mark_many({lid: ["10.0.0.1:3181"] for lid in ids})
        fresh = [await ZkClient(zk_connect, session_timeout_ms=8000).start() for _ in range(4)]
        managers = [UnderreplicationManager(c, P, lock_owner=f"d{i}") for i, c in enumerate(fresh)]
        for c in fresh:
            c.reset_peak()
        before = [c.ops for c in fresh]
        built = await asyncio.gather(*(m._index.ensure() for m in managers))
        assert built == [True] * 4
        for m in managers:
            assert m._index.marked == ids
        for c, b in zip(fresh, before, strict=True):
            # addWatch, 4 levels (root, 0000, 0000/0000 and the two third-level dirs in one batch), then
            # 1,500 leaf directories in two multiReads: 6 or 7 requests, not ~1,500
            assert c.ops - b <= 8, f"walk of {k} markers took {c.ops - b} requests"
            assert c.peak_outstanding <= ur_formats.WALK_IN_FLIGHT
        # the listing for admin tools reads the markers in batches too, same answer
        listed = [m.ledger_id async for m in managers[0].list_underreplicated()]
        assert sorted(listed) == sorted(ids) and fresh[0].peak_outstanding <= ur_formats.WALK_IN_FLIGHT
        assert await managers[1].list_marked_ids() == ids
    finally:
        for m in managers:
            await m.close()
        for c in fresh:
            await c.stop()
        await admin.stop()


async def test_walk_without_multiread_keeps_its_own_window(zk_connect):
    """Before ZooKeeper 3.6 (no multiRead) the walk lists one directory per request, still a bounded
    window (the fallback is taken when the server refuses; here it is forced)."""
    admin = await ZkClient(zk_connect, session_timeout_ms=8000).start()
    c = await ZkClient(zk_connect, session_timeout_ms=8000).start()
    try:
        urm = UnderreplicationManager(admin, P)
        await urm.init()
        await urm.mark_many({lid: ["10.0.0.1:3181"] for lid in range(1, 201)})
        m = UnderreplicationManager(c, P)
        m._multi_read_children = False
        c.reset_peak()
        assert await m.list_marked_ids() == set(range(1, 201))
        assert 0 < c.peak_outstanding <= ur_formats.WALK_IN_FLIGHT_SINGLE
        await m.close()
    finally:
        await c.stop()
        await admin.stop()


async def test_rebuild_after_a_session_event_is_jittered_and_first_build_is_not(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=8000).start()
    try:
        m = UnderreplicationManager(c, P)
        await m.init()
        idx = m._index
        idx.rebuild_jitter_s = 0.6
        drawn: list[tuple[float, float]] = []

        def top_of_range(a: float, b: float) -> float:  # the largest delay the jitter may draw
            drawn.append((a, b))
            return b

        idx._rng.uniform = top_of_range  # type: ignore[method-assign]
        loop = asyncio.get_running_loop()
        assert await idx.ensure()
        assert drawn == []  # the first build walks at once
        idx.invalidate()
        t = loop.time()
        assert await idx.ensure()
        assert drawn == [(0, 0.6)] and loop.time() - t >= 0.6 and idx.syncs == 2
        await m.close()
    finally:
        await c.stop()
