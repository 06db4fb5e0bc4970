"""Issue 9: membership listeners each get every change, even when one of them raises."""

from __future__ import annotations

import pytest

from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import init_cluster
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration
P = Paths("/ledgers")


@pytest.fixture
async def zk(zk_connect):
    c = await ZkClient(zk_connect, session_timeout_ms=10000).start()
    await init_cluster(c, P)
    yield c
    await c.stop()


async def test_a_raising_listener_does_not_hide_changes_from_the_others(zk):
    w = await BookieWatcher(zk, P).start()
    seen: list[frozenset[str]] = []
    calls = 0

    def broken(writable, readonly):
        nonlocal calls
        calls += 1
        raise RuntimeError("listener bug")

    async def good(writable, readonly):
        seen.append(writable)

    w.add_listener(broken)
    w.add_listener(good)
    try:
        await zk.create(P.available_bookie("10.0.0.1:3181"), b"", ephemeral=True)
        assert await wait_for(lambda: seen and seen[-1] == frozenset({"10.0.0.1:3181"}), 5)
        await zk.create(P.available_bookie("10.0.0.2:3181"), b"", ephemeral=True)
        assert await wait_for(lambda: seen[-1] == frozenset({"10.0.0.1:3181", "10.0.0.2:3181"}), 5)
        await zk.delete(P.available_bookie("10.0.0.1:3181"))
        assert await wait_for(lambda: seen[-1] == frozenset({"10.0.0.2:3181"}), 5)
        assert calls == 3 and w.listener_failures == 3
        assert w.writable == frozenset({"10.0.0.2:3181"})
    finally:
        await w.stop()


async def test_a_burst_of_watch_events_queues_one_refresh_and_the_last_change_is_seen(zk):
    """Every refresh re-arms the watches, and kazoo fires each armed callback once per event (all of
    them on a connection loss): one refresh per callback piled up refreshes waiting for the lock under
    churn. A burst queues one, which still reads the state after the burst."""
    w = await BookieWatcher(zk, P).start()
    try:
        for _ in range(500):
            w._on_watch(None)
        assert len(w._tasks) == 1
        for i in range(30):
            await zk.create(P.available_bookie(f"10.0.1.{i}:3181"), b"", ephemeral=True)
        want = frozenset(f"10.0.1.{i}:3181" for i in range(30))
        assert await wait_for(lambda: w.writable == want, 10)
        assert await wait_for(lambda: len(w._tasks) <= 1, 5)
    finally:
        await w.stop()
