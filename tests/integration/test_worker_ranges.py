"""A poisoned ledger against the daemon as a real process (issue 25): real ZooKeeper, real bookie
processes, our daemon (auditor + worker) as a child process whose RSS is sampled.

The ledger's metadata is CLOSED with ``lastEntryId`` = 2**62 on an ensemble of real bookies that never
stored any of it; one bookie of that ensemble is then lost, so the auditor marks the ledger together
with a normal ledger on the same ensemble. The worker must surface the poisoned ledger as
unrecoverable with a reason, heal the normal one, and keep its memory flat.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest

from autorecovery.ledger.ids import ur_leaf_name
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.zk.ledgers import LedgerStore

from test_shell_support import P, metadata, start_daemon, write_ledgers

pytestmark = pytest.mark.integration

POISON_LAST = 2**62
RSS_BUDGET = 50 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


async def _create_poisoned(cluster, ensemble: tuple[str, ...], ledger_id: int) -> None:
    zk = await ZkClient(cluster.zk_connect).start()
    try:
        md = LedgerMetadata(ensemble_size=3, write_quorum=2, ack_quorum=2, segments=(Segment(0, ensemble),),
                            state=LedgerState.CLOSED, last_entry_id=POISON_LAST, length=POISON_LAST,
                            password=b"", ctime=int(time.time() * 1000))
        await LedgerStore(zk, P).create(ledger_id, md)
    finally:
        await zk.stop()


async def _record(cluster, ledger_id: int) -> dict | None:
    zk = await ZkClient(cluster.zk_connect).start()
    try:
        data, _ = await zk.get(f"{P.unrecoverable}/{ur_leaf_name(ledger_id)}")
        return json.loads(data.decode())
    except NoNodeError:
        return None
    finally:
        await zk.stop()


def test_poisoned_ledger_is_surfaced_and_the_daemon_memory_stays_flat(cluster_factory):
    cluster = cluster_factory(bookies=4)
    normal = asyncio.run(write_ledgers(cluster, 1, 60, E=3, WQ=2, AQ=2))
    (normal_id, ens), = normal.items()
    poisoned_id = normal_id + 1_000_000
    asyncio.run(_create_poisoned(cluster, ens, poisoned_id))
    port, _ = start_daemon(cluster, 0, auditorPeriodicCheckInterval="0", lockReleaseOfFailedLedgerGracePeriod="2000")
    pid = cluster.daemons[0].pid
    base = rss_bytes(pid)
    victim = ens[0]
    cluster.stop_bookie(cluster.bookie_ids().index(victim))

    peak = base
    record = None
    healed = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (record and healed):
        peak = max(peak, rss_bytes(pid))
        assert peak - base < RSS_BUDGET, f"daemon RSS grew {(peak - base) / 2**20:.0f} MB (base {base / 2**20:.0f} MB)"
        record = record or asyncio.run(_record(cluster, poisoned_id))
        if not healed:
            md = asyncio.run(metadata(cluster, normal_id))
            healed = all(victim not in s.ensemble for s in md.segments)
        time.sleep(0.2)  # sampling the daemon's RSS while polling for the outcome, with a deadline
    assert record is not None, "the poisoned ledger was not surfaced as unrecoverable"
    assert healed, "the normal ledger marked at the same time was not healed"
    # the record says why, in a bounded document: counts exact, ids as spans
    assert record["entry_count"] == POISON_LAST + 1
    assert record["entries"] == [[0, POISON_LAST]]
    assert "no bookie of the ensemble holds" in record["reason"] and "ENOLEDGER" in record["reason"]
    assert victim in record["waiting_for"]
    assert all(set(why) <= set(ens) for why in record["reasons"].values())
    assert len(json.dumps(record)) < 10_000
    # the metric counts it; the daemon stays up
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert any(line.startswith("autorecovery_unrecoverable_ledgers_total") and float(line.split()[-1]) >= 1
               for line in text.splitlines()), text[:2000]
    assert cluster.daemon_alive(0)
    # surfaced once, then left alone (no hot loop): its passes are counted in the daemon's log
    passes = 0
    for line in (cluster.base / "autorecovery-0.log").read_text(errors="replace").splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            passes += rec.get("event") == "replication pass" and rec.get("ledger_id") == poisoned_id
    assert 1 <= passes <= 2, passes
    peak = max(peak, rss_bytes(pid))
    assert peak - base < RSS_BUDGET
    print(f"daemon RSS: base {base / 2**20:.1f} MB, peak {peak / 2**20:.1f} MB")


async def test_ledger_claiming_more_than_was_written_is_surfaced_not_copied(cluster_factory):
    """Entries 0..29 exist on every replica, but the metadata claims 2**62 (hand-edited): the bookies'
    listings answer ENOENTRY for the rest, so nothing is copied and the ledger is surfaced with the
    exact count, bounded spans and the bookies' answers; an ordinary ledger on the same ensemble
    heals meanwhile (in-process worker: the copier's result is inspected)."""
    from dataclasses import replace

    from autorecovery.plan import entry_runs
    from autorecovery.aio import wait_for

    from test_worker_support import open_env, wait_marker_gone

    cluster = await asyncio.to_thread(cluster_factory, bookies=4)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        claimed = await env.write(b[:3], 3, 2, 2, 30)
        ordinary = await env.write(b[:3], 3, 2, 2, 30)
        store = LedgerStore(env.zk, env.paths)
        md, version = await store.read(claimed.ledger_id)
        await store.write(claimed.ledger_id, replace(md, last_entry_id=POISON_LAST, length=POISON_LAST), version)
        await env.stop_bookie(b[0])
        for lh in (claimed, ordinary):
            await env.um.mark_underreplicated(lh.ledger_id, [b[0]])
        w = await env.start_worker()
        assert await wait_for(lambda: claimed.ledger_id in w.unrecoverable, 60, interval_s=0.05), w.history
        await wait_marker_gone(env, ordinary.ledger_id)
        doc = w.unrecoverable[claimed.ledger_id]
        # no bookie of the ensemble holds any of 30..2**62 (whichever index should)
        want = POISON_LAST + 1 - 30
        assert doc["entry_count"] == want
        assert doc["entries"] == [[30, POISON_LAST]]
        assert "ENOENTRY" in doc["reason"] and b[0] in doc["waiting_for"]
        assert all(set(why.values()) <= {"ENOENTRY", "NOT_REGISTERED"} for why in doc["reasons"].values())
        remembered = w.memory.unreadable(claimed.ledger_id)
        assert len(remembered) <= 3 and entry_runs.count(remembered) == want  # one run per residue
        md, _ = await store.read(claimed.ledger_id)
        assert b[0] in md.segments[0].ensemble  # nothing swapped: no partial copy
        md, _ = await store.read(ordinary.ledger_id)
        assert b[0] not in md.segments[0].ensemble
    finally:
        await env.close()
