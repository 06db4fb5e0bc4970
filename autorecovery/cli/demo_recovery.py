"""The autorecovery half of ``make demo``: a lost bookie healed, then the BP-54 disaster-recovery story.

Part A: 6 bookies in 3 racks with an autorecovery daemon next to each; ledgers are written, a host
(bookie + its daemon) is killed with SIGKILL, the Auditor marks the lost bookie's ledgers, the workers
copy them (a progress line shows ledgers and bytes left, MB/s and ETA), and every entry is verified.

Part B (the seed's DR test): 2 racks x 3 bookies, rack-aware E2/WQ2/AQ2, 30 closed ledgers. Rack A goes
down: autorecovery heals best-effort into rack B. Rack A comes back: the placement check marks the
ensembles that no longer span two racks and the workers repair them with minimum swaps (BP-54). Rack B
goes down: every entry of every ledger still reads back with a matching digest.

Why E2/WQ2 and not E3/WQ2: under round robin the write sets of an E3/WQ2 ensemble are the pairs
(0,1), (1,2), (2,0), a 3-cycle, and a 3-cycle cannot be coloured with 2 racks; so on two racks one write
set of every E3/WQ2 ensemble sits in one rack and a third of the entries die with that rack, whatever
the placement policy does (upstream has the same property). Any even E with WQ=2 (or WQ=E) can span
two racks in every write set; E2/WQ2/AQ2 is Pulsar's default.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import click

from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.errors import MalformedMetadataError, NoSuchLedgerError
from autorecovery.testing.local_cluster import LocalCluster
from autorecovery.testing.zk_server import free_port
from autorecovery.workload import Manifest, verify_ledgers, write_ledgers
from autorecovery.zk.underreplication import UnderreplicationManager

DAEMON_PROPS = {
    "lostBookieRecoveryDelay": "0",
    "auditorPeriodicCheckInterval": "0",
    "auditorPeriodicBookieCheckInterval": "0",
    "openLedgerRereplicationGracePeriod": "3000",
    "lockReleaseOfFailedLedgerGracePeriod": "2000",
    "rwRereplicateBackoffMs": "200",
    "rereplicationEntryBatchSize": "100",
    "zkTimeout": "4000",
    "getBookieInfoIntervalSeconds": "10",
}


def start_daemons(cluster: LocalCluster, indexes, extra: dict[str, str]) -> None:
    for i in indexes:
        cluster.start_daemon(i, {**DAEMON_PROPS, **extra, "httpServerPort": str(free_port())})


def kill_host(cluster: LocalCluster, i: int) -> str:
    """A host dies: its bookie and its autorecovery daemon, both with SIGKILL."""
    if i in cluster.daemons:
        cluster.stop_daemon(i, signal.SIGKILL)
    return cluster.kill_bookie(i, signal.SIGKILL)


async def _bytes_of(bk: BookKeeper, ids, cache: dict[int, int]) -> int:
    total = 0
    for lid in ids:
        if lid not in cache:
            try:
                md, _ = await bk.ledgers.read(lid)
                cache[lid] = md.length
            except (NoSuchLedgerError, MalformedMetadataError):
                cache[lid] = 0
        total += cache[lid]
    return total


async def watch_progress(bk: BookKeeper, done: Callable[[], "asyncio.Future[bool] | bool"], timeout_s: float,
                         label: str) -> tuple[bool, int]:
    """Print a progress line (markers left, bytes left, MB/s, ETA) until ``done()`` or timeout.

    Returns (finished, the largest number of marked ledgers seen)."""
    urm = UnderreplicationManager(bk.zk, bk.paths)
    cache: dict[int, int] = {}
    t0 = time.monotonic()
    peak_ledgers = 0
    peak_bytes = 0
    last_print = 0.0
    while time.monotonic() - t0 < timeout_s:
        ids = await urm.list_marked_ids()
        left = await _bytes_of(bk, ids, cache)
        peak_ledgers = max(peak_ledgers, len(ids))
        peak_bytes = max(peak_bytes, left)
        elapsed = time.monotonic() - t0
        rate = (peak_bytes - left) / elapsed if elapsed > 0 else 0.0
        eta = f"{left / rate:5.1f}s" if rate > 0 and left else "  -  "
        res = done()
        if asyncio.iscoroutine(res):
            res = await res
        if time.monotonic() - last_print > 1.0 or res:
            click.echo(f"    {label}: {len(ids):3d} ledgers marked, {left / 1e6:6.2f} MB left, "
                       f"{rate / 1e6:5.2f} MB/s, ETA {eta}")
            last_print = time.monotonic()
        if res:
            return True, peak_ledgers
        await asyncio.sleep(0.25)  # a progress display polls at a fixed pace
    return False, peak_ledgers


async def segments_referencing(bk: BookKeeper, manifest: Manifest, bookies: set[str]) -> int:
    n = 0
    for lid in manifest.ledgers:
        md, _ = await bk.ledgers.read(lid)
        n += sum(1 for seg in md.segments if bookies & set(seg.ensemble))
    return n


async def ensembles(bk: BookKeeper, manifest: Manifest) -> dict[int, list[tuple[str, ...]]]:
    """ledger id -> ensembles of its segments."""
    out = {}
    for lid in manifest.ledgers:
        md, _ = await bk.ledgers.read(lid)
        out[lid] = [seg.ensemble for seg in md.segments]
    return out


async def non_adhering(bk: BookKeeper, manifest: Manifest, policy) -> int:
    n = 0
    for lid in manifest.ledgers:
        md, _ = await bk.ledgers.read(lid)
        for seg in md.segments:
            if policy.is_ensemble_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum).name == "FAIL":
                n += 1
                break
    return n


def part_a(base: Path, table) -> None:
    cluster = LocalCluster(base / "heal", bookies=6, racks=3)
    try:
        cluster.up()
        start_daemons(cluster, range(6), {})
        table.add("6 bookies in 3 racks + 6 autorecovery daemons", "auditor elected, workers running")

        async def go() -> None:
            bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
            try:
                await bk.watcher.wait_until(lambda w: len(w.writable) == 6, 15)
                m = await write_ledgers(bk, ledgers=20, entries=500, size=1024)
                table.add("write 20 ledgers x 500 entries", f"{m.total_entries} entries, rack-aware ensembles")
                victim = 1
                dead = kill_host(cluster, victim)
                table.add("kill -9 a host (bookie + daemon)", dead)
                await bk.watcher.wait_until(lambda w: dead not in w.writable, 15)

                async def healed() -> bool:
                    urm_ids = await UnderreplicationManager(bk.zk, bk.paths).list_marked_ids()
                    return not urm_ids and await segments_referencing(bk, m, {dead}) == 0

                ok, peak = await watch_progress(bk, healed, 120, "re-replication")
                table.add("auditor marks, workers re-replicate", f"{peak} ledgers marked and healed" if ok else "TIMED OUT")
                rep = await verify_ledgers(bk, m)
                table.add("verify every entry", f"{rep.entries_ok}/{m.total_entries} ok" + ("" if rep.ok else " ERRORS"))
                if not ok or not rep.ok:
                    raise click.ClickException("autorecovery did not heal the cluster: " + "; ".join(rep.errors[:5]))
            finally:
                await bk.close()

        asyncio.run(go())
    finally:
        cluster.down()


def part_b(base: Path, table) -> None:
    cluster = LocalCluster(base / "dr", bookies=6, racks=2)
    rack_a = [i for i in range(6) if cluster.rack_of(i) == "/rack1"]
    rack_b = [i for i in range(6) if cluster.rack_of(i) == "/rack2"]
    extra = {"auditorPeriodicPlacementPolicyCheckInterval": "3",
             "repairedPlacementPolicyNotAdheringBookieEnabled": "true",
             "minNumRacksPerWriteQuorum": "2"}
    try:
        cluster.up()
        start_daemons(cluster, range(6), extra)
        table.add("DR: 2 racks x 3 bookies, BP-54 repair on", "placement check every 3 s")

        async def go() -> None:
            from autorecovery.placement import PlacementConfig, RackawarePolicy, StaticResolver

            bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
            judge = RackawarePolicy(PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": 2}),
                                    StaticResolver(cluster.rack_mapping()), default_rack="/default-rack")
            judge.on_cluster_changed(set(cluster.bookie_ids()), set())
            try:
                await bk.watcher.wait_until(lambda w: len(w.writable) == 6, 15)
                m = await write_ledgers(bk, ledgers=30, entries=100, size=1024, ensemble=2, write_quorum=2,
                                        ack_quorum=2)
                table.add("write 30 closed ledgers (E2/WQ2/AQ2)", f"{await non_adhering(bk, m, judge)} not spanning 2 racks")
                dead_a = {kill_host(cluster, i) for i in rack_a}
                table.add("shut down rack A", ", ".join(sorted(dead_a)))

                async def healed_into_b() -> bool:
                    return await segments_referencing(bk, m, dead_a) == 0

                ok, _ = await watch_progress(bk, healed_into_b, 120, "best-effort heal into rack B")
                table.add("autorecovery heals best-effort into rack B",
                          f"{await non_adhering(bk, m, judge)} ledgers on one rack" if ok else "TIMED OUT")
                if not ok:
                    raise click.ClickException("best-effort heal into rack B did not finish")
                before = await ensembles(bk, m)
                on_one_rack = await non_adhering(bk, m, judge)
                for i in rack_a:
                    cluster.start_bookie(i)
                start_daemons(cluster, rack_a, extra)
                await bk.watcher.wait_until(lambda w: len(w.writable) == 6, 15)
                table.add("bring rack A back", "6 bookies writable")

                async def spread() -> bool:
                    return await non_adhering(bk, m, judge) == 0

                ok, _ = await watch_progress(bk, spread, 120, "placement repair (BP-54)")
                after = await ensembles(bk, m)
                swaps = sum(x != y for k in before for a, b in zip(before[k], after[k]) for x, y in zip(a, b))
                table.add("placement check marks, workers repair (BP-54)",
                          f"{on_one_rack} -> {await non_adhering(bk, m, judge)} ledgers on one rack, {swaps} swaps"
                          if ok else "TIMED OUT")
                if not ok:
                    raise click.ClickException("placement repair did not spread the ledgers over both racks")
                dead_b = {kill_host(cluster, i) for i in rack_b}
                table.add("shut down rack B", ", ".join(sorted(dead_b)))
                rep = await verify_ledgers(bk, m)
                table.add("read every entry with rack B down",
                          f"{rep.entries_ok}/{m.total_entries} ok, digests match" if rep.ok else f"{len(rep.errors)} LOST")
                if not rep.ok:
                    raise click.ClickException("entries lost: " + "; ".join(rep.errors[:5]))
            finally:
                await bk.close()

        asyncio.run(go())
    finally:
        cluster.down()


def run(base: Path, table) -> None:
    """Both parts; raises ClickException when autorecovery does not do its job."""
    part_a(base, table)
    part_b(base, table)
