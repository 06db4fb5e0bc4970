"""Auto-closing maintenance windows in the Auditor (planned restarts), on a real ZooKeeper with
metadata-only ledgers and fake bookies (registration znodes), as test_auditor_maintenance.py: the
auditor stamps the window when it loads it, notes the bookie down under it, and closes it once the
bookie is back and no marker names it, recording why."""

from __future__ import annotations

import pytest

from autorecovery import metrics
from autorecovery.roles import auditor_holds
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.underreplication import UnderreplicationManager
from test_auditor import closed
from test_auditor_maintenance import A, B, C, P, cluster, start, zk  # noqa: F401 (zk: the fixture)

pytestmark = pytest.mark.integration


async def test_window_closes_by_itself_after_the_bookie_is_back_and_not_before(zk):  # noqa: F811
    fb = await cluster(zk)
    await LedgerStore(zk, P).create(1, closed([A[0], B[0], C[0]], E=3, WQ=2, AQ=2))
    a = await start(zk, metrics.MetricsRegistry(), lost_bookie_recovery_delay=0)
    store = MaintenanceStore(zk, P)
    urm = UnderreplicationManager(zk, P)
    try:
        await store.start("bookie", A[0], ttl_ms=600_000, reason="planned restart", auto_close=True)
        assert await wait_for(lambda: _acked(store, A[0]), 5), "the auditor stamps the window it loaded"
        await fb.kill(B[1])
        await fb.add(B[1])  # membership changes while A0 is up: the window must stay
        assert await wait_for(lambda: B[1] in a._available(), 5)
        w = await store.get("bookie", A[0])
        assert w is not None and w.lost_seen_ms == 0
        await fb.kill(A[0])
        assert await wait_for(lambda: _seen_down(store, A[0]), 5), "the auditor notes the bookie down"
        assert await urm.get_marker(1) is None, "held by the window: no heal"
        await fb.add(A[0])
        assert await wait_for(lambda: _gone(store, A[0]), 10), "closed by itself once back"
        ended = [e for e in await store.ended() if e["target"] == A[0]]
        assert ended and ended[-1]["end_reason"].startswith("auto-closed: bookie registered again")
        assert await urm.get_marker(1) is None
    finally:
        await a.stop()


async def test_window_stays_while_a_marker_names_the_bookie(zk, monkeypatch):  # noqa: F811
    monkeypatch.setattr(auditor_holds, "AUTO_CLOSE_RECHECK_S", 0.3)
    fb = await cluster(zk)
    await LedgerStore(zk, P).create(1, closed([A[0], B[0], C[0]], E=3, WQ=2, AQ=2))
    a = await start(zk, metrics.MetricsRegistry(), lost_bookie_recovery_delay=0)
    store = MaintenanceStore(zk, P)
    urm = UnderreplicationManager(zk, P)
    try:
        await store.start("bookie", A[0], ttl_ms=600_000, reason="planned restart", auto_close=True)
        assert await wait_for(lambda: _acked(store, A[0]), 5)
        await fb.kill(A[0])
        assert await wait_for(lambda: _seen_down(store, A[0]), 5)
        await urm.mark_underreplicated(1, [A[0]])  # e.g. a check found entries missing on it
        await fb.add(A[0])
        assert await wait_for(lambda: a.holds.autoclose_timer is not None, 5), "a re-check is scheduled"
        assert await store.get("bookie", A[0]) is not None, "a marker names it: not whole yet"
        await zk.delete(P.ur_marker(1))  # healed
        assert await wait_for(lambda: _gone(store, A[0]), 10), "closed on the re-check once healed"
    finally:
        await a.stop()


async def _acked(store, b):
    w = await store.get("bookie", b)
    return w is not None and w.acked_ms > 0


async def _seen_down(store, b):
    w = await store.get("bookie", b)
    return w is not None and w.lost_seen_ms > 0


async def _gone(store, b):
    return await store.get("bookie", b) is None
