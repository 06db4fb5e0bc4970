"""Every bench in bench/ runs in its smoke mode (``--quick``: seconds, tiny sizes) and prints its ratio line.

The benches are not tests, but nothing else runs them: without this module a bench that no longer runs
(as ``bench/audit.py`` did, dying in its set-up on a missing znode parent) goes unnoticed. Each case runs
the script as a user would, in its own process, and asserts exit code 0 and the line that carries the
bench's figure against its baseline (the ratio). A script added to bench/ must be added here (as a bench
with its smoke arguments, or as a helper of the benches); the last test fails otherwise.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench"

#: script -> (smoke arguments, a regex of its ratio line: the figure, its baseline and the ratio)
SMOKE: dict[str, tuple[list[str], str]] = {
    "audit.py": (["--quick"], r"find \(s\)\s+[\d.]+\s+[\d.]+\s+\d+x"),
    "placement.py": (["--quick"], r"avg swaps ours [\d.]+ vs greedy [\d.]+ \(greedy/ours [\d.]+\)"),
    "bookie_rpc.py": (["--quick"], r"ratio to baseline: [\d.]+x"),
    "bookie_throughput.py": (["--quick"], r"1024B\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+"),
    "ur_pick.py": (["--quick"], r"ratio: CPU per ledger at queue \d+ / at queue \d+ \(the baseline\) = [\d.]+"),
    "flood.py": (["--quick"], r"small unary, 16 connections\s+\d+\s+\d+\s+\d+\s+\d+\s+[\d.]+"),
    "replication.py": (["--quick"], r"ratio: worker/raw pull .* = [\d.]+"),
    "heal.py": (["--quick"], r"ratio: heal from the kill / raw pull of the same streams = [\d.]+"),
    "chaos.py": (["--quick"], r"read back, digest ok\s+\d+ \(must be all\)"),
    "vs_upstream.py": (["--quick", "--variants", "tuned+w,ours+w,ceiling", "--ledgers", "2", "--entries", "100",
                        "--jit", "c1"],
                       r"with the foreground writer: heal rate, ours / tuned\s+[\d.]+"),
    "reports.py": (["--quick", "--ledgers", "3000", "--bookies", "40", "--racks", "4"], r"ratio baseline/spark = [\d.]+x"),
    "zk_cost.py": (["--quick"], r"requests per healed ledger\s+[\d.]+\s+[\d.]+\s+[\d.]+x"),
    "copy_path.py": (["--quick"], r"ratio: CPU per MiB ours / relay = [\d.]+"),
}

#: modules of bench/ that are not benches (imported by them, or a server they start)
HELPERS = {"limits.py", "nullbookie.py", "profiles.py", "zkstats.py", "reports_profile.py", "cleanup.py"}


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_bench_smoke_run_completes_and_prints_its_ratio(script, tmp_path):
    args, ratio = SMOKE[script]
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=280)
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, f"bench/{script} {' '.join(args)} exited {proc.returncode}:\n{tail}"
    assert re.search(ratio, proc.stdout), f"bench/{script}: no ratio line matching {ratio!r}:\n{tail}"


def test_every_bench_script_has_a_smoke_run():
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts - set(SMOKE) - HELPERS == set(), "bench scripts without a smoke run in SMOKE"
    assert set(SMOKE) <= scripts and HELPERS <= scripts


#: benches that start servers or child processes -> (smoke arguments, a line printed once they run)
STOPPABLE: dict[str, tuple[list[str], str]] = {
    "zk_cost.py": (["--quick"], "phase: restart with the backlog"),
    "audit.py": (["--quick", "--no-memory"], "set-up:"),
    "chaos.py": (["--quick"], "cluster up:"),
}


@pytest.mark.parametrize("script", sorted(STOPPABLE))
def test_bench_stopped_by_sigterm_leaves_no_process_behind(script, tmp_path):
    """SIGTERM mid-run: the bench exits and its ZooKeeper (its own process group) and its child processes
    are gone with it."""
    args, running = STOPPABLE[script]
    proc = subprocess.Popen([sys.executable, str(BENCH / script), *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 180
        assert proc.stdout is not None
        while not any(running in line for line in seen):
            line = proc.stdout.readline()  # blocks until the bench prints (or exits: "")
            assert line and time.monotonic() < deadline, f"bench/{script} never printed {running!r}: {seen[-20:]}"
            seen.append(line)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert any("java" in (p.name() or "") for p in descendants), [p.name() for p in descendants]
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=90)
        assert proc.returncode != 0  # stopped, not finished
        _gone, alive = psutil.wait_procs(descendants, timeout=30)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert alive == [], f"bench/{script} left {[(p.pid, p.name()) for p in alive]} running after SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
