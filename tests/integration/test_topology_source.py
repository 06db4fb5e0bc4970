"""Placement set-up from /bookies and the rack watch (real ZooKeeper)."""

import asyncio
import json

import pytest

from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.topology_source import RackInfoWatcher, build_placement

pytestmark = pytest.mark.integration


def _doc(mapping: dict[str, str]) -> bytes:
    return json.dumps({"default": {b: {"rack": r} for b, r in mapping.items()}}).encode()


def test_racks_from_bookies_znode_and_rack_change_reresolves(zk_connect):
    async def go():
        zk = await ZkClient(zk_connect).start()
        try:
            await zk.create("/bookies", _doc({"a:1": "/rack1", "b:1": "/rack2"}))
            setup = await build_placement({"ensemblePlacementPolicy": "rackaware"}, zk)
            assert setup.source == "pulsar"
            watcher = await RackInfoWatcher(zk, setup).start()
            policy = setup.policy
            policy.on_cluster_changed({"a:1", "b:1", "c:1"}, set())
            assert policy.location_of("a:1") == "/rack1"
            # c:1 is not in /bookies: it gets the one-level default rack and stays placeable
            assert policy.location_of("c:1") == "/default-rack"
            await zk.set("/bookies", _doc({"a:1": "/rack3", "b:1": "/rack2", "c:1": "/rack1"}))
            assert await wait_for(lambda: policy.location_of("a:1") == "/rack3", 10)
            assert policy.location_of("c:1") == "/rack1"
            await watcher.stop()
        finally:
            await zk.stop()

    asyncio.run(go())


def test_default_racks_when_no_bookies_znode(zk_connect):
    async def go():
        zk = await ZkClient(zk_connect).start()
        try:
            setup = await build_placement({}, zk)
            assert setup.source == "default"
            assert type(setup.policy).__name__ == "RackawarePolicy"
        finally:
            await zk.stop()

    asyncio.run(go())
