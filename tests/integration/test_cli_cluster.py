"""`autorecovery local-cluster up|status|down` and `workload write|verify` as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autorecovery", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_up_workload_down(tmp_path):
    d = tmp_path / "c"
    up = cli("local-cluster", "up", "--bookies", "3", "--racks", "2", "--dir", str(d), cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        zk = up.stdout.strip().splitlines()[-1]
        assert zk.startswith("127.0.0.1:")
        assert up.stdout.count("bookie 127.0.0.") == 3 and "/rack2" in up.stdout
        st = json.loads(cli("local-cluster", "status", "--dir", str(d), cwd=tmp_path).stdout)
        assert st["zk_connect"] == zk and all(st["processes"].values()) and len(st["processes"]) == 4
        assert sorted(set(st["racks"].values())) == ["/rack1", "/rack2"]
        again = cli("local-cluster", "up", "--dir", str(d), cwd=tmp_path)
        assert again.returncode != 0 and "already running" in again.stderr

        w = cli("workload", "write", "--zk", zk, "--ledgers", "3", "--entries", "50", "--entry-size", "100",
                "--mixed", "--manifest", str(tmp_path / "m.json"), cwd=tmp_path)
        assert w.returncode == 0, w.stderr
        assert "wrote 3 ledgers, 150 entries" in w.stdout
        v = cli("workload", "verify", "--zk", zk, "--manifest", str(tmp_path / "m.json"), cwd=tmp_path)
        assert v.returncode == 0, v.stdout + v.stderr
        assert "verified 3 ledgers, 150 entries" in v.stdout and "0 errors" in v.stdout
    finally:
        state = json.loads((d / "cluster.json").read_text())
        down = cli("local-cluster", "down", "--dir", str(d), cwd=tmp_path)
    assert down.returncode == 0 and "zookeeper" in down.stdout
    pids = [b["pid"] for b in state["bookies"].values()] + [state["zk_pid"]]
    assert not any(_alive(p) for p in pids)


def test_verify_fails_on_missing_ledger(tmp_path, cluster_factory):
    cluster = cluster_factory(bookies=3)
    (tmp_path / "m.json").write_text(json.dumps(
        {"seed": 1, "entry_size": 10, "mixed": False, "ledgers": {"777": 5}, "closed": [777]}))
    v = cli("workload", "verify", "--zk", cluster.zk_connect, "--manifest", str(tmp_path / "m.json"), cwd=tmp_path)
    assert v.returncode == 1
    assert "ledger 777" in v.stdout
