"""Issue 16: the BP-54 seed's DR drill, run twice with the controls upstream lacks.

Two racks (A = bookies 0, 2, 4, 6; B = 1, 3, 5, 7), an Auditor and two workers in this process (as
tests/e2e/test_dr_scenario.py), ledgers E3/WQ3/AQ2 with one member in rack A and two in rack B.

1. **Maintenance window on rack A.** Rack A is shut down as planned: nothing is marked or copied while
   the window lasts, rack A comes back, every entry reads back; once the window has expired (the
   auditor deletes its record), a bookie loss is healed as usual.
2. **Rack-loss guard** (``autorecoveryDownOutSubtreeLimit=rack``). Every ledger has one member in
   rack A. Rack A is lost as a whole: the Auditor waits ("rack /rack1 lost as a whole") and nothing is
   copied into rack B alone. A second, unplanned failure in rack B leaves the ledgers on that bookie
   with one copy, below AQ: exactly those are re-replicated at once (data first).
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from autorecovery import metrics
from autorecovery.placement import PlacementConfig, RackawarePolicy
from autorecovery.placement.resolvers import StaticResolver
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings, WorkerSettings
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.maintenance import MaintenanceStore
from test_worker_support import FAST, open_env, read_all_from

pytestmark = pytest.mark.e2e

LEDGERS, ENTRIES, SIZE = 12, 30, 1024


def policy() -> RackawarePolicy:
    racks = {LocalCluster.bookie_host(i): f"/rack{1 + i % 2}" for i in range(8)}
    return RackawarePolicy(PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": "2"}),
                           StaticResolver(racks), rng=random.Random(7))


async def setup(cluster_factory, **auditor_kw):
    cluster = await asyncio.to_thread(cluster_factory, bookies=8, racks=2)
    env = await open_env(cluster)
    ids = cluster.bookie_ids()
    rack_a, rack_b = [ids[i] for i in (0, 2, 4, 6)], [ids[i] for i in (1, 3, 5, 7)]
    ledgers = []
    for n in range(LEDGERS):  # one member in rack A, two in rack B
        ens = [rack_a[n % 3], rack_b[n % 3], rack_b[(n + 1) % 3]]
        lh = await env.write(ens, 3, 3, 2, ENTRIES, size=SIZE, seed=n, full=True)
        ledgers.append((lh.ledger_id, n, tuple(ens)))
    azk = await ZkClient(cluster.zk_connect, session_timeout_ms=6000).start()
    abookies = BookieClient(timeout_s=5)
    reg = metrics.MetricsRegistry()
    auditor = Auditor(azk, env.paths, AuditorSettings(
        auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0, **auditor_kw),
        policy(), abookies, bookie_id="auditor:1", registry=reg)
    await auditor.start()
    settings = WorkerSettings(**{**FAST, "concurrent_ledgers": 4})
    workers = [await env.start_worker(settings, policy=policy()) for _ in range(2)]

    async def close():
        await auditor.stop()
        await abookies.close()
        await azk.stop()
        await env.close()

    return cluster, env, rack_a, rack_b, ledgers, auditor, workers, reg, close


async def ensembles(env, ledgers) -> dict[int, tuple[str, ...]]:
    out = {}
    for lid, _, _ in ledgers:
        md, _ = await env.bk.ledgers.read(lid)
        out[lid] = tuple(b for seg in md.segments for b in seg.ensemble)
    return out


async def test_drill_with_a_maintenance_window_on_rack_a(cluster_factory):
    _cluster, env, rack_a, rack_b, ledgers, auditor, workers, reg, close = await setup(
        cluster_factory, lost_bookie_recovery_delay=0)
    try:
        store = MaintenanceStore(env.zk, env.paths)
        before = await ensembles(env, ledgers)
        await store.start("rack", "/rack1", ttl_ms=30_000, reason="DR drill")
        assert await wait_for(lambda: len(auditor.windows) == 1, 10)
        for b in rack_a:
            await env.stop_bookie(b)
        assert await wait_for(lambda: reg.get("autorecovery_maintenance_held_bookies").value == 3, 20), \
            "the three bookies of rack A that hold ledgers"
        # nothing is marked or copied while the window lasts (a deadline check, not synchronisation)
        assert not await wait_for(lambda: env.um.list_marked_ids(), 3.0)
        assert await ensembles(env, ledgers) == before
        assert sum(w.m.replicated.value for w in workers) == 0
        for i in (0, 2, 4, 6):
            await env.start_bookie(i)
        for lid, seed, _ in ledgers:  # nothing lost
            await read_all_from(env, lid, ENTRIES, seed=seed, size=SIZE)
        # the window ends (stopped early here; expiry takes the same path) and normal behaviour returns
        assert await store.stop("rack", "/rack1")
        assert await wait_for(lambda: reg.get("autorecovery_maintenance_windows").value == 0, 10)
        victim = rack_b[0]
        await env.stop_bookie(victim)

        async def healed() -> bool:
            return (not await env.um.list_marked_ids()
                    and all(victim not in ens for ens in (await ensembles(env, ledgers)).values()))

        assert await wait_for(healed, 90, interval_s=0.2)
        for lid, seed, _ in ledgers:
            await read_all_from(env, lid, ENTRIES, seed=seed, size=SIZE)
    finally:
        for w in workers:
            await w.stop()
        await close()


async def test_drill_with_the_rack_loss_guard(cluster_factory):
    _cluster, env, rack_a, rack_b, ledgers, _auditor, workers, reg, close = await setup(
        cluster_factory, lost_bookie_recovery_delay=1, autorecovery_down_out_subtree_limit="rack")
    try:
        before = await ensembles(env, ledgers)
        for b in rack_a:
            await env.stop_bookie(b)
        assert await wait_for(lambda: reg.get("autorecovery_rack_loss_guard_domains").value == 1, 20)
        state = await MaintenanceStore(env.zk, env.paths).read_state()
        assert state["guard"] == {"/rack1": sorted(rack_a[:3])}, "the lost bookies that hold ledgers"
        # waiting: nothing copied into rack B alone (a deadline check, not synchronisation)
        assert not await wait_for(lambda: env.um.list_marked_ids(), 3.0)
        assert await ensembles(env, ledgers) == before
        # a second, unplanned failure in rack B: its ledgers drop to one copy (< AQ 2) -> copied now
        victim = rack_b[0]
        hit = {lid for lid, _, ens in ledgers if victim in ens}
        await env.stop_bookie(victim)

        async def fixed() -> bool:
            now = await ensembles(env, ledgers)
            return (not await env.um.list_marked_ids()
                    and all(victim not in now[lid] for lid in hit))

        assert await wait_for(fixed, 90, interval_s=0.2)
        now = await ensembles(env, ledgers)
        untouched = [lid for lid, _, _ in ledgers if lid not in hit]
        assert untouched and all(now[lid] == before[lid] for lid in untouched), "only the endangered ledgers moved"
        assert reg.get("autorecovery_maintenance_overridden_ledgers_total").value >= len(hit)
        for lid, seed, _ in ledgers:
            await read_all_from(env, lid, ENTRIES, seed=seed, size=SIZE)
    finally:
        for w in workers:
            await w.stop()
        await close()
