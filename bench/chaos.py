"""A seeded fault campaign over a real local cluster, ending with a report (issue 26; docs/chaos.md).

    python bench/chaos.py --seed 7 --faults 40 --duration 300 [--dir DIR] [--json report.json]
    python bench/chaos.py --cluster stock --seed 40 --faults 20 --duration 180   # Java bookies (issue 40)

Starts ZooKeeper, ``--bookies`` bookie processes and one autorecovery daemon per bookie in ``--dir``
(a temporary directory by default, removed afterwards unless ``--keep``), writes continuously with the
ledger client, injects up to ``--faults`` faults (drawn from the seed; the schedule is printed first)
for at most ``--duration`` seconds, then checks and prints the report (text; JSON with ``--json``).
Exit code 0 when every must-be-zero figure is 0 and every acknowledged entry read back, 1 otherwise,
2 for bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autorecovery.testing.chaos.runner import CampaignConfig, run_campaign
from autorecovery.testing.chaos.schedule import ALL_KINDS, KINDS, STOCK_KINDS, parse_kinds
from cleanup import exit_on_signals


def main(argv: list[str] | None = None) -> int:
    exit_on_signals()  # a SIGTERM unwinds the campaign: its cluster (bookies, ZooKeeper, daemons) is stopped
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1, help="seed of the fault schedule and of the payloads")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 4 bookies, one ZooKeeper, 2 faults within 8 s (bench smoke test)")
    ap.add_argument("--faults", type=int, default=30, help="fault budget (default 30)")
    ap.add_argument("--duration", type=float, default=300.0, help="cap on the fault phase, seconds (default 300)")
    ap.add_argument("--cluster", choices=("ours", "stock"), default="ours",
                    help="ours: our reference bookies and client; stock: Apache BookKeeper 4.17.2 Java bookies, "
                         "upstream's client writing, AutoRecoveryMain on --java-nodes (needs `make upstream`)")
    ap.add_argument("--bookies", type=int, default=None, help="bookies, one daemon each (default 5; stock 6; at least 4)")
    ap.add_argument("--java-nodes", default="5",
                    help="stock: comma-separated nodes whose daemon is upstream's AutoRecoveryMain (default 5)")
    ap.add_argument("--writers", type=int, default=4, help="stock: Java writer threads (default 4)")
    ap.add_argument("--bound", type=float, default=60.0,
                    help="seconds a ledger may stay under-replicated after its last fault, unless a reason is named")
    ap.add_argument("--rate", type=float, default=None, help="writer rate, entries/s (default 100; stock 80)")
    ap.add_argument("--min-hold", type=float, default=0.5, help="shortest hold of a fault, seconds")
    ap.add_argument("--max-hold", type=float, default=3.0, help="longest hold of a fault, seconds")
    ap.add_argument("--settle", type=float, default=120.0, help="bound on the wait for an empty queue, seconds")
    ap.add_argument("--zk-members", type=int, default=3, choices=(1, 3, 5),
                    help="ZooKeeper servers: 3 (default) allows the ensemble faults; 1 skips them")
    ap.add_argument("--disk-mb", type=int, default=128,
                    help="size (MiB) of the last bookie's tmpfs data dir for the disk-full fault; 0 = none")
    ap.add_argument("--kinds", default=None, help="default: every kind of the cluster; ""comma-separated fault kinds, each optionally weighted as kind:w (1..100, drawn w times as often); "
                         f"of: {', '.join(KINDS)}")
    ap.add_argument("--witness", type=int, default=None,
                    help="a node whose bookie and daemon no fault kills, so their RSS/fd trends span the run (the soak)")
    ap.add_argument("--lanes", type=int, default=1, choices=(1, 2),
                    help="2: network faults run in a second lane, concurrently with the others (default 1: one at a time)")
    ap.add_argument("--dir", type=Path, help="cluster directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directory (logs, ack log)")
    ap.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    a = ap.parse_args(argv)
    stock = a.cluster == "stock"
    a.bookies = a.bookies or (6 if stock else 5)
    a.rate = a.rate or (80.0 if stock else 100.0)
    if a.kinds is None:
        a.kinds = ",".join(STOCK_KINDS if stock else ALL_KINDS)
    if a.quick:
        a.bookies, a.zk_members, a.faults, a.duration, a.settle = (6 if stock else 4), 1, 2, 8.0, 60.0
    try:
        kinds = parse_kinds(a.kinds)
        if not all(n.strip().isdigit() for n in a.java_nodes.split(",") if n.strip()):
            raise ValueError(f"--java-nodes {a.java_nodes!r}: comma-separated node numbers expected")
        java_nodes = tuple(int(n) for n in a.java_nodes.split(",") if n.strip())
    except ValueError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    base = a.dir or Path(tempfile.mkdtemp(prefix="chaos-"))
    cfg = CampaignConfig(base_dir=base, seed=a.seed, faults=a.faults, duration_s=a.duration, bookies=a.bookies,
                         rate=a.rate, min_hold_s=a.min_hold, max_hold_s=a.max_hold, settle_s=a.settle, zk_members=a.zk_members,
                         disk_full_mb=a.disk_mb,
                         kinds=kinds, witness=a.witness, lanes=a.lanes, cluster=a.cluster, java_nodes=java_nodes,
                         writers=a.writers, bound_s=a.bound)
    try:
        t0 = time.monotonic()
        rep = asyncio.run(run_campaign(cfg, echo=lambda s: print(f"{time.monotonic() - t0:7.1f}s {s}", flush=True)))
    except ValueError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    finally:
        if a.dir is None and not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(rep.to_text())
    if a.json:
        a.json.write_text(rep.to_json())
    return 0 if rep.passed else 1


if __name__ == "__main__":
    sys.exit(main())
