"""The local bookie watch (``localBookieLossDetectionEnabled``, on by default) on a stock Apache
BookKeeper 4.17 cluster: real Java bookies, ledgers written by upstream's Java client, our daemons
beside them with the watch at its default, the Java bookies' ``zkTimeout`` 10 s.

* a bookie frozen (SIGSTOP) for less than ``zkTimeout``, as a long GC pause is, keeps its registration
  (the same ZooKeeper session) throughout and after: never declared lost early;
* a bookie killed (``kill -9``) loses its registration in under a second, not at its session expiry;
  started again within ``lostBookieRecoveryDelay`` it costs no copy (the Auditor's postponed audit is
  cancelled: ``auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED``);
* a bookie stopped gracefully (SIGTERM: upstream's bookie deletes its own registration) and started
  again within the delay costs no copy either, and its new registration is left alone.

Nothing is marked, every ensemble is what upstream's client wrote, no byte is copied and no daemon
logs ERROR."""

from __future__ import annotations

import time

import pytest

from interop_support import PW, markers, metadata, metric_sum, no_errors, our_daemons, wait_until

pytestmark = pytest.mark.integration

ZK_TIMEOUT_MS = 10_000
DELAY_S = 60  # lostBookieRecoveryDelay: far longer than a Java bookie's restart here


def test_paused_killed_and_restarted_stock_bookies(java_cluster):
    c = java_cluster(bookies=4, racks=2, zk_timeout_ms=ZK_TIMEOUT_MS)
    w = c.writer(ledgers=4, entries=100, entry_size=1024, ensemble=3, wq=2, aq=2, digest="CRC32C", password=PW)
    ids = [lg["ledger"] for lg in w["ledgers"]]

    def ensembles() -> dict[int, list[tuple[int, tuple[str, ...]]]]:
        return {lid: [(s.first_entry_id, tuple(s.ensemble)) for s in metadata(c, lid).segments] for lid in ids}

    def owner(i: int) -> int | None:
        assert c.kz is not None
        stat = c.kz.exists(f"{c.ledgers_root}/available/{c.bookie_ids[i]}")
        return stat.ephemeralOwner if stat is not None else None

    written = ensembles()
    # the defaults but for the delay (the watch itself is not set: on by default)
    daemons = our_daemons(c, range(4), lostBookieRecoveryDelay=str(DELAY_S))
    try:
        assert all("local bookie watch on" in "".join(d.lines("info")) for d in daemons.values())
        copied0 = metric_sum(daemons, "replication_worker_NUM_BYTES_WRITTEN_sum")

        # -- a GC-like pause below zkTimeout: the registration stays, the same session -----------------
        session = owner(0)
        assert session is not None
        c.bookies[0].sigstop()
        try:
            end = time.monotonic() + 0.4 * ZK_TIMEOUT_MS / 1000  # the pause's length (the fault itself)
            seen = set()
            while time.monotonic() < end:
                seen.add(owner(0))
                time.sleep(0.1)  # sampling the registration during the pause, not synchronising
        finally:
            c.bookies[0].sigcont()
        assert seen == {session} and owner(0) == session

        # -- kill -9: gone in under a second; back within the delay: the audit is cancelled ------------
        cancelled0 = metric_sum(daemons, "auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED")
        t0 = time.monotonic()
        c.bookies[1].kill()
        wait_until(lambda: owner(1) is None, ZK_TIMEOUT_MS / 1000, "the killed bookie's registration deleted")
        seen_lost_s = time.monotonic() - t0
        assert seen_lost_s < 1.0, f"the killed bookie was seen lost after {seen_lost_s:.2f} s"
        # the daemon logs the deletion after making it: wait for the line, not just the znode
        wait_until(lambda: any("process is gone" in ln for ln in daemons[1].lines("warning")), 10,
                   "the daemon's warning that the local bookie's process is gone")
        c.bookies[1].start()  # waits for its new registration
        wait_until(lambda: metric_sum(daemons, "auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED") >= cancelled0 + 1,
                   30, "the postponed audit of the restarted bookie cancelled")

        # -- a graceful stop and start within the delay: no copy, the new registration kept ------------
        c.bookies[2].stop()
        assert owner(2) is None  # upstream's bookie deleted its registration on SIGTERM
        c.bookies[2].start()
        wait_until(lambda: metric_sum(daemons, "auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED") >= cancelled0 + 2,
                   30, "the postponed audit of the gracefully restarted bookie cancelled")
        assert all(owner(i) is not None for i in range(4))

        assert markers(c) == set()
        assert ensembles() == written
        assert metric_sum(daemons, "replication_worker_NUM_BYTES_WRITTEN_sum") == copied0
        no_errors(daemons)
    finally:
        for d in daemons.values():
            d.stop()
