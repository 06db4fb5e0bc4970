"""BP-54 placement repair end to end (upstream testRepairedNotAdheringPlacementPolicyLedgerFragmentsOnRack
and testReplicationStats), with the real Auditor's placement check marking the ledger."""

from __future__ import annotations

import asyncio
import random

import pytest

from autorecovery import metrics
from autorecovery.placement import Adherence, PlacementConfig, RackawarePolicy
from autorecovery.placement.resolvers import StaticResolver
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings, WorkerSettings
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for

from test_worker_support import FAST, entries_on, open_env, read_all_from, wait_marker_gone

pytestmark = pytest.mark.integration


def racks() -> dict[str, str]:
    """Bookies 0-2 in /rack1, bookie 3 (started later) in /rack2 (by host)."""
    return {LocalCluster.bookie_host(i): ("/rack2" if i == 3 else "/rack1") for i in range(4)}


async def test_bp54_repair_moves_one_member_to_the_other_rack(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    azk = await ZkClient(cluster.zk_connect, session_timeout_ms=6000).start()
    abookies = BookieClient(timeout_s=5)
    reg = metrics.MetricsRegistry()
    apolicy = RackawarePolicy(PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": "2"}),
                              StaticResolver(racks()), rng=random.Random(1))
    auditor = Auditor(azk, env.paths, AuditorSettings(
        auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0,
        auditor_periodic_placement_policy_check_interval=3600,
        repaired_placement_policy_not_adhering_bookie_enabled=True), apolicy, abookies, bookie_id="auditor:1",
        registry=reg)
    try:
        b = cluster.bookie_ids()
        lh = await env.write(b, 3, 3, 3, 10)
        await auditor.start()  # placement check runs at once (no ctime yet) and marks the ledger
        assert await wait_for(lambda: env.um.get_marker(lh.ledger_id), 20)
        marker = await env.um.get_marker(lh.ledger_id)
        assert marker.replicas == []
        assert reg.get("auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY").value == 1
        await auditor.stop()

        settings = WorkerSettings(**{**FAST, "repair_placement": True})
        w = await env.start_worker(settings, racks=racks(), placement={"minNumRacksPerWriteQuorum": "2"})
        # only /rack1 is alive: no fix exists → "no more bookie", marker released, no loop
        await wait_marker_gone(env, lh.ledger_id)
        assert await wait_for(lambda: (lh.ledger_id, "no-more-bookie") in w.history, 10), w.history
        assert w.m.no_more_bookie.value == 1
        assert w.m.replicated_placement.value == 0
        md, _ = await env.bk.ledgers.read(lh.ledger_id)
        assert md.segments[0].ensemble == tuple(b)

        # a bookie in /rack2 appears and the auditor marks the ledger again
        new = await env.start_bookie(3)
        await env.um.mark_underreplicated(lh.ledger_id, [])
        await wait_marker_gone(env, lh.ledger_id)
        assert await wait_for(lambda: (lh.ledger_id, "replicated") in w.history, 10), w.history
        md, _ = await env.bk.ledgers.read(lh.ledger_id)
        ens = md.segments[0].ensemble
        assert new in ens and sum(1 for x, y in zip(ens, b, strict=True) if x != y) == 1, (ens, b)
        assert w.policy.is_ensemble_adhering(list(ens), 3, 3) != Adherence.FAIL
        assert w.m.replicated.value == 1 and w.m.replicated_placement.value == 1
        assert w.m.no_more_bookie.value == 1  # no loop while it could not be fixed
        assert await entries_on(env, new, lh.ledger_id) == list(range(10))
        assert w.m.entries_written.value == 10

        # lose all of /rack1: the /rack2 bookie alone serves every entry
        for x in b:
            await env.stop_bookie(x)
        await read_all_from(env, lh.ledger_id, 10)
    finally:
        await auditor.stop()
        await abookies.close()
        await azk.stop()
        await env.close()
