"""Benchmark: ReplicationWorker copy throughput against raw gRPC streaming and storage writes, one run.

Set-up (not timed): a local cluster of 3 bookie processes. ``--mib`` MiB (default 512) of 64 KiB
entries are written to ledgers E2/WQ2/AQ2 on bookies 0 and 1 (entries streamed straight to both
bookies, metadata CLOSED), bookie 0 is stopped and every ledger is marked under-replicated: the lost
bookie's fragments must be copied from bookie 1 (the surviving replica) to bookie 2 (the only target).

Timed, in the same run:

* **worker**: an in-process ReplicationWorker (default settings) from start until every marker is
  gone — re-check, the target bookie pulls each stream's range from the source (``PullEntries``, one
  hop, digests verified on arrival, entry log fdatasync + index commit per group commit), ensemble
  CAS. ``--no-pull`` copies through the worker as upstream does. The window's **fixed cost** is
  printed apart: from the start to the first acknowledged bytes, and from the last ones to an empty
  marker tree (the worker's acknowledged-bytes counter, read in this process every 20 ms);
* **raw pull** (the headline's baseline, issue 29): the same bytes pulled by one no-storage process
  from another with PullEntries, **as many calls at once as the worker ran streams** — the same
  one-hop path; the source serves pre-built bodies (``bench/nullbookie.py --prebuild``), so the
  baseline is the transport's ceiling, not the cost of building entries on the fly;
* **raw two-hop** (``--context``, or the baseline of ``--no-pull``): ReadEntryBatches → AddEntryBatches
  through this process, as many pipelines as the worker ran streams;
* **storage write** (context): the same bytes written by one BookieStorage (the bookie's SQLite
  store, group commit, 256 adds in flight) in its own process, no network.

Also printed: the machine's own limits measured first (``bench/limits.py``: fdatasync write rate and
loopback TCP rate, and the fraction of each every rate reached) and its load average; ``--cold-cache``
drops the page cache before each timed part (the source bookie then reads from the disk).

Prints MB/s (10^6 bytes/s of entry bodies); the headline ratio is worker / raw pull of the same
streams (issue 29 target >= 0.8). On a shared machine compare the **CPU per MiB** line instead: CPU
seconds (user + system, from psutil) of the source bookie, the target bookie and the worker's process
over the worker's window, per MiB copied, with the load average; and the system calls per MiB
(``/proc/PID/io``). ``--profile DIR`` records both bookies with ``py-spy record --native`` (raw
collapsed stacks) during the copy; ``--copy-only`` skips the baselines. Not a test.

    .venv/bin/python bench/replication.py             # 512 MiB
    .venv/bin/python bench/replication.py --mib 64    # quick run
    nice -n 19 .venv/bin/python bench/replication.py --copy-only --profile /tmp/prof   # CPU per MiB, profiles
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


from autorecovery import metrics
from autorecovery.ledger.digest import pack_entry
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.rpc.transport import BookieClient
import limits
from nullbookie import MAX_MSG, spawn_null, stop
from profiles import start_profiles, stop_profiles

ENTRY = 64 * 1024
MK = b"bench-master-key"


def body_of(ledger_id: int, entry_id: int, length: int, blob: bytes) -> bytes:
    # vary the payload per entry cheaply (a prefix) so nothing is trivially repeated
    payload = entry_id.to_bytes(8, "big") + blob[8:]
    return pack_entry(ledger_id, entry_id, entry_id - 1, length, payload)


# -- child processes ------------------------------------------------------------------------------
async def storage_only(data_dir: Path, mib: int) -> None:
    from autorecovery.bookie.storage import BookieStorage

    storage = BookieStorage(data_dir, name="bench-store")
    await asyncio.to_thread(storage.open)
    n = mib * 1024 * 1024 // ENTRY
    blob = os.urandom(ENTRY)
    window = asyncio.Semaphore(256)  # the bookie's AddEntries keeps at most 256 adds in flight
    pending = []
    nbytes = 0
    t0 = time.perf_counter()
    for e in range(n):
        await window.acquire()
        body = body_of(1, e, (e + 1) * ENTRY, blob)
        nbytes += len(body)
        fut = storage.submit_add(1, e, MK, body, recovery=True)
        fut.add_done_callback(lambda _f: window.release())
        pending.append(fut)
    await asyncio.gather(*pending)
    dt = time.perf_counter() - t0
    await storage.close()
    print(json.dumps({"bytes": nbytes, "seconds": dt, "commits": storage.commits}), flush=True)


def spawn(args: list[str], ready: str | None) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    if ready is not None:
        line = proc.stdout.readline()
        if ready not in line:
            proc.kill()
            raise RuntimeError(f"child {args} did not start: {line!r}")
    return proc


# -- measurements ---------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def null_pair(prebuild: tuple[int, int, int] | None = None, entry_size: int = ENTRY, **client_kw):
    """Two null bookies in child processes and a client: yields ``(source id, target id, client)``; the
    source pre-builds ``prebuild = (first ledger, ledgers, entries)`` (bench/nullbookie.py)."""
    a, src = spawn_null(entry_size, prebuild)
    b, dst = spawn_null(entry_size)
    client = BookieClient(timeout_s=30, max_message_bytes=MAX_MSG, **client_kw)
    try:
        yield src, dst, client
    finally:
        await client.close()
        stop(a)
        stop(b)


async def timed(pipe, pipelines: int) -> float:
    """Seconds to run ``pipe(0) .. pipe(pipelines - 1)`` concurrently."""
    t0 = time.perf_counter()
    await asyncio.gather(*(pipe(i) for i in range(pipelines)))
    return time.perf_counter() - t0


async def raw_grpc(total_entries: int, pipelines: int, batching: bool = True) -> float:
    """MB/s of entry bodies moved ReadEntries(process A) → AddEntries(process B), ``pipelines`` at once.

    The pipeline has the copier's shape: a reader task fills a bounded queue, the writer sends what has
    queued up. ``batching`` uses the batched framing (``ReadEntryBatches`` / ``AddEntryBatches``, up to
    1 MiB per message) exactly as the worker does with bookies that report it; False sends one entry
    per message (the framing before issue 13, printed for context).
    """
    per = total_entries // pipelines
    async with null_pair((100, pipelines, per), batching=batching) as (src, dst, client):
        await client.add_entries(dst, 9, MK, [])  # connect both channels before timing
        async for _ in client.read_entries(src, 9, 0, 0):
            pass
        moved = [0]
        limit = client.batch_bytes

        async def pipe(i: int) -> None:
            q: asyncio.Queue = asyncio.Queue(maxsize=256)

            async def batches():
                while (item := await q.get()) is not None:
                    batch, size = [item], len(item[1])
                    while not q.empty() and size < limit:
                        nxt = q.get_nowait()
                        if nxt is None:
                            yield batch
                            return
                        batch.append(nxt)
                        size += len(nxt[1])
                    yield batch

            writer = asyncio.create_task(client.add_entry_batches(dst, 100 + i, MK, batches()))
            async for r in client.read_entries(src, 100 + i, 0, per - 1):
                await q.put((r.entry_id, r.body))
                moved[0] += len(r.body)
            await q.put(None)
            await writer

        dt = await timed(pipe, pipelines)  # before reading ``moved``: the pipes fill it
        return moved[0] / dt / 1e6


async def raw_pull(total_entries: int, pipelines: int, entry_size: int = ENTRY) -> float:
    """MB/s of entry bodies a null bookie (process B) pulls from another (process A) with
    ``PullEntries``, ``pipelines`` calls at once: the raw one-hop baseline of the worker's
    bookie-to-bookie copy (B reads A with the batched framing and stores nothing; A serves pre-built
    bodies, so the figure is the transport's, not the cost of building entries)."""
    per = total_entries // pipelines
    async with null_pair((100, pipelines, per), entry_size) as (src, dst, client):
        async for _ in client.pull_entries(dst, src, 9, MK, 0, 0):  # connect every channel before timing
            pass
        moved = [0]

        async def pipe(i: int) -> None:
            async for rep in client.pull_entries(dst, src, 100 + i, MK, 0, per - 1):
                moved[0] += rep.bytes_stored

        dt = await timed(pipe, pipelines)  # before reading ``moved``: the pipes fill it
        return moved[0] / dt / 1e6


def storage_write(mib: int, base: Path) -> tuple[float, int]:
    proc = spawn(["--storage-only", str(base / "store-only"), "--mib", str(mib)], None)
    out, _ = proc.communicate(timeout=3600)
    res = json.loads(out.strip().splitlines()[-1])
    return res["bytes"] / res["seconds"] / 1e6, res["commits"]


async def load(cluster, mib: int, ledgers: int) -> tuple[list[int], int]:
    """Write the data set straight to bookies 0 and 1; returns (ledger ids, body bytes per replica)."""
    from autorecovery.zk.bridge import ZkClient
    from autorecovery.zk.ledgers import LedgerStore
    from autorecovery.zk.paths import Paths

    zk = await ZkClient(cluster.zk_connect).start()
    store = LedgerStore(zk, Paths(cluster.ledgers_root))
    client = BookieClient(timeout_s=60, max_message_bytes=MAX_MSG)
    b0, b1 = cluster.bookie_id(0), cluster.bookie_id(1)
    per = mib * 1024 * 1024 // ENTRY // ledgers
    blob = os.urandom(ENTRY)
    ids, total = [], 0
    try:
        for _ in range(ledgers):
            lid = await store.new_ledger_id()
            md = LedgerMetadata(2, 2, 2, (Segment(0, (b0, b1)),), state=LedgerState.CLOSED, last_entry_id=per - 1,
                                length=per * ENTRY, digest_type=DigestType.CRC32C, password=MK, ctime=1)

            def entries():
                for e in range(per):
                    yield e, body_of(lid, e, (e + 1) * ENTRY, blob)  # noqa: B023 - run before the loop rebinds it

            r = await asyncio.gather(client.add_entries(b0, lid, MK, entries(), recovery=False),
                                     client.add_entries(b1, lid, MK, entries(), recovery=False))
            total += r[0][1]
            await store.create(lid, md)
            ids.append(lid)
    finally:
        await client.close()
        await zk.stop()
    return ids, total


async def run_worker(cluster, ledger_ids: list[int], pull: bool = True, cold: bool = False,
                     profile: Path | None = None) -> dict:
    """Run the worker until every marker is gone. Returns ``seconds`` (start to empty marker tree),
    ``written`` (bytes the targets acknowledged), ``peak`` (most streams at once), ``verified`` (entries),
    ``first`` / ``last`` (seconds from the start to the first / last acknowledged bytes: the fixed cost
    is ``first + seconds - last``, the window outside the copy), ``cache`` (what --cold-cache did),
    ``cpu`` (CPU seconds, user + system, of the worker's process, the source bookie ``bookie1`` and the
    target ``bookie2`` over the window) and ``calls`` (their read-like and write-like system calls). ``profile``: py-spy profiles of both bookies in that directory."""
    from autorecovery.placement import PlacementConfig, RackawarePolicy
    from autorecovery.roles.worker import ReplicationWorker
    from autorecovery.config.sections import WorkerSettings
    from autorecovery.zk.bookies import BookieWatcher
    from autorecovery.zk.bridge import ZkClient
    from autorecovery.aio import wait_for
    from autorecovery.zk.paths import Paths
    from autorecovery.zk.underreplication import UnderreplicationManager

    paths = Paths(cluster.ledgers_root)
    zk = await ZkClient(cluster.zk_connect).start()
    watcher = await BookieWatcher(zk, paths).start()
    lost = cluster.bookie_id(0)
    await asyncio.to_thread(cluster.kill_bookie, 0, signal.SIGTERM)
    await watcher.wait_until(lambda w: lost not in w.available, 30)
    um = UnderreplicationManager(zk, paths)
    await um.init()
    await um.mark_many({lid: [lost] for lid in ledger_ids})
    bookies = BookieClient(timeout_s=60, max_message_bytes=MAX_MSG)
    reg = metrics.MetricsRegistry()
    settings = WorkerSettings(**{k: int(v) for k, v in (x.split("=") for x in os.environ.get("BENCH_WS", "").split(",") if x)})
    w = ReplicationWorker(zk, paths, settings, RackawarePolicy(PlacementConfig()), bookies, watcher,
                          registry=reg)
    w.copier.pull = pull
    peak = [0]
    orig = w.caps.try_start

    def counting(source, targets):
        ok = orig(source, targets)
        peak[0] = max(peak[0], sum(w.caps.sources.values()))
        return ok

    w.caps.try_start = counting
    import psutil

    procs = {"worker": psutil.Process()}
    for i in (1, 2):
        procs[f"bookie{i}"] = psutil.Process(cluster.bookies[i].pid)
    cache = await asyncio.to_thread(limits.cold, cold)
    spies = start_profiles(procs, profile, ("bookie",), 250) if profile is not None else []
    if spies:
        await asyncio.sleep(1.0)  # py-spy attaches before the copy starts (not a synchronisation: a bench)
    cpu0 = {k: sum(p.cpu_times()[:2]) for k, p in procs.items()}
    io0 = {k: p.io_counters() for k, p in procs.items()}
    t0 = time.perf_counter()
    await w.start()

    wanted = set(ledger_ids)
    seen = {"first": None, "last": None, "bytes": 0}

    def acked() -> int:
        m = reg.get("replication_worker_NUM_BYTES_WRITTEN")
        return int(m.total()) if m is not None else 0

    async def done() -> bool:
        if not w.running:
            raise SystemExit("the replication worker stopped (a slot failed); see its log")
        # the acknowledged-bytes counter (in this process, no I/O) moves with every pull report (4 MiB):
        # its first and last moves bound the copy, the rest of the window is fixed cost
        n = acked()
        if n > seen["bytes"]:
            now = time.perf_counter() - t0
            seen["first"] = seen["first"] if seen["first"] is not None else now
            seen["last"], seen["bytes"] = now, n
        # ZooKeeper is listed only once the worker has finished every ledger: listing the marker tree
        # every 20 ms cost the measured window about 250 getChildren/s (CPU in this process and ZooKeeper)
        if not wanted <= {lid for lid, _outcome in w.history}:
            return False
        return not await um.list_marked_ids()

    ok = await wait_for(done, 3600, interval_s=0.02)
    dt = time.perf_counter() - t0
    cpu = {k: sum(p.cpu_times()[:2]) - cpu0[k] for k, p in procs.items()}
    io = {k: p.io_counters() for k, p in procs.items()}
    calls = {k: (io[k].read_count - io0[k].read_count, io[k].write_count - io0[k].write_count) for k in procs}
    await asyncio.to_thread(stop_profiles, spies, 60)
    assert ok, "replication did not finish"
    print("CPU during the copy (cores): " + ", ".join(f"{k} {v / dt:.2f}" for k, v in cpu.items()))
    written = acked()
    verified = reg.get("replication_worker_NUM_ENTRIES_READ").value
    await w.stop()
    await um.close()
    await bookies.close()
    await watcher.stop()
    await zk.stop()
    return {"seconds": dt, "written": written, "peak": peak[0], "verified": verified,
            "first": seen["first"] or 0.0, "last": seen["last"] or dt, "cache": cache, "cpu": cpu, "calls": calls}


async def main_async(mib: int, ledgers: int, keep: bool, pull: bool = True, cold: bool = False,
                     context: bool = False, profile: Path | None = None, copy_only: bool = False) -> None:
    import logging

    import structlog

    from autorecovery.testing.local_cluster import LocalCluster

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    base = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    lim = await asyncio.to_thread(limits.measure, base)
    print(lim.line(base))
    cluster = LocalCluster(base / "cluster", bookies=3)
    try:
        await asyncio.to_thread(cluster.up)
        t = time.perf_counter()
        ids, nbytes = await load(cluster, mib, ledgers)
        print(f"set-up: {len(ids)} ledgers E2/WQ2, {nbytes / 2**20:.0f} MiB of {ENTRY // 1024} KiB entries per "
              f"replica, loaded in {time.perf_counter() - t:.1f}s; bookie 0 lost, copy 1 -> 2")
        await asyncio.to_thread(os.sync)  # the load's dirty pages must not be flushed during the copy
        r = await run_worker(cluster, ids, pull, cold, profile)
        dt, written, peak = r["seconds"], r["written"], r["peak"]
        assert written >= nbytes, (written, nbytes)
        cpu, mibs = r["cpu"], written / 2**20
        load1 = os.getloadavg()[0]
        print(f"cpu per MiB:   source bookie {cpu['bookie1'] / mibs * 1e3:.2f} ms, target bookie "
              f"{cpu['bookie2'] / mibs * 1e3:.2f} ms, worker {cpu['worker'] / mibs * 1e3:.2f} ms (CPU-s, user + "
              f"system, per MiB copied: {cpu['bookie1']:.2f} / {cpu['bookie2']:.2f} / {cpu['worker']:.2f} s for "
              f"{mibs:.0f} MiB; load {load1:.1f}: compare these on a shared machine, not MB/s)")
        print("syscalls per MiB (read-like / write-like, /proc/PID/io): " + ", ".join(
            f"{k} {r / mibs:.0f} / {w / mibs:.0f}" for k, (r, w) in r["calls"].items()))
        worker = written / dt / 1e6
        fixed = r["first"] + (dt - r["last"])
        how = "the target bookie pulls from the source" if pull else "through the worker (--no-pull)"
        print(f"worker:        {worker:8.1f} MB/s  ({written / 2**20:.0f} MiB in {dt:.2f}s, {r['verified']} entries "
              f"digest-verified, {peak} concurrent streams; {how}; {r['cache']}); {lim.fractions(worker)}")
        print(f"  fixed cost:  {fixed:.2f}s = {fixed / dt:.0%} of the window ({r['first']:.2f}s from start to the first "
              f"acknowledged bytes + {dt - r['last']:.2f}s from the last to an empty marker tree); "
              f"{written / max(1e-9, r['last'] - r['first']) / 1e6:.1f} MB/s between them")
    finally:
        await asyncio.to_thread(cluster.down)
    if copy_only:
        if not keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
        return
    streams = max(1, peak)
    cache = await asyncio.to_thread(limits.cold, cold)
    rawp = await raw_pull(nbytes // ENTRY, streams)
    print(f"raw pull:      {rawp:8.1f} MB/s  (PullEntries, {streams} calls at once as the worker ran: a no-storage process "
          f"reads another serving pre-built bodies; the worker's one-hop path; {cache}); {lim.fractions(rawp)}")
    if context or not pull:
        raw = await raw_grpc(nbytes // ENTRY, streams)
        print(f"raw two-hop:   {raw:8.1f} MB/s  (ReadEntryBatches -> AddEntryBatches through this process, {streams} "
              f"pipelines: the --no-pull path; worker/this = {worker / raw:.2f})")
    await asyncio.to_thread(os.sync)
    store, commits = await asyncio.to_thread(storage_write, mib, base)
    print(f"storage write: {store:8.1f} MB/s  (one BookieStorage, {commits} group commits: entry log fdatasync + index "
          f"commit; context: the bookie's own write rate, worker/this = {worker / store:.2f})")
    if pull:
        print(f"ratio: worker/raw pull (same path, {streams} streams) = {worker / rawp:.2f} (issue 29 target >= 0.80)")
    else:
        print(f"ratio: worker/raw two-hop (same path, {streams} streams) = {worker / raw:.2f} (issue 29 target >= 0.80)")
    if not keep:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 MiB (seconds; bench smoke test)")
    ap.add_argument("--mib", type=int, default=512, help="MiB of entry bodies to re-replicate (default 512)")
    ap.add_argument("--ledgers", type=int, default=8, help="ledgers the data is spread over (default 8)")
    ap.add_argument("--keep", action="store_true", help="keep the data directories")
    ap.add_argument("--no-pull", action="store_true",
                    help="copy through the worker (ReadEntryBatches -> AddEntryBatches), not bookie to bookie")
    ap.add_argument("--cold-cache", action="store_true",
                    help="drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches, needs root) before each timed "
                         "part: the source bookie reads from the disk")
    ap.add_argument("--context", action="store_true",
                    help="also time the two-hop pipeline through this process (the --no-pull path)")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="py-spy --native profiles (raw collapsed stacks) of the source and target bookies during "
                         "the worker's copy, in DIR/bookie1.txt and DIR/bookie2.txt")
    ap.add_argument("--copy-only", action="store_true",
                    help="time the worker's copy only (its MB/s and CPU per MiB), no baselines")
    ap.add_argument("--storage-only", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.mib = 16
    if a.storage_only:
        asyncio.run(storage_only(a.storage_only, a.mib))
    else:
        asyncio.run(main_async(a.mib, a.ledgers, a.keep, pull=not a.no_pull, cold=a.cold_cache, context=a.context,
                               profile=a.profile, copy_only=a.copy_only))


if __name__ == "__main__":
    main()
