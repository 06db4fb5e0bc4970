"""Benchmark: what one lost bookie costs ZooKeeper, ours measured against upstream's algorithm computed.

One lost bookie holding 1% of an N-ledger cluster (default N = 1M, so 10,000 under-replicated ledgers;
``--ledgers 10000000`` marks 100,000). On a private ZooKeeper:

* **marking**: the auditor's ``mark_many`` (batched ``multi``) writes the K markers; its requests and the
  server's bytes received (``mntr``: ``zk_packets_received``, and the request bytes when the server
  reports them);
* **healing**: ``--daemons`` worker sessions (lightweight: ``--per-process`` of them in each child
  process, each its own ZooKeeper session and manager, no copy path) each loop: honour ``zkReplicationTaskRateLimit`` (``--rate``
  tasks/s per daemon, 0 = off: the worker's own ``TokenBucket``, upstream's RateLimiter semantics), pick and lock a ledger
  (``poll_ledger_to_rereplicate``), take a source and a target stream slot (``ClusterStreamSlots``), then
  release them and delete the marker (``mark_replicated``): everything a heal asks of ZooKeeper but the
  copy. Printed: requests per healed ledger, peak outstanding requests cluster-wide (each process
  samples its sessions' outstanding requests every 2 ms and keeps the largest sum per 10 ms of wall
  time; the peak is the largest sum of those over the processes, an upper bound; next to it ZooKeeper's
  own ``mntr`` ``zk_outstanding_requests``, sampled every 10 ms; goal ≤ 500), lock races lost (a create
  that found the lock taken: the CAS retries);
* **restart with the backlog**: ``--restarts`` fresh sessions walk the marker tree together while the K
  markers are queued (daemons restarted): first with the walk this project had before (every directory
  of a level listed at once, 512 leaf directories at a time: the baseline, run here from the bench),
  then with the manager's (``multiRead`` batches, two requests in flight per session), then the
  rebuild every session makes after a ZooKeeper session event (jittered). Printed: peak outstanding
  (sampled, and the sum of each session's exact peak), requests per session, and the ratio.

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
    .venv/bin/python bench/zk_cost.py --daemons 1000 --per-process 100 --rate 1
    .venv/bin/python bench/zk_cost.py --quick               # smoke run

A SIGTERM, SIGINT or SIGHUP stops the child processes and the private ZooKeeper (bench/cleanup.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autorecovery.ledger.ids import ledger_id_from_ur_leaf
from autorecovery.plan.throttle import TokenBucket
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.ledgers import init_cluster
from autorecovery.zk.paths import Paths
from autorecovery.zk.stream_slots import ClusterStreamSlots
from autorecovery.zk.underreplication import UnderreplicationManager
from autorecovery.testing.zk_server import ZooKeeperServer
from cleanup import Children, child_command, exit_on_signals
from zkstats import mntr

P = Paths("/ledgers")
LOST = "10.0.0.1:3181"
BUCKET_S = 0.01  # wall-time window of the cross-process outstanding sum

KINDS = ("get", "get_children", "exists", "get_many", "get_children_many", "add_watch", "create", "set",
         "delete", "multi")


def count_kinds(zk: ZkClient, counts: dict[str, int]) -> None:
    """Count this client's requests by kind into ``counts`` (wrapping its methods)."""
    for kind in KINDS:
        orig = getattr(zk, kind)

        def wrapped(*a, _orig=orig, _kind=kind, **kw):
            counts[_kind] = counts.get(_kind, 0) + 1
            return _orig(*a, **kw)

        setattr(zk, kind, wrapped)


async def start_daemon(zk: ZkClient, i: int, rng: random.Random) -> UnderreplicationManager:
    """A worker's manager, started as a running daemon's is: its marker index built (persistent watch,
    ZooKeeper 3.6+) over the tree as it is."""
    um = UnderreplicationManager(zk, P, lock_owner=f"daemon-{i}", rng=random.Random(rng.random()))
    await um.init()
    await um._index.ensure()
    return um


async def old_walk(zk: ZkClient) -> set[int]:
    """The marker walk as this project had it before (the baseline): each level's directories all
    listed at once, then the leaf directories 512 at a time, one ``getChildren`` each."""
    async def children(p: str) -> list[str]:
        try:
            return sorted(await zk.get_children(p))
        except NoNodeError:
            return []

    level = [P.ur_ledgers]
    for _ in range(4):
        kids = await asyncio.gather(*(children(p) for p in level))
        level = [f"{p}/{k}" for p, ks in zip(level, kids, strict=True) for k in ks]
    out: set[int] = set()
    for i in range(0, len(level), 512):
        for names in await asyncio.gather(*(children(p) for p in level[i:i + 512])):
            out.update(ledger_id_from_ur_leaf(n) for n in names if n.startswith("urL"))
    return out


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


