"""Every bench in bench/ runs in its smoke mode (``--quick``: seconds, tiny sizes) and prints its ratio line.

The benches are not tests, but nothing else runs them: without this module a bench that no longer runs
(as ``bench/audit.py`` did, dying in its set-up on a missing znode parent) goes unnoticed. Each case runs
the script as a user would, in its own process, and asserts exit code 0 and the line that carries the
bench's figure against its baseline (the ratio). A script added to bench/ must be added here (as a bench
with its smoke arguments, or as a helper of the benches); the last test fails otherwise.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
    "vs_upstream.py": (["--quick", "--variants", "defaults,ours", "--ledgers", "2", "--entries", "100"],
                       r"ratio upstream defaults / ours \(time; > 1: ours faster\): all marked [\d.]+, healed [\d.]+"),
    "reports.py": (["--quick", "--ledgers", "3000", "--bookies", "40", "--racks", "4"], r"ratio baseline/spark = [\d.]+x"),
    "zk_cost.py": (["--quick"], r"requests per healed ledger\s+[\d.]+\s+[\d.]+\s+[\d.]+x"),
}

#: modules of bench/ that are not benches (imported by them, or a server they start)
HELPERS = {"limits.py", "nullbookie.py", "profiles.py", "zkstats.py", "reports_profile.py"}


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
