"""``shell initnewcluster`` creates exactly the znodes upstream 4.17's does, and everything else is
created where it is first needed (issue 28 item 6). Real ZooKeeper, a reference bookie, the daemon.

Upstream: ``ZKRegistrationManager.initNewCluster`` creates the root, ``available``,
``available/readonly`` and ``INSTANCEID`` in one transaction, then ``LAYOUT``
(``AbstractZkLedgerManagerFactory.newLedgerManagerFactory``). tests/interop/test_initnewcluster_upstream.py
compares with the tree upstream's own shell creates.
"""

from __future__ import annotations

import asyncio

from click.testing import CliRunner
from kazoo.client import KazooClient

from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.cli.main import main
from autorecovery.testing.znodes import UUID_V4 as UUID
from autorecovery.testing.znodes import znode_tree as tree
from autorecovery.config.load import load_settings
from autorecovery.daemon import Daemon
from autorecovery.testing.zk_server import free_port
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths

#: what upstream's initnewcluster leaves under the ledgers root (relative paths → data; INSTANCEID: a UUID)
UPSTREAM_TREE = {"": b"", "/LAYOUT": b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
                 "/INSTANCEID": None, "/available": b"", "/available/readonly": b""}




def shell(*args: str):
    return CliRunner().invoke(main, ["shell", *args], env={})


def test_initnewcluster_creates_exactly_upstreams_znodes(zk_connect):
    res = shell("initnewcluster", "--zk", zk_connect)
    assert res.exit_code == 0, res.output
    got = tree(zk_connect, "/ledgers")
    assert set(got) == set(UPSTREAM_TREE), sorted(set(got) ^ set(UPSTREAM_TREE))
    assert UUID.fullmatch(got.pop("/INSTANCEID"))
    assert got == {k: v for k, v in UPSTREAM_TREE.items() if k != "/INSTANCEID"}
    # formatted already: upstream's refusal, or success without change with --if-absent (ours)
    before = tree(zk_connect, "/ledgers")
    res = shell("initnewcluster", "--zk", zk_connect)
    assert res.exit_code == 1 and "Ledger root path: /ledgers already exists" in res.output
    assert shell("initnewcluster", "--zk", zk_connect, "--if-absent").exit_code == 0
    assert tree(zk_connect, "/ledgers") == before  # nothing overwritten (INSTANCEID included)


def test_initnewcluster_completes_an_empty_root_and_creates_its_parents(zk_connect):
    """Ours, where upstream refuses: a pre-created empty root is formatted, missing parents are created;
    the tree is upstream's either way."""
    kz = KazooClient(zk_connect)
    kz.start(10)
    try:
        kz.ensure_path("/pre/ledgers")
    finally:
        kz.stop()
        kz.close()
    for root in ("/pre/ledgers", "/new/parent/ledgers"):
        res = shell("initnewcluster", "--zk", zk_connect, "--ledgers-root", root)
        assert res.exit_code == 0 and f"Successfully initiated cluster at {root}" in res.output, res.output
        assert set(tree(zk_connect, root)) == set(UPSTREAM_TREE)


def test_what_initnewcluster_leaves_out_is_created_where_needed(zk_connect, tmp_path):
    """On a root formatted as upstream formats it: the first bookie creates ``cookies/``, the daemon the
    under-replication tree, its election and lostBookieRecoveryDelay, a shell command that reads the
    under-replication tree works, and the first ledger creates ``idgen``."""
    assert shell("initnewcluster", "--zk", zk_connect).exit_code == 0
    assert set(tree(zk_connect, "/ledgers")) == set(UPSTREAM_TREE)
    paths = Paths("/ledgers")
    settings = load_settings(None, env={}, overrides={
        "zkServers": zk_connect, "bookieId": "127.0.0.1:3181", "lostBookieRecoveryDelay": "7", "zkTimeout": "6000",
        "auditorPeriodicCheckInterval": "3600", "auditorPeriodicBookieCheckInterval": "0",
        "httpServerEnabled": "false", "shutdownTimeoutSeconds": "10", "prometheusStatsHttpPort": str(free_port()),
        "prometheusStatsHttpAddress": "127.0.0.1"})

    async def flow() -> None:
        bookie = await BookieServer(BookieConfig(zk=zk_connect, data_dir=tmp_path / "b1", port=0)).start()
        d = Daemon(settings)
        zk = await ZkClient.from_settings(settings).start()
        try:
            assert await zk.exists(paths.cookie(bookie.bookie_id)), "the bookie's cookie"
            await d.start()
            assert await wait_for(lambda: d.auditor is not None, 20), "auditor elected"
            assert await wait_for(lambda: zk.exists(paths.check_all_ledgers_ctime), 30), "checkAllLedgers ctime"
            for p in (paths.ur_layout, paths.ur_ledgers, paths.ur_locks, paths.lost_bookie_recovery_delay,
                      paths.auditor_election):
                assert await zk.exists(p), p
            assert (await zk.get(paths.ur_layout))[0] == b'type: "BASIC"\nversion: 1\n'
            await LedgerStore(zk, paths).new_ledger_id()
            assert await zk.exists(paths.idgen)
        finally:
            await zk.stop()
            await d.stop()
            await bookie.stop()

    asyncio.run(flow())
    res = shell("listunderreplicated", "--zk", zk_connect)
    assert res.exit_code == 0, res.output
