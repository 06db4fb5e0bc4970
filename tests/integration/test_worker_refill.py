"""A segment with a dead member and a live member lacking entries, and one spare (reference bookies).

Six bookies, an E5/WQ3/AQ2 ledger on five of them. One member lacks the last entries of its share (what a
bookie restarted in the middle of a write keeps: the client left the entries it acknowledged without it
in the old segment), then another member dies. The only bookie outside the ensemble is one spare. The
worker used to serve the bad indexes in index order: the live member took the spare, the dead one got no
target (``no target bookie for ensemble index 2``) and the ledger stayed marked. Now the dead member
gets the spare and the live one is refilled in place.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from autorecovery.bookie.storage import CURRENT_DIR, DB_FILENAME
from autorecovery.ledger.striping import index_stores
from autorecovery.roles.checker import LedgerChecker
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore

from test_worker_support import entries_on, index_of, open_env, read_all_from, wait_marker_gone

pytestmark = pytest.mark.integration


def _delete_entries(cluster, bookie_id: str, ledger_id: int, first: int) -> int:
    db = Path(cluster.bookies[index_of(cluster, bookie_id)].data_dir) / CURRENT_DIR / DB_FILENAME
    con = sqlite3.connect(db, timeout=30)
    try:
        cur = con.execute("DELETE FROM entries WHERE ledger_id=? AND entry_id >= ?", (ledger_id, first))
        con.commit()
        return cur.rowcount
    finally:
        con.close()


async def test_dead_member_replaced_and_live_member_lacking_entries_refilled_in_place(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=6)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        ens, spare = b[:5], b[5]
        n = 50
        lh = await env.write(ens, 5, 3, 2, n, full=True)
        lid = lh.ledger_id
        share = {i: [e for e in range(n) if index_stores(i, e, 5, 3)] for i in range(5)}
        # index 1 lacks the last entries of its share (49 is its last one: the checker's sample sees it)
        assert _delete_entries(cluster, ens[1], lid, 40) == len([e for e in share[1] if e >= 40])
        assert await wait_for(lambda: _lacks(env, ens[1], lid, 49), 10)
        await env.stop_bookie(ens[2])  # index 2 dies
        await env.um.mark_many({lid: [ens[2]]})  # what the auditor marks for the lost bookie
        w = await env.start_worker()
        await wait_marker_gone(env, lid, 60)
        md, _ = await LedgerStore(env.zk, env.paths).read(lid)
        assert len(md.segments) == 1
        healed = md.segments[0].ensemble
        assert list(healed) == [ens[0], ens[1], spare, ens[3], ens[4]], (healed, w.history[-10:])
        for i, bookie in enumerate(healed):  # each member holds its whole share again, read from it
            assert await entries_on(env, bookie, lid) == share[i], bookie
        # what a later check sees: nothing bad (every entry of every member read)
        checker = LedgerChecker(env.bk.bookies, lambda: env.bk.watcher.available)
        assert await checker.check(lid, md, verify_all=frozenset(healed)) == []
        await read_all_from(env, lid, n)
    finally:
        await env.close()


async def _lacks(env, bookie: str, lid: int, entry_id: int) -> bool:
    return entry_id not in await entries_on(env, bookie, lid)
