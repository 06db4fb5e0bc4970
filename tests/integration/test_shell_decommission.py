"""``autorecovery shell decommissionbookie`` on a real cluster with a running daemon: completes on a
healthy cluster (progress, upstream success lines, cookie deleted), and with an unrecoverable ledger
it times out, exits non-zero and names that ledger and why (upstream waits forever, #3887/#2162)."""

from __future__ import annotations

import pytest

from autorecovery.zk.ledgers import LedgerStore
from test_shell_support import (
    arun,
    bookie_index,
    cluster_with_daemon,
    metadata,
    read_all,
    shell,
    wait_unregistered,
    write_ledgers,
    zk_session,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with cluster_with_daemon(tmp_path_factory.mktemp("decom"), racks=1) as c:
        yield c


async def cookie_exists(cluster, bookie_id) -> bool:
    async with zk_session(cluster) as (zk, paths, _urm):
        return await zk.exists(paths.cookie(bookie_id)) is not None


def test_decommission_live_bookie_is_refused(cluster):
    res = shell(cluster, "decommissionbookie", "-bookieid", cluster.bookie_id(1), "--timeout", "5")
    assert res.exit_code == 1 and f"bookie {cluster.bookie_id(1)} is not shutdown yet" in res.stderr
    res = shell(cluster, "decommissionbookie", "-bookieid", "garbage")
    assert res.exit_code == 2 and "bad bookie id 'garbage'" in res.stderr


def test_decommission_completes_on_healthy_cluster(cluster):
    victim = cluster.bookie_id(3)
    # a long delay: the auditor would wait 10 minutes; decommission must not
    assert shell(cluster, "lostbookierecoverydelay", "-set", "600").exit_code == 0
    written = arun(write_ledgers(cluster, 6, 40, 3, 2, 2, size=512))
    on_victim = [lid for lid, ens in written.items() if victim in ens]
    assert on_victim, "no ledger landed on the victim; placement is random but 6 ledgers of E3 over 4 bookies"
    payloads = {lid: arun(read_all(cluster, lid)) for lid in written}
    cluster.kill_bookie(3)
    wait_unregistered(cluster, victim)
    res = shell(cluster, "decommissionbookie", "-bookieid", victim, "--timeout", "90")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.stdout.splitlines() == [
        f"The ledgers stored in the given decommissioning bookie: {victim} are properly replicated",
        f"Cookie of the decommissioned bookie: {victim} is deleted successfully",
    ]
    assert "ledgers left" in res.stderr and "ETA" in res.stderr  # progress line
    assert not arun(cookie_exists(cluster, victim))
    for lid in written:
        assert victim not in arun(metadata(cluster, lid)).all_bookies()
        assert arun(read_all(cluster, lid)) == payloads[lid]

    async def drop():  # leave only what the next test creates
        async with zk_session(cluster) as (zk, paths, _urm):
            for lid in written:
                await LedgerStore(zk, paths).delete(lid)
    arun(drop())


def test_decommission_times_out_naming_unrecoverable_ledger(cluster):
    lid, ens = next(iter(arun(write_ledgers(cluster, 1, 10, 1, 1, 1)).items()))
    victim = ens[0]
    cluster.kill_bookie(bookie_index(cluster, victim))
    wait_unregistered(cluster, victim)
    res = shell(cluster, "decommissionbookie", "-bookieid", victim, "--timeout", "12")
    assert res.exit_code == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"Decommission of {victim} did not complete within 12s. Ledgers blocking completion:"
    mine = [l for l in lines if l.startswith(f"  ledger {lid}: ")]
    assert len(mine) == 1 and "unrecoverable" in mine[0], res.stdout
    assert f"ERROR: decommission of {victim} timed out; 1 ledger(s) still store data on it" in res.stderr
    assert arun(cookie_exists(cluster, victim)), "the cookie must stay when decommission did not complete"
