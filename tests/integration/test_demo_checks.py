"""Honest demo (issue 9): every line ``make demo`` prints comes from a check, a failed check fails the
demo with exit code 1, and the autorecovery half cannot be dropped silently. The step checks run here
against real processes (a ZooKeeper and a bookie) without running the whole demo; ``make demo`` runs
them for real."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest
from click.testing import CliRunner

from autorecovery.cli import demo as demo_mod
from autorecovery.cli.demo_checks import (
    DemoStepFailed,
    all_processes_stopped,
    daemons_ready,
    processes_dead,
    unregistered,
    writable_bookies,
)
from autorecovery.testing.zk_server import free_port
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration


def test_step_checks_fail_loudly_on_a_real_cluster(cluster_factory):
    cluster = cluster_factory(bookies=1)
    bookie = cluster.bookie_id(0)

    async def membership() -> None:
        zk = await ZkClient(cluster.zk_connect).start()
        watcher = await BookieWatcher(zk, Paths(cluster.ledgers_root)).start()
        try:
            assert await writable_bookies(watcher, 1, "one bookie", timeout_s=10) == "1 bookies writable"
            with pytest.raises(DemoStepFailed, match=r"two bookies: 1 of 2 bookies writable"):
                await writable_bookies(watcher, 2, "two bookies", timeout_s=0.3)
            with pytest.raises(DemoStepFailed, match=rf"kill: still registered after 0 s: \['{bookie}'\]"):
                await unregistered(watcher, [bookie], "kill", timeout_s=0.3)
        finally:
            await watcher.stop()
            await zk.stop()

    asyncio.run(membership())
    with pytest.raises(DemoStepFailed, match=r"kill -9 one bookie: still running: \['bookie-0'\]"):
        processes_dead(cluster, ["bookie-0"], "kill -9 one bookie")
    with pytest.raises(DemoStepFailed, match=r"shut the cluster down: still running: \['bookie-0', 'zookeeper'\]"):
        all_processes_stopped(cluster)
    cluster.down()
    assert all_processes_stopped(cluster) == "all 2 processes stopped"
    processes_dead(cluster, ["bookie-0"], "kill -9 one bookie")


def test_daemons_ready_fails_when_no_daemon_answers():
    port = free_port()  # nothing listens there
    with pytest.raises(DemoStepFailed, match=r"6 daemons: after 0 s HTTP check failed"):
        daemons_ready({0: port}, "6 daemons", timeout_s=0.2)


def test_a_failed_check_fails_the_demo_with_exit_1_and_the_table(monkeypatch, tmp_path):
    def foundation(base, table):
        table.add("start ZooKeeper + 6 bookies in 3 racks", "6 bookies writable in 3 racks")
        raise DemoStepFailed("write 20 ledgers x 500 entries (E3/WQ2/AQ2)", "19 ledgers, 9500 entries acknowledged")

    ran = []
    monkeypatch.setattr(demo_mod, "run_foundation_demo", foundation)
    monkeypatch.setattr(demo_mod.demo_recovery, "run", lambda base, table: ran.append(base))
    res = CliRunner().invoke(demo_mod.demo, ["--dir", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "demo step failed: write 20 ledgers x 500 entries (E3/WQ2/AQ2): 19 ledgers, 9500 entries" in res.output
    assert "| FAILED" in res.output and "6 bookies writable in 3 racks" in res.output
    assert ran == []  # nothing after a failed step


def test_the_autorecovery_half_is_never_dropped_on_an_import_error(monkeypatch):
    import autorecovery.cli

    monkeypatch.setitem(sys.modules, "autorecovery.cli.demo_recovery", None)  # importing it raises
    monkeypatch.delattr(autorecovery.cli, "demo_recovery")
    try:
        with pytest.raises(ImportError):
            importlib.reload(demo_mod)
    finally:
        monkeypatch.undo()
        importlib.reload(demo_mod)
    assert demo_mod.demo_recovery.run is not None
