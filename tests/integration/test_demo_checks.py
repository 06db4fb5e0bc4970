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
    # the last line is the one verdict, made of the checks above (one held, one failed)
    assert res.output.rstrip("\n").splitlines()[-1] == (
        "demo: FAIL — 1 check held, then failed: write 20 ledgers x 500 entries (E3/WQ2/AQ2): "
        "19 ledgers, 9500 entries acknowledged")


def test_a_passing_demo_ends_with_the_pass_verdict_and_exit_0(monkeypatch, tmp_path):
    def foundation(base, table):
        table.add("start ZooKeeper + 6 bookies in 3 racks", "6 bookies writable in 3 racks")
        table.add("shut the cluster down", "all 7 processes stopped")

    monkeypatch.setattr(demo_mod, "run_foundation_demo", foundation)
    res = CliRunner().invoke(demo_mod.demo, ["--dir", str(tmp_path), "--foundation-only"])
    assert res.exit_code == 0, res.output
    assert res.output.rstrip("\n").splitlines()[-1] == "demo: PASS — 2 of 2 checks held"


def test_a_crash_is_a_fail_verdict_not_a_missing_line(monkeypatch, tmp_path):
    def foundation(base, table):
        table.add("start ZooKeeper + 6 bookies in 3 racks", "6 bookies writable in 3 racks")
        raise RuntimeError("bookie 3 did not start")

    monkeypatch.setattr(demo_mod, "run_foundation_demo", foundation)
    res = CliRunner().invoke(demo_mod.demo, ["--dir", str(tmp_path), "--foundation-only"])
    assert res.exit_code == 1
    assert res.output.rstrip("\n").splitlines()[-1] == (
        "demo: FAIL — 1 check held, then failed: RuntimeError: bookie 3 did not start")


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


def test_progress_line_shows_a_heal_done_between_two_samples_never_zeros(cluster_factory):
    """Issue 28: the demo sampled ZooKeeper's markers, so a heal done between two samples printed
    ``0 ledgers marked, 0.00 MB left, 0.00 MB/s``. The line now comes from the daemons' own counters,
    taken when the step starts: here the whole heal happens before the first sample."""
    from autorecovery.cli.demo_progress import HealWatch
    from autorecovery.cli.demo_recovery import segments_referencing, start_daemons
    from autorecovery.client.bookkeeper import BookKeeper
    from autorecovery.workload import write_ledgers
    from autorecovery.zk.underreplication import UnderreplicationManager

    cluster = cluster_factory(bookies=4)  # E3: a spare bookie to heal onto
    ports = start_daemons(cluster, (0, 1), {})

    async def go() -> tuple[list[str], object]:
        bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
        try:
            m = await write_ledgers(bk, ledgers=6, entries=50, size=1024, ensemble=3, write_quorum=2, ack_quorum=2)
            watch = await HealWatch.start(ports)  # the step starts: counters taken
            dead = cluster.kill_bookie(3)

            async def healed() -> bool:
                marked = await UnderreplicationManager(bk.zk, bk.paths).list_marked_ids()
                return not marked and await segments_referencing(bk, m, {dead}) == 0

            deadline = asyncio.get_running_loop().time() + 120
            while not await healed():  # the heal runs while nobody samples
                assert asyncio.get_running_loop().time() < deadline, "not healed within 120 s"
                await asyncio.sleep(0.2)  # polling ZooKeeper, bounded by the deadline
            printed: list[str] = []
            ok, sample = await watch.follow(healed, 30, "re-replication", echo=printed.append)
            assert ok
            return printed, sample
        finally:
            await bk.close()

    printed, sample = asyncio.run(go())
    assert sample.healed > 0 and sample.copied_bytes > 0, sample
    assert len(printed) == 1, printed
    assert printed[0].startswith(f"    re-replication: {sample.healed} ledgers done, ")
    assert " 0 ledgers done" not in printed[0] and "0.00 MB copied" not in printed[0], printed
