"""Benchmark: what one lost bookie costs ZooKeeper, ours measured against upstream's algorithm computed.

One lost bookie holding 1% of an N-ledger cluster (default N = 1M, so 10,000 under-replicated ledgers;
``--ledgers 10000000`` marks 100,000). On a private ZooKeeper:

* **marking**: the auditor's ``mark_many`` (batched ``multi``) writes the K markers; its requests and the
  server's bytes received (``mntr``: ``zk_packets_received``, and the request bytes when the server
  reports them);
* **healing**: ``--daemons`` worker sessions (lightweight: all in this process, each its own ZooKeeper
  session and manager, no copy path) each loop: honour ``zkReplicationTaskRateLimit`` (``--rate``
  tasks/s per daemon, 0 = off: the worker's own ``TokenBucket``, upstream's RateLimiter semantics), pick and lock a ledger
  (``poll_ledger_to_rereplicate``), take a source and a target stream slot (``ClusterStreamSlots``), then
  release them and delete the marker (``mark_replicated``): everything a heal asks of ZooKeeper but the
  copy. Printed: requests per healed ledger, peak outstanding requests (all sessions, sampled every
  2 ms; goal ≤ 500), lock races lost (a create that found the lock taken: the CAS retries);
* **restart with the backlog**: ``--restarts`` fresh sessions start a worker's manager together while
  the K markers are queued (daemons restarted, or every session after a ZooKeeper session event): each
  walks the marker tree to build its index. Printed: their peak outstanding and requests per session.

Upstream's figures are computed from its documented operations (/work/shared/reference/
upstream-autorecovery.md §3.4), not run: per healed ledger ``exists`` the marker, ``create`` the lock,
``delete`` the marker with its version, ``delete`` the emptied parent (≥1 try), ``delete`` the lock = 5,
plus the watch re-listings its SubTreeCache does: every marker deletion changes the leaf level and every
lock create/delete the flat locks directory (and the marker's own fourth-level directory is deleted, which
changes the third level every worker listed), so each of the D workers holding those one-shot watches
re-lists them: up to 3·D ``getChildren`` per ledger (an upper bound: changes that come faster than a
worker re-lists coalesce into one notification). Upstream's marking (``markLedgerUnderreplicated``,
"create full path optimistic", one ledger at a time) pays 3 requests per marker: the leaf's create fails
NoNode (each marker has its own fourth-level directory), the directory is created, the leaf again.
Upstream has no stream slots. Its outstanding peak is bounded by its D workers' re-listings, D·3 at once.

    .venv/bin/python bench/zk_cost.py                       # 1M-ledger cluster: 10,000 ledgers, 100 daemons
    .venv/bin/python bench/zk_cost.py --ledgers 10000000 --daemons 300
    .venv/bin/python bench/zk_cost.py --quick               # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autorecovery.plan.throttle import TokenBucket  # noqa: E402
from autorecovery.zk.bridge import ZkClient  # noqa: E402
from autorecovery.zk.ledgers import init_cluster  # noqa: E402
from autorecovery.zk.paths import Paths  # noqa: E402
from autorecovery.zk.stream_slots import ClusterStreamSlots  # noqa: E402
from autorecovery.zk.underreplication import UnderreplicationManager  # noqa: E402
from autorecovery.testing.zk_server import ZooKeeperServer  # noqa: E402
from zkstats import mntr  # noqa: E402

P = Paths("/ledgers")
LOST = "10.0.0.1:3181"


KINDS = ("get", "get_children", "exists", "get_many", "add_watch", "create", "set", "delete", "multi")


def count_kinds(zk: ZkClient, counts: dict[str, int]) -> None:
    """Count this client's requests by kind into ``counts`` (wrapping its methods)."""
    for kind in KINDS:
        orig = getattr(zk, kind)

        def wrapped(*a, _orig=orig, _kind=kind, **kw):
            counts[_kind] = counts.get(_kind, 0) + 1
            return _orig(*a, **kw)

        setattr(zk, kind, wrapped)


async def start_daemon(zk: ZkClient, i: int, rng: random.Random) -> UnderreplicationManager:
    """A worker's manager, started as a running daemon's is before the loss: its marker index built
    (persistent watch, ZooKeeper 3.6+) over the tree as it is."""
    um = UnderreplicationManager(zk, P, lock_owner=f"daemon-{i}", rng=random.Random(rng.random()))
    await um.init()
    await um._index.ensure()
    return um


