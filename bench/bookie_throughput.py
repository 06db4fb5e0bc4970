"""Benchmark: ledger-client write/read MB/s against raw gRPC streaming of the same bytes.

For 1 KiB and 64 KiB entries it measures, in one run:
- client write: ``LedgerHandle.add_entry`` on a real 3-bookie cluster (E3/WQ2/AQ2, a window of adds in
  flight), payload MB/s;
- client read: ``ReadHandle.read_entries`` of the same ledger, payload MB/s;
- baseline: raw gRPC streaming of the same payload bytes x WQ to an in-process server that stores
  nothing (AddEntries client stream for writes, ReadEntries server stream for reads).
It prints the ratios client / raw. Not a test: run ``python bench/bookie_throughput.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorecovery.client.bookkeeper import BookKeeper  # noqa: E402
from autorecovery.ledger.digest import pack_entry  # noqa: E402
from autorecovery.proto import bookie_pb2 as pb  # noqa: E402
from autorecovery.proto import bookie_pb2_grpc as pbg  # noqa: E402
from autorecovery.rpc.bookie_client import BookieClient  # noqa: E402
from autorecovery.testing.local_cluster import LocalCluster  # noqa: E402
from autorecovery.testing.zk_server import free_port  # noqa: E402


class NullBookie(pbg.BookieServicer):
    """Accepts and serves entries without storing anything (the raw gRPC baseline)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def AddEntries(self, request_iterator, context):
        n = b = 0
        async for req in request_iterator:
            n += 1
            b += len(req.body)
        return pb.AddEntriesResponse(status=pb.EOK, entries_written=n, bytes_written=b, failed_entry_id=-1)

    async def ReadEntries(self, request, context):
        for e in range(request.first_entry_id, request.last_entry_id + 1):
            yield pb.ReadResponse(status=pb.EOK, ledger_id=request.ledger_id, entry_id=e, body=self.body, lac=e - 1)


async def raw_grpc(size: int, count: int, copies: int) -> tuple[float, float]:
    """(write MB/s, read MB/s) of payload bytes over raw gRPC streams, no storage."""
    body = pack_entry(1, 0, -1, size, b"x" * size)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 16 << 20),
                                      ("grpc.max_send_message_length", 16 << 20)])
    pbg.add_BookieServicer_to_server(NullBookie(body), server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    bc = BookieClient()
    bid = f"127.0.0.1:{port}"
    try:
        t = time.perf_counter()
        for _ in range(copies):
            await bc.add_entries(bid, 1, b"k", ((e, body) for e in range(count)))
        wdt = time.perf_counter() - t
        t = time.perf_counter()
        n = 0
        async for item in bc.read_entries(bid, 1, 0, count - 1):
            n += 1
        rdt = time.perf_counter() - t
        assert n == count
    finally:
        await bc.close()
        await server.stop(None)
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
        cluster = LocalCluster(Path(d), bookies=3, racks=1)
        cluster.up()
        try:
            print(f"{'entry':>8} {'client write':>13} {'raw write':>10} {'ratio':>6} {'client read':>12} {'raw read':>9} {'ratio':>6}  (payload MB/s, E3/WQ2/AQ2)")
            for size, count in plans:
                cw, cr = asyncio.run(client_rates(cluster, size, count))
                rw, rr = asyncio.run(raw_grpc(size, count, copies=2))
                print(f"{size:>7}B {cw:>13.2f} {rw:>10.2f} {cw / rw:>6.2f} {cr:>12.2f} {rr:>9.2f} {cr / rr:>6.2f}")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
