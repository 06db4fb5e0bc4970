"""``make demo``, part 3: the BP-54 disaster-recovery story on stock Apache BookKeeper 4.17 (issue 24).

Six real Java bookies (``make upstream``: bookkeeper-server 4.17.2 from Maven Central) in two racks,
ledgers written by upstream's own Java client (E3/WQ3/AQ2, CRC32C), and our daemons in place of
AutoRecoveryMain next to every bookie, speaking upstream's bookie protocol to them. Rack A dies: our
workers heal best effort into rack B. Rack A returns: our Auditor's placement check and our workers
(BP-54) spread every ensemble over both racks again, and upstream's shell lists nothing
under-replicated. Rack B dies: upstream's client reads every entry back, digests checked.

Every row is the result of a check (:mod:`autorecovery.cli.demo_checks`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from autorecovery.cli.demo_checks import require
from autorecovery.testing.daemon_proc import DaemonProcess
from autorecovery.testing.upstream_cluster import JavaCluster
from autorecovery.testing.upstream_state import ledger_metadata, marked_ledgers, start_our_daemons
from autorecovery.testing.zk_server import ZooKeeperServer

LEDGERS, ENTRIES = 12, 200
PASSWORD = "demo"
DAEMON = {
    "lostBookieRecoveryDelay": "0",
    "auditorPeriodicCheckInterval": "0",
    "auditorPeriodicBookieCheckInterval": "0",
    "auditorPeriodicPlacementPolicyCheckInterval": "2",
    "repairedPlacementPolicyNotAdheringBookieEnabled": "true",
    "minNumRacksPerWriteQuorum": "2",
    "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy",
    "zkTimeout": "5000",
    "httpServerPort": "0",
    "rwRereplicateBackoffMs": "200",
    "lockReleaseOfFailedLedgerGracePeriod": "2000",
}


def _until(pred: Callable[[], object], timeout_s: float, step: str, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        require(time.monotonic() < deadline, step, f"not within {timeout_s:g}s: {what}")
        time.sleep(0.1)  # polling a condition with a deadline


def run(base: Path, table) -> None:
    """Part 3; raises :class:`~autorecovery.cli.demo_checks.DemoStepFailed` when a check fails."""
    zk = ZooKeeperServer(base / "stock-zk").start()
    c = JavaCluster(base / "stock", zk.connect_string, bookies=6, racks=2)
    daemons: dict[int, DaemonProcess] = {}
    try:
        step = table.begin("stock BookKeeper 4.17.2: 6 Java bookies, 2 racks")
        c.up()
        daemons.update(start_our_daemons(c, range(6), DAEMON))
        ours = {c.bookie_ids[i] for i in daemons}
        _until(lambda: c.auditor() in ours, 30, step, "one of our daemons elected Auditor")
        table.add(step, f"{len(c.bookie_ids)} Java bookies registered; our daemons next to each, Auditor "
                        f"{c.auditor()}")

        step = table.begin(f"upstream's Java client writes {LEDGERS} ledgers")
        w = c.writer(ledgers=LEDGERS, entries=ENTRIES, entry_size=1024, ensemble=3, wq=3, aq=2, digest="CRC32C",
                     password=PASSWORD)
        ids = [lg["ledger"] for lg in w["ledgers"]]
        rack_a = [0, 2, 4]
        ids_a = {c.bookie_ids[i] for i in rack_a}
        ids_b = set(c.bookie_ids) - ids_a

        def shapes() -> list[set[str]]:
            return [set(seg.ensemble) for lid in ids for seg in ledger_metadata(c, lid).segments]

        require(len(ids) == LEDGERS and all(e & ids_a and e & ids_b for e in shapes()), step, f"{w}")
        table.add(step, f"{LEDGERS * ENTRIES} entries acknowledged (E3/WQ3/AQ2), every ensemble on both racks")

        step = table.begin("kill -9 rack A (Java bookies + our daemons)")
        for i in rack_a:
            c.bookies[i].kill()
            daemons.pop(i).kill()
        require(not any(c.bookies[i].alive for i in rack_a), step, "a process survived")
        table.add(step, ", ".join(sorted(ids_a)))

        step = table.begin("our daemons heal best-effort into rack B")
        _until(lambda: all(e <= ids_b for e in shapes()) and not marked_ledgers(c), 120, step,
               "every ensemble in rack B, no marker")
        table.add(step, f"{LEDGERS} ledgers on rack B alone, 0 markers")

        step = table.begin("bring rack A back")
        for i in rack_a:
            c.bookies[i].start(wait=False)
        for i in rack_a:
            c.bookies[i].wait_registered(60)
        daemons.update(start_our_daemons(c, rack_a, DAEMON))
        table.add(step, f"{len(c.bookie_ids)} Java bookies registered, {len(daemons)} daemons running")

        step = table.begin("placement check + BP-54 repair (ours)")
        _until(lambda: all(e & ids_a and e & ids_b for e in shapes()) and not marked_ledgers(c), 180, step,
               "every ensemble on both racks, no marker")
        ur = c.shell("listunderreplicated")
        require(ur.returncode == 0 and "Under replicated ledger count: 0" in ur.stdout, step,
                f"upstream's shell: {ur.stdout[-300:]}")
        table.add(step, f"{LEDGERS} -> 0 ledgers on one rack; upstream's listunderreplicated: 0")

        step = table.begin("kill -9 rack B, read every entry (Java client)")
        for i in sorted(set(range(6)) - set(rack_a)):
            c.bookies[i].kill()
            daemons.pop(i).kill()
        r = c.reader(ids, password=PASSWORD)
        got = sum(lg["entries_read"] for lg in r["ledgers"])
        bad = sum(lg["bad_entries"] for lg in r["ledgers"])
        require(r["ok"] and got == LEDGERS * ENTRIES and bad == 0, step, f"{got} read, {bad} bad: {r}")
        table.add(step, f"{got}/{LEDGERS * ENTRIES} ok, digests checked by upstream's client")
    finally:
        everyone = list(daemons.values())
        for d in everyone:
            d.kill()
        c.down()
        zk.stop()
    step = "shut the stock cluster down"  # timed from the previous row: the shutdown above
    left = [b.bookie_id for b in c.bookies if b.alive] + [d.name for d in everyone if d.alive]
    require(not left, step, f"still running: {left}")
    table.add(step, f"{len(c.bookies)} Java bookies and every daemon stopped")