async def daemon(um: UnderreplicationManager, zk: ZkClient, i: int, rate: float, healed: list[int],
                 races: list[int]) -> None:
    slots = ClusterStreamSlots(zk, P, 2, 2, f"daemon-{i}")
    orig = um.acquire

    async def counted(lid: int, **kw) -> bool:
        ok = await orig(lid, **kw)
        if not ok:
            races[0] += 1
        return ok

    um.acquire = counted  # type: ignore[method-assign]
    bucket = TokenBucket(rate, time.monotonic)  # the worker's own zkReplicationTaskRateLimit bucket
    try:
        while True:
            wait = bucket.reserve(1)
            if wait > 0:
                await asyncio.sleep(wait)  # pacing, as the worker does, not synchronisation
            lid = await um.poll_ledger_to_rereplicate()
            if lid is None:
                return
            source, target = f"10.0.1.{lid % 200}:3181", f"10.0.2.{(lid * 7) % 200}:3181"
            taken = await slots.acquire(source, [target])
            await slots.release(taken)
            await um.mark_replicated(lid)
            healed[0] += 1
    finally:
        await um.close()


async def run(n: int, n_daemons: int, per_process: int, rate: float, connect: str, restarts: int) -> None:
    k = max(1, n // 100)
    admin = await ZkClient(connect, session_timeout_ms=30000).start()
    await init_cluster(admin, P)
    urm = UnderreplicationManager(admin, P)
    await urm.init()
    clients = [await ZkClient(connect, session_timeout_ms=30000).start() for _ in range(n_daemons)]
    peak, phase = {"start": 0, "heal": 0}, ["start"]
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            out = sum(c.max_concurrent_ops - c._sem._value for c in clients)
            peak[phase[0]] = max(peak[phase[0]], out)
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    rng = random.Random(3)
    s0 = sum(c.ops for c in clients)
    ums = await asyncio.gather(*(start_daemon(c, i, rng) for i, c in enumerate(clients)))
    start_ops = sum(c.ops for c in clients) - s0
    m0, ops0, t = mntr(connect), admin.ops, time.monotonic()
    await urm.mark_many({lid: [LOST] for lid in range(1, k + 1)})
    mark_s = time.monotonic() - t
    m1 = mntr(connect)
    mark_ops = admin.ops - ops0
    mark_packets = m1.get("zk_packets_received", 0) - m0.get("zk_packets_received", 0)
    bytes_key = next((key for key in ("zk_bytes_received_count",) if key in m1), None)
    mark_bytes = (m1[bytes_key] - m0[bytes_key]) if bytes_key else None

    # every daemon's index has seen the markers (persistent watch notifications), bounded wait
    deadline = time.monotonic() + 120
    while any(len(um._index.marked) < k for um in ums):
        if time.monotonic() > deadline:
            raise SystemExit("the daemons' marker indexes did not see every marker within 120 s")
        await asyncio.sleep(0.01)  # polling a condition with a deadline (bench, not a test)
    # daemons (re)starting with the backlog in place (a restart, or every session after a ZooKeeper
    # session event): each walks the marker tree to build its index
    phase[0] = "restart"
    peak["restart"] = 0
    fresh = [await ZkClient(connect, session_timeout_ms=30000).start() for _ in range(restarts)]
    clients.extend(fresh)
    r0 = sum(c.ops for c in fresh)
    t = time.monotonic()
    restarted = await asyncio.gather(*(start_daemon(c, i, rng) for i, c in enumerate(fresh)))
    restart_s, restart_ops = time.monotonic() - t, sum(c.ops for c in fresh) - r0
    for um in restarted:
        await um.close()
    for c in fresh:
        await c.stop()
        clients.remove(c)
    phase[0] = "heal"
    by_kind: dict[str, int] = {}
    for c in clients:
        count_kinds(c, by_kind)
    healed, races = [0], [0]
    h0 = [c.ops for c in clients]
    t = time.monotonic()
    await asyncio.gather(*(daemon(um, c, i, rate, healed, races) for i, (um, c) in enumerate(zip(ums, clients))))
    heal_s = time.monotonic() - t
    stop.set()
    await sampler
    heal_ops = sum(c.ops for c in clients) - sum(h0)
    left = len(await urm.list_marked_ids())
    for c in clients:
        await c.stop()
    await urm.close()
    await admin.stop()

    d = n_daemons
    up_mark = 3 * k  # createFullPathOptimistic: the leaf (NoNode), its own 4th-level directory, the leaf again
    up_heal = 5 + 3 * d
    print(f"lost bookie {LOST}: {k} of {n} ledgers under-replicated (1%); {d} daemon sessions "
          f"({per_process} per process: this one), zkReplicationTaskRateLimit {rate:g}/s per daemon"
          f"{' (off)' if rate <= 0 else ''}; {healed[0]} healed in {heal_s:.1f} s, {left} markers left")
    if rate > 0:
        got = healed[0] / max(heal_s, 1e-9) / d
        print(f"  rate limit honoured: {got:.2f} ledgers/s per daemon against {rate:g}/s: "
              f"{'yes' if got <= rate * 1.05 + 1 / heal_s else 'NO'}")
    print(f"{'':34}{'ours':>12}{'upstream':>12}{'ratio':>9}")
    print(f"{'marking: requests':34}{mark_ops:12d}{up_mark:12d}{up_mark / max(1, mark_ops):8.1f}x")
    print(f"{'marking: packets at the server':34}{mark_packets:12.0f}{'':>12}"
          + (f"   ({mark_bytes:.0f} bytes received)" if mark_bytes is not None else "   (this server reports no byte count)"))
    print(f"{'marking: time (s)':34}{mark_s:12.2f}")
    per = heal_ops / max(1, healed[0])
    print(f"{'requests per healed ledger':34}{per:12.1f}{up_heal:12.1f}{up_heal / max(per, 1e-9):8.1f}x"
          f"   (upstream: 5 + up to 3·D watch re-listings, D = {d})")
    kinds = ", ".join(f"{kind} {n / max(1, healed[0]):.2f}" for kind, n in sorted(by_kind.items(), key=lambda x: -x[1]))
    print(f"  ours per healed ledger by call: {kinds}")
    print(f"{'peak outstanding requests, heal':34}{peak['heal']:12d}{3 * d:12d}   (goal <= 500; all sessions, sampled every 2 ms)")
    print(f"{'  at the daemons start':34}{peak['start']:12d}{'':>12}   ({start_ops} requests for {d} sessions to start, "
          f"before the loss)")
    print(f"{'  at a restart with the backlog':34}{peak['restart']:12d}{'':>12}   ({restarts} sessions restarting together, "
          f"{restart_ops / max(1, restarts):.0f} requests each to walk {k} markers, {restart_s:.1f} s for all; "
          f"up to max_concurrent_ops in flight per session)")
    print(f"{'lock races lost (CAS retries)':34}{races[0]:12d}{'':>12}   ({races[0] / max(1, healed[0]):.3f} per healed ledger)")
    print(f"{'ZooKeeper requests, whole heal':34}{heal_ops:12d}{up_heal * k:12d}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process ({d} daemon sessions and {restarts} restarting): {rss:.0f} MB "
          f"= {rss / (d + restarts):.1f} MB per session")
    ok = left == 0 and peak["heal"] <= 500
    print(f"targets: every marker healed and peak outstanding <= 500: {'PASS' if ok else 'FAIL'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=int, default=1_000_000, help="cluster size; 1%% of it is under-replicated")
    ap.add_argument("--daemons", type=int, default=100, help="worker sessions (default 100)")
    ap.add_argument("--rate", type=float, default=0.0, help="zkReplicationTaskRateLimit per daemon, tasks/s (0 = off)")
    ap.add_argument("--restarts", type=int, default=None,
                    help="sessions that restart together with the backlog queued (default: min(--daemons, 20))")
    ap.add_argument("--zk", default=None, help="use this ZooKeeper (default: start a private one)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 50,000-ledger cluster (500 markers), 20 daemons")
    a = ap.parse_args()
    if a.quick:
        a.ledgers, a.daemons = 50_000, 20
    if a.ledgers < 100 or a.daemons < 1:
        ap.error("--ledgers at least 100, --daemons at least 1")
    restarts = min(a.daemons, 20) if a.restarts is None else a.restarts
    per = a.daemons  # every session in this process (lightweight: one ZkClient each, no copy path)
    if a.zk:
        asyncio.run(run(a.ledgers, a.daemons, per, a.rate, a.zk, restarts))
        return
    with tempfile.TemporaryDirectory(prefix="bench-zk-cost-") as d:
        server = ZooKeeperServer(Path(d)).start()
        try:
            asyncio.run(run(a.ledgers, a.daemons, per, a.rate, server.connect_string, restarts))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
