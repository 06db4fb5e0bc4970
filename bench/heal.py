"""Benchmark: end-to-end heal in a real local cluster, from the kill, against a raw pull of the same streams.

Set-up (not timed): a local cluster of ``--bookies`` bookie processes (default 7) in 3 racks, an
autorecovery daemon next to the victim and next to ``--daemons`` other hosts (default: every other
host; ``lostBookieRecoveryDelay=0``), and the data written with the ledger client into ``--ledgers``
ledgers E3/WQ2/AQ2 of ``--entries`` entries (default: ``--mib`` MiB spread over them) of
``--entry-size`` bytes. Many small ledgers: ``--ledgers 10000 --entries 1`` (10,000 ledgers of 64 KiB;
without ``--entries 1`` the default ``--mib`` is spread over them: 3 entries each). With one entry per
ledger on 7 bookies the victim stores an entry of about 2/7 of them (WQ 2 of 7), so about 2,900 of the
10,000 are healed; the line ``ledgers:`` projects 10,000 healed at the measured rate, and
``--ledgers 35000`` heals about 10,000 for real.

Timed, in the same run, per daemon count of ``--daemons`` (e.g. ``--daemons 6,1``: each on a fresh
cluster with the same data shape, so the ratio of the two is printed by one run):

* **heal**: one host (bookie and daemon) is killed with SIGKILL (``--kill bookie``: the bookie process
  only, its daemon stays up, as in a crash or an OOM kill); from the kill until no ledger is
  marked under-replicated and no ensemble references the dead bookie (the metadata is checked once the
  marker tree is empty; the time is the last moment it became empty). **Rates are counted from the
  kill**; detection (kill to the first marker: the dead bookie's ZooKeeper session expiry plus the
  audit) is shown apart as the fixed cost it is. The bytes to heal are the entries whose write set held
  the dead bookie; the ledgers healed are those that stored an entry on it (a ledger whose ensemble
  names it without an entry there is not marked by our auditor, and is counted apart);
* **streams**: the copy streams the daemons ran, from child watches on the stream-slot znodes
  (``bench/zkstats.py``): peak and time-weighted mean while copying (a copy of a closed ledger of at
  most 1 MiB takes no stream slot, issue 29: such heals show none);
* **ZooKeeper**: packets the server received from the surviving daemons' connections (its ``cons``
  listing, each connection mapped to its process: the server's own count, no hook in the daemons,
  this bench's and the bookies' sessions excluded), from the kill to healed, per ledger healed (session
  pings included: one per ``zkTimeout / 3`` per daemon); and the server's ``zk_packets_received`` from
  every client for context;
* **raw pull** (the baseline, issue 29): the same bytes pulled by one null bookie from another
  (``PullEntries``, the one hop the daemons' bookies take) with **as many calls at once as the heal's
  peak of streams**, the source serving pre-built bodies (``bench/nullbookie.py``).

Also printed: the machine's own limits (``bench/limits.py``: fdatasync write rate, loopback TCP rate)
and the fraction of each the heal reached; the CPU of each kind of process from the kill.
``--cold-cache`` drops the page cache just before the kill. The bench waits on watches (no polling),
so it adds next to no load to the cluster it measures. Not a test.

    .venv/bin/python bench/heal.py                          # 2048 MiB in 24 ledgers, 6 surviving daemons
    .venv/bin/python bench/heal.py --daemons 6,1            # and with 1 daemon: the ratio of the two
    .venv/bin/python bench/heal.py --ledgers 10000 --entries 1 --load direct   # 10,000 ledgers of 64 KiB
    .venv/bin/python bench/heal.py --mib 32                 # quick run
    .venv/bin/python bench/heal.py --set replicationWorkerConcurrentLedgers=8     # tune a key
    .venv/bin/python bench/heal.py --kill bookie --set localBookieLossDetectionEnabled=true  # a crash seen at once
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import structlog

import limits
import zkstats
from profiles import start_profiles, stop_profiles
from autorecovery.cli.demo_checks import daemons_ready, writable_bookies
from autorecovery.cli.demo_recovery import kill_host, start_daemons
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.ledger.striping import index_stores
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.workload import write_ledgers
from autorecovery.zk.underreplication import UnderreplicationManager
from replication import raw_pull

VICTIM = 1
WRITE_CHUNK = 64  # ledgers written at once (hundreds of concurrent 64 KiB adds time out on a loaded 2-core machine)


def cpu_procs(cluster: LocalCluster, victim: int, victim_daemon: bool = False) -> dict:
    """psutil processes whose CPU is accounted: surviving daemons and bookies, ZooKeeper, this bench
    (``victim_daemon``: the victim's daemon survives its bookie, ``--kill bookie``)."""
    import psutil

    out = {"bench-0": psutil.Process(os.getpid())}
    zk_pid = json.loads((cluster.base / "cluster.json").read_text()).get("zk_pid")
    if zk_pid:
        out["zookeeper-0"] = psutil.Process(zk_pid)
    for i, b in cluster.bookies.items():
        if i != victim and b.pid:
            out[f"bookies-{i}"] = psutil.Process(b.pid)
    for i, d in cluster.daemons.items():
        if (i != victim or victim_daemon) and d.pid:
            out[f"daemons-{i}"] = psutil.Process(d.pid)
    return out


def cpu_s(p) -> float:
    """User + system CPU seconds of a process so far (0 once it is gone). Children are not counted: the
    bench's reaped children are the killed host's processes, whose whole lifetime would count."""
    import psutil

    try:
        t = p.cpu_times()
        return t.user + t.system
    except psutil.Error:  # a process that died counts what it had
        return 0.0


def progress(port: int) -> dict:
    """The daemon's ``/api/v1/autorecovery/progress`` document."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/autorecovery/progress", timeout=5) as r:
        return json.loads(r.read())


async def gather_chunked(coros, n: int = 200) -> list:
    out: list = []
    coros = list(coros)
    for i in range(0, len(coros), n):
        out += await asyncio.gather(*coros[i:i + n])
    return out


async def on_victim(bk: BookKeeper, ledger_ids, bookie: str, entry_size: int) -> tuple[set[int], int, int]:
    """Ledgers that store at least one entry on ``bookie`` (what its loss leaves to heal: our auditor
    marks exactly those), the entry bytes whose write set includes it, and how many more ledgers name
    it in an ensemble without storing an entry there (not marked, left as they are)."""
    async def one(lid: int) -> tuple[int, int, bool]:
        md, _ = await bk.ledgers.read(lid)
        total, hit = 0, False
        for i, seg in enumerate(md.segments):
            if bookie not in seg.ensemble:
                continue
            idx = seg.ensemble.index(bookie)
            n = sum(1 for e in range(seg.first_entry_id, md.segment_end(i) + 1)
                    if index_stores(idx, e, len(seg.ensemble), md.write_quorum))
            total += entry_size * n
            hit = hit or n > 0
        return lid, total, hit, bookie in {b for seg in md.segments for b in seg.ensemble}

    rows = await gather_chunked(one(lid) for lid in ledger_ids)
    return ({lid for lid, _b, hit, _n in rows if hit}, sum(r[1] for r in rows),
            sum(1 for _l, _b, hit, named in rows if named and not hit))


async def still_referencing(bk: BookKeeper, ledger_ids, dead: str) -> int:
    """How many of ``ledger_ids`` still name ``dead`` in an ensemble."""
    async def one(lid: int) -> bool:
        md, _ = await bk.ledgers.read(lid)
        return any(dead in seg.ensemble for seg in md.segments)

    return sum(await gather_chunked(one(lid) for lid in ledger_ids))


async def write(bk: BookKeeper, ledgers: int, entries: int, size: int) -> list[int]:
    ids: list[int] = []
    for k in range(0, ledgers, WRITE_CHUNK):
        m = await write_ledgers(bk, ledgers=min(WRITE_CHUNK, ledgers - k), entries=entries, size=size, seed=1 + k)
        ids += list(m.ledgers)
    return ids


async def direct_load(bk: BookKeeper, ledgers: int, entries: int, size: int, concurrency: int = 12) -> list[int]:
    """Closed ledgers written straight to their bookies and ZooKeeper, without the ledger client (set-up
    of ``--load direct``, for many small ledgers): per ledger an ensemble from the client's placement
    policy, each entry added to its write set (CRC32C, packed as the client does), the
    CLOSED metadata created (one ZooKeeper create; ids from a counter above the idgen's). ``concurrency``
    ledgers at once: 2 adds each stay under a bookie's 32 messages being received."""
    from autorecovery.ledger.digest import pack_entry
    from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
    from autorecovery.rpc.transport import BookieClient

    mk = b"bench-heal"
    blob = os.urandom(size)
    client = BookieClient(timeout_s=120)
    base = await bk.ledgers.new_ledger_id() + 1
    sem = asyncio.Semaphore(concurrency)

    async def one(lid: int) -> int:
        async with sem:
            ens = tuple(bk.policy.new_ensemble(3, 2, 2, frozenset(), None).ensemble)
            adds = []
            for e in range(entries):
                body = pack_entry(lid, e, e - 1, (e + 1) * size, e.to_bytes(8, "big") + blob[8:])
                adds += [client.add_entry(ens[(e + k) % 3], lid, e, mk, body) for k in range(2)]
            await asyncio.gather(*adds)
            md = LedgerMetadata(3, 2, 2, (Segment(0, ens),), state=LedgerState.CLOSED, last_entry_id=entries - 1,
                                length=entries * size, digest_type=DigestType.CRC32C, password=mk, ctime=1)
            await bk.ledgers.create(lid, md)
            return lid

    try:
        return list(await asyncio.gather(*(one(base + k) for k in range(ledgers))))
    finally:
        await client.close()


async def side(base: Path, a: argparse.Namespace, daemons: int, lim: limits.Limits) -> dict:
    """One cluster, one kill, one heal with ``daemons`` surviving daemons; prints its lines, returns figures."""
    cluster = LocalCluster(base / f"heal-{daemons}", bookies=a.bookies, racks=3)
    r: dict = {"daemons": daemons}
    try:
        await asyncio.to_thread(cluster.up)
        others = [i for i in range(a.bookies) if i != VICTIM][:daemons]
        ports = await asyncio.to_thread(start_daemons, cluster, sorted({VICTIM, *others}), a.props)
        bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
        slots = None
        try:
            await writable_bookies(bk.watcher, a.bookies, "set-up")
            await asyncio.to_thread(daemons_ready, ports, "set-up")
            t = time.perf_counter()
            if a.load == "direct":
                ids = await direct_load(bk, a.ledgers, a.entries, a.entry_size)
            else:
                ids = await write(bk, a.ledgers, a.entries, a.entry_size)
            dead = cluster.bookie_id(VICTIM)
            hit, to_heal, named_only = await on_victim(bk, ids, dead, a.entry_size)
            r.update(ledgers=len(hit), bytes=to_heal)
            print(f"[{daemons} daemons] set-up: {a.ledgers} ledgers x {a.entries} entries of {a.entry_size} B, E3/WQ2/AQ2 "
                  f"on {a.bookies} bookies in 3 racks, written ({a.load}) in {time.perf_counter() - t:.1f}s; the victim {dead} "
                  f"stores entries of {len(hit)} ledgers, {to_heal / 2**20:.0f} MiB (and is named without an entry by "
                  f"{named_only} more, which need no heal)", flush=True)
            alive = {i: p for i, p in ports.items() if i != VICTIM or a.kill == "bookie"}  # daemons after the kill
            before = {i: progress(p)["worker"]["bytes_copied"] for i, p in alive.items()}
            survivors = [cluster.bookie_id(i) for i in range(a.bookies) if i != VICTIM]
            slots = await asyncio.to_thread(
                zkstats.SlotWatch(cluster.zk_connect, f"{bk.paths.underreplication}/streams").start, survivors)
            urm = UnderreplicationManager(bk.zk, bk.paths)
            await urm.init()
            changed = urm.subscribe()
            # the load's dirty pages (two replicas of every entry) must not be flushed during the heal
            await asyncio.to_thread(os.sync)
            r["cache"] = await asyncio.to_thread(limits.cold, a.cold_cache)
            procs = cpu_procs(cluster, VICTIM, a.kill == "bookie")
            daemon_pids = [p.pid for k, p in procs.items() if k.startswith("daemons-")]
            zk0 = await asyncio.to_thread(zkstats.packets_by_process, cluster.zk_connect, daemon_pids)
            all0 = (await asyncio.to_thread(zkstats.mntr, cluster.zk_connect)).get("zk_packets_received", 0)
            cpu0 = {k: cpu_s(p) for k, p in procs.items()}
            spies = start_profiles(procs, a.profile, ("daemons-", "bookies-"), 100) if a.profile else []
            t0 = time.perf_counter()
            if a.kill == "host":
                await asyncio.to_thread(kill_host, cluster, VICTIM)
            else:  # the bookie process only: its daemon stays (localBookieLossDetectionEnabled can see it)
                await asyncio.to_thread(cluster.kill_bookie, VICTIM, signal.SIGKILL)
            deadline, marked_at, empty_at = t0 + a.timeout, None, None
            # watch-driven (the marker tree's child watches): the bench adds no polling load of its own;
            # the metadata is read once the markers are gone
            while True:
                changed.clear()
                marked = await urm.watched_marked_count()
                now = time.perf_counter()
                if marked and marked_at is None:
                    marked_at = now
                if marked:
                    empty_at = None
                elif marked_at is not None:
                    empty_at = empty_at or now  # the start of the last empty spell is the end of the heal
                    if not await still_referencing(bk, hit, dead):
                        break
                if now > deadline:
                    raise SystemExit(f"heal did not finish within {a.timeout:.0f} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), 1.0)
            zk1 = await asyncio.to_thread(zkstats.packets_by_process, cluster.zk_connect, daemon_pids)
            all1 = (await asyncio.to_thread(zkstats.mntr, cluster.zk_connect)).get("zk_packets_received", 0)
            cpu = {k: cpu_s(p) - cpu0[k] for k, p in procs.items()}
            stop_profiles(spies, 30)
            r.update(seconds=empty_at - t0, detect=marked_at - t0,
                     zk_daemons=sum(zk1.get(p, 0) - zk0.get(p, 0) for p in daemon_pids), zk_all=all1 - all0)
            r["peak"], r["mean"] = slots.stats(marked_at, empty_at)
            r["copied"] = {i: progress(p)["worker"]["bytes_copied"] - before[i] for i, p in alive.items()}
            r["kill"] = a.kill
            r["cpu"] = cpu
            r["zk_timeout_s"] = int(a.props.get("zkTimeout", "4000")) / 1000
            await urm.close()
        finally:
            if slots is not None:
                await asyncio.to_thread(slots.stop)
            await bk.close()
    finally:
        await asyncio.to_thread(cluster.down)
        if not a.keep:  # the next side's cluster must not share the disk with this one's data
            await asyncio.to_thread(shutil.rmtree, cluster.base, True)
    report_side(r, lim)
    if r["bytes"] and not a.no_raw:
        streams = max(1, r["peak"])
        cache = await asyncio.to_thread(limits.cold, a.cold_cache)
        r["raw"] = await raw_pull(r["bytes"] // a.entry_size, streams, a.entry_size)
        print(f"  raw pull:  {r['raw']:8.1f} MB/s  (the same bytes, PullEntries, {streams} calls at once = the heal's peak "
              f"of streams; a null-bookie process reads another serving pre-built bodies; {cache}); "
              f"{lim.fractions(r['raw'])}")
        print(f"  ratio: heal from the kill / raw pull of the same streams = {r['rate'] / r['raw']:.2f} "
              f"(issue 29 target >= 0.5); copying only (after detection) / raw pull = {r['rate_copy'] / r['raw']:.2f}",
              flush=True)
    return r


def report_side(r: dict, lim: limits.Limits) -> None:
    dt, detect = r["seconds"], r["detect"]
    copy_s = dt - detect
    r["rate"], r["rate_copy"] = r["bytes"] / dt / 1e6, r["bytes"] / copy_s / 1e6
    n = max(1, r["ledgers"])
    workers = sum(1 for b in r["copied"].values() if b > 0)
    how = ("the dead bookie's ZooKeeper session expiry" if r["kill"] == "host" else
           "its own daemon deleting its registration (localBookieLossDetectionEnabled) or else its session expiry")
    print(f"  kill ({r['kill']}) -> healed: {dt:.2f}s = {detect:.2f}s detection (fixed cost: {how} + the audit, to the "
          f"first marker) + {copy_s:.2f}s healing; {r['cache']}")
    print(f"  heal:      {r['rate']:8.1f} MB/s from the kill ({r['bytes'] / 2**20:.0f} MiB; {r['rate_copy']:.1f} MB/s "
          f"after detection); {lim.fractions(r['rate'])}")
    small = r["bytes"] <= r["ledgers"] * 2**20  # small ledgers: project the 10,000
    print(f"  ledgers:   {r['ledgers'] / dt:8.1f} ledgers/s from the kill ({r['ledgers']} ledgers stored entries on the victim; "
          f"{r['ledgers'] / copy_s:.1f}/s after detection"
          + (f"; 10,000 such ledgers at this rate: {detect + 10000 / max(1e-9, r['ledgers'] / copy_s):.0f} s from the "
             f"kill, issue 29 target < 60 s)" if small else ")"))
    print(f"  streams:   peak {r['peak']}, mean {r['mean']:.1f} while healing (stream-slot znodes; copies of closed "
          f"ledgers of at most 1 MiB take none); "
          f"{workers} of {len(r['copied'])} daemons copied: "
          + ", ".join(f"{i}: {b / 2**20:.0f} MiB" for i, b in sorted(r["copied"].items())))
    pings = len(r["copied"]) * dt / (r["zk_timeout_s"] / 3)
    print(f"  ZooKeeper: {r['zk_daemons']} packets from the surviving daemons' connections, kill -> healed = "
          f"{r['zk_daemons'] / n:.1f} per ledger healed (server's cons counts; about {pings:.0f} of them session "
          f"pings); {r['zk_all']:.0f} packets from every client (mntr)")
    busiest = max(r["cpu"].items(), key=lambda kv: kv[1], default=None)
    groups: dict[str, float] = {}
    for k, v in r["cpu"].items():
        groups[k.split("-")[0]] = groups.get(k.split("-")[0], 0.0) + v
    print(f"  CPU from the kill ({dt:.2f}s x {lim.cores} cores = {lim.cores * dt:.1f} core-s): "
          + ", ".join(f"{k} {v:.2f}" for k, v in sorted(groups.items(), key=lambda kv: -kv[1]))
          + (f"; {sum(r['cpu'].values()) / (r['bytes'] / 1e6) * 1000:.0f} core-ms per MB healed" if r["bytes"] else "")
          + (f"; busiest process {busiest[0]} {busiest[1]:.2f} core-s = {busiest[1] / dt:.2f} of one core over the "
             "window (a Python process runs its event loop on one core)" if busiest else ""),
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 16 MiB (seconds; bench smoke test)")
    ap.add_argument("--mib", type=int, default=2048, help="MiB of entry bodies written (default 2048; ignored with --entries)")
    ap.add_argument("--ledgers", type=int, default=24, help="ledgers written (default 24)")
    ap.add_argument("--entries", type=int, help="entries per ledger (default: --mib spread over the ledgers)")
    ap.add_argument("--entry-size", type=int, default=64 * 1024, help="bytes per entry (default 65536)")
    ap.add_argument("--bookies", type=int, default=7, help="bookies, one host each (default 7; host 1 is killed)")
    ap.add_argument("--daemons", default="",
                    help="surviving hosts that run a daemon, comma-separated for one cluster each in this run "
                         "(e.g. 6,1; default: every surviving host)")
    ap.add_argument("--load", choices=("client", "direct"), default="client",
                    help="set-up: write with the ledger client (default) or straight to the bookies and ZooKeeper "
                         "(direct: faster for --ledgers 10000 --entries 1)")
    ap.add_argument("--kill", choices=("host", "bookie"), default="host",
                    help="what dies: the victim's host, bookie and daemon (default), or its bookie process only "
                         "(the daemon stays: with --set localBookieLossDetectionEnabled=true it sees the crash)")
    ap.add_argument("--cold-cache", action="store_true",
                    help="drop the page cache (needs root) just before the kill and before the raw pull")
    ap.add_argument("--no-raw", action="store_true", help="skip the raw pull baseline")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a heal may take (default 900)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's data directories")
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy --native profiles of every surviving daemon and bookie from the kill, in DIR")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a daemon configuration key for this run (repeatable), e.g. "
                         "replicationMaxStreamsPerTargetBookie=8")
    a = ap.parse_args()
    if a.quick:
        a.mib = 16
    a.props = {}
    for item in a.set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--set {item!r}: expected KEY=VALUE")
        a.props[key] = value
    if a.bookies < 4:
        ap.error(f"--bookies {a.bookies}: at least 4 (E3 must still fit once one is killed)")
    if a.ledgers < 1 or a.entry_size < 1:
        ap.error("--ledgers and --entry-size must be positive")
    if a.entries is None:
        a.entries = max(1, a.mib * 2**20 // a.entry_size // a.ledgers)
    try:
        counts = [int(x) for x in a.daemons.split(",") if x.strip()] or [a.bookies - 1]
    except ValueError:
        ap.error(f"--daemons {a.daemons!r}: expected counts like 6,1")
    if any(not 1 <= d <= a.bookies - 1 for d in counts):
        ap.error(f"--daemons {a.daemons!r}: each count must be 1..{a.bookies - 1} (the surviving hosts)")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    base = Path(tempfile.mkdtemp(prefix="bench-heal-"))
    try:
        lim = limits.measure(base)
        print(lim.line(base), flush=True)
        results = [asyncio.run(side(base, a, d, lim)) for d in counts]
        f = results[0]
        for r in results[1:]:
            what = "MB/s" if f["bytes"] and a.entries > 1 else "ledgers/s"
            fr, rr = ((f["rate"], r["rate"]) if what == "MB/s" else
                      (f["ledgers"] / f["seconds"], r["ledgers"] / r["seconds"]))
            # each side is its own cluster: random ensembles give the victim different data, and the
            # detection (session expiry: 2/3 to 1 session timeout after the kill) differs too
            fc, rc = ((f["rate_copy"], r["rate_copy"]) if what == "MB/s" else
                      (f["ledgers"] / (f["seconds"] - f["detect"]), r["ledgers"] / (r["seconds"] - r["detect"])))
            print(f"ratio: heal from the kill ({what}), {f['daemons']} daemons / {r['daemons']} daemons = {fr / rr:.2f} "
                  f"(issue 29: more daemons must never heal slower); after detection {fc / rc:.2f} (detection "
                  f"{f['detect']:.2f}s / {r['detect']:.2f}s; healed {f['bytes'] / 2**20:.0f} / {r['bytes'] / 2**20:.0f} MiB "
                  f"in {f['ledgers']} / {r['ledgers']} ledgers)")
    finally:  # several GB per run: left behind, a few dozen runs filled the disk and turned bookies read-only
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
