"""Helpers shared by the ReplicationWorker integration and end-to-end tests (no tests here).

A worker runs in-process against real bookie processes of a :class:`LocalCluster`; ledgers are written
with the real ledger client, optionally on a fixed ensemble (:class:`FixedPolicy`), and markers are
written with the real :class:`UnderreplicationManager` as the auditor would.
"""

from __future__ import annotations

import asyncio
import random
import signal
from dataclasses import dataclass, field

from autorecovery import metrics
from autorecovery.client.bookkeeper import BookKeeper
from autorecovery.ledger.striping import write_set
from autorecovery.placement import DefaultPolicy, PlacementConfig, RackawarePolicy
from autorecovery.placement.resolvers import StaticResolver
from autorecovery.roles.worker import ReplicationWorker
from autorecovery.config.sections import WorkerSettings
from autorecovery.rpc.transport import BookieClient
from autorecovery.workload import payload
from autorecovery.zk.bookies import BookieWatcher
from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

#: Small timings so the upstream scenarios run in seconds.
FAST = dict(open_ledger_grace_ms=500, lock_release_grace_ms=64, backoff_ms=20, concurrent_ledgers=2)


class FixedPolicy(DefaultPolicy):
    """Default (random) policy whose next ``new_ensemble`` returns ``ensemble`` (tests place ledgers exactly)."""

    def __init__(self) -> None:
        super().__init__(rng=random.Random(7))
        self.ensemble: list[str] | None = None

    def new_ensemble(self, ensemble_size, write_quorum_size, ack_quorum_size, exclude=frozenset(), custom_metadata=None):
        if self.ensemble is not None:
            ens, self.ensemble = list(self.ensemble), None
            assert len(ens) == ensemble_size
            return type("R", (), {"ensemble": ens, "bookie": None, "adherence": None})()
        return super().new_ensemble(ensemble_size, write_quorum_size, ack_quorum_size, exclude, custom_metadata)


@dataclass
class Env:
    """A client, a marker manager and (once started) a worker on one cluster."""

    cluster: object
    paths: Paths
    zk: ZkClient
    bk: BookKeeper
    fixed: FixedPolicy
    um: UnderreplicationManager
    workers: list = field(default_factory=list)
    closers: list = field(default_factory=list)

    async def write(self, ensemble: list[str] | None, E: int, WQ: int, AQ: int, n: int, size: int = 100,
                    close: bool = True, seed: int = 1, full: bool = False, digest: str = "CRC32C"):
        """Write ``n`` entries of ``size`` bytes (workload payloads) to a ledger of digest type
        ``digest``; returns the handle.

        ``full``: before closing, wait until every bookie of the write sets stored its entries (an add
        completes at AQ acks; the client's close drops writes still in flight beyond AQ).
        """
        self.fixed.ensemble = ensemble
        lh = await self.bk.create_ledger(E, WQ, AQ, digest=digest)
        for e in range(n):
            await lh.add_entry(payload(seed, lh.ledger_id, e, size))
        if full:
            ens = lh.metadata.segments[-1].ensemble
            for i, bookie in enumerate(ens):
                want = [e for e in range(n) if i in write_set(e, E, WQ)]
                ok = await wait_for(lambda: _has(self, bookie, lh.ledger_id, want), 20, interval_s=0.02)  # noqa: B023 - run before the loop rebinds it
                assert ok, f"{bookie} never stored entries of ledger {lh.ledger_id}"
        if close:
            await lh.close()
        return lh

    async def start_worker(self, settings: WorkerSettings | None = None, *, racks: dict[str, str] | None = None,
                           placement: dict | None = None, policy=None, registry=None,
                           before_start=None) -> ReplicationWorker:
        zk = await ZkClient(self.cluster.zk_connect, session_timeout_ms=6000).start()
        watcher = await BookieWatcher(zk, self.paths).start()
        bookies = BookieClient(timeout_s=5)
        if policy is None:
            # by host (bookie i is 127.0.0.<10+i>), so bookies started later are known too
            resolver = StaticResolver(racks or {self.cluster.bookie_host(i): "/rack1" for i in range(32)})
            policy = RackawarePolicy(PlacementConfig.from_properties(placement or {}), resolver, rng=random.Random(3))
        w = ReplicationWorker(zk, self.paths, settings or WorkerSettings(**FAST), policy, bookies, watcher,
                              registry=registry or metrics.MetricsRegistry(), lock_owner=f"worker-{len(self.workers)}")
        if before_start is not None:
            before_start(w)
        await w.start()
        self.workers.append(w)

        async def close() -> None:
            await w.stop(drain_timeout_s=2)
            await watcher.stop()
            await bookies.close()
            await zk.stop()

        self.closers.append(close)
        return w

    async def wait_available(self, predicate, timeout_s: float = 20.0) -> None:
        ok = await self.bk.watcher.wait_until(predicate, timeout_s)
        assert ok, f"bookie membership never matched: writable={sorted(self.bk.watcher.writable)}"

    async def stop_bookie(self, bookie_id: str) -> None:
        """SIGTERM a bookie (it deregisters at once) and wait until the client sees it gone."""
        i = index_of(self.cluster, bookie_id)
        await asyncio.to_thread(self.cluster.kill_bookie, i, signal.SIGTERM)
        await self.wait_available(lambda w: bookie_id not in w.available)

    async def start_bookie(self, i: int, extra_args: list[str] | None = None) -> str:
        bid = await asyncio.to_thread(self.cluster.start_bookie, i, 30.0, extra_args)
        await self.wait_available(lambda w: bid in w.writable)
        return bid

    async def close(self) -> None:
        for c in reversed(self.closers):
            await c()
        await self.um.close()
        await self.bk.close()
        await self.zk.stop()


