"""Auditor on a real ZooKeeper with metadata-only ledgers on fake bookies (as upstream's
AuditorLedgerCheckerTest / AuditorPlacementPolicyCheckTest / AuditorPeriodicCheckTest do).

Fake bookies are ephemeral ``available/<id>`` znodes (plus cookies); "killing" one deletes its znode.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import pytest

from autorecovery import metrics
from autorecovery.errors import NoSuchLedgerError, ZooKeeperError
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings
from autorecovery.rpc.convert import encode_service_info
from autorecovery.zk.bridge import NoNodeError, NodeExistsError, ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.election import AuditorElector, elector_loop
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
B = [f"98.98.98.{i}:3181" for i in range(6)]


@pytest.fixture
def chroot(zk_connect):
    """A fresh chroot on the session ZooKeeper (tests/conftest.py)."""
    return zk_connect


@pytest.fixture
async def zk(chroot):
    c = await ZkClient(chroot, session_timeout_ms=4000).start()
    await init_cluster(c, P)
    yield c
    await c.stop()


def info(bookie: str) -> bytes:
    """Registration data advertising our gRPC endpoint, as the reference bookie writes it."""
    host, port = bookie.rsplit(":", 1)
    return encode_service_info(host, int(port))


class FakeBookies:
    """Registers fake bookie ids in ZooKeeper; answers reads as if every bookie held everything."""

    def __init__(self, zk: ZkClient) -> None:
        self.zk = zk

    async def add(self, bookie: str, readonly: bool = False) -> None:
        with contextlib.suppress(NodeExistsError):  # a bookie coming back keeps its cookie
            await self.zk.create(P.cookie(bookie), b"cookie", makepath=True)
        await self.zk.create(P.readonly_bookie(bookie) if readonly else P.available_bookie(bookie), info(bookie),
                             ephemeral=True)

    async def kill(self, bookie: str) -> None:
        for p in (P.available_bookie(bookie), P.readonly_bookie(bookie)):
            with contextlib.suppress(NoNodeError):  # registered under the other path
                await self.zk.delete(p)

    async def to_readonly(self, bookie: str) -> None:
        await self.zk.create(P.readonly_bookie(bookie), info(bookie), ephemeral=True)
        await self.zk.delete(P.available_bookie(bookie))

    # BookieClient surface used by the auditor (never called when checks are off)
    async def read_lac(self, bookie, ledger_id):
        return -1


def closed(ensemble, last=99, E=None, WQ=2, AQ=2, segs=None):
    E = E or len(ensemble)
    segments = segs or [(0, ensemble)]
    return LedgerMetadata(E, WQ, AQ, tuple(Segment(f, tuple(e)) for f, e in segments), state=LedgerState.CLOSED,
                          last_entry_id=last, length=4 * (last + 1), password=b"pw")


def settings(**kw) -> AuditorSettings:
    base = dict(auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0)
    base.update(kw)
    return AuditorSettings(**base)


async def start_auditor(zk, st: AuditorSettings, policy=None, bookies=None, registry=None,
                        persistent: bool | None = None) -> Auditor:
    a = Auditor(zk, P, st, policy, bookies or FakeBookies(zk), bookie_id="auditor:1",
                registry=registry or metrics.MetricsRegistry())
    a.tree.persistent = persistent  # None: ZooKeeper 3.6+ → one persistent watch (issue 13)
    await a.start()
    return a


async def marker(urm, lid):
    return await urm.get_marker(lid)


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "per-ledger"])
async def test_lost_bookie_gives_one_marker_at_the_exact_path(zk, persistent):
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    store = LedgerStore(zk, P)
    await store.create(1, closed(B[:3]))
    await store.create(2, closed(B[:2], E=2))
    a = await start_auditor(zk, settings(), persistent=persistent)
    try:
        await fb.kill(B[2])
        path = "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
        assert await wait_for(lambda: zk.exists(path), 5)
        data, _ = await zk.get(path)
        assert data.decode().startswith(f'replica: "{B[2]}"\nctime: ')
        children = await zk.get_children("/ledgers/underreplication/ledgers/0000/0000/0000")
        assert children == ["0001"], "only the ledger on the lost bookie is marked"
        assert a.last_audit.ledgers == 1 and a.last_audit.lost == [B[2]]
        # marking needed no metadata read: the index answered (and in persistent mode the markers,
        # locks and the vanished bookie znode under the watched root were filtered out by path)
        assert a.tree.reads == 2
    finally:
        await a.stop()


async def test_readonly_bookie_is_not_lost_until_it_dies(zk):
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await LedgerStore(zk, P).create(5, closed(B[:3]))
    a = await start_auditor(zk, settings())
    urm = UnderreplicationManager(zk, P)
    try:
        audits = a.audits
        await fb.to_readonly(B[1])
        assert await wait_for(lambda: a.bookie_watcher.readonly == {B[1]}, 5)
        assert await wait_for(lambda: a._events.empty(), 5)
        assert await urm.get_marker(5) is None
        await fb.kill(B[1])
        assert await wait_for(lambda: marker(urm, 5), 5)
        assert (await urm.get_marker(5)).replicas == [B[1]]
        assert a.audits > audits
    finally:
        await a.stop()


async def test_delay_and_second_failure_during_the_delay(zk):
    fb = FakeBookies(zk)
    for b in B[:4]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3], E=3, WQ=3))
    await LedgerStore(zk, P).create(2, closed([B[0], B[1], B[3]], E=3, WQ=3))
    reg = metrics.MetricsRegistry()
    a = await start_auditor(zk, settings(lost_bookie_recovery_delay=30), registry=reg)
    urm = UnderreplicationManager(zk, P)
    try:
        await fb.kill(B[2])
        assert await wait_for(lambda: a.pending_audit_at is not None, 5)
        assert await urm.get_marker(1) is None
        assert reg.get("auditor_NUM_BOOKIE_AUDITS_DELAYED").value == 1
        t0 = time.monotonic()
        await fb.kill(B[3])
        assert await wait_for(lambda: marker(urm, 2), 2)
        assert time.monotonic() - t0 < 2
        assert (await urm.get_marker(1)).replicas == [B[2]]
        assert (await urm.get_marker(2)).replicas == [B[3]]
        assert a.pending_audit_at is None
        assert reg.get("auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED").value == 1
    finally:
        await a.stop()


async def test_rolling_restart_inside_the_delay_marks_nothing_for_the_restarted_bookie(zk):
    fb = FakeBookies(zk)
    for b in B[:4]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3], E=3, WQ=3))   # holds A = B[2]
    await LedgerStore(zk, P).create(2, closed([B[0], B[1], B[3]], E=3, WQ=3))  # holds B = B[3]
    a = await start_auditor(zk, settings(lost_bookie_recovery_delay=2))
    urm = UnderreplicationManager(zk, P)
    try:
        await fb.kill(B[2])
        assert await wait_for(lambda: a.pending_audit_at is not None, 5)
        await fb.add(B[2])  # A is back inside the delay
        assert await wait_for(lambda: a.pending_audit_at is None, 5)
        await fb.kill(B[3])
        assert await wait_for(lambda: a.pending_audit_at is not None, 5)
        assert await wait_for(lambda: marker(urm, 2), 6)
        assert (await urm.get_marker(2)).replicas == [B[3]]
        assert await urm.get_marker(1) is None, "the restarted bookie must not be marked"
    finally:
        await a.stop()


@pytest.mark.parametrize("new_value", [600, 0])
async def test_triggeraudit_same_value_or_zero(zk, new_value):
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3]))
    a = await start_auditor(zk, settings(lost_bookie_recovery_delay=600))
    urm = UnderreplicationManager(zk, P)
    try:
        await fb.kill(B[2])
        assert await wait_for(lambda: a.pending_audit_at is not None, 5)
        await urm.set_lost_bookie_recovery_delay(new_value)
        assert await wait_for(lambda: marker(urm, 1), 2)
        assert a.pending_audit_at is None
        assert a.tracker.previous_delay == new_value
    finally:
        await a.stop()


async def test_trigger_without_pending_audit_marks_dead_bookies_from_metadata(zk):
    # ledgers on bookies that never registered (testTriggerAuditorWithNoPendingAuditTask)
    fb = FakeBookies(zk)
    await fb.add(B[0])
    await LedgerStore(zk, P).create(3, closed(["192.0.2.1:1000", B[0]], E=2))
    elector = AuditorElector(zk, P, "auditor:1")
    await elector.run_for_leadership()
    a = await start_auditor(zk, settings(auditor_periodic_bookie_check_interval=86400, lost_bookie_recovery_delay=0))
    urm = UnderreplicationManager(zk, P)
    try:
        # the bookie check at start already marks it (upstream AuditorPeriodicBookieCheckTest)
        assert await wait_for(lambda: marker(urm, 3), 5)
        assert (await urm.get_marker(3)).replicas == ["192.0.2.1:1000"]
        await zk.delete(P.ur_marker(3))
        await urm.trigger_audit()
        assert await wait_for(lambda: marker(urm, 3), 2)
    finally:
        await a.stop()


async def test_disable_then_enable(zk):
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3], E=3, WQ=3))
    a = await start_auditor(zk, settings())
    urm = UnderreplicationManager(zk, P)
    try:
        await urm.disable()
        assert await wait_for(lambda: not a.state.enabled, 5)
        await fb.kill(B[1])
        await fb.kill(B[2])
        # nothing may be marked while disabled (deadline check, not synchronisation)
        assert not await wait_for(lambda: marker(urm, 1), 1.0)
        await urm.enable()
        assert await wait_for(lambda: marker(urm, 1), 5)
        assert sorted((await urm.get_marker(1)).replicas) == [B[1], B[2]]
    finally:
        await a.stop()


async def test_precise_marking_and_multi_batches(zk):
    fb = FakeBookies(zk)
    for b in B[:4]:
        await fb.add(b)
    store = LedgerStore(zk, P)
    await store.create(1, closed(B[:3], last=0))            # one entry: on indexes 0,1 only
    await store.create(2, closed(B[:3], last=-1))           # closed empty: nothing stored
    opn = LedgerMetadata(3, 2, 2, (Segment(0, tuple(B[:3])),), state=LedgerState.OPEN)
    await store.create(3, opn)                              # open: last segment always counts
    changed = closed(B[:3], last=9, segs=[(0, B[:3]), (1, B[:3]), (1, [B[0], B[1], B[3]])])
    await store.create(4, changed)                          # B[2] held no entry: only entry 0 (indexes 0,1), then an empty segment
    for lid in range(100, 400):
        await store.create(lid, closed([B[0], B[1], B[2]]))
    a = await start_auditor(zk, settings())
    urm = UnderreplicationManager(zk, P)
    try:
        await fb.kill(B[2])
        assert await wait_for(lambda: a.last_audit is not None and a.last_audit.lost == [B[2]], 5)
        marked = await urm.list_marked_ids()
        assert marked == {3} | set(range(100, 400))
        # 301 markers in a few multis; the gauges' first look may land in the audit's window and build
        # the marker index (two addWatch and the lock listing: 3 more than the walk it replaced)
        assert a.last_audit.zk_ops < 13, f"batched marking expected, used {a.last_audit.zk_ops} ZooKeeper ops"
    finally:
        await a.stop()


async def settle(ops) -> None:
    """Run a batch of concurrent metadata changes; a change racing a delete of its ledger is dropped."""
    for res in await asyncio.gather(*ops, return_exceptions=True):
        if isinstance(res, Exception) and not isinstance(res, NoSuchLedgerError):
            raise res


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "per-ledger"])
async def test_index_agrees_with_full_rescan_after_random_changes(zk, persistent):
    fb = FakeBookies(zk)
    for b in B:
        await fb.add(b)
    store = LedgerStore(zk, P)
    rng = random.Random(7)
    for lid in range(50):
        await store.create(lid, LedgerMetadata(3, 2, 2, (Segment(0, tuple(rng.sample(B, 3))),)))
    a = await start_auditor(zk, settings(), persistent=persistent)
    try:
        live = set(range(50))
        next_id = 50
        ops = []
        for _ in range(1000):
            r = rng.random()
            if r < 0.35 or not live:
                lid = next_id if rng.random() < 0.9 else rng.randrange(2**31 - 1, 2**31 + 5)
                next_id += 1
                if lid in live:
                    continue
                ops.append(store.create(lid, LedgerMetadata(3, 2, 2, (Segment(0, tuple(rng.sample(B, 3))),))))
                live.add(lid)
            elif r < 0.55:
                lid = rng.choice(sorted(live))
                ops.append(store.update(lid, lambda m: None if m.is_closed else
                                        LedgerMetadata(m.ensemble_size, m.write_quorum, m.ack_quorum, m.segments,
                                                       state=LedgerState.CLOSED, last_entry_id=rng.randrange(0, 50),
                                                       length=10)))
            elif r < 0.9:
                lid = rng.choice(sorted(live))
                first = rng.randrange(1, 100)
                ens = tuple(rng.sample(B, 3))
                ops.append(store.update(lid, lambda m, f=first, e=ens: None if m.is_closed or f < m.segments[-1].first_entry_id
                                        else m.with_new_segment(f, e)))
            else:
                lid = rng.choice(sorted(live))
                live.discard(lid)
                ops.append(store.delete(lid))
            if len(ops) >= 50:
                await settle(ops)
                ops = []
        await settle(ops)

        async def agrees() -> bool:
            await a.tree.settle()
            scan = await a.tree.scan()
            return a.index.diff(scan).mismatches == 0 and set(scan) == live

        assert await wait_for(agrees, 15)
        rep = await a.run_check("index_reconcile")
        assert rep == {"added": 0, "removed": 0, "changed": 0}
    finally:
        await a.stop()


async def test_initial_delay_of_check_all_ledgers_from_ctime(zk):
    urm = UnderreplicationManager(zk, P)
    await urm.init()
    now = int(time.time() * 1000)
    await urm.set_check_ctime("checkallledgers", now - 999_000)   # interval 1000 s → runs in ~1 s
    st = settings(auditor_periodic_check_interval=1000)
    t0 = time.monotonic()
    a = await start_auditor(zk, st)
    try:
        assert await wait_for(lambda: "check_all_ledgers" in a.last_results, 5)
        took = time.monotonic() - t0
        assert 0.5 <= took <= 3.0, took
        ctime = await urm.get_check_ctime("checkallledgers")
        assert now <= ctime <= int(time.time() * 1000)
    finally:
        await a.stop()
    await urm.set_check_ctime("checkallledgers", int(time.time() * 1000) - 1_001_000)  # overdue → at once
    t0 = time.monotonic()
    a = await start_auditor(zk, st)
    try:
        assert await wait_for(lambda: "check_all_ledgers" in a.last_results, 2)
        assert time.monotonic() - t0 < 1.0
    finally:
        await a.stop()


async def test_periodic_checks_skipped_while_delayed_audit_pending(zk):
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3]))
    reg = metrics.MetricsRegistry()
    a = await start_auditor(zk, settings(lost_bookie_recovery_delay=10_000, auditor_replicas_check_interval=1),
                            registry=reg)
    try:
        await fb.kill(B[2])
        assert await wait_for(lambda: reg.get("auditor_NUM_SKIPPING_CHECK_TASK_TIMES").value > 0, 5)
        assert a.last_results["replicas_check"].skipped == "delayed audit pending"
    finally:
        await a.stop()


async def test_placement_check_counting_and_bp54_marking(zk):
    from autorecovery.placement import PlacementConfig, RackawarePolicy, StaticResolver

    bookies = [f"98.98.98.{i}:2181" for i in range(5)]
    racks = ["/rack1", "/rack2", "/rack3", "/rack1", "/rack2"]
    fb = FakeBookies(zk)
    for b in bookies:
        await fb.add(b)
    store = LedgerStore(zk, P)
    await store.create(1, closed(bookies, E=5, WQ=3, AQ=2))
    await store.create(2, LedgerMetadata(5, 3, 2, (Segment(0, tuple(bookies)),), state=LedgerState.OPEN))

    for repair in (False, True):
        policy = RackawarePolicy(PlacementConfig(min_num_racks_per_write_quorum=3),
                                 StaticResolver(dict(zip(bookies, racks, strict=True))))
        reg = metrics.MetricsRegistry()
        st = settings(auditor_periodic_placement_policy_check_interval=1000,
                      repaired_placement_policy_not_adhering_bookie_enabled=repair)
        with contextlib.suppress(NoNodeError):
            await zk.delete(P.placement_policy_check_ctime)  # ctime -1: run at once
        a = await start_auditor(zk, st, policy=policy, registry=reg)
        try:
            assert await wait_for(lambda: "placement_check" in a.last_results, 5)  # noqa: B023 - run before the loop rebinds it
            assert reg.get("auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY").value == 1
            assert reg.get("auditor_NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY").value == 0
            urm = UnderreplicationManager(zk, P)
            await urm.init()
            got = await urm.poll_ledger_to_rereplicate()
            if repair:
                assert got == 1 and (await urm.get_marker(1)).replicas == []
            else:
                assert got is None
            await urm.close()
        finally:
            await a.stop()


async def test_failover_after_the_auditor_dies(chroot, zk):
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3], E=3, WQ=3))
    nodes = []
    for i in range(2):
        c = await ZkClient(chroot, session_timeout_ms=2000).start()
        state: dict = {"auditor": None}

        async def elected(c=c, state=state, i=i):
            state["auditor"] = await start_auditor(c, settings())

        async def lost(state=state):
            if state["auditor"] is not None:
                await state["auditor"].stop()
                state["auditor"] = None

        task = asyncio.ensure_future(elector_loop(c, P, f"node{i}:1", elected, lost))
        nodes.append((c, state, task))
        if i == 0:
            assert await wait_for(lambda: state["auditor"] is not None, 10)  # noqa: B023 - run before the loop rebinds it
    try:
        assert nodes[1][1]["auditor"] is None
        # the auditor's process dies (session closed)
        nodes[0][2].cancel()
        await asyncio.gather(nodes[0][2], return_exceptions=True)
        await nodes[0][0].stop()
        assert await wait_for(lambda: nodes[1][1]["auditor"] is not None, 5)
        await fb.kill(B[2])
        urm = UnderreplicationManager(zk, P)
        assert await wait_for(lambda: marker(urm, 1), 5)
    finally:
        for c, _state, task in nodes:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await c.stop()


async def test_session_expiry_stops_the_auditor_and_the_node_rejoins(chroot, zk):
    from kazoo.client import KazooClient

    from autorecovery.zk.election import current_auditor

    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await LedgerStore(zk, P).create(1, closed(B[:3], E=3, WQ=3))
    nodes = []
    stopped: list = []
    for i in range(2):
        c = await ZkClient(chroot, session_timeout_ms=2000).start()
        state: dict = {"auditor": None, "elections": 0}

        async def elected(c=c, state=state):
            state["elections"] += 1
            state["auditor"] = await start_auditor(c, settings())

        async def lost(state=state):
            a, state["auditor"] = state["auditor"], None
            if a is not None:
                await a.stop()
                stopped.append(a)

        task = asyncio.ensure_future(elector_loop(c, P, f"node{i}:1", elected, lost))
        nodes.append((c, state, task))
        if i == 0:
            assert await wait_for(lambda: state["auditor"] is not None, 10)  # noqa: B023 - run before the loop rebinds it
    try:
        old = nodes[0][1]["auditor"]
        sid, passwd = nodes[0][0].client_id
        hosts = chroot

        def expire() -> None:
            k = KazooClient(hosts=hosts, client_id=(sid, passwd), timeout=2)
            k.start(10)
            k.stop()
            k.close()

        t0 = time.monotonic()
        await asyncio.to_thread(expire)
        assert await wait_for(lambda: nodes[1][1]["auditor"] is not None, 2 + 3)
        assert time.monotonic() - t0 < 5
        # the expired node stopped its auditor cleanly: every task is finished
        assert await wait_for(lambda: old in stopped, 5)
        assert not old.running and all(t.done() for t in old._tasks)
        # ... and is a candidate again, with a new session
        assert await wait_for(lambda: nodes[0][0].connected.is_set(), 10)

        async def two_votes() -> bool:
            return len([v for v in await zk.get_children(P.auditor_election) if v.startswith("V_")]) == 2

        assert await wait_for(two_votes, 10)
        assert await current_auditor(zk, P) == "node1:1"
        # the new auditor works
        await fb.kill(B[2])
        urm = UnderreplicationManager(zk, P)
        assert await wait_for(lambda: marker(urm, 1), 5)
    finally:
        for c, _state, task in nodes:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await c.stop()


class AvailabilityBookies(FakeBookies):
    """Answers GET_LIST_OF_ENTRIES_OF_LEDGER from a table (upstream AuditorReplicasCheckTest's fake admin)."""

    def __init__(self, zk, table):
        super().__init__(zk)
        self.table = table

    async def get_list_of_entries(self, bookie, ledger_id):
        from autorecovery.errors import BookieError, BookieUnavailableError

        ans = self.table.get((bookie, ledger_id), "ENOLEDGER")
        if ans == "ENOLEDGER":
            raise BookieError(bookie, "ENOLEDGER")
        if ans == "DOWN":
            raise BookieUnavailableError(bookie, "UNAVAILABLE")
        return ans


@pytest.mark.parametrize("mark", [False, True])
async def test_replicas_check_buckets_and_optional_marking(zk, mark):
    fb = FakeBookies(zk)
    b = B[:4]
    for x in b:
        await fb.add(x)
    store = LedgerStore(zk, P)
    await store.create(1, closed(b, last=3, E=4, WQ=3, AQ=2))   # entry 2 on one bookie only → < AQ
    await store.create(2, closed(b[:3], last=1, E=3, WQ=3))     # entry 1 nowhere → no replica
    await store.create(3, closed(b[:3], last=1, E=3, WQ=3))     # one copy of entry 1 missing → < WQ
    await store.create(4, closed(b[:3], last=1, E=3, WQ=3))     # a bookie down: not counted
    await store.create(5, LedgerMetadata(3, 3, 2, (Segment(0, tuple(b[:3])),)))  # open: ignored
    table = {
        (b[0], 1): [(0, 0)], (b[1], 1): [(0, 1), (3, 3)], (b[2], 1): [(0, 1)], (b[3], 1): [(1, 3)],
        (b[0], 2): [(0, 0)], (b[1], 2): [(0, 0)], (b[2], 2): "ENOLEDGER",
        (b[0], 3): [(0, 1)], (b[1], 3): [(0, 1)], (b[2], 3): [(0, 0)],
        (b[0], 4): [(0, 1)], (b[1], 4): [(0, 1)], (b[2], 4): "DOWN",
    }
    reg = metrics.MetricsRegistry()
    st = settings(auditor_replicas_check_interval=1000, auditor_replicas_check_mark_under_replicated=mark)
    a = await start_auditor(zk, st, bookies=AvailabilityBookies(zk, table), registry=reg)
    urm = UnderreplicationManager(zk, P)
    try:
        assert await wait_for(lambda: "replicas_check" in a.last_results, 5)
        res = a.last_results["replicas_check"].summary
        assert (res["no_replica"], res["less_than_aq"], res["less_than_wq"]) == ([2], [1], [3])
        assert reg.get("auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY").value == 1
        assert reg.get("auditor_NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY").value == 1
        assert reg.get("auditor_NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY").value == 1
        assert await urm.get_check_ctime("replicascheck") > 0
        marked = await urm.list_marked_ids()
        if mark:
            assert marked == {1, 2, 3}
            assert (await urm.get_marker(3)).replicas == [b[2]]
        else:
            assert marked == set(), "upstream's replicas check only reports"
    finally:
        await a.stop()


@pytest.mark.parametrize("mark", [False, True])
async def test_replicas_check_logs_error_only_when_a_person_must_act(zk, mark):
    """Issue 26 (found by the chaos campaign's disk-full fault): a ledger left at >= AQ but < WQ copies
    that the replicas check marks for the workers heals by itself: WARNING, not ERROR. Without marking,
    or with an entry under AQ copies, a person must act: ERROR."""
    from structlog.testing import capture_logs

    fb = FakeBookies(zk)
    b = B[:4]
    for x in b:
        await fb.add(x)
    store = LedgerStore(zk, P)
    await store.create(1, closed(b, last=3, E=4, WQ=3, AQ=2))   # entry 2 on one bookie only → < AQ
    await store.create(3, closed(b[:3], last=1, E=3, WQ=3))     # one copy of entry 1 missing → < WQ
    table = {(b[0], 1): [(0, 0)], (b[1], 1): [(0, 1), (3, 3)], (b[2], 1): [(0, 1)], (b[3], 1): [(1, 3)],
             (b[0], 3): [(0, 1)], (b[1], 3): [(0, 1)], (b[2], 3): [(0, 0)]}
    st = settings(auditor_replicas_check_interval=1000, auditor_replicas_check_mark_under_replicated=mark)
    with capture_logs() as logs:
        a = await start_auditor(zk, st, bookies=AvailabilityBookies(zk, table), registry=metrics.MetricsRegistry())
        try:
            assert await wait_for(lambda: "replicas_check" in a.last_results, 5)
        finally:
            await a.stop()
    level = {e["ledger_id"]: e["log_level"] for e in logs if e["event"] == "ledger has entries with fewer replicas than WQ"}
    assert level == {1: "error", 3: "warning" if mark else "error"}


@pytest.mark.parametrize(("exc", "level"), [(ZooKeeperError("ZooKeeper operation on /x failed: ConnectionLoss"), "warning"),
                                          (RuntimeError("a bug"), "error")], ids=["retriable", "bug"])
async def test_a_periodic_check_failing_on_a_retriable_error_logs_a_warning(zk, exc, level):
    """Issue 26 (chaos campaign, ZooKeeper faults): a periodic check that fails on a retriable error (a
    ConnectionLoss) is run again at its next period: WARNING; any other failure stays ERROR."""
    from structlog.testing import capture_logs

    async def failing() -> dict:
        raise exc

    with capture_logs() as logs:
        a = Auditor(zk, P, settings(auditor_replicas_check_interval=1000), None, FakeBookies(zk), bookie_id="auditor:1",
                    registry=metrics.MetricsRegistry())
        a.checks.replicas_check = failing  # the check part's run, replaced before start() schedules it
        await a.start()
        try:
            assert await wait_for(lambda: "replicas_check" in a.last_results, 5)
            assert a.last_results["replicas_check"].ok is False
        finally:
            await a.stop()
    assert [e["log_level"] for e in logs if e["event"] == "periodic check failed"] == [level]


@pytest.mark.parametrize(("exc", "level"), [(ZooKeeperError("ZooKeeper operation on /x failed: ConnectionLoss"), "warning"),
                                          (RuntimeError("a bug"), "error")], ids=["retriable", "bug"])
async def test_a_check_ctime_write_failing_on_a_retriable_error_logs_a_warning(zk, exc, level):
    """Issue 26 (chaos campaign, ZooKeeper quorum changes): the ctime write after a check that meets a
    ConnectionLoss is written again by the next run: WARNING; any other failure stays ERROR."""
    from structlog.testing import capture_logs

    a = Auditor(zk, P, settings(auditor_replicas_check_interval=1000), None, FakeBookies(zk), bookie_id="auditor:1",
                registry=metrics.MetricsRegistry())

    async def failing_write(which: str, ms: int) -> None:
        raise exc

    a.urm.set_check_ctime = failing_write  # type: ignore[method-assign]  # the write meets the fault
    with capture_logs() as logs:
        await a.start()
        try:
            assert await wait_for(lambda: any(e["event"] == "could not write the check's ctime" for e in logs), 5)
        finally:
            await a.stop()
    assert {e["log_level"] for e in logs if e["event"] == "could not write the check's ctime"} == {level}


async def test_placement_check_reports_markers_older_than_the_grace_period(zk):
    from autorecovery.placement import DefaultPolicy

    old = UnderreplicationManager(zk, P, now_ms=lambda: int(time.time() * 1000) - 10_000)
    await old.init()
    await old.mark_many({7: ["x:1"], 8: ["y:1"]})
    fresh = UnderreplicationManager(zk, P)
    await fresh.mark_underreplicated(9, ["z:1"])
    reg = metrics.MetricsRegistry()
    st = settings(auditor_periodic_placement_policy_check_interval=1000,
                  underreplicated_ledger_recovery_grace_period=5)
    a = await start_auditor(zk, st, policy=DefaultPolicy(), registry=reg)
    try:
        assert await wait_for(lambda: "placement_check" in a.last_results, 5)
        assert reg.get("auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD").value == 2
    finally:
        await a.stop()
        await old.close()


async def test_new_auditor_honours_the_delay_for_a_bookie_that_died_with_the_old_auditor(zk):
    # issue 9: the auditor's own host dies (its bookie with it); the node elected next starts with the
    # dead bookie known from its cookie and not registered. Its start-up bookie check must not audit it
    # before lostBookieRecoveryDelay has passed, and the skipped run is counted.
    fb = FakeBookies(zk)
    for b in B[:3]:
        await fb.add(b)
    await fb.kill(B[2])  # died before this auditor starts (cookie stays)
    await LedgerStore(zk, P).create(1, closed(B[:3], E=3, WQ=3))
    reg = metrics.MetricsRegistry()
    urm = UnderreplicationManager(zk, P)
    a = await start_auditor(zk, settings(auditor_periodic_bookie_check_interval=86400, lost_bookie_recovery_delay=60),
                            registry=reg)
    try:
        assert a.pending_audit_at is not None, "the dead bookie is tracked with the delay from the start"
        assert await wait_for(lambda: "bookie_check" in a.last_results, 5)
        assert a.last_results["bookie_check"].skipped == "delayed audit pending"
        assert reg.get("auditor_NUM_SKIPPING_CHECK_TASK_TIMES").value == 1
        assert reg.get("auditor_NUM_BOOKIE_AUDITS_DELAYED").value == 1
        assert await urm.get_marker(1) is None
        assert a.audits == 0
        # the bookie returns inside the delay (rolling restart of the auditor's host): nothing is marked
        await fb.add(B[2])
        assert await wait_for(lambda: a.pending_audit_at is None, 5)
        assert reg.get("auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED").value == 1
        assert await urm.get_marker(1) is None
    finally:
        await a.stop()


async def test_unrecoverable_records_are_logged_once_by_the_auditor_bookies_first(zk):
    # issue 9: every daemon logged an unrecoverable ledger at ERROR, 860 characters a line with the
    # useful part at the end; now the auditor alone logs each record once, naming the bookies first
    import json

    from structlog.testing import capture_logs

    a = await start_auditor(zk, settings())
    try:
        with capture_logs() as logs:
            for lid, waiting in ((7, [B[4]]), (8, [])):
                doc = {"ledger": lid, "entries": [[0, 4]], "entry_count": 5, "bookies": [B[4]], "waiting_for": waiting}
                await zk.create(f"{P.unrecoverable}/urL{lid:010d}", json.dumps(doc).encode(), makepath=True)
                assert await wait_for(lambda: f"urL{lid:010d}" in a._unrecoverable_logged, 5)  # noqa: B023 - run before the loop rebinds it
            await zk.set(f"{P.unrecoverable}/urL0000000007", b"{}")  # a rewrite is not a new record
            await zk.create(f"{P.unrecoverable}/urL0000000009", b"{}")
            assert await wait_for(lambda: "urL0000000009" in a._unrecoverable_logged, 5)
        errors = [e for e in logs if e["log_level"] == "error"]
        assert [e.get("ledger_id") for e in errors] == [7, 8, None]
        assert errors[0]["event"] == f"ledger 7 is unrecoverable until one of these bookies returns: {B[4]}"
        assert errors[1]["event"].startswith("ledger 8 is unrecoverable until one of these bookies returns: none known")
        assert all(len(e["event"]) < 200 for e in errors)
    finally:
        await a.stop()


async def test_unrecoverable_record_is_reported_once_across_auditor_elections(zk):
    """The stock hour's 66 auditor elections logged its 18 unrecoverable records 984 times at ERROR.
    The first auditor logs each record once and stamps it ``reported``; a second auditor (a new
    election) logs no ERROR for them, only one INFO line listing them; a record a worker rewrote since
    (the stamp gone) is logged again by the next auditor."""
    import json

    from structlog.testing import capture_logs

    for lid in (7, 8):
        doc = {"ledger": lid, "entries": [[0, 4]], "entry_count": 5, "bookies": [B[4]], "waiting_for": [B[4]]}
        await zk.create(f"{P.unrecoverable}/urL{lid:010d}", json.dumps(doc).encode(), makepath=True)

    async def stamped(lid: int) -> bool:
        data, _ = await zk.get(f"{P.unrecoverable}/urL{lid:010d}")
        return "reported" in json.loads(data)

    with capture_logs() as first:
        a = await start_auditor(zk, settings())
        try:
            assert await wait_for(lambda: stamped(7), 5) and await wait_for(lambda: stamped(8), 5)
        finally:
            await a.stop()
    assert [e.get("ledger_id") for e in first if e["log_level"] == "error"] == [7, 8]
    # a worker rewrites ledger 8's record (a new finding): no stamp
    doc8 = {"ledger": 8, "entries": [[0, 9]], "entry_count": 10, "bookies": [B[4]], "waiting_for": [B[4]]}
    await zk.set(f"{P.unrecoverable}/urL0000000008", json.dumps(doc8).encode())
    with capture_logs() as second:
        a = await start_auditor(zk, settings())
        try:
            assert await wait_for(lambda: len(a._unrecoverable_logged) == 2, 5)
            assert await wait_for(lambda: stamped(8), 5)
        finally:
            await a.stop()
    assert [e.get("ledger_id") for e in second if e["log_level"] == "error"] == [8]
    info = [e for e in second if e["event"] == "unrecoverable ledgers already reported by an earlier auditor"]
    assert len(info) == 1 and info[0]["ledger_ids"] == [7]


async def test_non_retriable_audit_failure_is_surfaced_not_retried(zk):
    """Issue 9 (``retriable`` read nowhere): a garbage marker makes the lost-bookie audit fail with a
    CompatibilityError. It is counted as not retriable and not retried every second; the next bookie
    loss is still audited (other ledgers are marked)."""
    fb = FakeBookies(zk)
    for b in B[:4]:
        await fb.add(b)
    store = LedgerStore(zk, P)
    await store.create(1, closed(B[:3]))
    await store.create(2, closed(B[:3]))
    await store.create(3, closed([B[0], B[3]], E=2))
    await zk.create(P.ur_marker(1), b"\xff not a marker", makepath=True)
    reg = metrics.MetricsRegistry()
    a = await start_auditor(zk, settings(), registry=reg)
    urm = UnderreplicationManager(zk, P)
    errors = {r: reg.get("autorecovery_auditor_event_errors_total", {"retriable": r}) for r in ("true", "false")}
    try:
        await fb.kill(B[2])
        assert await wait_for(lambda: errors["false"].value >= 1, 10)
        assert await urm.get_marker(2) is not None  # the batch created the other marker
        await fb.kill(B[3])
        assert await wait_for(lambda: marker(urm, 3), 10)
        assert await wait_for(lambda: a._events.empty() and errors["false"].value == 2, 10), errors["false"].value
        assert errors["true"].value == 0
        assert a._events.empty()  # nothing re-queued: the failed audit is not retried
    finally:
        await a.stop()
