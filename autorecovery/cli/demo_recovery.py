"""The autorecovery half of ``make demo``: a lost bookie healed, then the BP-54 disaster-recovery story.

Part A: 6 bookies in 3 racks with an autorecovery daemon next to each; ledgers are written, a host
(bookie + its daemon) is killed with SIGKILL, the Auditor marks the lost bookie's ledgers, the workers
copy them (a progress line from the daemons' own progress, :mod:`autorecovery.cli.demo_progress`: ledgers
done and bytes copied since the host died, ledgers and bytes left, MB/s and ETA), and every entry is
verified.

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
from pathlib import Path

from autorecovery.cli.demo_checks import (
    all_processes_stopped,
    daemons_ready,
    processes_dead,
    require,
    unregistered,
    writable_bookies,
)
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.cli.demo_progress import HealWatch
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


def start_daemons(cluster: LocalCluster, indexes, extra: dict[str, str]) -> dict[int, int]:
    """Start a daemon next to each bookie of ``indexes``; returns daemon index → HTTP port."""
    ports = {}
    for i in indexes:
        ports[i] = free_port()
        cluster.start_daemon(i, {**DAEMON_PROPS, **extra, "httpServerPort": str(ports[i])})
    return ports


def kill_host(cluster: LocalCluster, i: int) -> str:
    """A host dies: its bookie and its autorecovery daemon, both with SIGKILL."""
    if i in cluster.daemons:
        cluster.stop_daemon(i, signal.SIGKILL)
    return cluster.kill_bookie(i, signal.SIGKILL)


async def kill_hosts(cluster: LocalCluster, bk: BookKeeper, indexes, step: str) -> set[str]:
    """Kill hosts and check it: their processes are gone and their bookies unregistered."""
    dead = {kill_host(cluster, i) for i in indexes}
    names = [cluster.bookies[i].name for i in indexes] + [cluster.daemons[i].name for i in indexes if i in cluster.daemons]
    processes_dead(cluster, names, step)
    await unregistered(bk.watcher, dead, step)
    return dead


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
        ports = start_daemons(cluster, range(6), {})

        async def go() -> None:
            bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
            try:
                step = "6 bookies in 3 racks + 6 autorecovery daemons"  # timed from the previous row: set-up above
                writable = await writable_bookies(bk.watcher, 6, step)
                daemons = await asyncio.to_thread(daemons_ready, ports, step)
                table.add(step, f"{writable}; {daemons}")
                step = table.begin("write 20 ledgers x 500 entries")
                m = await write_ledgers(bk, ledgers=20, entries=500, size=1024)
                require(m.total_entries == 20 * 500, step, f"{m.total_entries} entries acknowledged")
                table.add(step, f"{m.total_entries} entries, rack-aware ensembles")
                victim = 1
                step = table.begin("kill -9 a host (bookie + daemon)")
                # the heal starts when the host dies: the survivors' counters are taken before
                watch = await HealWatch.start({i: p for i, p in ports.items() if i != victim})
                dead = (await kill_hosts(cluster, bk, [victim], step)).pop()
                table.add(step, f"{dead} (processes gone, unregistered)")

                async def healed() -> bool:
                    urm_ids = await UnderreplicationManager(bk.zk, bk.paths).list_marked_ids()
                    return not urm_ids and await segments_referencing(bk, m, {dead}) == 0

                step = table.begin("auditor marks, workers re-replicate", at=watch.started)
                ok, s = await watch.follow(healed, 120, "re-replication")
                require(ok, step, "timed out after 120 s: ledgers still marked or on the dead bookie")
                require(s.healed > 0, step, "healed, but no worker reports a ledger done")
                table.add(step, f"{s.healed} ledgers done, {s.copied_bytes / 1e6:.1f} MB copied (the workers' counts)",
                          end=watch.finished_at)
                step = table.begin("verify every entry")
                rep = await verify_ledgers(bk, m)
                require(rep.ok and rep.entries_ok == m.total_entries, step,
                        f"{rep.entries_ok}/{m.total_entries} ok: " + "; ".join(rep.errors[:5]))
                table.add(step, f"{rep.entries_ok}/{m.total_entries} ok")
            finally:
                await bk.close()

        asyncio.run(go())
    finally:
        cluster.down()
    table.add("shut the cluster down", all_processes_stopped(cluster))


def part_b(base: Path, table) -> None:
    cluster = LocalCluster(base / "dr", bookies=6, racks=2)
    rack_a = [i for i in range(6) if cluster.rack_of(i) == "/rack1"]
    rack_b = [i for i in range(6) if cluster.rack_of(i) == "/rack2"]
    extra = {"auditorPeriodicPlacementPolicyCheckInterval": "3",
             "repairedPlacementPolicyNotAdheringBookieEnabled": "true",
             "minNumRacksPerWriteQuorum": "2"}
    try:
        cluster.up()
        ports = start_daemons(cluster, range(6), extra)

        async def go() -> None:
            from autorecovery.placement import PlacementConfig, RackawarePolicy, StaticResolver

            bk = await BookKeeper.connect(cluster.zk_connect, cluster.ledgers_root)
            judge = RackawarePolicy(PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": 2}),
                                    StaticResolver(cluster.rack_mapping()), default_rack="/default-rack")
            judge.on_cluster_changed(set(cluster.bookie_ids()), set())
            try:
                step = "DR: 2 racks x 3 bookies, BP-54 repair on"  # timed from the previous row: set-up above
                require(len(rack_a) == 3 and len(rack_b) == 3, step, f"racks {rack_a} / {rack_b}")
                writable = await writable_bookies(bk.watcher, 6, step)
                daemons = await asyncio.to_thread(daemons_ready, ports, step)
                table.add(step, f"{writable}; {daemons}; placement check every 3 s (configured)")
                step = table.begin("write 30 closed ledgers (E2/WQ2/AQ2)")
                m = await write_ledgers(bk, ledgers=30, entries=100, size=1024, ensemble=2, write_quorum=2,
                                        ack_quorum=2)
                require(len(m.ledgers) == 30 and m.total_entries == 3000, step, f"{m.total_entries} entries")
                table.add(step, f"{await non_adhering(bk, m, judge)} not spanning 2 racks")
                step = table.begin("shut down rack A")
                watch = await HealWatch.start({i: ports[i] for i in rack_b})
                dead_a = await kill_hosts(cluster, bk, rack_a, step)
                table.add(step, ", ".join(sorted(dead_a)) + " (processes gone, unregistered)")

                async def healed_into_b() -> bool:
                    return await segments_referencing(bk, m, dead_a) == 0

                step = table.begin("autorecovery heals best-effort into rack B", at=watch.started)
                ok, s = await watch.follow(healed_into_b, 120, "best-effort heal into rack B")
                require(ok, step, "timed out after 120 s: segments still on rack A")
                require(s.healed > 0, step, "healed, but no worker reports a ledger done")
                on_one_rack = await non_adhering(bk, m, judge)
                table.add(step, f"{s.healed} ledgers done; {on_one_rack} ledgers on one rack", end=watch.finished_at)
                before = await ensembles(bk, m)
                step = table.begin("bring rack A back")
                watch = await HealWatch.start({i: ports[i] for i in rack_b})  # placement repair starts now
                for i in rack_a:
                    cluster.start_bookie(i)
                ports_a = start_daemons(cluster, rack_a, extra)
                watch.add(ports_a)
                writable = await writable_bookies(bk.watcher, 6, step)
                daemons = await asyncio.to_thread(daemons_ready, {**{i: ports[i] for i in rack_b}, **ports_a}, step)
                table.add(step, f"{writable}; {daemons}")

                async def spread() -> bool:
                    return await non_adhering(bk, m, judge) == 0

                step = table.begin("placement check marks, workers repair (BP-54)", at=watch.started)
                ok, _ = await watch.follow(spread, 120, "placement repair (BP-54)")
                left = await non_adhering(bk, m, judge)
                require(ok and left == 0, step, f"timed out after 120 s: {left} ledgers still on one rack")
                after = await ensembles(bk, m)
                swaps = sum(x != y for k in before for a, b in zip(before[k], after[k], strict=False) for x, y in zip(a, b, strict=False))
                require(swaps >= on_one_rack, step, f"{swaps} swaps for {on_one_rack} ledgers on one rack")
                table.add(step, f"{on_one_rack} -> {left} ledgers on one rack, {swaps} swaps", end=watch.finished_at)
                step = table.begin("shut down rack B")
                dead_b = await kill_hosts(cluster, bk, rack_b, step)
                table.add(step, ", ".join(sorted(dead_b)) + " (processes gone, unregistered)")
                step = table.begin("read every entry with rack B down")
                rep = await verify_ledgers(bk, m)
                require(rep.ok and rep.entries_ok == m.total_entries, step,
                        f"{len(rep.errors)} LOST: " + "; ".join(rep.errors[:5]))
                table.add(step, f"{rep.entries_ok}/{m.total_entries} ok, digests match")
            finally:
                await bk.close()

        asyncio.run(go())
    finally:
        cluster.down()
    table.add("shut the cluster down", all_processes_stopped(cluster))


def run(base: Path, table) -> None:
    """Both parts; raises :class:`~autorecovery.cli.demo_checks.DemoStepFailed` (a ClickException)
    when a check fails."""
    part_a(base, table)
    part_b(base, table)
