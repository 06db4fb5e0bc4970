"""Benchmark: end-to-end heal in a real local cluster against the raw copy rate of the same bytes.

Set-up (not timed): a local cluster of 6 bookie processes in 3 racks, an autorecovery daemon next to
each (``lostBookieRecoveryDelay=0``; ``--daemons 1`` keeps one surviving daemon: a single worker heals), and ``--mib`` MiB of 64 KiB entries written with the ledger
client into ``--ledgers`` ledgers E3/WQ2/AQ2.

Timed, in the same run:

* **heal**: one host (bookie and daemon) is killed with SIGKILL; from the kill until no ledger is
  marked under-replicated and no ensemble references the dead bookie. The bytes to heal are the
  entries whose write set held the dead bookie (computed from the metadata before the kill). The
  per-worker rate is each surviving daemon's ``bytes_copied`` (its progress endpoint) over the heal time.
* **raw copy**: the same bytes through ReadEntryBatches → AddEntryBatches (the workers' framing) between
  two null bookies in their own processes (``bench/nullbookie.py``), with as many pipelines as workers
  copied (issue 13's baseline);
* **raw pull**: the same bytes pulled by one null bookie from another (``PullEntries``, one hop: the
  path the bookies take when the workers let the target pull).

Prints MB/s (10^6 bytes/s of entry bodies), the ratio heal / raw copy, and the CPU each kind of process
(daemons, bookies, ZooKeeper, this bench) used from the kill to the end. The bench waits on the marker
tree's watches (no polling), so it adds next to no load to the cluster it measures. Not a test.

    .venv/bin/python bench/heal.py              # 1024 MiB (about a third of it is healed)
    .venv/bin/python bench/heal.py --mib 32     # quick run
    .venv/bin/python bench/heal.py --daemons 1 --set replicationWorkerConcurrentLedgers=8   # tune a key
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import structlog  # noqa: E402

from autorecovery.cli.demo_recovery import kill_host, start_daemons  # noqa: E402
from autorecovery.client.bookkeeper import BookKeeper  # noqa: E402
from autorecovery.cli.demo_checks import daemons_ready, writable_bookies  # noqa: E402
from autorecovery.ledger.metadata import bookie_index_stores  # noqa: E402
from autorecovery.testing.local_cluster import LocalCluster  # noqa: E402
from autorecovery.workload import write_ledgers  # noqa: E402
from autorecovery.zk.underreplication import UnderreplicationManager  # noqa: E402
from replication import ENTRY, raw_grpc, raw_pull  # noqa: E402


def cpu_procs(cluster: LocalCluster, victim: int) -> dict:
    """psutil processes whose CPU is accounted: surviving daemons and bookies, ZooKeeper, this bench."""
    import os

    import psutil

    out = {"bench-0": psutil.Process(os.getpid())}
    zk_pid = json.loads((cluster.base / "cluster.json").read_text()).get("zk_pid")
    if zk_pid:
        out["zookeeper-0"] = psutil.Process(zk_pid)
    for i, b in cluster.bookies.items():
        if i != victim and b.pid:
            out[f"bookies-{i}"] = psutil.Process(b.pid)
    for i, d in cluster.daemons.items():
        if i != victim and d.pid:
            out[f"daemons-{i}"] = psutil.Process(d.pid)
    return out


def cpu_s(p) -> float:
    """User + system CPU seconds of a process so far (0 once it is gone). Children are not counted: the
    bench's reaped children are the killed host's processes, whose whole lifetime would count."""
    try:
        t = p.cpu_times()
        return t.user + t.system
    except Exception:  # noqa: BLE001 - a process that died counts what it had
        return 0.0


def zk_counts(connect: str) -> dict[str, int]:
    """ZooKeeper's request counters (``mntr``): packets received, and write requests so far."""
    import socket

    host, port = connect.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"mntr")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    out = {}
    for line in data.decode().splitlines():
        k, _, v = line.partition("\t")
        if k in ("zk_packets_received", "zk_watch_count", "zk_outstanding_requests"):
            out[k] = int(float(v))
    return out


