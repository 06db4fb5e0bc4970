"""Benchmark: ledger-client write/read MB/s against raw gRPC streaming of the same bytes.

For 1 KiB and 64 KiB entries it measures, in one run:
- client write: ``LedgerHandle.add_entry`` on a real 3-bookie cluster (E3/WQ2/AQ2, a window of adds in
  flight), payload MB/s;
- client read: ``ReadHandle.read_entries`` of the same ledger, payload MB/s;
- baseline: raw gRPC streaming of the same payload bytes to three null bookies, each in its own
  process, with the client's fan-out: every entry to its WQ=2 bookies round-robin, one AddEntries stream
  per bookie in parallel; reads as three ReadEntries streams in parallel (``bench/nullbookie.py``).
It prints the ratios client / raw. Not a test: run ``python bench/bookie_throughput.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.ledger.digest import pack_entry
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.local_cluster import LocalCluster
import limits
from nullbookie import MAX_MSG, spawn_null, stop


async def raw_grpc(size: int, count: int, ensemble: int = 3, wq: int = 2) -> tuple[float, float]:
    """(write MB/s, read MB/s) of payload bytes over raw gRPC streams to ``ensemble`` null bookies.

    Same fan-out and bytes as the client: each null bookie runs in its own process; writes stripe
    round-robin (entry ``e`` goes to bookies ``e..e+wq-1 mod ensemble``, every copy sent) with one
    AddEntries stream per bookie, all in parallel; reads fetch each entry once, ``ensemble`` ReadEntries
    streams in parallel (the client reads each write set from its first bookie), served from pre-built
    bodies (``bench/nullbookie.py --prebuild``: the transport's ceiling, not entry building).
    """
    body = pack_entry(1, 0, -1, size, b"x" * size)
    servers = [spawn_null(size, (1, 1, count)) for _ in range(ensemble)]  # reads served from pre-built bodies
    ids = [bid for _p, bid in servers]
    bc = BookieClient(max_message_bytes=MAX_MSG)
    try:
        for bid in ids:  # connect every channel before timing
            await bc.add_entries(bid, 9, b"k", [])
        t = time.perf_counter()
        await asyncio.gather(*(
            bc.add_entries(bid, 1, b"k", ((e, body) for e in range(count) if (i - e) % ensemble < wq))
            for i, bid in enumerate(ids)))
        wdt = time.perf_counter() - t
        n = [0]

        async def read(i: int, bid: str) -> None:
            per = -(-count // ensemble)
            first, last = i * per, min(count, (i + 1) * per) - 1
            if first > last:
                return
            async for _item in bc.read_entries(bid, 1, first, last):
                n[0] += 1

        t = time.perf_counter()
        await asyncio.gather(*(read(i, bid) for i, bid in enumerate(ids)))
        rdt = time.perf_counter() - t
        assert n[0] == count, (n[0], count)
    finally:
        await bc.close()
        for proc, _bid in servers:
            stop(proc)
    mb = size * count / 1e6
    return mb / wdt, mb / rdt


async def client_rates(cluster: LocalCluster, size: int, count: int, window: int = 64) -> tuple[float, float]:
    bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
    try:
        await bk.watcher.wait_until(lambda w: len(w.writable) == len(cluster.bookies), 10)
        lh = await bk.create_ledger(3, 2, 2)
        data = b"y" * size
        sem = asyncio.Semaphore(window)
        tasks = []
        t = time.perf_counter()
        for _ in range(count):
            await sem.acquire()
            task = asyncio.ensure_future(lh.add_entry(data))
            task.add_done_callback(lambda _t: sem.release())
            tasks.append(task)
        await asyncio.gather(*tasks)
        wdt = time.perf_counter() - t
        await lh.close()
        rh = await bk.open_ledger(lh.ledger_id)
        t = time.perf_counter()
        got = await rh.read_entries(0, count - 1)
        rdt = time.perf_counter() - t
        assert len(got) == count
    finally:
        await bk.close()
    mb = size * count / 1e6
    return mb / wdt, mb / rdt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer entries")
    args = ap.parse_args()
    plans = [(1024, 2000 if args.quick else 10000), (64 * 1024, 200 if args.quick else 1000)]
    with tempfile.TemporaryDirectory() as d:
        lim = limits.measure(Path(d))
        print(lim.line(Path(d)))
        cluster = LocalCluster(Path(d), bookies=3, racks=1)
        cluster.up()
        try:
            print(f"{'entry':>8} {'client write':>13} {'raw write':>10} {'ratio':>6} {'client read':>12} {'raw read':>9} {'ratio':>6}  (payload MB/s, E3/WQ2/AQ2)")
            for size, count in plans:
                cw, cr = asyncio.run(client_rates(cluster, size, count))
                rw, rr = asyncio.run(raw_grpc(size, count))
                print(f"{size:>7}B {cw:>13.2f} {rw:>10.2f} {cw / rw:>6.2f} {cr:>12.2f} {rr:>9.2f} {cr / rr:>6.2f}  "
                      f"(client write: {lim.fractions(cw)})")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
