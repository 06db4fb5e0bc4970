"""Benchmark: the reference bookie's RPC paths, against a sequential-add baseline from the same run.

One in-process bookie (SQLite store + gRPC service, no ZooKeeper), one BookieClient. For 1 KiB and
64 KiB entries it measures entries/s and MB/s of:

- baseline: sequential AddEntry (one add in flight: every add pays its own fsync);
- concurrent AddEntry with 64 adds in flight (group commit shares the fsyncs);
- one AddEntries client stream (pipelined into the group-commit writer);
- sequential ReadEntry, and one ReadEntries server stream over the same entries.

It prints each figure and its ratio to the baseline (writes) or to sequential reads (reads), and the
machine's own limits (``bench/limits.py``: fdatasync write and loopback TCP rates) with the fraction of
each every figure reached.
Not a test: ``python bench/bookie_rpc.py [--quick]``.
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

import limits
from autorecovery.bookie.disk import DiskProbe
from autorecovery.bookie.service import BookieService, add_service
from autorecovery.bookie.grpc_server import build_grpc_server
from autorecovery.bookie.storage import BookieStorage
from autorecovery.ledger.digest import pack_entry
from autorecovery.rpc.transport import BookieClient

MK = b"bench"


async def run(size: int, n: int, data_dir: Path, lim: limits.Limits) -> None:
    storage = BookieStorage(data_dir, name="bench")
    await asyncio.to_thread(storage.open)
    server, port = build_grpc_server("127.0.0.1", 0, 5 * 1024 * 1024)
    add_service(server, BookieService(storage, f"127.0.0.1:{port}", disk=DiskProbe(data_dir)))
    await server.start()
    bid = f"127.0.0.1:{port}"
    client = BookieClient()
    payload = b"x" * size

    def body(lid: int, e: int) -> bytes:
        return pack_entry(lid, e, e - 1, 0, payload)

    async def timed(label: str, coro_fn, count: int) -> float:
        c0 = storage.commits
        t = time.perf_counter()
        await coro_fn()
        dt = time.perf_counter() - t
        rate = count / dt
        print(f"  {label:<34} {rate:>10.0f} entries/s {rate * size / 1e6:>8.1f} MB/s "
              f"({storage.commits - c0} commits; {lim.fractions(rate * size / 1e6)})")
        return rate

    print(f"entries of {size} bytes, {n} per run")
    try:
        async def seq() -> None:
            for e in range(n):
                await client.add_entry(bid, 1, e, MK, body(1, e))

        async def concurrent() -> None:
            sem = asyncio.Semaphore(64)

            async def one(e: int) -> None:
                async with sem:
                    await client.add_entry(bid, 2, e, MK, body(2, e))
            await asyncio.gather(*(one(e) for e in range(n)))

        async def stream() -> None:
            written, _ = await client.add_entries(bid, 3, MK, ((e, body(3, e)) for e in range(n)))
            assert written == n

        async def read_seq() -> None:
            for e in range(n):
                await client.read_entry(bid, 3, e)

        async def read_stream() -> None:
            k = 0
            async for _ in client.read_entries(bid, 3, 0, n - 1):
                k += 1
            assert k == n

        base = await timed("sequential AddEntry (baseline)", seq, n)
        r = await timed("AddEntry, 64 in flight", concurrent, n)
        print(f"    ratio to baseline: {r / base:.1f}x")
        r = await timed("AddEntries stream", stream, n)
        print(f"    ratio to baseline: {r / base:.1f}x")
        rbase = await timed("sequential ReadEntry", read_seq, n)
        r = await timed("ReadEntries stream", read_stream, n)
        print(f"    ratio to sequential reads: {r / rbase:.1f}x")
    finally:
        await client.close()
        await server.stop(None)
        await storage.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer entries")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        lim = limits.measure(Path(d))
        print(lim.line(Path(d)))
    for size, n in ((1024, 500 if args.quick else 3000), (64 * 1024, 100 if args.quick else 600)):
        with tempfile.TemporaryDirectory() as d:
            asyncio.run(run(size, n, Path(d), lim))


if __name__ == "__main__":
    main()
