"""A bookie that is up but misses entries inside its share (issue 26: the chaos campaign's one-way
loss left such copies; the replicas check, with ``auditorReplicasCheckMarkUnderReplicated``, marks the
ledger naming that bookie). The worker's first-and-last sample cannot see the hole: before the fix it
passed the ledger as ``nothing-to-do``, deleted the marker and the copies stayed missing. Now the
bookies a marker names are checked in full from their entry listings, and the hole is healed."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from autorecovery.bookie.storage import CURRENT_DIR, DB_FILENAME
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore

from test_worker_support import entries_on, index_of, open_env, read_all_from, wait_marker_gone

pytestmark = pytest.mark.integration


def _delete_entries(cluster, bookie_id: str, ledger_id: int, first: int, last: int) -> int:
    db = Path(cluster.bookies[index_of(cluster, bookie_id)].data_dir) / CURRENT_DIR / DB_FILENAME
    con = sqlite3.connect(db, timeout=30)
    try:
        cur = con.execute("DELETE FROM entries WHERE ledger_id=? AND entry_id BETWEEN ? AND ?",
                          (ledger_id, first, last))
        con.commit()
        return cur.rowcount
    finally:
        con.close()


async def test_a_hole_inside_a_live_bookies_share_is_healed(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=4)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        n = 40
        lh = await env.write(b[:3], 3, 3, 3, n, full=True)
        lid = lh.ledger_id
        assert _delete_entries(cluster, b[1], lid, 10, 19) == 10
        assert await wait_for(lambda: _lacks(env, b[1], lid), 10)
        await env.um.mark_many({lid: [b[1]]})  # what the replicas check marks for such a hole
        w = await env.start_worker()
        await wait_marker_gone(env, lid, 60)
        md, _ = await LedgerStore(env.zk, env.paths).read(lid)
        ensemble = md.segments[0].ensemble
        assert b[1] not in ensemble, (ensemble, w.history[-10:])
        for bookie in ensemble:  # every copy is back: each bookie of the ensemble holds all 40
            assert await entries_on(env, bookie, lid) == list(range(n)), bookie
        await read_all_from(env, lid, n)
    finally:
        await env.close()


async def _lacks(env, bookie: str, lid: int) -> bool:
    return 15 not in await entries_on(env, bookie, lid)
