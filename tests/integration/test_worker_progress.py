"""Progress follows the marker set on every worker (issue 9: a daemon kept reporting a ledger left
after the queue was empty). Each worker's backlog follows markers created or deleted by anyone (the
marker watches), not a refresh every 10 s; a ledger finished elsewhere leaves its progress at once."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.config.sections import WorkerSettings
from autorecovery.aio import wait_for

from test_worker_support import FAST, open_env

pytestmark = pytest.mark.integration


async def test_every_worker_follows_markers_added_and_removed_elsewhere(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=3)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        lhs = [await env.write(b, 3, 3, 2, 5, size=1000) for _ in range(6)]
        await env.um.disable()  # the workers take nothing: only their view of the queue changes
        ws = [await env.start_worker(WorkerSettings(**FAST)) for _ in range(2)]
        for w in ws:  # the first refresh saw an empty queue
            assert await wait_for(lambda w=w: w._refresh_task is not None and w.progress().ledgers_remaining == 0, 5)
        for lh in lhs:
            await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        # the old 10 s refresh would still show 0 here
        for w in ws:
            ok = await wait_for(lambda w=w: w.progress().ledgers_remaining == 6, 3, interval_s=0.02)
            assert ok, w.progress()
            assert w.progress().eta_s is None  # nothing completed yet: no rate, no made-up ETA
        # another worker (here: the operator) finishes them: every worker reports nothing left
        for lh in lhs:
            await env.zk.delete(env.paths.ur_marker(lh.ledger_id))
        for w in ws:
            ok = await wait_for(lambda w=w: w.progress().ledgers_remaining == 0, 3, interval_s=0.02)
            snap = w.progress()
            assert ok, snap
            assert snap.eta_s == 0.0 and snap.blocked == {} and snap.bytes_remaining == 0
            assert w.m.registry.get("autorecovery_worker_ledgers_remaining").value == 0
        await env.um.enable()
    finally:
        await env.close()