class Sampler:
    """Every 2 ms, the sum of ``clients``' outstanding requests: its peak and, per BUCKET_S of wall
    time, its largest value (for the cross-process sum)."""

    def __init__(self, clients: list[ZkClient]) -> None:
        self.clients, self.peak, self.buckets = clients, 0, {}  # type: ignore[var-annotated]
        self._stop = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            out = sum(c.outstanding for c in self.clients)
            self.peak = max(self.peak, out)
            b = int(time.time() / BUCKET_S)
            if out > self.buckets.get(b, 0):
                self.buckets[b] = out
            await asyncio.sleep(0.002)  # a sampling period, not synchronisation

    async def stop(self) -> None:
        self._stop.set()
        await self._task


class ServerSampler:
    """ZooKeeper's own ``zk_outstanding_requests`` (``mntr``), every 10 ms in a thread: its peak."""

    def __init__(self, connect: str) -> None:
        self.connect, self.peak, self.samples = connect, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            try:
                self.peak = max(self.peak, int(mntr(self.connect).get("zk_outstanding_requests", 0)))
                self.samples += 1
            except OSError:
                pass

    def stop(self) -> int:
        self._stop.set()
        self._t.join(5)
        return self.peak


# -- a child process: --per-process daemon sessions ------------------------------------------------

