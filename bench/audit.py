"""Benchmark: the auditor's index (build, memory, watches) and a lost-bookie audit, against upstream's
full metadata re-read measured in the same run.

Set-up (not timed): a private ZooKeeper (heap sized for N), N ledgers of metadata (E3/WQ2, CLOSED
with 100 entries, ensembles drawn from B fake bookies) written with multi batches, B fake bookies
registered as ephemeral ``available/`` znodes, and an in-process Auditor (lostBookieRecoveryDelay 0,
periodic checks off).

Timed and printed:
* the index build on election (time, ZooKeeper requests and metadata reads, watches held, index bytes,
  peak RSS of the process right after the build). ZooKeeper 3.6+: one persistent recursive watch and
  multiRead batches; ``--watch-mode per-ledger`` forces the fallback (a watch and a read per ledger);
* ours: from one bookie's ephemeral znode vanishing until every affected ledger is marked, split into
  "find" (index lookup) and "write markers" (batched multi);
* the cost moved out of the audit: 1000 metadata rewrites, each re-read by the watcher (requests and
  reads per change);
* upstream's method, same run: list the tree and re-read all N metadata znodes, one request each,
  ≤500 in flight (``BookieLedgerIndexer``; on our kazoo client, which is slower per request than
  upstream's Java client), then write the same markers the same way (under another root).

Ratios are upstream / ours.

Then the index's memory, each build in a fresh child process (so that each peak RSS is its own): the
auditor's compact index (:class:`~autorecovery.audit.compact_index.CompactLedgerIndex`) at N ledgers and,
at ``min(N, 1M)`` where both fit, the same against the record index it replaced
(:class:`~autorecovery.audit.record_index.RecordLedgerIndex`), built from synthetic metadata znode bytes
through ``put_znode`` (the watcher's path: decode + insert; 4,096 distinct ensembles drawn from the B
bookies, E3/WQ2 CLOSED). Above 1M ledgers the ZooKeeper part runs at 1M (writing 10M znodes into one
test ZooKeeper takes longer than the bench should, and ~10 GB of its heap): the build *rate* from a real
ZooKeeper is measured there, the memory at N from the synthetic build.

    .venv/bin/python bench/audit.py                                     # 100k ledgers, 30 bookies
    .venv/bin/python bench/audit.py --ledgers 1000000 --bookies 1000    # issue 13's scale
    .venv/bin/python bench/audit.py --ledgers 10000000 --bookies 10000  # the memory at 10M (ZooKeeper part at 1M)
    .venv/bin/python bench/audit.py --quick                             # smoke run: 2,000 ledgers
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import random
import resource
import sys
import shutil
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorecovery.rpc.convert import encode_service_info
from autorecovery import metrics
from autorecovery.ledger import formats
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.roles.auditor import Auditor
from autorecovery.config.sections import AuditorSettings
from autorecovery.testing.zk_server import ZooKeeperServer
from autorecovery.zk.bridge import NoNodeError, Op, ZkClient
from autorecovery.zk.ledgers import init_cluster
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cleanup import exit_on_signals

P = Paths("/ledgers")


def bookie_ids(n: int) -> list[str]:
    return [f"10.1.{i // 250}.{i % 250 + 1}:3181" for i in range(n)]


def peak_rss_mb() -> float:
    """Peak resident set (MB) of this process since its start or :func:`reset_peak_rss`: Linux VmHWM
    (``ru_maxrss`` would include the parent's RSS at fork for a child started by ``subprocess``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False when not permitted."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def rss_mb() -> float:
    """Current resident set (MB) of this process (Linux /proc), 0 when unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


async def load_metadata(zk: ZkClient, n: int, rng: random.Random, bookies: list[str]) -> None:
    dirs = sorted({P.ledger(lid).rsplit("/", 1)[0] for lid in range(0, n, 1)})
    for d in dirs:
        await zk.ensure_path(d)
    batch: list[Op] = []
    pending: list = []
    sem = asyncio.Semaphore(8)

    async def commit(ops: list[Op]) -> None:
        async with sem:
            res = await zk.multi(ops)
            bad = [r for r in res if isinstance(r, Exception)]
            if bad:
                raise RuntimeError(f"loading metadata failed: {bad[0]!r}")

    for lid in range(n):
        md = LedgerMetadata(3, 2, 2, (Segment(0, tuple(rng.sample(bookies, 3))),), state=LedgerState.CLOSED,
                            last_entry_id=99, length=100 * 1024, password=b"pw", ctime=1)
        batch.append(Op("create", P.ledger(lid), formats.serialize(md)))
        if len(batch) == 1000:
            pending.append(asyncio.ensure_future(commit(batch)))
            batch = []
    if batch:
        pending.append(asyncio.ensure_future(commit(batch)))
    await asyncio.gather(*pending)


async def upstream_find(zk: ZkClient, victim: str, concurrency: int = 500) -> tuple[dict[int, list[str]], int]:
    """Upstream BookieLedgerIndexer: list every ledger, read every metadata znode (≤500 in flight)."""
    ops0 = zk.ops
    ids: list[int] = []
    for top in await zk.get_children(P.root):
        if not (top.isdigit() and len(top) == 2):
            continue
        for mid in await zk.get_children(f"{P.root}/{top}"):
            for leaf in await zk.get_children(f"{P.root}/{top}/{mid}"):
                ids.append(int(top + mid + leaf[1:]))
    sem = asyncio.Semaphore(concurrency)
    index: dict[str, set[int]] = {}

    async def read(lid: int) -> None:
        async with sem:
            try:
                data, _ = await zk.get(P.ledger(lid))
            except NoNodeError:
                return
        md = formats.deserialize(data, P.ledger(lid))
        for b in md.all_bookies():
            index.setdefault(b, set()).add(lid)

    for i in range(0, len(ids), 2000):
        await asyncio.gather(*(read(lid) for lid in ids[i:i + 2000]))
    return {lid: [victim] for lid in index.get(victim, ())}, zk.ops - ops0


async def run(n: int, n_bookies: int, zk_hosts: str | None, watch_mode: str, upstream: bool = True) -> None:
    rng = random.Random(42)
    bookies = bookie_ids(n_bookies)
    server = None
    admin = auditor_zk = up_zk = None
    auditor = None
    try:
        if zk_hosts is None:
            heap = max(256, 256 + n // 1000)  # ~1 KB of ZooKeeper heap per ledger znode
            server = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="bench-audit-")), heap_mb=heap)
            server.start()
            zk_hosts = server.connect_string
        admin = await ZkClient(zk_hosts, session_timeout_ms=30000).start()
        await init_cluster(admin, P)
        t = time.monotonic()
        await load_metadata(admin, n, rng, bookies)
        print(f"set-up: {n} ledgers over {n_bookies} bookies written in {time.monotonic() - t:.1f} s "
              f"(multi batches, not timed)")
        await admin.ensure_path(P.cookies)  # init_cluster leaves it to the first bookie, as upstream does
        for b in bookies:
            await admin.create(P.cookie(b), b"c")
            host, port = b.rsplit(":", 1)  # registered as our bookies are: advertising the gRPC endpoint
            await admin.create(P.available_bookie(b), encode_service_info(host, int(port)), ephemeral=True)

        auditor_zk = await ZkClient(zk_hosts, session_timeout_ms=30000).start()
        st = AuditorSettings(auditor_periodic_check_interval=0, auditor_periodic_bookie_check_interval=0,
                             auditor_ledger_index_reconcile_interval=0)
        auditor = Auditor(auditor_zk, P, st, None, None, bookie_id="bench:1", registry=metrics.MetricsRegistry())
        auditor.tree.persistent = False if watch_mode == "per-ledger" else None
        gc.collect()
        rss0 = rss_mb()
        reset = reset_peak_rss()
        t = time.monotonic()
        cpu0 = time.process_time()
        ops_start = auditor_zk.ops
        await auditor.start()
        build_s = time.monotonic() - t
        build_cpu = time.process_time() - cpu0
        build_ops = auditor_zk.ops - ops_start
        build_peak = peak_rss_mb()
        gc.collect()
        rss_build = rss_mb()
        index_mb = auditor.index.memory_bytes() / 2**20
        watches = auditor.tree.watches_held
        mode = ("persistent recursive watches per top-level directory + multiRead" if auditor.tree.persistent
                else "per-ledger watches")
        print(f"index build on election ({mode}): {len(auditor.index)} ledgers in {build_s:.1f} s "
              f"({build_cpu:.1f} s CPU in this process), {build_ops} ZooKeeper requests carrying "
              f"{auditor.tree.reads} metadata reads; once per election")
        print(f"index: {index_mb:.0f} MB ({index_mb * 2**20 / max(1, len(auditor.index)):.0f} B/ledger); "
              f"RSS after the build {rss_build:.0f} MB (before it {rss0:.0f} MB, peak during it "
              f"{build_peak if reset else float('nan'):.0f} MB: the listing's id set and read batches); "
              f"watches held: {watches} (upstream holds none)")
        await asyncio.sleep(0.2)  # let the start-up bookie event pass (nothing is lost yet)
        assert auditor.last_audit is None or auditor.last_audit.ledgers == 0

        victim = bookies[7]
        expected = set(auditor.index.ledgers_of(victim))
        ops0 = auditor_zk.ops
        t0 = time.monotonic()
        await admin.delete(P.available_bookie(victim))
        while auditor.last_audit is None or victim not in auditor.last_audit.lost:
            await asyncio.sleep(0.001)
        total_s = time.monotonic() - t0
        rep = auditor.last_audit
        ours_ops = auditor_zk.ops - ops0
        urm = UnderreplicationManager(admin, P)
        marked = await urm.list_marked_ids()
        assert marked == expected, f"marked {len(marked)} ledgers, expected {len(expected)}"

        # the cost moved out of the audit: every metadata change (close, ensemble change) is re-read once
        changed = sorted(rng.sample(auditor.index.ledger_ids(), min(1000, n)))
        reads0, req0 = auditor.tree.reads, auditor.tree.requests

        async def rewrite(lid: int) -> None:
            data, _ = await admin.get(P.ledger(lid))
            await admin.set(P.ledger(lid), data)

        for i in range(0, len(changed), 200):
            await asyncio.gather(*(rewrite(lid) for lid in changed[i:i + 200]))
        deadline = time.monotonic() + 60
        while auditor.tree.reads < reads0 + len(changed) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await auditor.tree.settle()
        per_change = (auditor.tree.requests - req0) / len(changed)
        reads_per_change = (auditor.tree.reads - reads0) / len(changed)

        find_s, write_s = rep.find_ms / 1000, rep.write_ms / 1000
        if not upstream:
            print()
            print(f"lost bookie {victim}: {len(expected)} of {n} ledgers affected; find {find_s:.4f} s, write markers "
                  f"{write_s:.3f} s, {ours_ops} ZooKeeper requests; vanish → all marked {total_s:.3f} s")
            print(f"requests per metadata change {per_change:.2f} ({reads_per_change:.2f} reads, batched); "
                  f"index build {build_s:.1f} s = {build_s / max(1, n) * 1e6:.1f} µs/ledger; upstream's re-read skipped "
                  f"(--no-upstream)")
            return
        # upstream's method, same run, same ZooKeeper
        up_zk = await ZkClient(zk_hosts, session_timeout_ms=30000, max_concurrent_ops=500).start()
        t = time.monotonic()
        marks, up_find_ops = await upstream_find(up_zk, victim)
        up_find_s = time.monotonic() - t
        assert set(marks) == expected
        up_urm = UnderreplicationManager(up_zk, Paths("/upstream-method"))
        await up_urm.init()
        ops1 = up_zk.ops
        t = time.monotonic()
        await up_urm.mark_many(marks)
        up_write_s = time.monotonic() - t
        up_write_ops = up_zk.ops - ops1

        detect_s = max(0.0, total_s - find_s - write_s)
        print()
        print(f"lost bookie {victim}: {len(expected)} of {n} ledgers affected")
        print(f"{'':28}{'ours':>12}{'upstream':>12}{'ratio':>10}")
        print(f"{'find (s)':28}{find_s:12.4f}{up_find_s:12.3f}{up_find_s / max(find_s, 1e-9):9.0f}x")
        print(f"{'write markers (s)':28}{write_s:12.3f}{up_write_s:12.3f}{up_write_s / max(write_s, 1e-9):9.1f}x")
        print(f"{'ZooKeeper requests, audit':28}{ours_ops:12d}{up_find_ops + up_write_ops:12d}")
        print(f"{'  of which find':28}{'0 (index)':>12}{up_find_ops:12d}")
        print(f"{'index build (s)':28}{build_s:12.1f}{up_find_s:12.1f}{up_find_s / max(build_s, 1e-9):9.1f}x"
              f"   (ours: once per election; upstream: every audit)")
        print(f"{'ZooKeeper requests, build':28}{build_ops:12d}{up_find_ops:12d}")
        print(f"{'requests per change':28}{per_change:12.2f}{0:12d}   (ours: {reads_per_change:.2f} metadata "
              f"reads per change, batched; measured on {len(changed)} rewrites)")
        be = build_ops / max(1, up_find_ops + up_write_ops - ours_ops)
        print(f"  break-even: the index build costs {be:.2f} upstream audits' worth of ZooKeeper requests")
        print(f"{'vanish → all marked (s)':28}{total_s:12.3f}{up_find_s + up_write_s:12.3f}"
              f"{(up_find_s + up_write_s) / max(total_s, 1e-9):9.1f}x")
        print(f"  (ours includes {detect_s:.3f} s from the znode deletion to the watch event being handled)")
        rss = peak_rss_mb()
        print(f"peak RSS of the process (auditor + benchmark + upstream's method): {rss:.0f} MB")
        ok_find = up_find_s / max(find_s, 1e-9) >= 20
        ok_write = write_s <= 2.0
        ok_rss = rss_build < 2048
        ok_build = build_s < 180
        print(f"targets: find ≥20x faster: {'PASS' if ok_find else 'FAIL'}; markers within 2 s: "
              f"{'PASS' if ok_write else 'FAIL'}; RSS after the build < 2 GB: {'PASS' if ok_rss else 'FAIL'}; "
              f"build < 3 min: {'PASS' if ok_build else 'FAIL'}")
    finally:
        if auditor is not None:
            await auditor.stop()
        for c in (up_zk, auditor_zk, admin):
            if c is not None:
                await c.stop()
        if server is not None:
            server.stop()
            shutil.rmtree(server.data_dir, ignore_errors=True)  # the ledger znodes' snapshots and logs


#: above this many ledgers the ZooKeeper part runs at this size (see the docstring)
ZK_MAX = 1_000_000
RECORD_MAX = 1_000_000


def child_index(kind: str, n: int, n_bookies: int) -> dict:
    """Build one index of ``n`` synthetic ledgers in this (fresh) process; its figures as a dict."""
    from autorecovery.audit.compact_index import CompactLedgerIndex
    from autorecovery.audit.record_index import RecordLedgerIndex
    rng = random.Random(5)
    bookies = bookie_ids(n_bookies)
    pool = [formats.serialize(LedgerMetadata(3, 2, 2, (Segment(0, tuple(rng.sample(bookies, 3))),),
                                             state=LedgerState.CLOSED, last_entry_id=99, length=100 * 1024,
                                             password=b"pw", ctime=1)) for _ in range(4096)]
    gc.collect()
    rss0 = rss_mb()
    reset_peak_rss()
    idx = CompactLedgerIndex() if kind == "compact" else RecordLedgerIndex()
    t, c = time.monotonic(), time.process_time()
    for lid in range(n):
        idx.put_znode(lid, pool[lid & 4095], lid + 1)
    build_s, build_cpu = time.monotonic() - t, time.process_time() - c
    gc.collect()
    rss1 = rss_mb()
    t = time.monotonic()
    marked = len(idx.ledgers_to_mark([bookies[7]]))
    find_s = time.monotonic() - t
    return {"kind": kind, "ledgers": n, "build_s": build_s, "build_cpu_s": build_cpu, "rss_before_mb": rss0, "rss_after_mb": rss1,
            "peak_rss_mb": peak_rss_mb(), "index_bytes": idx.memory_bytes(), "find_s": find_s, "marked": marked}


def measure_index(kind: str, n: int, n_bookies: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child-index", kind, "--ledgers", str(n), "--bookies", str(n_bookies)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_report(n: int, n_bookies: int) -> None:
    both = min(n, RECORD_MAX)
    print()
    print(f"index memory, synthetic metadata through put_znode, each build in its own process ({n_bookies} bookies):")
    print(f"{'':34}{'ledgers':>11}{'build (s)':>11}{'CPU (s)':>9}{'CPU µs/ledger':>14}{'B/ledger':>10}{'RSS +MB':>9}"
          f"{'peak RSS MB':>12}")
    rows = [measure_index("record", both, n_bookies), measure_index("compact", both, n_bookies)]
    if n > both:
        rows.append(measure_index("compact", n, n_bookies))
    for r in rows:
        name = "record index (before; baseline)" if r["kind"] == "record" else "compact index (the auditor's)"
        print(f"{name:34}{r['ledgers']:11d}{r['build_s']:11.1f}{r['build_cpu_s']:9.1f}"
              f"{r['build_cpu_s'] / r['ledgers'] * 1e6:14.1f}"
              f"{r['index_bytes'] / r['ledgers']:10.1f}{r['rss_after_mb'] - r['rss_before_mb']:9.0f}{r['peak_rss_mb']:12.0f}")
    rec, com = rows[0], rows[1]
    big = rows[-1]
    print(f"ratio: bytes per ledger, record index / compact index at {both} ledgers = "
          f"{rec['index_bytes'] / max(1, com['index_bytes']):.2f}x "
          f"({rec['index_bytes'] / both:.0f} vs {com['index_bytes'] / both:.0f} B/ledger)")
    print(f"find a lost bookie's ledgers at {big['ledgers']} ledgers: {big['find_s'] * 1000:.1f} ms ({big['marked']} ledgers)")
    ok_mem = big["index_bytes"] / big["ledgers"] <= 100
    print(f"targets: <= 100 B/ledger at {big['ledgers']}: {'PASS' if ok_mem else 'FAIL'}; "
          f"build of {big['ledgers']} under 10 min: {'PASS' if big['build_s'] < 600 else 'FAIL'} "
          f"({big['build_cpu_s']:.0f} CPU-s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


def main() -> None:
    exit_on_signals()  # SIGTERM/SIGHUP unwind through run()'s finally: the private ZooKeeper is stopped
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ledgers", type=int, default=100_000, help="ledgers of metadata to create (default 100000)")
    ap.add_argument("--bookies", type=int, default=30, help="fake bookies the ensembles are drawn from (default 30)")
    ap.add_argument("--zk", default=None, help="use this ZooKeeper (default: start a private one)")
    ap.add_argument("--watch-mode", choices=("auto", "per-ledger"), default="auto",
                    help="auto: persistent watch on ZooKeeper 3.6+; per-ledger: force the fallback")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2,000 ledgers, 30 bookies")
    ap.add_argument("--zk-ledgers", type=int, default=None,
                    help=f"ledgers of the ZooKeeper part (default: --ledgers up to {ZK_MAX:,}; ~1 KB of ZooKeeper heap each)")
    ap.add_argument("--no-memory", action="store_true", help="skip the index-memory builds (the ZooKeeper part only)")
    ap.add_argument("--no-upstream", action="store_true",
                    help="skip upstream's full re-read (832 s at 1M ledgers): our build and audit only")
    ap.add_argument("--child-index", choices=("compact", "record"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_index:
        print(json.dumps(child_index(args.child_index, args.ledgers, args.bookies)))
        return
    if args.quick:
        args.ledgers, args.bookies = 2000, 30
    if args.bookies < 8:
        ap.error("--bookies must be at least 8 (bookie 7 is the one lost)")
    zk_n = min(args.ledgers, ZK_MAX) if args.zk_ledgers is None else args.zk_ledgers
    if zk_n < args.ledgers:
        print(f"ZooKeeper part at {zk_n} ledgers (of {args.ledgers}; see the docstring), memory at {args.ledgers}")
    asyncio.run(run(zk_n, args.bookies, args.zk, args.watch_mode, not args.no_upstream))
    if not args.no_memory:
        memory_report(args.ledgers, args.bookies)


if __name__ == "__main__":
    main()
