"""Benchmark: the worker's cost to pick, lock and finish one ledger against the length of the queue.

On a private ZooKeeper (``autorecovery.testing.zk_server``), for each queue length of ``--queues``: an
auditor's manager marks that many ledgers (ids 1..n, as a real cluster numbers them: all below 65,536
share the upper three hex levels), then a worker's :class:`UnderreplicationManager` with its
:class:`~autorecovery.roles.backlog.Backlog` (ranking, and with ``--refresh`` the worker's refresh
loop) picks, locks and deletes ``--picks`` markers one after another: what a heal pays per ledger
besides the copy. Printed per queue length: wall ms and CPU ms of this process per ledger, and
ZooKeeper requests per ledger (in the pick alone, then in all). Issue 29 item 3: before the
persistent-watch index and the reused ranking, the cost grew with the queue (a pick re-listed the
marker level and walked every leaf); after, it stays flat. Not a test.

    .venv/bin/python bench/ur_pick.py                         # queues 300,1000,3000,10000, 100 picks
    .venv/bin/python bench/ur_pick.py --queues 1000 --picks 200 --refresh
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorecovery.roles.backlog import Backlog
from autorecovery.testing.zk_chroot import fresh_chroot
from autorecovery.testing.zk_server import ZooKeeperServer
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def one(connect: str, queue: int, picks: int, refresh: bool) -> tuple[float, str]:
    zk = await ZkClient(connect).start()
    auditor_zk = await ZkClient(connect).start()
    paths = Paths("/ledgers")
    um = UnderreplicationManager(zk, paths)
    auditor = UnderreplicationManager(auditor_zk, paths)
    refresher: asyncio.Task | None = None
    try:
        await um.init()
        await auditor.init()
        await auditor.mark_many({lid: ["bookie-0:3181"] for lid in range(1, queue + 1)})
        backlog = Backlog(zk, paths, um, LedgerStore(zk, paths), clock=time.monotonic)
        await backlog.refresh(set())
        rng = random.Random(1)

        async def refresh_loop() -> None:  # the worker's: on every marker change, paced by the queue
            changed = um.subscribe()
            while True:
                changed.clear()
                t0 = time.monotonic()
                await backlog.refresh(set())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), 10)
                pause = max(0.5, len(backlog.markers) / 2000.0) - (time.monotonic() - t0)
                if pause > 0:
                    await asyncio.sleep(pause)

        if refresh:
            refresher = asyncio.create_task(refresh_loop())
        ops0, c0, t0, in_pick = zk.ops, cpu_s(), time.perf_counter(), 0
        for _ in range(picks):
            o = zk.ops
            lid = await um.poll_ledger_to_rereplicate(lambda ids: backlog.order(ids, rng, set()))
            in_pick += zk.ops - o
            if lid is None:
                raise SystemExit(f"queue {queue}: nothing to pick")
            await um.get_marker(lid)
            if not await um.mark_replicated(lid):
                raise SystemExit(f"queue {queue}: marker of ledger {lid} not deleted")
        dt, dc = time.perf_counter() - t0, cpu_s() - c0
        return dc / picks, (f"queue {queue:6d}: {dt / picks * 1000:7.1f} ms/ledger wall, {dc / picks * 1000:6.1f} ms CPU/ledger, "
                f"{in_pick / picks:4.1f} ZooKeeper requests in the pick, {(zk.ops - ops0) / picks:5.1f} in all"
                + (" (with the refresh loop)" if refresh else ""))
    finally:
        if refresher is not None:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
        await um.close()
        await auditor.close()
        await zk.stop()
        await auditor_zk.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: queues 100,300, 20 picks each")
    ap.add_argument("--queues", default="300,1000,3000,10000", help="queue lengths, comma-separated")
    ap.add_argument("--picks", type=int, default=100, help="ledgers picked and finished per queue length")
    ap.add_argument("--refresh", action="store_true", help="run the worker's backlog refresh loop meanwhile")
    a = ap.parse_args()
    if a.quick:
        a.queues, a.picks = "100,300", 20
    try:
        queues = [int(q) for q in a.queues.split(",") if q.strip()]
    except ValueError:
        ap.error(f"--queues {a.queues!r}: expected counts like 300,1000")
    if not queues or any(q < 1 for q in queues) or a.picks < 1 or any(q < a.picks for q in queues):
        ap.error("--queues: positive counts, each at least --picks")
    with tempfile.TemporaryDirectory(prefix="bench-ur-pick-") as d:
        server = ZooKeeperServer(Path(d)).start()
        try:
            cpu: list[float] = []
            for q in queues:
                per, line = asyncio.run(one(fresh_chroot(server.connect_string, "q"), q, a.picks, a.refresh))
                cpu.append(per)
                print(line, flush=True)
            print(f"ratio: CPU per ledger at queue {queues[-1]} / at queue {queues[0]} (the baseline) = "
                  f"{cpu[-1] / max(cpu[0], 1e-9):.2f} (flat: 1.0)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
