"""Gauges that tell the truth (issue 9), on two real daemon processes and a real ZooKeeper.

``auditor_NUM_UNDER_REPLICATED_LEDGERS`` (upstream: an OpStats per audit) "stayed 12 while the queue
was empty". The cluster-wide gauges are exported by the elected auditor only (0 on the other node), so
``sum()`` over the nodes is the number of markers in ZooKeeper at every step; they follow every
marker change, go back to 0 when the queue empties, and move to the new auditor on failover.
"""

from __future__ import annotations

import json
import signal
import urllib.request

import pytest

from test_shell_support import arun, start_daemon, wait_until, write_ledgers, zk_session

pytestmark = pytest.mark.integration

CLUSTER = ("autorecovery_underreplicated_ledgers", "autorecovery_underreplicated_bytes",
           "autorecovery_unrecoverable_ledgers", "autorecovery_underreplicated_oldest_age_seconds")


def scrape(port: int) -> dict[str, float]:
    """Unlabelled samples of /metrics as name → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def progress(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/autorecovery/progress", timeout=10) as r:
        return json.loads(r.read())


async def markers(cluster) -> set[int]:
    async with zk_session(cluster) as (_zk, _paths, urm):
        return await urm.list_marked_ids()


def test_cluster_gauges_only_on_the_auditor_follow_markers_and_return_to_zero(cluster_factory):
    cluster = cluster_factory(bookies=3)
    written = arun(write_ledgers(cluster, 4, 20, 3, 2, 2, size=500))
    real = sorted(written)
    fake = list(range(9000, 9008))  # markers of ledgers that do not exist: workers drop them

    async def setup() -> int:
        async with zk_session(cluster) as (zk, paths, urm):
            await urm.disable()  # the workers wait: the markers stay while we look
            total = 0
            from autorecovery.zk.ledgers import LedgerStore
            for lid in real:
                md, _ = await LedgerStore(zk, paths).read(lid)
                total += md.length
            return total

    real_bytes = arun(setup())
    assert real_bytes == 4 * 20 * 500
    ports = {i: start_daemon(cluster, i)[0] for i in (0, 1)}

    def gauges() -> dict[int, dict[str, float]]:
        return {i: scrape(p) for i, p in ports.items()}

    def elected() -> list[int]:
        g = gauges()
        return [i for i in g if g[i].get("autorecovery_auditor_elected") == 1.0]

    wait_until(lambda: len(elected()) == 1, 30, 0.1, "one node exporting autorecovery_auditor_elected 1")
    auditor = elected()[0]
    other = 1 - auditor
    g = gauges()
    assert g[other]["autorecovery_auditor_elected"] == 0.0
    assert all(g[i]["autorecovery_enabled"] == 0.0 for i in g)  # the disable znode exists
    assert all(g[i][n] == 0.0 for i in g for n in CLUSTER)  # nothing marked yet: present, and 0

    async def mark() -> None:
        async with zk_session(cluster) as (zk, paths, urm):
            await urm.mark_many({lid: [cluster.bookie_id(0)] for lid in real + fake})
            await zk.create(f"{paths.unrecoverable}/urL{fake[0]:010d}", b"{}", makepath=True)

    arun(mark())

    def summed(name: str) -> float:
        g = gauges()
        return sum(g[i][name] for i in g)

    wait_until(lambda: summed("autorecovery_underreplicated_ledgers") == 12, 20, 0.1, "12 marked ledgers")
    assert len(arun(markers(cluster))) == 12
    g = gauges()
    assert g[auditor]["autorecovery_underreplicated_ledgers"] == 12
    assert g[auditor]["autorecovery_underreplicated_bytes"] == real_bytes  # fake ledgers have no length
    wait_until(lambda: gauges()[auditor]["autorecovery_unrecoverable_ledgers"] == 1, 20, 0.1, "1 unrecoverable")
    assert all(g[other][n] == 0.0 for n in CLUSTER), g[other]  # non-auditor: 0, so sum() is right
    wait_until(lambda: gauges()[auditor]["autorecovery_underreplicated_oldest_age_seconds"] > 0.0, 20, 0.1,
               "the oldest marker's age growing")

    # failover: the auditor's host stops; the other node takes over the cluster gauges
    cluster.stop_daemon(auditor, signal.SIGTERM)
    del ports[auditor]
    wait_until(lambda: gauges()[other]["autorecovery_auditor_elected"] == 1.0, 30, 0.1, "failover")
    wait_until(lambda: gauges()[other]["autorecovery_underreplicated_ledgers"] == 12, 20, 0.1, "12 on the new auditor")
    assert gauges()[other]["autorecovery_underreplicated_bytes"] == real_bytes

    # enable: the worker drains the queue (healthy ledgers: nothing to copy; fake ones: deleted)
    async def enable() -> None:
        async with zk_session(cluster) as (_zk, _paths, urm):
            await urm.enable()

    arun(enable())
    wait_until(lambda: gauges()[other]["autorecovery_enabled"] == 1.0, 20, 0.1, "enabled 1")
    wait_until(lambda: not arun(markers(cluster)), 60, 0.1, "the queue to empty")
    # the gauge goes back to 0 (it stayed at 12 before), every figure with it
    wait_until(lambda: gauges()[other]["autorecovery_underreplicated_ledgers"] == 0, 20, 0.1, "0 marked")
    g = gauges()[other]
    assert all(g[n] == 0.0 for n in CLUSTER), g
    assert g["autorecovery_worker_bytes_remaining"] == 0 and g["autorecovery_worker_ledgers_remaining"] == 0
    assert g["autorecovery_worker_ledgers_blocked"] == 0
    # progress clears finished work: nothing left, ETA 0, nothing blocked
    wait_until(lambda: progress(ports[other])["cluster"]["ledgers_remaining"] == 0, 20, 0.1, "progress cleared")
    doc = progress(ports[other])
    assert doc["cluster"]["eta_s"] == 0.0 and doc["cluster"]["blocked"] == {} and doc["worker"]["ledgers_in_progress"] == 0
