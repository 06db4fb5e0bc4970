"""Topics live: ``listunderreplicated --by-topic`` and the progress endpoint's ``by_topic`` section roll
the marked ledgers up by Pulsar tenant / namespace / topic from their ``pulsar/managed-ledger`` custom
metadata (others are "not Pulsar"); without the flag the output is upstream's, unchanged."""

from __future__ import annotations

import json

import pytest

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.testing.local_cluster import LocalCluster
from test_http import Http
from test_shell_support import P, arun, ok, shell, start_daemon, wait_until, zk_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("bytopic"), bookies=3, racks=1).up()
    try:
        port, _ = start_daemon(c, 0, auditorTopicMetricsMaxNamespaces="1")  # the auditor (first daemon)
        wait_until(lambda: "Auditor:" in shell(c, "whoisauditor").stdout, 30, what="an auditor")
        port1, _ = start_daemon(c, 1)
        yield c, Http(port), Http(port1)
    finally:
        c.down()


async def make_ledgers(cluster) -> dict[str, int]:
    bk = await BookKeeper.connect(cluster.zk_connect, P.root)
    out = {}
    try:
        for name, custom in (("orders", {"pulsar/managed-ledger": b"public/default/persistent/orders"}),
                             ("orders2", {"pulsar/managed-ledger": b"public/default/persistent/orders"}),
                             ("invoices", {"pulsar/managed-ledger": b"acme/billing/persistent/invoices"}),
                             ("plain", None)):
            lh = await bk.create_ledger(3, 2, 2, custom_metadata=custom)
            for _e in range(5):
                await lh.add_entry(b"x" * 100)
            await lh.close()
            out[name] = lh.ledger_id
    finally:
        await bk.close()
    return out


def test_by_topic_in_shell_and_progress(env):
    cluster, http, http1 = env
    ok(shell(cluster, "autorecovery", "-disable"))  # keep the markers: no worker re-checks them
    try:
        ids = arun(make_ledgers(cluster))

        async def mark():
            async with zk_session(cluster) as (_zk, _paths, urm):
                for name in ("orders", "orders2", "invoices", "plain"):
                    await urm.mark_underreplicated(ids[name], [cluster.bookie_id(0)])
        arun(mark())
        out = ok(shell(cluster, "listunderreplicated", "--by-topic"))
        assert "Tenant public: under-replicated 2" in out
        assert "Namespace acme/billing: under-replicated 1" in out
        o1, o2 = sorted((ids["orders"], ids["orders2"]))
        # E3 WQ2 AQ2 on 3 bookies with one marked missing: one readable copy left, below AQ → at risk
        assert f"Topic persistent://public/default/orders: under-replicated 2, at-risk 2, blocked 0, " \
               f"unrecoverable 0; ledgers {o1}, {o2}" in out
        assert f"Topic not Pulsar: under-replicated 1, at-risk 1, blocked 0, unrecoverable 0; ledgers {ids['plain']}" in out
        plain = ok(shell(cluster, "listunderreplicated"))  # upstream's output, unchanged
        assert "Tenant" not in plain and "Under replicated ledger count: 4" in plain
        assert all(str(i) in plain.splitlines() for i in ids.values())
        code, body = http.get("/api/v1/autorecovery/progress")
        assert code == 200, body
        by = json.loads(body)["by_topic"]
        assert by["namespaces"]["public/default"]["under_replicated"] == 2
        assert by["topics"]["persistent://acme/billing/invoices"]["ledger_ids"] == [ids["invoices"]]
        assert by["tenants"]["not Pulsar"]["under_replicated"] == 1 and by["truncated"] is False

        async def bounded():
            from autorecovery.admin import ops
            from autorecovery.admin.ops_topics import by_topic
            from autorecovery.config.load import load_settings

            async with ops.open_admin(load_settings(None, env={}, overrides={"zkServers": cluster.zk_connect})) as ctx:
                return await by_topic(ctx, {str(ids["invoices"]): "no eligible target"}, max_ledgers=3)
        small = arun(bounded())
        assert small["truncated"] is True and small["ledgers"] == 3  # the lowest three ids
        assert small["namespaces"]["acme/billing"]["blocked"] == 1

        # metrics: the auditor exports the top 1 namespace and "other" (2 = acme/billing + not Pulsar), so
        # the family sums to the unlabelled gauge; the other daemon exports no by-namespace series
        def series(h):
            text = h.get("/metrics")[1]
            return {ln for ln in text.splitlines() if ln.startswith("autorecovery_underreplicated_ledgers_by_namespace{")}
        want = {'autorecovery_underreplicated_ledgers_by_namespace{namespace="public/default"} 2.0',
                'autorecovery_underreplicated_ledgers_by_namespace{namespace="other"} 2.0'}
        wait_until(lambda: series(http) == want, 30, what=f"the by-namespace gauges {want}")
        assert 'autorecovery_underreplicated_ledgers 4.0' in http.get("/metrics")[1]
        assert series(http1) == set()
    finally:
        ok(shell(cluster, "autorecovery", "-enable"))
