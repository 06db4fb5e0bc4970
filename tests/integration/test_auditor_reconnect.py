"""Issue 9: the Auditor's incremental index across a *connection* loss (the session survives).

kazoo fires every watch once with ``EventType.NONE`` on SUSPENDED and forgets it; the server drops a
persistent watch with the connection (issue 13's mode, ZooKeeper 3.6+). Both modes of the ledger tree
watcher run every test here (``persistent``: one persistent recursive watch; ``per-ledger``: the
fallback for older servers, a watch per directory and per ledger). A TCP proxy between
the auditor and ZooKeeper is cut and restored; ledgers created and re-ensembled during the outage must
be in the index afterwards, and the bookie they live on must get them marked when it dies. The
consistency check (count + digest of ledger ids vs the tree) must see and heal drift.
"""

from __future__ import annotations

import contextlib

import pytest

from autorecovery import metrics
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings
from autorecovery.testing.tcp_proxy import TcpProxy
from autorecovery.zk.bridge import NodeExistsError, SessionEvent, ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
B = [f"98.98.97.{i}:3181" for i in range(6)]


def closed(ensemble, last=99, WQ=2, AQ=2) -> LedgerMetadata:
    return LedgerMetadata(len(ensemble), WQ, AQ, (Segment(0, tuple(ensemble)),), state=LedgerState.CLOSED,
                          last_entry_id=last, length=4 * (last + 1), password=b"pw")


class NoReads:
    """The auditor's bookie client; these tests run no check that reads entries."""

    async def read_lac(self, bookie, ledger_id):  # pragma: no cover - not called
        raise AssertionError("no entry reads expected")


async def register(zk: ZkClient, bookie: str) -> None:
    with contextlib.suppress(NodeExistsError):  # the cookie exists already
        await zk.create(P.cookie(bookie), b"cookie", makepath=True)
    await zk.create(P.available_bookie(bookie), b"", ephemeral=True)


async def next_event(q, wanted: SessionEvent, timeout_s: float) -> bool:
    import asyncio

    try:
        while True:
            ev = await asyncio.wait_for(q.get(), timeout_s)
            if ev == wanted:
                return True
    except TimeoutError:
        return False


@pytest.fixture
async def direct(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=20000).start()
    await init_cluster(c, P)
    yield c
    await c.stop()


@pytest.fixture
def proxy(zk_server):
    p = TcpProxy((zk_server.host, zk_server.port)).start()
    yield p
    p.close()


@pytest.fixture(params=[True, False], ids=["persistent", "per-ledger"])
def persistent(request) -> bool:
    return request.param


async def test_ledgers_created_and_changed_during_a_connection_loss_are_marked(zk_connect, direct, proxy, persistent):
    chroot = zk_connect[zk_connect.index("/"):]
    for b in B[:5]:
        await register(direct, b)
    store = LedgerStore(direct, P)
    await store.create(1, closed(B[:2]))
    # session timeout well above the outage: the connection drops, the session survives
    zk = await ZkClient(proxy.address + chroot, session_timeout_ms=20000).start()
    reg = metrics.MetricsRegistry()
    a = Auditor(zk, P, AuditorSettings(auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0),
                None, NoReads(), bookie_id="auditor:1", registry=reg)
    a.tree.persistent = persistent
    await a.start()
    assert a.tree.persistent is persistent
    events = zk.session_events()
    try:
        assert a.index.get(1) is not None
        proxy.cut()
        assert await next_event(events, SessionEvent.SUSPENDED, 10)
        # while the auditor is disconnected: a new ledger, and an ensemble change of ledger 1
        await store.create(2, closed([B[0], B[2]]))
        await store.update(1, lambda md: closed([B[0], B[3]]))
        proxy.restore()
        assert await next_event(events, SessionEvent.CONNECTED, 15)
        assert await wait_for(lambda: a.index.get(2) is not None, 10), "ledger created during the outage"
        assert await wait_for(lambda: B[3] in a.index.get(1).all_bookies(), 10), "ensemble changed during the outage"
        # the re-armed watches keep working: a later change is seen without a reconcile
        await store.create(3, closed([B[1], B[4]]))
        assert await wait_for(lambda: a.index.get(3) is not None, 10)
        # and the bookies of those ledgers are audited when they die
        urm = UnderreplicationManager(direct, P)
        await direct.delete(P.available_bookie(B[2]))
        await direct.delete(P.available_bookie(B[3]))
        assert await wait_for(lambda: urm.get_marker(2), 10)
        assert await wait_for(lambda: urm.get_marker(1), 10)
        assert (await urm.get_marker(2)).replicas == [B[2]]
        assert (await urm.get_marker(1)).replicas == [B[3]]
        assert await urm.get_marker(3) is None
        if persistent:
            assert a.tree.rearmed >= 1 and a.tree.resyncs == 1, "the persistent watch was re-added, the tree re-read"
            assert a.tree.watches_held == 2  # the top-level directory 00, and the root's child watch
        else:
            assert a.tree.rearmed >= 2, "the lost watches were counted as re-armed"
        assert a.tree.lost_watches == 0
    finally:
        zk.unsubscribe(events)
        await a.stop()
        await zk.stop()


async def test_consistency_check_finds_and_heals_index_drift(direct, persistent):
    for b in B[:3]:
        await register(direct, b)
    store = LedgerStore(direct, P)
    for lid in (1, 2, 3):
        await store.create(lid, closed(B[:2]))
    await direct.create(P.ledger(4), b"not ledger metadata", makepath=True)  # malformed: counted, not drift
    reg = metrics.MetricsRegistry()
    a = Auditor(direct, P, AuditorSettings(auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0),
                None, NoReads(), bookie_id="auditor:1", registry=reg)
    a.tree.persistent = persistent
    await a.start()
    try:
        rep = await a.run_check("index_consistency")
        assert rep == {"tree": 4, "index": 4, "drift": 0}
        assert reg.get("autorecovery_auditor_index_drift_ledgers").value == 0
        # make the index silently wrong (as a lost watch did): one ledger missing, one extra
        a.index.remove(2)
        a.index.put(99, closed(B[:2]))
        rep = await a.run_check("index_consistency")
        assert rep["drift"] == 2
        assert reg.get("autorecovery_auditor_index_drift_ledgers").value == 2
        assert a.index.get(2) is not None and a.index.get(99) is None, "drift is healed"
        rep = await a.run_check("index_consistency")
        assert rep["drift"] == 0
        assert reg.get("autorecovery_auditor_index_drift_ledgers").value == 0
        assert reg.get("autorecovery_auditor_index_checks_total").value == 3
    finally:
        await a.stop()
