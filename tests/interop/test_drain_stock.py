"""Live drain (BP-56) of a running stock Java BookKeeper 4.17 bookie by our shell: copies over upstream's
protocol while upstream's client reads, and leaves no ledger naming the bookie, which is still
registered (a smaller case than tests/integration/test_drain.py)."""

from __future__ import annotations

import threading

import pytest

from interop_support import PW, metadata, our_shell

pytestmark = pytest.mark.integration


def test_our_shell_drains_a_running_stock_bookie_under_upstream_reads(java_cluster):
    c = java_cluster(bookies=4, racks=1)
    w = c.writer(ledgers=4, entries=120, entry_size=1024, ensemble=3, wq=2, aq=2, digest="CRC32C", password=PW)
    ids = [lg["ledger"] for lg in w["ledgers"]]
    counts = {b: sum(b in metadata(c, lid).all_bookies() for lid in ids) for b in c.bookie_ids}
    victim = max(counts, key=lambda b: counts[b])
    dry = our_shell(c, "drain", "-bookieid", victim, "--dry-run")
    assert dry.returncode == 0 and f"{counts[victim]} ledger(s)" in dry.stdout, dry.stdout + dry.stderr

    reads: list[dict] = []
    done = threading.Event()

    def read_loop():
        while not done.is_set():
            reads.append(c.reader(ids, password=PW, digest="CRC32C"))

    t = threading.Thread(target=read_loop)
    t.start()
    try:
        res = our_shell(c, "drain", "-bookieid", victim)
    finally:
        done.set()
        t.join(timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "can be stopped and decommissioned with nothing to copy" in res.stdout
    assert reads and all(r["ok"] for r in reads), [r for r in reads if not r["ok"]][:1]
    assert all(victim not in metadata(c, lid).all_bookies() for lid in ids)
    assert c.kz.exists(f"{c.ledgers_root}/available/{victim}")  # still running
    r = c.reader(ids, password=PW, digest="CRC32C")
    assert r["ok"] and [lg["entries_read"] for lg in r["ledgers"]] == [120] * len(ids), r
