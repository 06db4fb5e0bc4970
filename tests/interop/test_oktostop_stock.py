"""ok-to-stop and planned restarts on a stock Apache BookKeeper 4.17 cluster: real Java bookies, ledgers
written by upstream's Java client, our daemons beside them. Each bookie in turn: ``shell oktostop``
says yes, the hook line opens an auto-closing window, the Java bookie is stopped gracefully (SIGTERM:
it deletes its registration) and started again, and the next goes only once the window closed by
itself. Nothing is copied, nothing is marked, and upstream's own shell and client judge the result."""

from __future__ import annotations

import json

import pytest

from interop_support import PW, markers, metric_sum, no_errors, our_daemons, our_shell, wait_until

pytestmark = pytest.mark.integration


def bytes_copied(daemons) -> float:
    return metric_sum(daemons, "replication_worker_NUM_BYTES_WRITTEN_sum")


def maint(c) -> dict:
    r = our_shell(c, "maintenance", "list", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_rolling_restart_of_stock_bookies_copies_nothing(java_cluster):
    c = java_cluster(bookies=3, racks=1)
    w = c.writer(ledgers=4, entries=100, entry_size=1024, ensemble=3, wq=2, aq=2, digest="CRC32C", password=PW)
    ids = [lg["ledger"] for lg in w["ledgers"]]
    daemons = our_daemons(c, range(3))
    try:
        copied0 = bytes_copied(daemons)
        for i, b in enumerate(c.bookie_ids):
            r = our_shell(c, "oktostop", "-bookieid", b, "--for", "300")
            assert r.returncode == 0 and f"ok to stop {b}" in r.stdout, r.stdout + r.stderr
            r = our_shell(c, "oktostop", "-bookieid", b, "--for", "300", "--wait", "30", "--open-window")
            assert r.returncode == 0 and "Maintenance window on bookie" in r.stdout, r.stdout + r.stderr
            c.bookies[i].stop()
            c.bookies[i].wait_unregistered(30)
            wait_until(lambda: any(x["target"] == b and x.get("down_since_ms") for x in maint(c)["windows"]), 30,  # noqa: B023 - run before the loop rebinds it
                       f"the auditor to see {b} down under its window")
            # a second stop now would leave a write set with no copy: the answer is no, naming ledgers
            other = c.bookie_ids[(i + 1) % 3]
            r = our_shell(c, "oktostop", "-bookieid", other)
            assert r.returncode == 3 and "NOT ok to stop" in r.stdout and str(ids[0]) in r.stdout, r.stdout
            c.bookies[i].start()
            wait_until(lambda: not any(x["target"] == b for x in maint(c)["windows"])  # noqa: B023 - run before the loop rebinds it
                       and any(e["target"] == b and e["end_reason"].startswith("auto-closed")  # noqa: B023 - run before the loop rebinds it
                               for e in maint(c)["ended"]), 60, f"the window on {b} to close by itself")
            assert bytes_copied(daemons) == copied0 and not markers(c), f"the planned restart of {b} cost copies"
        ur = c.shell("listunderreplicated")
        assert ur.returncode == 0 and "Under replicated ledger count: 0" in ur.stdout, ur.stdout + ur.stderr
        r = c.reader(ids, password=PW, digest="CRC32C")
        assert r["ok"] and [lg["entries_read"] for lg in r["ledgers"]] == [100] * len(ids), r
        no_errors(daemons)
    finally:
        for d in daemons.values():
            d.stop()
