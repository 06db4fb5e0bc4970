"""Issue 16, the local cluster as an operator's test bed, with real processes: `local-cluster
start|stop|kill|restart --bookie/--daemon/--node N`, `up --with-autorecovery -D ...`, and a continuous
`workload write` whose ack log lets `workload verify` prove that no acknowledged entry was lost."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.testing.waits import wait_until
from autorecovery.workload import read_ack_log

pytestmark = pytest.mark.integration


def cli(*args: str, cwd, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autorecovery", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"




def _zk_children(zk: str, path: str) -> list[str]:
    from kazoo.client import KazooClient

    kz = KazooClient(zk)
    kz.start(10)
    try:
        return kz.get_children(path) if kz.exists(path) else []
    finally:
        kz.stop()
        kz.close()


def _entries_in(data_dir: str) -> int:
    """Entries stored in a bookie's SQLite file (read-only; the bookie may be running)."""
    db = sqlite3.connect(f"file:{Path(data_dir) / 'current' / 'ledgers.db'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    finally:
        db.close()


def _readyz(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
        return json.loads(r.read())


def test_node_bookie_and_daemon_control_keep_data_dir_address_and_conf(tmp_path):
    """up --with-autorecovery gives N ready daemons with the -D settings; stop/kill/restart/start of a
    bookie, a daemon and a node bring each back on the same data dir, address and conf file."""
    d = tmp_path / "c"
    up = cli("local-cluster", "up", "--bookies", "3", "--racks", "3", "--dir", str(d), "--with-autorecovery",
             "-D", "lostBookieRecoveryDelay=7", "-D", "zkTimeout=4000", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        zk = up.stdout.strip().splitlines()[-1]
        assert up.stdout.count("autorecovery ") == 3
        state = json.loads((d / "cluster.json").read_text())
        assert sorted(state["daemons"]) == ["0", "1", "2"]
        for i in range(3):
            conf = (d / f"autorecovery-{i}.conf").read_text().splitlines()
            assert "lostBookieRecoveryDelay=7" in conf and "zkTimeout=4000" in conf
            assert f"bookieId={state['bookies'][str(i)]['host']}:{state['bookies'][str(i)]['port']}" in conf
            r = _readyz(state["daemons"][str(i)]["port"])
            assert r["ready"] is True and r["bookie_id"] == f"127.0.0.{10 + i}:{state['bookies'][str(i)]['port']}"
        before = state["bookies"]["1"]
        bid1 = f"{before['host']}:{before['port']}"
        assert bid1 in _zk_children(zk, "/ledgers/available")
        # data on every bookie (E = WQ = AQ = 3): bookie 1 holds 60 entries
        w = cli("workload", "write", "--zk", zk, "--ledgers", "3", "--entries", "20", "--entry-size", "64",
                "-e", "3", "-w", "3", "-a", "3", "--acks", str(tmp_path / "a.acks"), cwd=tmp_path)
        assert w.returncode == 0, w.stdout + w.stderr
        assert _entries_in(before["data_dir"]) == 60

        # a crash: SIGKILL; the process is gone, the znode waits for the session to expire
        k = cli("local-cluster", "kill", "--bookie", "1", "--dir", str(d), cwd=tmp_path)
        assert k.returncode == 0 and "bookie-1: killed" in k.stdout, k.stdout + k.stderr
        assert not _alive(before["pid"])
        st = json.loads(cli("local-cluster", "status", "--dir", str(d), cwd=tmp_path).stdout)
        assert st["processes"]["bookie-1"] is False and st["processes"]["bookie-0"] is True
        again = cli("local-cluster", "kill", "--bookie", "1", "--dir", str(d), cwd=tmp_path)
        assert again.returncode == 0 and "was not running" in again.stdout

        s = cli("local-cluster", "start", "--bookie", "1", "--dir", str(d), cwd=tmp_path)
        assert s.returncode == 0 and f"running as {bid1}" in s.stdout, s.stdout + s.stderr
        after = json.loads((d / "cluster.json").read_text())["bookies"]["1"]
        assert (after["host"], after["port"], after["data_dir"]) == (before["host"], before["port"], before["data_dir"])
        assert after["pid"] != before["pid"] and _alive(after["pid"])
        assert _entries_in(after["data_dir"]) == 60  # the same data dir, data intact
        dup = cli("local-cluster", "start", "--bookie", "1", "--dir", str(d), cwd=tmp_path)
        assert dup.returncode != 0 and "already running" in dup.stderr

        # a clean stop unregisters at once
        stop = cli("local-cluster", "stop", "--bookie", "1", "--dir", str(d), cwd=tmp_path)
        assert stop.returncode == 0 and "bookie-1: stopped" in stop.stdout
        assert bid1 not in _zk_children(zk, "/ledgers/available")
        rs = cli("local-cluster", "restart", "--bookie", "1", "--dir", str(d), cwd=tmp_path)
        assert rs.returncode == 0 and f"running as {bid1}" in rs.stdout, rs.stdout + rs.stderr
        wait_until(lambda: bid1 in _zk_children(zk, "/ledgers/available"), 30, f"{bid1} registered again")

        # a node = bookie + daemon
        node_before = json.loads((d / "cluster.json").read_text())
        kn = cli("local-cluster", "kill", "--node", "2", "--dir", str(d), cwd=tmp_path)
        assert kn.returncode == 0 and "autorecovery-2: killed" in kn.stdout and "bookie-2: killed" in kn.stdout
        assert not _alive(node_before["bookies"]["2"]["pid"]) and not _alive(node_before["daemons"]["2"]["pid"])
        conf2 = (d / "autorecovery-2.conf").read_text()
        sn = cli("local-cluster", "start", "--node", "2", "--dir", str(d), cwd=tmp_path)
        assert sn.returncode == 0, sn.stdout + sn.stderr
        node_after = json.loads((d / "cluster.json").read_text())
        b2 = node_after["bookies"]["2"]
        assert (b2["host"], b2["port"], b2["data_dir"]) == tuple(node_before["bookies"]["2"][k]
                                                              for k in ("host", "port", "data_dir"))
        assert (d / "autorecovery-2.conf").read_text() == conf2
        assert _readyz(node_after["daemons"]["2"]["port"])["ready"] is True

        # a daemon alone
        rd = cli("local-cluster", "restart", "--daemon", "0", "--dir", str(d), cwd=tmp_path)
        assert rd.returncode == 0 and "autorecovery-0: running" in rd.stdout, rd.stdout + rd.stderr
        st = json.loads(cli("local-cluster", "status", "--dir", str(d), cwd=tmp_path).stdout)
        assert all(st["processes"].values()) and len(st["processes"]) == 7

        bad = cli("local-cluster", "stop", "--bookie", "9", "--dir", str(d), cwd=tmp_path)
        assert bad.returncode != 0 and "no bookie 9" in bad.stderr
        v = cli("workload", "verify", "--zk", zk, "--acks", str(tmp_path / "a.acks"), cwd=tmp_path)
        assert v.returncode == 0 and "verified 60 acknowledged entries" in v.stdout and "0 lost" in v.stdout, v.stdout
    finally:
        final = json.loads((d / "cluster.json").read_text())
        down = cli("local-cluster", "down", "--dir", str(d), cwd=tmp_path)
    assert down.returncode == 0
    pids = [p["pid"] for p in list(final["bookies"].values()) + list(final["daemons"].values())]
    assert not any(_alive(p) for p in [*pids, final["zk_pid"]])


def _records(path: Path) -> int:
    try:
        return len(read_ack_log(path))
    except (OSError, ValueError):
        return 0


def _ensembles(zk: str) -> dict[int, list[list[str]]]:
    async def go():
        bk = await BookKeeper.connect(zk)
        try:
            out = {}
            for lid in await bk.ledgers.list_ledger_ids():
                md, _ = await bk.ledgers.read(lid)
                out[lid] = [list(s.ensemble) for s in md.segments]
            return out
        finally:
            await bk.close()

    return asyncio.run(go())


def test_continuous_workload_through_a_bookie_kill_loses_no_acknowledged_entry(tmp_path, cluster_factory):
    """A continuous rack-aware writer keeps going through a SIGKILL of a bookie; every acknowledged entry
    is recorded and `workload verify --acks` finds them all. Then a removed entry and a corrupted record
    make verify fail, naming exactly those entries."""
    cluster = cluster_factory(bookies=4, racks=2)
    zk = cluster.zk_connect
    acks = tmp_path / "w.acks"
    writer = subprocess.Popen(
        [sys.executable, "-m", "autorecovery", "workload", "write", "--zk", zk, "--continuous", "--rate", "150",
         "--ledgers", "3", "--entries", "50", "--entry-size", "256", "-e", "2", "-w", "2", "-a", "2",
         "--acks", str(acks), "-D", "ensemblePlacementPolicy=rackaware", "-D", "minNumRacksPerWriteQuorum=2",
         "-D", "enforceMinNumRacksPerWriteQuorum=true"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _records(acks) >= 100, 60, "100 acknowledged entries")
        cluster.kill_bookie(1, signal.SIGKILL)
        at_kill = _records(acks)
        wait_until(lambda: _records(acks) >= at_kill + 300, 90, "300 more acknowledged entries after the kill")
        cluster.start_bookie(1)
        writer.send_signal(signal.SIGINT)
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.communicate()
    assert writer.returncode == 0, out + err
    assert "acknowledged" in out and "Traceback" not in err
    recs = read_ack_log(acks)
    assert len(recs) >= at_kill + 300 and len({(r.ledger_id, r.entry_id) for r in recs}) == len(recs)
    assert len({r.ledger_id for r in recs}) >= 4  # ledgers were rolled (50 entries each, or on a failure)

    # the client placed rack-aware from /bookies, as a Pulsar broker would: both racks in every ensemble
    racks = cluster.rack_mapping()
    for lid, segments in _ensembles(zk).items():
        for ens in segments:
            assert len({racks[b] for b in ens}) == 2, (lid, segments)

    v = cli("workload", "verify", "--zk", zk, "--acks", str(acks), cwd=tmp_path)
    assert v.returncode == 0, v.stdout + v.stderr
    assert f"verified {len(recs)} acknowledged entries" in v.stdout and "0 lost" in v.stdout

    # a removed entry: delete one acknowledged entry from every bookie's storage
    victim = recs[len(recs) // 2]
    for i in sorted(cluster.bookies):
        db = sqlite3.connect(Path(cluster.bookies[i].data_dir) / "current" / "ledgers.db", timeout=30)
        try:
            db.execute("DELETE FROM entries WHERE ledger_id = ? AND entry_id = ?", (victim.ledger_id, victim.entry_id))
            db.commit()
        finally:
            db.close()
    # a corrupted record: the hash of another acknowledged entry no longer matches
    other = recs[len(recs) // 3]
    lines = acks.read_text().splitlines()
    assert lines[other.line - 1].endswith(other.digest)
    lines[other.line - 1] = lines[other.line - 1][:-32] + "0" * 32
    bad = tmp_path / "tampered.acks"
    bad.write_text("\n".join(lines) + "\n")

    v = cli("workload", "verify", "--zk", zk, "--acks", str(bad), cwd=tmp_path)
    assert v.returncode == 1, v.stdout + v.stderr
    lost = [line for line in v.stdout.splitlines() if line.strip().startswith("LOST")]
    assert len(lost) == 2 and "2 lost" in v.stdout, v.stdout
    assert any(f"ledger {victim.ledger_id} entry {victim.entry_id}: lost" in line for line in lost), lost
    assert any(f"ledger {other.ledger_id} entry {other.entry_id}: content differs" in line for line in lost), lost

    # a malformed ack log is refused, naming the file and line
    (tmp_path / "junk.acks").write_text("# autorecovery-acks v1\n1 2 three\n")
    j = cli("workload", "verify", "--zk", zk, "--acks", str(tmp_path / "junk.acks"), cwd=tmp_path)
    assert j.returncode == 1 and "junk.acks:2: malformed ack record" in j.stderr
