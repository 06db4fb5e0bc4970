"""Issue 9: membership listeners each get every change, even when one of them raises."""

from __future__ import annotations

import pytest

from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import ZkClient, wait_for
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
