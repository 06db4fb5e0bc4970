"""lostBookieRecoveryDelay counts only lost bookies that still hold ledgers (issue 25), against a real
ZooKeeper and real bookie processes (LocalCluster).

Bookie A dies and is healed (``recover``: no ledger's ensemble lists it any more) but is never
decommissioned, so its cookie stays and it stays down. A new auditor starts (upstream's ``knownBookies``
= every cookie, so A counts as lost); bookie B is then lost. Upstream, and this implementation before,
took A and B for a "multiple bookie failure" and marked B's ledgers at once; now B's ledgers are marked
only after lostBookieRecoveryDelay.
"""

from __future__ import annotations

import time

import pytest

from autorecovery import metrics
from autorecovery.admin import ops
from autorecovery.admin.recover import recover_bookies
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.config.load import load_settings
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
DELAY_S = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), bookies=4).up()
    yield c
    c.down()


async def write_ledger(cluster, n=20) -> tuple[int, tuple[str, ...]]:
    bk = await BookKeeper.connect(cluster.zk_connect, P.root)
    try:
        lh = await bk.create_ledger(3, 2, 2)
        for i in range(n):
            await lh.add_entry(b"e%03d" % i)
        await lh.close()
        return lh.ledger_id, lh.metadata.segments[0].ensemble
    finally:
        await bk.close()


def index_of(cluster, bookie_id: str) -> int:
    return next(i for i in cluster.bookies if cluster.bookie_id(i) == bookie_id)


async def test_a_healed_lost_bookie_does_not_skip_the_delay_of_the_next_loss(cluster):
    zk = await ZkClient(cluster.zk_connect, session_timeout_ms=6000).start()
    urm = UnderreplicationManager(zk, P)
    store = LedgerStore(zk, P)
    bookies = BookieClient(timeout_s=5)
    a = None
    killed: list[int] = []
    try:
        # A: holds a ledger, dies, and is healed by recover (its cookie stays: never decommissioned)
        l1, ens1 = await write_ledger(cluster)
        a_id = ens1[0]
        cluster.kill_bookie(index_of(cluster, a_id))
        killed.append(index_of(cluster, a_id))
        assert await wait_for(lambda: _unregistered(zk, a_id), 30)
        settings = load_settings(None, env={}, overrides={"zkServers": cluster.zk_connect})
        async with ops.open_admin(settings) as ctx:
            report = await recover_bookies(ctx, [a_id], force=True)
        assert not report.failed and a_id in report.sources
        md, _version = await store.read(l1)
        assert all(a_id not in seg.ensemble for seg in md.segments)  # healed: no ensemble lists A
        assert await zk.exists(f"{P.cookies}/{a_id}")  # ... but never decommissioned
        await urm.set_lost_bookie_recovery_delay(DELAY_S)

        # B holds a ledger written after A was lost
        l2, ens2 = await write_ledger(cluster)
        assert a_id not in ens2
        b_id = ens2[0]

        # a new auditor starts with A down; the index lists no ledger on A
        a = Auditor(zk, P, AuditorSettings(auditor_periodic_check_interval=0,
                                           auditor_periodic_bookie_check_interval=86400),
                    None, bookies, bookie_id="auditor:1", registry=metrics.MetricsRegistry())
        await a.start()
        assert not a.index.in_some_ensemble(a_id) and a.index.in_some_ensemble(b_id)
        assert a.tracker is not None and not a.tracker.pending  # nothing to audit for A: no delayed audit

        # B is lost: one loss holding ledgers, so its audit waits lostBookieRecoveryDelay
        cluster.kill_bookie(index_of(cluster, b_id))
        killed.append(index_of(cluster, b_id))
        t_lost = time.monotonic()

        async def decided() -> bool:  # the auditor took its decision on B's loss: delayed, or audited
            return (a.tracker.pending and b_id in a.tracker.to_audit) or await urm.get_marker(l2) is not None

        assert await wait_for(decided, 30)
        t_decided = time.monotonic()
        assert await urm.get_marker(l2) is None, "B's ledger was marked at once: A counted as a second lost bookie"
        assert a.tracker.pending and a.tracker.to_audit == {b_id}
        pending_at = a.tracker.pending_at
        # still unmarked until the delay is nearly over
        assert not await wait_for(lambda: urm.get_marker(l2), DELAY_S - 1.5), "marked before lostBookieRecoveryDelay"
        assert await wait_for(lambda: urm.get_marker(l2), DELAY_S + 20)
        t_marked = time.monotonic()
        assert t_marked - t_decided >= DELAY_S - 0.5, (t_lost, t_decided, t_marked)
        assert pending_at is not None and a.clock() >= pending_at
        assert (await urm.get_marker(l2)).replicas == [b_id]
    finally:
        if a is not None:
            await a.stop()
        await urm.set_lost_bookie_recovery_delay(0)
        await bookies.close()
        await zk.stop()
        for i in killed:
            cluster.start_bookie(i)


async def _unregistered(zk: ZkClient, bookie_id: str) -> bool:
    return bookie_id not in await zk.get_children(P.available) if await zk.exists(P.available) else True