async def child(connect: str, first: int, count: int, rate: float, k: int) -> None:
    """Run ``count`` daemon sessions; the parent drives it over stdin/stdout (JSON lines)."""
    clients = [await ZkClient(connect, session_timeout_ms=30000).start() for _ in range(count)]
    rng = random.Random(first)
    s0 = sum(c.ops for c in clients)
    ums = await asyncio.gather(*(start_daemon(c, first + i, rng) for i, c in enumerate(clients)))
    say({"ready": True, "start_ops": sum(c.ops for c in clients) - s0,
         "start_peak": sum(c.peak_outstanding for c in clients)})
    line = await asyncio.to_thread(sys.stdin.readline)
    if line.strip() != "go":
        return  # the parent went away
    deadline = time.monotonic() + 120
    while any(len(um._index.marked) < k for um in ums):  # every index has seen the markers
        if time.monotonic() > deadline:
            raise SystemExit("the daemons' marker indexes did not see every marker within 120 s")
        await asyncio.sleep(0.01)  # polling a condition with a deadline (bench, not a test)
    by_kind: dict[str, int] = {}
    for c in clients:
        count_kinds(c, by_kind)
        c.reset_peak()
    healed, races = [0], [0]
    h0 = sum(c.ops for c in clients)
    sampler = Sampler(clients)
    t0 = time.time()
    await asyncio.gather(*(daemon(um, c, first + i, rate, healed, races) for i, (um, c) in enumerate(zip(ums, clients, strict=True))))
    t1 = time.time()
    await sampler.stop()
    say({"healed": healed[0], "races": races[0], "ops": sum(c.ops for c in clients) - h0, "by_kind": by_kind,
         "buckets": sampler.buckets, "peak": sampler.peak, "session_peak": max(c.peak_outstanding for c in clients),
         "t0": t0, "t1": t1, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    for c in clients:
        await c.stop()


def say(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


async def read_msg(proc: subprocess.Popen) -> dict:
    assert proc.stdout is not None
    line = await asyncio.to_thread(proc.stdout.readline)
    if not line:
        raise SystemExit(f"a daemon process (pid {proc.pid}) ended early, exit code {proc.wait()}")
    return json.loads(line)


# -- the parent ------------------------------------------------------------------------------------

async def restart_phase(connect: str, restarts: int, k: int) -> dict[str, dict]:
    """``restarts`` fresh sessions walk the backlog together: the old walk, ours, and the rebuild after a
    session event (jittered). Per variant: sampled peak, sum of the sessions' own peaks, requests."""
    fresh = [await ZkClient(connect, session_timeout_ms=30000).start() for _ in range(restarts)]
    out: dict[str, dict] = {}
    ums = [UnderreplicationManager(c, P, lock_owner=f"restart-{i}") for i, c in enumerate(fresh)]
    try:
        for name in ("old walk", "ours", "ours, after a session event"):
            for c in fresh:
                c.reset_peak()
            ops0 = sum(c.ops for c in fresh)
            sampler, server = Sampler(fresh), ServerSampler(connect)
            t = time.monotonic()
            if name == "old walk":
                got = await asyncio.gather(*(old_walk(c) for c in fresh))
            else:
                if name != "ours":
                    for um in ums:
                        um._index.invalidate()
                await asyncio.gather(*(um._index.ensure() for um in ums))
                got = [set(um._index.marked) for um in ums]
            dt = time.monotonic() - t
            await sampler.stop()
            if any(len(g) != k for g in got):
                raise SystemExit(f"{name}: a walk found {sorted(len(g) for g in got)[:3]} markers, not {k}")
            out[name] = {"peak": sampler.peak, "bound": sum(c.peak_outstanding for c in fresh),
                         "server": server.stop(), "ops": (sum(c.ops for c in fresh) - ops0) / restarts, "s": dt}
    finally:
        for um in ums:
            await um.close()
        for c in fresh:
            await c.stop()
    return out


async def run(n: int, n_daemons: int, per_process: int, rate: float, connect: str, restarts: int,
              kids: Children) -> None:
    k = max(1, n // 100)
    admin = await ZkClient(connect, session_timeout_ms=30000).start()
    try:
        await init_cluster(admin, P)
        urm = UnderreplicationManager(admin, P)
        await urm.init()
        script = str(Path(__file__).resolve())
        procs = []
        for first in range(0, n_daemons, per_process):
            count = min(per_process, n_daemons - first)
            procs.append(kids.add(subprocess.Popen(
                child_command(script, "--child", "--zk", connect, "--first", str(first), "--count", str(count),
                              "--rate", str(rate), "--k", str(k)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)))
        ready = [await read_msg(p) for p in procs]
        print(f"phase: {n_daemons} daemon sessions started in {len(procs)} processes", flush=True)
        start_ops = sum(r["start_ops"] for r in ready)

        m0, ops0, t = mntr(connect), admin.ops, time.monotonic()
        await urm.mark_many({lid: [LOST] for lid in range(1, k + 1)})
        mark_s = time.monotonic() - t
        m1 = mntr(connect)
        mark_ops = admin.ops - ops0
        mark_packets = m1.get("zk_packets_received", 0) - m0.get("zk_packets_received", 0)
        print("phase: restart with the backlog", flush=True)
        rs = await restart_phase(connect, restarts, k)

        print("phase: heal", flush=True)
        server = ServerSampler(connect)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        res = [await read_msg(p) for p in procs]
        server_peak = server.stop()
        for p in procs:
            p.wait(60)
        left = len(await urm.list_marked_ids())
        await urm.close()
    finally:
        await admin.stop()

    healed = sum(r["healed"] for r in res)
    races = sum(r["races"] for r in res)
    heal_ops = sum(r["ops"] for r in res)
    heal_s = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    by_kind: dict[str, int] = {}
    sums: dict[str, int] = {}
    for r in res:
        for kind, c in r["by_kind"].items():
            by_kind[kind] = by_kind.get(kind, 0) + c
        for b, v in r["buckets"].items():
            sums[b] = sums.get(b, 0) + v
    heal_peak = max(sums.values(), default=0)
    d = n_daemons
    up_mark = 3 * k  # createFullPathOptimistic: the leaf (NoNode), its own 4th-level directory, the leaf again
    up_heal = 5 + 3 * d
    print(f"lost bookie {LOST}: {k} of {n} ledgers under-replicated (1%); {d} daemon sessions "
          f"({per_process} per process, {len(res)} processes), zkReplicationTaskRateLimit {rate:g}/s per daemon"
          f"{' (off)' if rate <= 0 else ''}; {healed} healed in {heal_s:.1f} s, {left} markers left")
    rate_ok = True
    if rate > 0:
        got = healed / max(heal_s, 1e-9) / d
        rate_ok = got <= rate * 1.05 + 1 / heal_s
        print(f"  rate limit honoured: {got:.2f} ledgers/s per daemon against {rate:g}/s: {'yes' if rate_ok else 'NO'}")
    print(f"{'':34}{'ours':>12}{'upstream':>12}{'ratio':>9}")
    print(f"{'marking: requests':34}{mark_ops:12d}{up_mark:12d}{up_mark / max(1, mark_ops):8.1f}x")
    print(f"{'marking: packets at the server':34}{mark_packets:12.0f}")
    print(f"{'marking: time (s)':34}{mark_s:12.2f}")
    per = heal_ops / max(1, healed)
    print(f"{'requests per healed ledger':34}{per:12.1f}{up_heal:12.1f}{up_heal / max(per, 1e-9):8.1f}x"
          f"   (upstream: 5 + up to 3·D watch re-listings, D = {d})")
    kinds = ", ".join(f"{kind} {c / max(1, healed):.2f}" for kind, c in sorted(by_kind.items(), key=lambda x: -x[1]))
    print(f"  ours per healed ledger by call: {kinds}")
    print(f"{'peak outstanding requests, heal':34}{heal_peak:12d}{3 * d:12d}   (goal <= 500; all sessions of all "
          f"processes, per {BUCKET_S * 1000:.0f} ms; ZooKeeper's own zk_outstanding_requests peak {server_peak}; "
          f"one session's peak {max(r['session_peak'] for r in res)})")
    print(f"{'lock races lost (CAS retries)':34}{races:12d}{'':>12}   ({races / max(1, healed):.3f} per healed ledger)")
    print(f"{'ZooKeeper requests, whole heal':34}{heal_ops:12d}{up_heal * k:12d}")
    print(f"  {start_ops} requests for the {d} sessions to start (before the loss), "
          f"{sum(r['start_peak'] for r in ready)} at most outstanding")
    print(f"restart with the backlog: {restarts} sessions walking {k} markers together")
    print(f"{'':34}{'peak':>8}{'bound':>8}{'server':>8}{'req/session':>13}{'time (s)':>10}")
    for name, v in rs.items():
        print(f"  {name:32}{v['peak']:8d}{v['bound']:8d}{v['server']:8d}{v['ops']:13.1f}{v['s']:10.2f}")
    old, ours = rs["old walk"], rs["ours"]
    print(f"  ratio old walk / ours: peak outstanding {old['peak'] / max(1, ours['peak']):.1f}x, "
          f"requests {old['ops'] / max(ours['ops'], 1e-9):.1f}x  (peak: sampled every 2 ms; bound: the sum of "
          f"each session's exact peak; server: mntr zk_outstanding_requests every 10 ms)")
    rss = max(r["rss_mb"] for r in res)
    print(f"peak RSS of a daemon process ({per_process} sessions): {rss:.0f} MB = {rss / per_process:.1f} MB per session")
    restart_peak = max(v["bound"] for name, v in rs.items() if name != "old walk")
    ok = left == 0 and heal_peak <= 500 and restart_peak <= 500 and rate_ok
    print(f"targets: every marker healed, peak outstanding <= 500 healing ({heal_peak}) and restarting "
          f"({restart_peak}): {'PASS' if ok else 'FAIL'}")


def main() -> None:
    exit_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=int, default=1_000_000, help="cluster size; 1%% of it is under-replicated")
    ap.add_argument("--daemons", type=int, default=100, help="worker sessions (default 100)")
    ap.add_argument("--per-process", type=int, default=100, help="daemon sessions per child process (default 100)")
    ap.add_argument("--rate", type=float, default=0.0, help="zkReplicationTaskRateLimit per daemon, tasks/s (0 = off)")
    ap.add_argument("--restarts", type=int, default=None,
                    help="sessions that restart together with the backlog queued (default: min(--daemons, 20))")
    ap.add_argument("--zk", default=None, help="use this ZooKeeper (default: start a private one)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 50,000-ledger cluster (500 markers), 20 daemons")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        asyncio.run(child(a.zk, a.first, a.count, a.rate, a.k))
        return
    if a.quick:
        a.ledgers, a.daemons, a.per_process = 50_000, 20, 10
    if a.ledgers < 100 or a.daemons < 1 or a.per_process < 1:
        ap.error("--ledgers at least 100, --daemons and --per-process at least 1")
    restarts = min(a.daemons, 20) if a.restarts is None else a.restarts
    if restarts < 1:
        ap.error("--restarts at least 1")
    kids = Children()
    try:
        if a.zk:
            asyncio.run(run(a.ledgers, a.daemons, a.per_process, a.rate, a.zk, restarts, kids))
            return
        with tempfile.TemporaryDirectory(prefix="bench-zk-cost-") as d:
            server = ZooKeeperServer(Path(d))
            try:
                server.start()
                print(f"phase: ZooKeeper started on {server.connect_string}", flush=True)
                asyncio.run(run(a.ledgers, a.daemons, a.per_process, a.rate, server.connect_string, restarts, kids))
            finally:
                kids.stop_all()
                server.stop()
    finally:
        kids.stop_all()


if __name__ == "__main__":
    main()
