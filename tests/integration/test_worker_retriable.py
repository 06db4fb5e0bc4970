"""The worker acts on ``AutoRecoveryError.retriable`` (issue 9): an error retrying cannot fix is
surfaced once and the ledger skipped until it is marked again, instead of being retried forever."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.config.sections import WorkerSettings
from autorecovery.aio import wait_for

from test_worker_support import FAST, open_env, wait_marker_gone

pytestmark = pytest.mark.integration


async def test_malformed_metadata_is_surfaced_not_retried_until_marked_again(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        bad = await env.write(b, 3, 3, 2, 5)
        good = await env.write(b, 3, 3, 2, 5)
        path = env.paths.ledger(bad.ledger_id)
        await env.zk.set(path, b"this is not ledger metadata")  # MalformedMetadataError: not retriable
        await env.um.mark_underreplicated(bad.ledger_id, [b[0]])
        w = await env.start_worker(WorkerSettings(**FAST))

        def fails() -> int:
            return sum(1 for lid, o in w.history if lid == bad.ledger_id and o == "failed")

        assert await wait_for(lambda: fails() >= 1, 20, interval_s=0.02), w.history
        # skipped from now on: the acquire order leaves it out, and progress says why
        assert list(w._order({bad.ledger_id, good.ledger_id})) == [good.ledger_id]
        reason = w.progress().blocked[bad.ledger_id]
        assert reason.startswith("not retriable: MalformedMetadataError") and path in reason, reason
        assert w.m.registry.get("replication_worker_exceptions_BKMetadataSerializationException").value == 1
        # other work goes on (a healthy ledger's marker is cleared) and the bad one was not tried again
        await env.um.mark_underreplicated(good.ledger_id, [b[0]])
        await wait_marker_gone(env, good.ledger_id)
        assert fails() == 1, w.history
        assert w.running
        # marked again (a new marker): tried exactly once more, then skipped again
        await env.zk.delete(env.paths.ur_marker(bad.ledger_id))
        await env.um.mark_underreplicated(bad.ledger_id, [b[1]])
        assert await wait_for(lambda: fails() == 2, 20, interval_s=0.02), w.history
        assert list(w._order({bad.ledger_id})) == []
    finally:
        await env.close()