def index_of(cluster, bookie_id: str) -> int:
    return next(i for i in cluster.bookies if cluster.bookie_id(i) == bookie_id)


async def open_env(cluster) -> Env:
    paths = Paths(cluster.ledgers_root)
    zk = await ZkClient(cluster.zk_connect, session_timeout_ms=6000).start()
    fixed = FixedPolicy()
    bk = BookKeeper(zk, paths, policy=fixed)
    await bk.start()
    await bk.watcher.wait_until(lambda w: len(w.writable) >= sum(cluster.bookie_alive(i) for i in cluster.bookies), 20)
    um = UnderreplicationManager(zk, paths, lock_owner="test")
    await um.init()
    return Env(cluster, paths, zk, bk, fixed, um)


async def wait_marker_gone(env: Env, ledger_id: int, timeout_s: float = 60.0) -> None:
    ok = await wait_for(lambda: _gone(env, ledger_id), timeout_s, interval_s=0.1)
    assert ok, f"marker of ledger {ledger_id} still present after {timeout_s}s; workers: " + "; ".join(
        f"history={w.history[-10:]} blocked={w.progress().blocked}" for w in env.workers)


async def _has(env: Env, bookie: str, ledger_id: int, want: list[int]) -> bool:
    return set(want) <= set(await entries_on(env, bookie, ledger_id))


async def _gone(env: Env, ledger_id: int) -> bool:
    return await env.um.get_marker(ledger_id) is None


async def read_all_from(env: Env, ledger_id: int, n: int, seed: int = 1, size: int = 100) -> None:
    """Open the ledger (no recovery) and check every entry's digest and payload."""
    rh = await env.bk.open_ledger(ledger_id)
    entries = await rh.read_entries(0, n - 1)
    assert [x.entry_id for x in entries] == list(range(n))
    for x in entries:
        assert x.payload == payload(seed, ledger_id, x.entry_id, size), f"entry {x.entry_id} payload differs"
    assert rh.digest_errors == []


async def entries_on(env: Env, bookie_id: str, ledger_id: int) -> list[int]:
    """Entry ids a bookie holds (GET_LIST_OF_ENTRIES_OF_LEDGER); [] when it does not know the ledger."""
    from autorecovery.errors import BookieError

    try:
        rngs = await env.bk.bookies.get_list_of_entries(bookie_id, ledger_id)
    except BookieError as exc:
        if exc.status == "ENOLEDGER":
            return []
        raise
    return [e for a, b in rngs for e in range(a, b + 1)]
