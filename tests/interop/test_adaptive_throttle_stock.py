"""The adaptive copy throttle against a stock Java bookie made slow: SIGSTOP bursts of the target
bookie's process while the worker's copy path (SegmentReplicator → FragmentCopier over the upstream
client) copies to it. The target's limit drops (reason slow, published in /metrics), and once the
bursts end it recovers (the limit lifted, reason idle) before the copy completes; every entry arrives."""

from __future__ import annotations

import asyncio
import time

import pytest

from autorecovery import metrics
from autorecovery.plan.adaptive_rate import IDLE, AdaptiveRates, AdaptiveSettings
from autorecovery.plan.targets import plan_fragment_copy
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles.copier import FragmentCopier
from autorecovery.roles.replicator import SWAPPED, SegmentReplicator
from autorecovery.roles.worker_metrics import WorkerMetrics
from autorecovery.rpc.transport import BookieClient
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


async def stock(_bookie: str) -> tuple[str, ...]:
    return ("bookie-rpc",)


async def until(pred, timeout_s: float, what: str, every_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s: {what}"
        await asyncio.sleep(every_s)


async def test_a_copy_backs_off_while_its_target_bookie_is_frozen_in_bursts_and_recovers_after(java_cluster):
    c = java_cluster(bookies=3, racks=1)
    w = c.writer(ledgers=1, entries=6000, entry_size=4096, ensemble=2, wq=2, aq=2, digest="CRC32C",
                 password="pw", timeout_s=600)
    lg = w["ledgers"][0]
    ens = lg["ensembles"][0]
    last = min([f for f in lg["ensembles"] if f > 0], default=lg["last_acked"] + 1) - 1
    target = next(b for b in c.bookie_ids if b not in ens)
    frozen = c.bookies[c.bookie_ids.index(target)]
    props = c.daemon_properties()
    zk = await ZkClient(props["zkServers"], session_timeout_ms=10000).start()
    bookies = BookieClient(timeout_s=30, resolve=stock)
    registry = metrics.MetricsRegistry()
    rates = AdaptiveRates(AdaptiveSettings(budget_factor=3.0, floor_bytes_per_s=256 * 1024,
                                           increase_bytes_per_s=2 * MIB, interval_s=0.25, patience=1))
    # replicationRateByBytes 3 MiB/s keeps the copy running long enough to see both phases
    copier = FragmentCopier(bookies, byte_bucket=TokenBucket(3 * MIB, time.monotonic), caps=StreamCaps(0, 0),
                            caps_changed=asyncio.Condition(), metrics=WorkerMetrics(registry), adaptive=rates)
    store = LedgerStore(zk, Paths(props["zkLedgersRootPath"]))
    seen: list[tuple[str, float | None]] = []
    copy: asyncio.Task | None = None

    def watch() -> None:
        st = rates.bookies.get(target)
        if st is not None and (not seen or seen[-1] != (st.reason, st.limit)):
            seen.append((st.reason, st.limit))

    def gauge(name: str, **labels: str) -> float:
        return registry.gauge("autorecovery", name, labels=labels).value

    try:
        md, version = await store.read(lg["ledger"])
        plan = plan_fragment_copy(ensemble=tuple(ens), write_quorum=2, first=0, last=last,
                                  replacements={1: target}, readable=[ens[0]])
        copy = asyncio.create_task(SegmentReplicator(store, copier).replicate(
            lg["ledger"], md, 0, plan, registered=lambda: {*ens, target}, version=version))
        await until(lambda: (watch(), rates.bookies.get(target) is not None
                             and rates.bookies[target].decisions >= 3)[1], 60, "a baseline for the target")
        assert rates.bookies[target].limit is None  # idle: full speed (within replicationRateByBytes)
        # bursts: the target's JVM frozen 0.4 s of every 0.6 s, until its limit drops
        deadline = time.monotonic() + 30
        while rates.bookies[target].limit is None:
            assert time.monotonic() < deadline and not copy.done(), f"the limit never dropped: {seen} (entries 0..{last}, {copy.done() and copy.result()})"
            frozen.sigstop()
            await asyncio.sleep(0.4)  # the burst's length is the fault injected, not a wait for a condition
            frozen.sigcont()
            await asyncio.sleep(0.2)
            watch()
        assert rates.bookies[target].limit is not None and rates.bookies[target].reason in ("slow", "floor"), seen
        assert "over the budget" in rates.bookies[target].detail
        await until(lambda: (watch(), gauge("replication_rate_limit_bytes_per_second", bookie=target) > 0)[1], 10,
                    "the limit published")
        assert gauge("replication_rate_limit_reason", bookie=target, reason="idle") == 0.0
        # the bursts are over: the limit grows back and is lifted
        await until(lambda: (watch(), rates.bookies[target].limit is None)[1], 60, f"recovery: {seen}")
        assert rates.bookies[target].reason == IDLE
        res = await asyncio.wait_for(copy, 300)
        assert res.status == SWAPPED, res.detail
        assert res.copy is not None and res.copy.entries_written == last + 1
        assert any(r in ("slow", "floor") for r, _ in seen) and seen[-1][1] is None, seen
    finally:
        frozen.sigcont()
        if copy is not None and not copy.done():
            copy.cancel()
            await asyncio.gather(copy, return_exceptions=True)
        await bookies.close()
        await zk.stop()
