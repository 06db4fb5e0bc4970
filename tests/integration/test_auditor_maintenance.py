"""Issue 16: maintenance windows and the rack-loss guard in the Auditor, on a real ZooKeeper with
metadata-only ledgers and fake bookies (registration znodes), as tests/integration/test_auditor.py."""

from __future__ import annotations

import time

import pytest

from autorecovery import metrics
from autorecovery.placement import PlacementConfig, RackawarePolicy
from autorecovery.placement.resolvers import StaticResolver
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.maintenance import MaintenanceStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager
from test_auditor import FakeBookies, closed

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
A = ["10.1.0.1:3181", "10.1.0.2:3181"]   # rack /r1
B = ["10.2.0.1:3181", "10.2.0.2:3181"]   # rack /r2
C = ["10.3.0.1:3181"]                    # rack /r3


def policy():
    racks = {b.split(":")[0]: "/r1" for b in A} | {b.split(":")[0]: "/r2" for b in B} | {C[0].split(":")[0]: "/r3"}
    p = RackawarePolicy(PlacementConfig.from_properties({}), StaticResolver(racks))
    p.on_cluster_changed(set(A + B + C), set())
    return p


@pytest.fixture
async def zk(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=6000).start()
    await init_cluster(c, P)
    yield c
    await c.stop()


async def start(zk, reg=None, **kw) -> Auditor:
    st = AuditorSettings(auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0, **kw)
    a = Auditor(zk, P, st, policy(), FakeBookies(zk), bookie_id="auditor:1", registry=reg or metrics.MetricsRegistry())
    await a.start()
    return a


async def cluster(zk):
    fb = FakeBookies(zk)
    for b in A + B + C:
        await fb.add(b)
    return fb


async def test_window_holds_a_lost_bookie_until_it_expires_then_the_delay_applies(zk):
    fb = await cluster(zk)
    await LedgerStore(zk, P).create(1, closed([A[0], B[0], C[0]], E=3, WQ=3))
    reg = metrics.MetricsRegistry()
    a = await start(zk, reg, lost_bookie_recovery_delay=0)
    urm = UnderreplicationManager(zk, P)
    store = MaintenanceStore(zk, P)
    try:
        await store.start("bookie", A[0], ttl_ms=3000, reason="kernel upgrade")
        assert await wait_for(lambda: len(a.windows) == 1, 5)
        await fb.kill(A[0])
        assert await wait_for(lambda: a.last_audit is not None and a.last_audit.lost == [A[0]], 5), a.last_audit
        assert await urm.get_marker(1) is None, "held by the window"
        assert reg.get("autorecovery_maintenance_held_bookies").value == 1
        st = await store.read_state()
        assert st["windows"][A[0]]["reason"] == "kernel upgrade"
        t0 = time.monotonic()
        assert await wait_for(lambda: urm.get_marker(1), 10), "marked once the window expired"
        assert time.monotonic() - t0 > 1.0
        assert (await urm.get_marker(1)).replicas == [A[0]]
        assert await store.list() == [], "the auditor deleted the expired record"
        assert reg.get("autorecovery_maintenance_held_bookies").value == 0
    finally:
        await a.stop()


async def test_a_second_failure_below_aq_overrides_the_window_at_once(zk):
    fb = await cluster(zk)
    store = LedgerStore(zk, P)
    await store.create(1, closed([A[0], B[0], C[0]], E=3, WQ=3, AQ=2))  # A0 + B0 lost: 1 copy < AQ
    await store.create(2, closed([A[0], B[1], C[0]], E=3, WQ=3, AQ=2))  # A0 lost only: 2 copies, held
    reg = metrics.MetricsRegistry()
    a = await start(zk, reg, lost_bookie_recovery_delay=0)
    urm = UnderreplicationManager(zk, P)
    try:
        await MaintenanceStore(zk, P).start("rack", "/r1", ttl_ms=3_600_000, reason="rack drill")
        assert await wait_for(lambda: len(a.windows) == 1, 5)
        await fb.kill(A[0])
        assert await wait_for(lambda: a.audits >= 1, 5)
        assert await urm.get_marker(1) is None and await urm.get_marker(2) is None
        await fb.kill(B[0])  # unplanned
        assert await wait_for(lambda: urm.get_marker(1), 5), "data first"
        assert sorted((await urm.get_marker(1)).replicas) == sorted([A[0], B[0]])
        assert await urm.get_marker(2) is None, "still held: two copies left"
        assert reg.get("autorecovery_maintenance_overridden_ledgers_total").value == 1
    finally:
        await a.stop()


async def test_rack_loss_guard_waits_keeps_data_first_and_yields_to_an_override(zk):
    fb = await cluster(zk)
    store = LedgerStore(zk, P)
    await store.create(1, closed([A[0], B[0], C[0]], E=3, WQ=3, AQ=2))  # one copy lost: held
    await store.create(2, closed([A[0], A[1], B[0]], E=3, WQ=3, AQ=2))  # two lost: below AQ -> marked
    reg = metrics.MetricsRegistry()
    # a delay, as in production: the rack's bookies go one by one, the audit sees the rack lost whole
    a = await start(zk, reg, lost_bookie_recovery_delay=2, autorecovery_down_out_subtree_limit="rack")
    urm = UnderreplicationManager(zk, P)
    ms = MaintenanceStore(zk, P)
    try:
        await fb.kill(A[0])
        await fb.kill(A[1])
        assert await wait_for(lambda: urm.get_marker(2), 5), "data first"
        assert await wait_for(lambda: reg.get("autorecovery_rack_loss_guard_domains").value == 1, 5)
        assert await urm.get_marker(1) is None, "the rack lost as a whole is waiting"
        assert (await ms.read_state())["guard"] == {"/r1": sorted(A)}
        await ms.start("override", "/r1", ttl_ms=600_000, reason="rack is gone for good")
        assert await wait_for(lambda: urm.get_marker(1), 5), "the operator's override audits now"
        assert (await urm.get_marker(1)).replicas == [A[0]]
        assert await wait_for(lambda: reg.get("autorecovery_rack_loss_guard_domains").value == 0, 5)
    finally:
        await a.stop()
