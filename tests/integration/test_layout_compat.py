"""Issue 10 on a real cluster: a cluster formatted with ``LongHierarchicalLedgerManagerFactory`` is
audited, listed and healed like a hierarchical one; a v2 ledger without ctime that the worker
re-replicates stays v2 without ctime; a configuration naming another ledger manager than ``LAYOUT`` is
refused before anything is created."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.ledger import formats
from autorecovery.ledger.layout import LONG_HIERARCHICAL
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore, read_layout
from autorecovery.zk.paths import Paths
from test_shell_support import arun, shell, start_daemon, wait_until

pytestmark = pytest.mark.integration


async def _write(cluster: LocalCluster, n: int, entries: int = 40) -> dict[int, tuple[str, ...]]:
    bk = await BookKeeper.connect(cluster.zk_connect, "/ledgers")
    out = {}
    try:
        for _ in range(n):
            lh = await bk.create_ledger(3, 2, 2)
            for e in range(entries):
                await lh.add_entry(bytes([e % 251]) * 300)
            await lh.close()
            out[lh.ledger_id] = tuple(lh.metadata.segments[0].ensemble)
    finally:
        await bk.close()
    return out


async def _store(cluster: LocalCluster):
    zk = await ZkClient(cluster.zk_connect).start()
    paths = Paths("/ledgers")
    return zk, LedgerStore(zk, paths.with_layout(await read_layout(zk, paths)))


async def _read_back(cluster: LocalCluster, ledger_id: int) -> int:
    bk = await BookKeeper.connect(cluster.zk_connect, "/ledgers")
    try:
        lh = await bk.open_ledger(ledger_id)
        return len(await lh.read_entries(0, lh.last_add_confirmed))
    finally:
        await bk.close()


def _ensembles(cluster: LocalCluster, ids) -> dict[int, set[str]]:
    async def go():
        zk, store = await _store(cluster)
        try:
            return {lid: (await store.read(lid))[0].all_bookies() for lid in ids}
        finally:
            await zk.stop()
    return arun(go())


def test_long_hierarchical_cluster_is_listed_audited_and_healed(tmp_path):
    cluster = LocalCluster(tmp_path / "long", bookies=4, racks=2, ledger_manager=LONG_HIERARCHICAL).up()
    try:
        written = arun(_write(cluster, 6))
        from kazoo.client import KazooClient
        kz = KazooClient(hosts=cluster.zk_connect)
        kz.start(timeout=30)
        try:
            # every id split 3-4-4-4-4, as upstream LongHierarchicalLedgerManager (no 2-4-4 tree at all)
            for lid in written:
                d = f"{lid:019d}"
                assert kz.exists(f"/ledgers/{d[:3]}/{d[3:7]}/{d[7:11]}/{d[11:15]}/L{d[15:]}"), lid
            assert not [c for c in kz.get_children("/ledgers") if len(c) == 2 and c.isdigit()]
        finally:
            kz.stop()
            kz.close()
        lid = min(written)
        r = shell(cluster, "ledgermetadata", "-l", str(lid))
        assert r.exit_code == 0, r.output
        assert "does not exist" not in r.output and str(lid) in r.output
        r = shell(cluster, "placementcheck")
        assert r.exit_code == 0, r.output
        assert f"Closed ledgers checked: {len(written)} " in r.output, r.output

        # heal: an auditor + worker on a surviving node re-replicates the killed bookie's ledgers
        victim_i = 3
        victim = cluster.bookie_id(victim_i)
        affected = [lid for lid, ens in written.items() if victim in ens]
        assert affected
        start_daemon(cluster, 0)
        cluster.kill_bookie(victim_i)
        wait_until(lambda: all(victim not in ens for ens in _ensembles(cluster, affected).values()), 90, 0.5,
                   f"ledgers {affected} moved off {victim}")
        for lid in affected:
            assert arun(_read_back(cluster, lid)) == 40
    finally:
        cluster.down()


def test_v2_ledger_rewritten_by_the_worker_stays_v2_without_ctime(tmp_path):
    cluster = LocalCluster(tmp_path / "v2", bookies=4, racks=2).up()
    try:
        written = arun(_write(cluster, 3))
        victim_i = 3
        victim = cluster.bookie_id(victim_i)
        lid = next(lid for lid, ens in written.items() if victim in ens)

        async def to_v2() -> None:
            # what an old (4.2-4.8) client wrote: text format, no ctime, no cToken
            zk, store = await _store(cluster)
            try:
                md, version = await store.read(lid)
                from dataclasses import replace
                old = replace(md, format_version=2, store_ctime=False, ctime=0)
                await zk.set(store.paths.ledger(lid), formats.serialize_v2(old), version)
            finally:
                await zk.stop()

        arun(to_v2())
        start_daemon(cluster, 0)
        cluster.kill_bookie(victim_i)
        wait_until(lambda: victim not in _ensembles(cluster, [lid])[lid], 90, 0.5, f"ledger {lid} healed")

        async def raw() -> bytes:
            zk, store = await _store(cluster)
            try:
                return (await zk.get(store.paths.ledger(lid)))[0]
            finally:
                await zk.stop()

        data = arun(raw())
        assert data.startswith(b"BookieMetadataFormatVersion\t2\n"), data[:60]
        assert b"ctime" not in data and b"cToken" not in data
        assert arun(_read_back(cluster, lid)) == 40
    finally:
        cluster.down()


def test_configured_ledger_manager_that_disagrees_with_layout_is_refused(tmp_path):
    cluster = LocalCluster(tmp_path / "mismatch", bookies=1).up()
    try:
        assert "/" not in cluster.zk_connect
        uri = f"zk+longhierarchical://{cluster.zk_connect}/ledgers"
        proc = subprocess.run([sys.executable, "-m", "autorecovery", "run", "-D", f"metadataServiceUri={uri}",
                               "--http-port", "0"], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert "does not match the existing layout org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory" \
            in proc.stderr and "metadataServiceUri" in proc.stderr, proc.stderr[-2000:]
        assert "AUTORECOVERY_READY" not in proc.stdout
        from kazoo.client import KazooClient
        kz = KazooClient(hosts=cluster.zk_connect)
        kz.start(timeout=30)
        try:
            assert kz.exists("/ledgers/underreplication/auditorelection") is None or \
                kz.get_children("/ledgers/underreplication/auditorelection") == []
        finally:
            kz.stop()
            kz.close()
    finally:
        cluster.down()


def test_config_check_cluster_flags_a_scheme_that_disagrees_with_layout(tmp_path):
    """Issue 10: ``config check`` must flag a metadataServiceUri scheme that disagrees with LAYOUT."""
    from test_shell_support import cli

    cluster = LocalCluster(tmp_path / "check", bookies=1, ledger_manager=LONG_HIERARCHICAL).up()
    try:
        ok = cli("config", "check", "--cluster", "-D", f"metadataServiceUri=zk+longhierarchical://{cluster.zk_connect}/ledgers")
        assert ok.exit_code == 0, ok.output
        assert "LongHierarchicalLedgerManagerFactory:1 (configured by metadataServiceUri)" in ok.output
        bad = cli("config", "check", "--cluster", "-D", f"metadataServiceUri=zk+hierarchical://{cluster.zk_connect}/ledgers")
        assert bad.exit_code == 2, bad.output
        assert "does not match the existing layout org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory" \
            in bad.stderr and "zk+longhierarchical" in bad.stderr
        follows = cli("config", "check", "--cluster", "--zk", cluster.zk_connect)
        assert follows.exit_code == 0 and "not configured: follows LAYOUT" in follows.output, follows.output
    finally:
        cluster.down()
