"""Every ``autorecovery shell`` command against a real local cluster (ZooKeeper + 4 bookie processes in
2 racks + one autorecovery daemon), output wording checked (upstream BookieShell wording)."""

from __future__ import annotations

import re

import json
import subprocess
import sys
import time

import pytest

from autorecovery.bookie.disk import write_fake_disk
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.underreplication import UnderreplicationManager
from test_shell_support import (
    arun,
    cli,
    cluster_with_daemon,
    create_metadata_ledger,
    metadata,
    ok,
    read_all,
    shell,
    snapshot,
    write_ledgers,
    zk_session,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with cluster_with_daemon(tmp_path_factory.mktemp("shell"), racks=2) as c:
        yield c


def test_whoisauditor(cluster):
    out = ok(shell(cluster, "whoisauditor"))
    assert out == f"Auditor: {cluster.bookie_id(0)}\n"


def test_clusterinfo_json(cluster):
    info = json.loads(ok(shell(cluster, "clusterinfo", "--json")))
    assert info == {
        "auditorElected": True, "auditorId": cluster.bookie_id(0), "clusterUnderReplicated": False,
        "ledgerReplicationEnabled": True, "totalBookiesCount": 4, "writableBookiesCount": 4,
        "readonlyBookiesCount": 0, "unavailableBookiesCount": 0,
    }


def test_listbookies_with_racks(cluster):
    out = ok(shell(cluster, "listbookies", "--racks")).splitlines()
    ids = sorted(cluster.bookie_ids())

    def upstream(b):  # CommandHelpers.getBookieSocketAddrStringRepresentation for an IP-literal bookie id
        host, port = b.rsplit(":", 1)
        return f"BookieID:{b}, IP:{host}, Port:{port}, Hostname:"

    assert out[0] == "ReadWrite Bookies :"
    for b, line in zip(ids, out[1:5], strict=True):
        assert line.startswith(upstream(b)) and line.endswith(f"\track={cluster.rack_of(cluster.bookie_ids().index(b))}")
    assert out[5] == "All Bookies :"
    for b, line in zip(ids, out[6:10], strict=True):
        rack = cluster.rack_of(cluster.bookie_ids().index(b))
        assert line.startswith(upstream(b)) and line.endswith(f"\track={rack}\tstate=writable")
    assert not any("rack=" in line for line in ok(shell(cluster, "listbookies")).splitlines())
    only_rw = ok(shell(cluster, "listbookies", "-rw")).splitlines()
    assert only_rw[0] == "ReadWrite Bookies :" and "All Bookies :" not in only_rw


def test_bookieinfo_upstream_wording(cluster):
    for i in cluster.bookies:
        write_fake_disk(cluster.bookies[i].data_dir, total_bytes=2_000_000_000, free_bytes=1_234_567_890 + i)
    try:
        out = ok(shell(cluster, "bookieinfo")).splitlines()
    finally:
        for i in cluster.bookies:
            write_fake_disk(cluster.bookies[i].data_dir)
    assert out[0] == "Free disk space info:"
    rows = out[1:5]
    for i, b in enumerate(sorted(cluster.bookie_ids())):
        idx = cluster.bookie_ids().index(b)
        assert rows[i].startswith(f"BookieID:{b}, IP:")
        assert rows[i].endswith(f": \tFree: {1_234_567_890 + idx}(1.234GB)\tTotal: 2000000000(2GB)")
    free = sum(1_234_567_890 + i for i in range(4))
    assert out[5] == f"Total free disk space in the cluster:\t{free}(4.938GB)"
    assert out[6] == "Total disk capacity in the cluster:\t8000000000(8GB)"


def test_autorecovery_toggle(cluster):
    assert ok(shell(cluster, "autorecovery")) == "Autorecovery is enabled.\n"
    assert ok(shell(cluster, "autorecovery", "-enable")) == "Autorecovery already enabled. Doing nothing\n"
    try:
        assert ok(shell(cluster, "autorecovery", "-disable")) == "Disabling autorecovery\n"
        assert ok(shell(cluster, "autorecovery")) == "Autorecovery is disabled.\n"
        assert ok(shell(cluster, "autorecovery", "-disable")) == "Autorecovery already disabled. Doing nothing\n"
    finally:
        assert ok(shell(cluster, "autorecovery", "-enable")) == "Enabling autorecovery\n"
    res = shell(cluster, "autorecovery", "-enable", "-disable")
    assert res.exit_code == 2 and "only one of -e/--enable, -d/--disable and -s/--status" in res.stderr


def test_lostbookierecoverydelay(cluster):
    assert ok(shell(cluster, "lostbookierecoverydelay", "-get")) == "LostBookieRecoveryDelay value in ZK: 0\n"
    try:
        assert ok(shell(cluster, "lostbookierecoverydelay", "-set", "7")) == \
            "Successfully set LostBookieRecoveryDelay value in ZK: 7\n"
        assert ok(shell(cluster, "lostbookierecoverydelay", "-get")) == "LostBookieRecoveryDelay value in ZK: 7\n"
    finally:
        ok(shell(cluster, "lostbookierecoverydelay", "-set", "0"))
    res = shell(cluster, "lostbookierecoverydelay")
    assert res.exit_code == 2 and "exactly one of -g/--get and -s/--set" in res.stderr
    res = shell(cluster, "lostbookierecoverydelay", "-set", "-5")
    assert res.exit_code == 2 and "bad lostBookieRecoveryDelay '-5'" in res.stderr


def test_triggeraudit(cluster):
    out = ok(shell(cluster, "triggeraudit"))
    assert out == "Resetting LostBookieRecoveryDelay value: 0, to kickstart audit task\n"


def test_forceauditchecks(cluster):
    before = int(time.time() * 1000)
    out = ok(shell(cluster, "forceauditchecks", "-calc", "-rc")).splitlines()
    assert out[0].startswith("Resetting CheckAllLedgersCTime to : ")
    assert out[1].startswith("Resetting ReplicasCheckCTime to : ")
    assert "REBOOTED" in out[2]

    async def ctimes():
        async with zk_session(cluster) as (_zk, _p, urm):
            return (await urm.get_check_ctime("checkallledgers"), await urm.get_check_ctime("replicascheck"))

    calc, rc = arun(ctimes())
    for v in (calc, rc):
        assert abs((before - 21 * 24 * 3600 * 1000) - v) < 60_000
    res = shell(cluster, "forceauditchecks")
    assert res.exit_code == 2 and "atleast one type of check" in res.stderr


def test_listunderreplicated_and_queryautorecoverystatus(cluster):
    a, b = cluster.bookie_id(2), cluster.bookie_id(3)
    ok(shell(cluster, "autorecovery", "-disable"))  # keep the worker off our fake markers

    async def setup():
        async with zk_session(cluster) as (zk, paths, urm):
            await urm.mark_underreplicated(900001, [a])
            await urm.mark_underreplicated(900002, [a, b])
            await urm.mark_underreplicated(900003, [b])
            await zk.create(paths.ur_lock(900002), b'bookieId: "worker-host-1"\n', ephemeral=False)

    async def cleanup():
        async with zk_session(cluster) as (zk, paths, urm):
            await zk.delete(paths.ur_lock(900002))
            for lid in (900001, 900002, 900003):
                urm.held[lid] = -1
                await urm.mark_replicated(lid)

    arun(setup())
    try:
        out = ok(shell(cluster, "listunderreplicated")).splitlines()
        assert [l for l in out if not l.startswith("\t")] == ["900001", "900002", "900003",
                                                             "Under replicated ledger count: 3"]
        assert sum(1 for l in out if l.startswith("\tCtime : ")) == 3
        out = ok(shell(cluster, "listunderreplicated", "-mr", a, "-pmr", "-prw")).splitlines()
        assert out[0] == "900001" and out[2] == f"\tMissingReplica : {a}"
        assert out[3] == "900002" and f"\tMissingReplica : {b}" in out[4:8]
        assert "\tReplicationWorkerId : worker-host-1" in out
        assert out[-1] == "Under replicated ledger count: 2"
        out = ok(shell(cluster, "listunderreplicated", "-emr", a))
        assert out.splitlines()[0] == "900003" and out.endswith("Under replicated ledger count: 1\n")
        assert ok(shell(cluster, "listunderreplicated", "-mr", b, "-emr", a, "-c")) == \
            "Under replicated ledger count: 1\n"
        res = shell(cluster, "listunderreplicated", "-mr", "not-a-bookie")
        assert res.exit_code == 2 and "bad missing replica 'not-a-bookie'" in res.stderr

        out = ok(shell(cluster, "queryautorecoverystatus")).splitlines()
        assert out == ["CurrentRecoverLedgerInfo:", "\tLedgerId:900002\tBookieId:worker-host-1"]
        assert json.loads(ok(shell(cluster, "clusterinfo", "--json")))["clusterUnderReplicated"] is True
    finally:
        arun(cleanup())
        ok(shell(cluster, "autorecovery", "-enable"))
    assert ok(shell(cluster, "queryautorecoverystatus")).splitlines() == [
        "CurrentRecoverLedgerInfo:", "\t No Ledger is being recovered."]
    assert ok(shell(cluster, "listunderreplicated")) == "Under replicated ledger count: 0\n"


def test_ledgermetadata(cluster):
    lid, ens = next(iter(arun(write_ledgers(cluster, 1, 5, 3, 2, 2)).items()))
    out = ok(shell(cluster, "ledgermetadata", "-l", str(lid))).splitlines()
    assert out[0] == f"ledgerID: {lid}"
    assert out[1].startswith("LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, ackQuorumSize=2, "
                             "state=CLOSED, length=1280, lastEntryId=4")
    assert f"ensembles={{0=[{', '.join(ens)}]}}" in out[1]
    doc = json.loads(ok(shell(cluster, "ledgermetadata", "-l", str(lid), "--json")))
    assert doc["ensembles"] == {"0": list(ens)} and doc["lastEntryId"] == 4
    res = shell(cluster, "ledgermetadata", "-l", "987654")
    assert res.exit_code == 1 and "ledger 987654 does not exist" in res.stderr
    res = shell(cluster, "ledgermetadata", "-l", "x1")
    assert res.exit_code == 2 and "bad ledger id 'x1'" in res.stderr


def test_placementcheck(cluster):
    # racks: bookies 0,2 in /rack1, 1,3 in /rack2
    same = [cluster.bookie_id(0), cluster.bookie_id(2)]
    spread = [cluster.bookie_id(0), cluster.bookie_id(1)]
    bad = arun(create_metadata_ledger(cluster, same, 2, 2))
    good = arun(create_metadata_ledger(cluster, spread, 2, 2))
    try:
        out = ok(shell(cluster, "placementcheck")).splitlines()
        assert out[0] == "Placement policy: org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
        assert any(l.startswith("Closed ledgers checked: ") for l in out)
        fails = [l for l in out if l.startswith(f"  ledger {bad} ")]
        assert fails == [f"  ledger {bad} [FAIL] entries 0..-1: {same[0]}(/rack1), {same[1]}(/rack1)"]
        assert not any(l.startswith(f"  ledger {good} ") for l in out)
        out = ok(shell(cluster, "placementcheck", "--policy", "default")).splitlines()
        assert out[0].startswith("Placement policy: ") and "  FAIL: 0" in out
        res = shell(cluster, "placementcheck", "--policy", "NoSuchPolicy")
        assert res.exit_code == 2 and "NoSuchPolicy" in res.stderr
    finally:
        async def drop():
            async with zk_session(cluster) as (zk, paths, _urm):
                for lid in (bad, good):
                    await LedgerStore(zk, paths).delete(lid)
        arun(drop())


def test_recover_dry_run_changes_nothing(cluster):
    src = cluster.bookie_id(3)
    written = arun(write_ledgers(cluster, 3, 20, 3, 2, 2, size=100))
    for _ in range(20):  # E3 of 4 bookies: make sure at least one ledger has data on the source
        if any(src in ens for ens in written.values()):
            break
        written.update(arun(write_ledgers(cluster, 1, 20, 3, 2, 2, size=100)))
    mine = {lid for lid, ens in written.items() if src in ens}
    assert mine
    before = arun(snapshot(cluster))
    res = shell(cluster, "recover", src, "--dry-run")
    out = ok(res)
    assert arun(snapshot(cluster)) == before, "recover --dry-run wrote to ZooKeeper"
    assert out.startswith(f"Recovery plan for {src} (dry run: nothing is changed)\n")
    for lid in mine:
        assert f"ledger {lid}: 1 fragment(s), " in out
    lines = out.splitlines()
    frag = [l for l in lines if l.startswith("  entries 0..19: ")]
    assert len(frag) >= len(mine)
    for l in frag:
        assert f"{src} -> " in l and "read from 127.0.0." in l and " bytes; " in l
    assert any(l.startswith("    ensemble [") and f"*{src}" in l for l in lines)
    assert lines[-1].startswith("Total: ") and lines[-1].endswith(" bytes to copy")


def test_recover_asks_for_confirmation(cluster):
    src = cluster.bookie_id(3)
    before = arun(snapshot(cluster))
    res = shell(cluster, "recover", src, input="N\n")
    assert res.exit_code == 1
    assert "Are you sure to recover them : (Y/N)" in res.stderr and "Give up!" in res.stderr
    assert arun(snapshot(cluster)) == before


def test_recover_moves_data_off_a_bookie(cluster):
    src = cluster.bookie_id(3)
    written = arun(write_ledgers(cluster, 2, 30, 3, 3, 2, size=200))
    for _ in range(20):  # E3 of 4 bookies: make sure at least one ledger has data on the source
        if any(src in ens for ens in written.values()):
            break
        written.update(arun(write_ledgers(cluster, 1, 30, 3, 3, 2, size=200)))
    assert any(src in ens for ens in written.values())
    payloads = {lid: arun(read_all(cluster, lid)) for lid in written}
    out = ok(shell(cluster, "recover", src, "-f", "-rate", "10000000"))
    m = re.search(r"Recovered (\d+) ledger\(s\), (\d+) failed, (\d+) skipped; (\d+) bytes written", out)
    assert m, out
    assert m.group(2) == "0" and int(m.group(1)) >= sum(src in ens for ens in written.values()), out
    assert int(m.group(4)) > 0
    for lid in written:
        md = arun(metadata(cluster, lid))
        assert src not in md.all_bookies(), md
        assert arun(read_all(cluster, lid)) == payloads[lid]
    # nothing is left on the source; a second dry run plans nothing
    again = ok(shell(cluster, "recover", src, "--dry-run"))
    assert again.splitlines()[-1] == "Total: 0 ledger(s), 0 fragment(s), 0 bytes to copy"


def test_recover_bad_ids(cluster):
    res = shell(cluster, "recover", "nonsense", "-f")
    assert res.exit_code == 2 and "bad bookie id 'nonsense': expected host:port" in res.stderr
    res = shell(cluster, "recover", "10.9.9.9:3181", "--dry-run")
    assert res.exit_code == 2 and "no such bookie" in res.stderr
    res = shell(cluster, "recover", cluster.bookie_id(3), "--dry-run", "-l", "987654")
    assert res.exit_code == 1 and "ledger 987654 does not exist" in res.stderr


def test_errors_unreachable_zk_and_no_cluster(cluster):
    from autorecovery.testing.zk_server import free_port

    t0 = time.monotonic()
    res = cli("shell", "--zk", f"127.0.0.1:{free_port()}", "-D", "zkTimeout=1500", "whoisauditor")
    assert res.exit_code == 1 and "cannot connect to ZooKeeper at 127.0.0.1:" in res.stderr
    assert time.monotonic() - t0 < 15
    res = shell(cluster, "whoisauditor", root="/not-a-cluster")
    assert res.exit_code == 1 and "no BookKeeper cluster" in res.stderr and "/not-a-cluster/LAYOUT" in res.stderr


def test_errors_no_auditor(cluster):
    async def fmt():
        async with zk_session(cluster, "/nodaemon") as (zk, paths, _urm):
            await init_cluster(zk, paths)
            await UnderreplicationManager(zk, paths).init_lost_bookie_recovery_delay(0)

    arun(fmt())
    res = shell(cluster, "whoisauditor", root="/nodaemon")
    assert res.exit_code == 1 and res.stdout == "No auditor elected\n" and "no auditor elected" in res.stderr
    res = shell(cluster, "triggeraudit", root="/nodaemon")
    assert res.exit_code == 1 and "no auditor elected" in res.stderr
    res = shell(cluster, "decommissionbookie", "-bookieid", "10.9.9.9:3181", root="/nodaemon")
    assert res.exit_code == 2 and "no such bookie" in res.stderr


def test_real_entry_point(cluster):
    """The installed command path (``python -m autorecovery``), not just click's runner."""
    proc = subprocess.run([sys.executable, "-m", "autorecovery", "shell", "--zk", cluster.zk_connect, "whoisauditor"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"Auditor: {cluster.bookie_id(0)}\n"


def test_recover_open_ledger_is_fenced_or_skipped(cluster):
    src = cluster.bookie_id(2)
    opened = {}
    while not opened:  # an open ledger (never closed) whose ensemble holds the source
        lid, ens = next(iter(arun(write_ledgers(cluster, 1, 8, 3, 3, 2, close=False)).items()))
        if src in ens:
            opened[lid] = ens
    lid = next(iter(opened))
    assert arun(metadata(cluster, lid)).state.name == "OPEN"
    out = ok(shell(cluster, "recover", src, "-f", "-l", str(lid), "--skip-open-ledgers"))
    assert f"ledger {lid}: skipped: open ledger (--skip-open-ledgers)" in out
    assert src in arun(metadata(cluster, lid)).all_bookies()
    plan = ok(shell(cluster, "recover", src, "--dry-run", "-l", str(lid)))
    assert "open ledger: would be fenced and closed first" in plan
    assert arun(metadata(cluster, lid)).state.name == "OPEN"
    out = ok(shell(cluster, "recover", src, "-f", "-l", str(lid)))
    assert f"ledger {lid}: recovered (fenced and closed)" in out
    md = arun(metadata(cluster, lid))
    assert md.state.name == "CLOSED" and md.last_entry_id == 7 and src not in md.all_bookies()
    assert len(arun(read_all(cluster, lid))) == 8