def progress(port: int) -> dict:
    """The daemon's ``/api/v1/autorecovery/progress`` document."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/autorecovery/progress", timeout=5) as r:
        return json.loads(r.read())


async def bytes_on(bk: BookKeeper, ledger_ids, bookie: str) -> int:
    """Entry bytes whose write set includes ``bookie`` (what its loss leaves to copy)."""
    total = 0
    for lid in ledger_ids:
        md, _ = await bk.ledgers.read(lid)
        for i, seg in enumerate(md.segments):
            if bookie not in seg.ensemble:
                continue
            idx = seg.ensemble.index(bookie)
            total += ENTRY * sum(1 for e in range(seg.first_entry_id, md.segment_end(i) + 1)
                                 if bookie_index_stores(idx, e, len(seg.ensemble), md.write_quorum))
    return total


async def run(base: Path, mib: int, ledgers: int, daemons: int = 5, props: dict[str, str] | None = None) -> None:
    cluster = LocalCluster(base / "heal", bookies=6, racks=3)
    try:
        await asyncio.to_thread(cluster.up)
        # host 1 is the victim; the surviving daemons run on the first ``daemons`` other hosts
        hosts = sorted({1, *[0, 2, 3, 4, 5][:daemons]})
        ports = await asyncio.to_thread(start_daemons, cluster, hosts, props or {})
        bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
        try:
            await writable_bookies(bk.watcher, 6, "set-up")
            await asyncio.to_thread(daemons_ready, ports, "set-up")
            entries = max(1, mib * 2**20 // ENTRY // ledgers)
            t = time.perf_counter()
            m = await write_ledgers(bk, ledgers=ledgers, entries=entries, size=ENTRY)
            victim = 1
            dead = cluster.bookie_id(victim)
            to_heal = await bytes_on(bk, m.ledgers, dead)
            print(f"set-up: {ledgers} ledgers x {entries} entries of {ENTRY // 1024} KiB, E3/WQ2/AQ2, written in "
                  f"{time.perf_counter() - t:.1f}s; {to_heal / 2**20:.0f} MiB on {dead}")
            before = {i: progress(p)["worker"]["bytes_copied"] for i, p in ports.items() if i != victim}
            urm = UnderreplicationManager(bk.zk, bk.paths)
            await urm.init()
            changed = urm.subscribe()

            async def references_dead() -> bool:
                for lid in m.ledgers:
                    md, _ = await bk.ledgers.read(lid)
                    if any(dead in seg.ensemble for seg in md.segments):
                        return True
                return False

            # the load's dirty pages (two replicas of every entry) must not be flushed during the heal: the
            # raw baselines run on a quiet disk
            await asyncio.to_thread(os.sync)
            procs = cpu_procs(cluster, victim)
            cpu0 = {k: cpu_s(p) for k, p in procs.items()}
            t0 = time.perf_counter()
            await asyncio.to_thread(kill_host, cluster, victim)
            deadline = t0 + 900
            marked_at = None
            # watch-driven (the marker tree's child watches), so the bench adds no polling load of its
            # own to the cluster it measures; the metadata is read once the markers are gone
            while True:
                changed.clear()
                marked = await urm.watched_marked_ids()
                if marked and marked_at is None:
                    marked_at = time.perf_counter()
                    cpu_marked = {k: cpu_s(p) for k, p in procs.items()}
                    zk_marked = zk_counts(cluster.zk_connect)
                if marked_at is not None and not marked and not await references_dead():
                    break
                if time.perf_counter() > deadline:
                    raise SystemExit("heal did not finish within 900 s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)
            dt = time.perf_counter() - t0
            cpu_end = {k: cpu_s(p) for k, p in procs.items()}
            zk_end = zk_counts(cluster.zk_connect)
            cpu = {k: cpu_end[k] - cpu0[k] for k, p in procs.items()}
            cpu_copy = {k: cpu_end[k] - cpu_marked.get(k, cpu0[k]) for k in procs} if marked_at else cpu
            detect = (marked_at or t0) - t0
            copy_s = dt - detect
            copied = {i: progress(p)["worker"]["bytes_copied"] - before[i] for i, p in ports.items() if i != victim}
            await urm.close()
        finally:
            await bk.close()
    finally:
        await asyncio.to_thread(cluster.down)
    workers = [i for i, b in copied.items() if b > 0]
    heal = to_heal / copy_s / 1e6
    print(f"kill -> empty queue: {dt:.2f}s = {detect:.2f}s until the first marker (ZooKeeper session expiry of "
          f"the dead bookie + audit) + {copy_s:.2f}s of copying")
    print(f"heal:      {heal:8.1f} MB/s  ({to_heal / 2**20:.0f} MiB from the first marker to an empty queue, "
          f"{len(workers)} workers copied; {to_heal / dt / 1e6:.1f} MB/s counting from the kill)")
    for i in sorted(copied):
        print(f"  worker {i}: {copied[i] / 2**20:7.1f} MiB, {copied[i] / copy_s / 1e6:6.1f} MB/s")
    def by_kind(c: dict) -> str:
        groups: dict[str, float] = {}
        for k, v in c.items():
            groups[k.split("-")[0]] = groups.get(k.split("-")[0], 0.0) + v
        return ", ".join(f"{k} {v:.2f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1]))

    print(f"CPU from the kill to the end ({dt:.2f}s x 2 cores = {2 * dt:.1f} core-s): {by_kind(cpu)}; "
          f"{sum(cpu.values()) / (to_heal / 1e6) * 1000:.0f} core-ms per MB healed")
    print("ZooKeeper while copying: " + ", ".join(f"{k} {zk_end[k] - zk_marked.get(k, 0)}" for k in zk_end))
    print("per process while copying (core-s): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu_copy.items())))
    print(f"CPU while copying ({copy_s:.2f}s x 2 cores = {2 * copy_s:.1f} core-s): {by_kind(cpu_copy)}; "
          f"{sum(cpu_copy.values()) / copy_s:.2f} cores busy")
    raw = await raw_grpc(to_heal // ENTRY, max(1, len(workers)))
    print(f"raw copy:  {raw:8.1f} MB/s  (same bytes, ReadEntryBatches -> AddEntryBatches between two null-bookie "
          f"processes, {max(1, len(workers))} pipelines)")
    rawp = await raw_pull(to_heal // ENTRY, max(1, len(workers)))
    print(f"raw pull:  {rawp:8.1f} MB/s  (same bytes, PullEntries: one null-bookie process reads another, "
          f"{max(1, len(workers))} calls: the one-hop path the workers' bookies use)")
    best = max(copied.values()) / copy_s / 1e6
    print(f"ratio: heal/raw copy = {heal / raw:.2f}, heal/raw pull = {heal / rawp:.2f} (issue 13 goal: per-worker >= 100 MB/s; best worker "
          f"{best:.1f} MB/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="MiB of entry bodies written (default 1024)")
    ap.add_argument("--ledgers", type=int, default=24, help="ledgers the data is spread over (default 24)")
    ap.add_argument("--daemons", type=int, choices=range(1, 6), default=5,
                    help="surviving hosts that run an autorecovery daemon (default 5: all; 1 = a single worker heals)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's data directories")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a daemon configuration key for this run (repeatable), e.g. "
                         "replicationMaxStreamsPerTargetBookie=8")
    a = ap.parse_args()
    props = {}
    for item in a.set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--set {item!r}: expected KEY=VALUE")
        props[key] = value
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    base = Path(tempfile.mkdtemp(prefix="bench-heal-"))
    try:
        asyncio.run(run(base, a.mib, a.ledgers, a.daemons, props))
    finally:  # ~2.5 GB per run: left behind, a few dozen runs filled the disk and turned bookies read-only
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
