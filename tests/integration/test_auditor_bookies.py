"""Auditor against real bookie processes (LocalCluster): a lost bookie is marked, and the periodic
check finds entries deleted or corrupted in a bookie's SQLite store while no bookie is down
(upstream AuditorLedgerCheckerTest.testSimpleLedger, AuditorPeriodicCheckTest.testIndexCorruption)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autorecovery import metrics
from autorecovery.bookie.storage import CURRENT_DIR, DB_FILENAME
from autorecovery.testing.bookie_tamper import flip_entry_bytes
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing.stock_bookie import StockBookie
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration
P = Paths("/ledgers")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), bookies=3).up()
    yield c
    c.down()


async def write_ledger(cluster, E, WQ, AQ, n=100, digest="CRC32C") -> tuple[int, tuple[str, ...]]:
    bk = await BookKeeper.connect(cluster.zk_connect, P.root)
    try:
        lh = await bk.create_ledger(E, WQ, AQ, digest=digest)
        for i in range(n):
            await lh.add_entry(b"e%03d" % i)
        await lh.close()
        return lh.ledger_id, lh.metadata.segments[0].ensemble
    finally:
        await bk.close()


def db_of(cluster, bookie_id: str) -> Path:
    i = next(i for i in cluster.bookies if cluster.bookie_id(i) == bookie_id)
    db = Path(cluster.bookies[i].data_dir) / CURRENT_DIR / DB_FILENAME
    assert db.exists(), db
    return db


def tamper(db: Path, sql: str, *args) -> int:
    con = sqlite3.connect(db, timeout=30)
    try:
        cur = con.execute(sql, args)
        con.commit()
        return cur.rowcount
    finally:
        con.close()


async def start_auditor(cluster, **kw):
    zk = await ZkClient(cluster.zk_connect, session_timeout_ms=6000).start()
    bookies = BookieClient(timeout_s=5)
    st = AuditorSettings(**{"auditor_periodic_check_interval": 0, "auditor_periodic_bookie_check_interval": 0, **kw})
    a = Auditor(zk, P, st, None, bookies, bookie_id="auditor:1", registry=metrics.MetricsRegistry())
    await a.start()
    return zk, bookies, a


async def test_periodic_check_finds_deleted_and_corrupted_entries(cluster):
    # AQ = WQ: every copy is acknowledged before close (with AQ < WQ the last copy may legitimately
    # be missing when the writer closes, and the checker would rightly report it)
    l1, ens1 = await write_ledger(cluster, 3, 3, 3)
    l2, ens2 = await write_ledger(cluster, 3, 3, 3)
    l3, _ = await write_ledger(cluster, 3, 3, 3)
    # corrupt the first entry of l1 on its first bookie, delete the last entry of l2 on its second
    assert flip_entry_bytes(db_of(cluster, ens1[0]).parent.parent, l1, [0], at=-4, count=4) == 1
    assert tamper(db_of(cluster, ens2[1]), "DELETE FROM entries WHERE ledger_id=? AND entry_id=99", l2) == 1
    zk, bookies, a = await start_auditor(cluster, auditor_periodic_check_interval=1)
    urm = UnderreplicationManager(zk, P)
    try:
        assert await wait_for(lambda: urm.get_marker(l2), 20)
        assert await wait_for(lambda: urm.get_marker(l1), 5)
        assert (await urm.get_marker(l1)).replicas == [ens1[0]]
        assert (await urm.get_marker(l2)).replicas == [ens2[1]]
        assert await urm.get_marker(l3) is None
        assert a._m["NUM_LEDGERS_CHECKED"].value >= 3
        assert await urm.get_check_ctime("checkallledgers") > 0
        for lid in (l1, l2):
            await zk.delete(P.ur_marker(lid))
    finally:
        await a.stop()
        await bookies.close()
        await zk.stop()


async def test_periodic_check_verifies_each_ledger_with_its_own_digest_type(cluster):
    """CRC32, MAC (HMAC: the index keeps no password, the check reads it) and DUMMY ledgers are not
    false-marked; a corrupt entry of a MAC ledger is found."""
    healthy = [(await write_ledger(cluster, 3, 3, 3, n=20, digest=d))[0] for d in ("CRC32", "MAC", "DUMMY")]
    bad, ens = await write_ledger(cluster, 3, 3, 3, n=20, digest="MAC")
    assert flip_entry_bytes(db_of(cluster, ens[1]).parent.parent, bad, [0], at=-4, count=4) == 1
    zk, bookies, a = await start_auditor(cluster)
    urm = UnderreplicationManager(zk, P)
    try:
        assert await wait_for(lambda: all(lid in a.index for lid in [*healthy, bad]), 10)
        res = await a.run_check("check_all_ledgers")
        assert res["failed"] == 0, res
        assert [lid for lid in healthy if await urm.get_marker(lid) is not None] == []
        assert (await urm.get_marker(bad)).replicas == [ens[1]]
        await zk.delete(P.ur_marker(bad))
    finally:
        await a.stop()
        await bookies.close()
        await zk.stop()


async def test_lost_bookie_gives_exactly_one_marker(cluster):
    lid, ens = await write_ledger(cluster, 3, 2, 2)
    zk, bookies, a = await start_auditor(cluster)
    urm = UnderreplicationManager(zk, P)
    try:
        victim = cluster.bookie_id(2)
        assert victim in ens
        cluster.kill_bookie(2)
        assert await wait_for(lambda: urm.get_marker(lid), 15)
        m = await urm.get_marker(lid)
        assert m.replicas == [victim]
        hexes = f"{(lid >> 48) & 0xffff:04x}/{(lid >> 32) & 0xffff:04x}/{(lid >> 16) & 0xffff:04x}/{lid & 0xffff:04x}"
        data, _ = await zk.get(f"/ledgers/underreplication/ledgers/{hexes}/urL{lid:010d}")
        assert data.decode().startswith(f'replica: "{victim}"\n')
        assert len([x async for x in urm.list_underreplicated(lambda r: victim in r) if x.ledger_id == lid]) == 1
    finally:
        await a.stop()
        await bookies.close()
        await zk.stop()
        cluster.start_bookie(2)


async def test_a_bookie_speaking_no_protocol_of_ours_is_skipped_never_false_marked(cluster):
    # issue 9: a bookie advertising neither protocol we speak must not turn into "missing entries"
    lid, ens = await write_ledger(cluster, 3, 3, 3)
    stock = StockBookie()
    zk, bookies, a = await start_auditor(cluster)
    urm = UnderreplicationManager(zk, P)
    try:
        await zk.create(P.available_bookie(stock.bookie_id), stock.registration(), ephemeral=True)
        assert await wait_for(lambda: stock.bookie_id in a.bookie_watcher.foreign, 5)
        assert a.bookie_watcher.foreign[stock.bookie_id] == ("thrift-rpc",)
        # the ledger's third copy now lives on the stock bookie (as in a mixed cluster)
        from autorecovery.zk.ledgers import LedgerStore

        await LedgerStore(zk, P).update(lid, lambda md: md.with_segment_replaced(0, {ens[2]: stock.bookie_id}))
        assert await wait_for(lambda: stock.bookie_id in a.index.get(lid).all_bookies(), 5)
        res = await a.run_check("check_all_ledgers")
        assert res["failed"] == 0, res
        assert await urm.get_marker(lid) is None, "a healthy ledger was marked because of the stock bookie"
        assert a.checker.skipped_foreign >= 1
        res = await a.run_check("replicas_check")
        assert lid not in res["no_replica"] + res["less_than_aq"] + res["less_than_wq"]
    finally:
        await a.stop()
        await bookies.close()
        await zk.stop()
        stock.close()
