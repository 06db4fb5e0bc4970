"""``autorecovery shell decommissionbookie`` on a real cluster with a running daemon: completes on a
healthy cluster (progress, upstream success lines, cookie deleted), and with an unrecoverable ledger
it times out, exits non-zero and names that ledger and why (upstream waits forever, #3887/#2162)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
import urllib.request

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
    wait_until,
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
    lines = res.stdout.splitlines() or [res.stderr]
    assert lines[0] == f"Decommission of {victim} did not complete within 12s. Ledgers blocking completion:"
    mine = [l for l in lines if l.startswith(f"  ledger {lid}: ")]
    assert len(mine) == 1 and "unrecoverable" in mine[0], res.stdout
    assert f"ERROR: decommission of {victim} timed out; 1 ledger(s) still store data on it" in res.stderr
    assert arun(cookie_exists(cluster, victim)), "the cookie must stay when decommission did not complete"


def run_on_a_terminal(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """Run ``argv`` with stdout and stderr on one pseudo-terminal (as an operator sees it); returns
    (exit code, what the terminal received, ``\\r\\n`` read as ``\\n``)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return rc, out.decode(errors="replace").replace("\r\n", "\n")


def progress_doc(cluster) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.daemons[0].port}/api/v1/autorecovery/progress",
                                timeout=10) as r:
        return json.loads(r.read())


def test_decommission_on_a_terminal_ends_the_bar_and_words_the_block_as_progress_does(cluster):
    """Issue 28: the result was glued to the progress bar, and the block of an unrecoverable ledger was
    worded one way by decommissionbookie and another by the daemon's /progress."""
    lid, ens = next(iter(arun(write_ledgers(cluster, 1, 10, 1, 1, 1)).items()))
    victim = ens[0]
    cluster.kill_bookie(bookie_index(cluster, victim))
    wait_unregistered(cluster, victim)
    rc, screen = run_on_a_terminal([sys.executable, "-m", "autorecovery", "shell", "--zk", cluster.zk_connect,
                                    "decommissionbookie", "-bookieid", victim, "--timeout", "12", "--poll", "0.5"], 120)
    assert rc == 1, screen
    lines = screen.split("\n")
    assert any("ledgers left" in line for line in lines), screen  # the bar was drawn
    result = [line for line in lines if "did not complete within" in line]
    assert result == [f"Decommission of {victim} did not complete within 12s. Ledgers blocking completion:"], screen
    mine = [line for line in lines if line.startswith(f"  ledger {lid}: ")]
    assert len(mine) == 1 and "unrecoverable" in mine[0], screen
    shell_reason = mine[0].removeprefix(f"  ledger {lid}: ")
    # the daemon names the same block in the same words (the ledger stays marked after the timeout)
    wait_until(lambda: str(lid) in ((progress_doc(cluster).get("cluster") or {}).get("blocked") or {}), 30, 0.2,
               f"ledger {lid} blocked in /progress")
    assert progress_doc(cluster)["cluster"]["blocked"][str(lid)] == shell_reason
