"""`workload write` / `workload verify` without --manifest/--acks, run where a local cluster's `.cluster`
directory is (as the README does from the repository root): both files land in `.cluster`, nothing in
the working directory, and verify finds them."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autorecovery", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL)


def test_write_and_verify_keep_their_files_beside_the_cluster(cluster_factory, tmp_path):
    cluster = cluster_factory(bookies=3)
    work = tmp_path / "work"
    (work / ".cluster").mkdir(parents=True)
    w = _cli("workload", "write", "--zk", cluster.zk_connect, "--ledgers", "2", "--entries", "10", cwd=work)
    assert w.returncode == 0, w.stdout + w.stderr
    assert "manifest .cluster/workload.json; ack log .cluster/workload.acks" in w.stdout, w.stdout
    assert sorted(p.name for p in work.iterdir()) == [".cluster"]  # nothing left in the working directory
    assert {p.name for p in (work / ".cluster").iterdir()} == {"workload.json", "workload.acks"}
    v = _cli("workload", "verify", "--zk", cluster.zk_connect, cwd=work)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "verified 2 ledgers, 20 entries" in v.stdout, v.stdout
