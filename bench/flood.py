"""Benchmark: a real bookie process under add floods, its peak RSS against its documented memory bound.

One ZooKeeper, a fresh ``python -m autorecovery.bookie`` process per flood. Its idle RSS (measured in the
same run, after a warm-up add) is that flood's baseline; the bound is ``bookie.admission.memory_bound`` of its flags
(``idle + 4 x (max_receiving x (max_entry_size + 1 MiB) + max_add_bytes + max_entry_size + 1 MiB)
+ 256 MiB``). Floods, each its own ledger:

- large unary: ``--large`` concurrent ~5 MiB AddEntry calls on one connection, then on 8 connections;
- large streams: as many AddEntries streams of one ~5 MiB entry each, on one connection;
- small unary: ``--small`` concurrent 1 KiB AddEntry calls on one connection, then on 16 connections.

For each it prints the bookie's peak RSS, its ratio to the bound and to the machine's memory, the
answers by status (``EOK``, ``ETOOMANYREQUESTS``; gRPC-level refusals such as HTTP/2's
``REFUSED_STREAM`` by their gRPC code) and whether every ``EOK`` entry read back identical.
Not a test (tests/integration/test_bookie_flood.py is): ``python bench/flood.py [--quick]
[--bookie-arg=--max-receiving-messages=8 ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from autorecovery.bookie.admission import AdmissionLimits, memory_bound
from autorecovery.bookie.limits import DEFAULT_MAX_ENTRY_SIZE, GRPC_HEADROOM
from autorecovery.testing.bookie_proc import BookieProcess, format_test_cluster
from autorecovery.testing.flood import RssSampler, flood
from autorecovery.testing.zk_server import ZooKeeperServer

MIB = 1024 * 1024


def limits_of(args: list[str]) -> tuple[int, AdmissionLimits]:
    """(max entry size, admission limits) a bookie started with ``args`` runs with (defaults otherwise)."""
    flags = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            name, _, value = a.partition("=")
            flags[name] = value or (args[i + 1] if i + 1 < len(args) else "")
    d = AdmissionLimits()
    return int(flags.get("--max-entry-size", DEFAULT_MAX_ENTRY_SIZE)), AdmissionLimits(
        max_adds=int(flags.get("--max-adds-in-progress", d.max_adds)),
        max_add_bytes=int(flags.get("--max-add-bytes-in-progress", d.max_add_bytes)),
        max_reads=int(flags.get("--max-reads-in-progress", d.max_reads)),
        max_receiving=int(flags.get("--max-receiving-messages", d.max_receiving)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 large and 500 small adds per flood")
    ap.add_argument("--large", type=int, default=120, help="concurrent large adds per flood")
    ap.add_argument("--small", type=int, default=5000, help="concurrent 1 KiB adds per flood")
    ap.add_argument("--bookie-arg", action="append", default=[], help="extra flag for the bookie (repeatable)")
    args = ap.parse_args()
    small = 500 if args.quick else args.small
    if args.quick:
        args.large = 16
    max_entry, limits = limits_of(args.bookie_arg)
    large_size = max_entry
    plans = [
        ("large unary, 1 connection", args.large, large_size, 1, False),
        ("large unary, 8 connections", args.large, large_size, 8, False),
        ("large streams, 1 connection", args.large, large_size, 1, True),
        ("small unary, 1 connection", small, 1024, 1, False),
        ("small unary, 16 connections", small, 1024, 16, False),
    ]
    total = psutil.virtual_memory().total
    print(f"machine: {os.cpu_count()} cores, {total / MIB:.0f} MiB memory; bookie: max entry {max_entry / MIB:g} MiB, "
          f"max receiving {limits.max_receiving}, max add bytes {limits.max_add_bytes / MIB:g} MiB")
    print(f"{'flood':<30} {'adds':>6} {'idle MiB':>8} {'peak MiB':>9} {'bound MiB':>9} {'/bound':>7} "
          f"{'/machine':>9} {'EOK':>6} {'ETOOMANY':>8} {'other':>6} {'read back':>10} {'s':>5}")
    with tempfile.TemporaryDirectory() as d:
        zk = ZooKeeperServer(Path(d) / "zk").start()
        try:
            for i, (name, count, size, conns, stream) in enumerate(plans):
                # its own cluster root: a later bookie may be given an earlier one's port, hence its id and cookie
                cluster = asyncio.run(format_test_cluster(zk.connect_string))
                # a fresh bookie per flood: its idle RSS is that flood's baseline
                bookie = BookieProcess(["--zk", cluster, "--data-dir", str(Path(d) / f"bookie{i}"), "--port", "0",
                                        *args.bookie_arg], Path(d) / f"bookie{i}.log")
                try:
                    bid = bookie.wait_ready()
                    asyncio.run(flood(bid, 1, 1, 1024))  # warm-up: connections, the store, the code paths
                    idle = psutil.Process(bookie.pid).memory_info().rss
                    bound = memory_bound(idle, max_entry + GRPC_HEADROOM, limits)
                    with RssSampler(bookie.pid) as rss:
                        res = asyncio.run(flood(bid, 100 + i, count, size, connections=conns, stream=stream))
                    alive = bookie.proc.poll() is None
                finally:
                    bookie.stop()
                other = sum(n for s, n in res.statuses.items() if s not in ("EOK", "ETOOMANYREQUESTS"))
                ratio = f"{rss.peak / bound:.2f}" if bound else "-"
                print(f"{name:<30} {count:>6} {idle / MIB:>8.0f} {rss.peak / MIB:>9.0f} "
                      f"{(bound or 0) / MIB:>9.0f} {ratio:>7} {rss.peak / total:>9.3f} {res.ok:>6} {res.busy:>8} "
                      f"{other:>6} {res.read_back:>5}/{res.ok:<4} {res.seconds:>5.1f}", flush=True)
                for status, detail in res.errors.items():
                    print(f"{'':<30} {status}: {detail}")
                if res.lost:
                    print(f"{'':<30} LOST (acknowledged, not read back): {res.lost[:10]}")
                if not alive:
                    print(f"{'':<30} the bookie exited: {bookie.log_tail()}")
        finally:
            zk.stop()


if __name__ == "__main__":
    main()
