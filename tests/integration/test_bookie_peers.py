"""A PullEntries target's check that the source is a registered bookie, remembered under a watch
(issue 29: one or two ZooKeeper ``exists`` per pull were a visible part of the per-ledger cost of many
small ledgers), on a real ZooKeeper."""

from __future__ import annotations

import pytest

from autorecovery.bookie.peers import RegisteredPeers
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration

PATHS = Paths("/ledgers")


async def test_registered_answer_kept_until_the_registration_changes(zk_connect):
    """Many pulls from one writable source cost one look-up; the source leaving is seen (its watch)
    without waiting for the keep time; a read-only source counts; an unknown one is asked each time."""
    zk = await ZkClient(zk_connect, session_timeout_ms=4000).start()
    try:
        await zk.ensure_path(PATHS.readonly_bookie("x:1").rsplit("/", 1)[0])
        await zk.create(PATHS.available_bookie("a:1"), b"", ephemeral=True)
        await zk.create(PATHS.readonly_bookie("r:1"), b"", ephemeral=True)
        peers = RegisteredPeers(zk, PATHS)
        assert all([await peers.registered("a:1") for _ in range(50)])
        assert peers.lookups == 1
        assert await peers.registered("r:1") and await peers.registered("r:1")
        assert peers.lookups == 2
        assert not await peers.registered("gone:1") and not await peers.registered("gone:1")
        assert peers.lookups == 4  # "not registered" is never remembered
        assert not await peers.registered("a/../b:1")  # a path, not a bookie id
        await zk.delete(PATHS.available_bookie("a:1"))
        assert await wait_for(lambda: "a:1" not in peers._known, 10)
        assert not await peers.registered("a:1")
    finally:
        await zk.stop()
