"""Several workers on one queue go for different ledgers first (issue 29: with candidates of equal stake
ordered by ledger id, every daemon raced for the same lock, each lost race a marker read and a failed
``multi``). Real ZooKeeper, one session per worker, as separate daemons."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from autorecovery.plan.priority import LedgerPriority, WorkKind
from autorecovery.roles.backlog import Backlog
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore
from autorecovery.zk.paths import Paths
from autorecovery.zk.underreplication import UnderreplicationManager

pytestmark = pytest.mark.integration

PATHS = Paths("/ledgers")
LEDGERS = 120
WORKERS = 4
#: Lost lock races allowed for the whole queue with spread workers (measured 5 here, 2 shared cores; ordered by
#: ledger id the same run lost 238).
MAX_LOST_RACES = 25


async def _drain(zk_connect: str, salts: list[int | None]) -> tuple[int, list[list[int]]]:
    """Mark :data:`LEDGERS` ledgers of equal stake (one copy left, same ctime window), then let one
    worker per salt lock, re-read and mark replicated until none is left. Returns (lost races, the
    ledgers each worker healed)."""
    clients = [await ZkClient(zk_connect, session_timeout_ms=4000).start() for _ in range(len(salts) + 1)]
    try:
        auditor = UnderreplicationManager(clients[0], PATHS)
        await auditor.init()
        await auditor.mark_many({lid: ["b:3181"] for lid in range(1, LEDGERS + 1)})
        ctime = int(time.time() * 1000)
        workers = []
        for i, salt in enumerate(salts):
            zk = clients[i + 1]
            um = UnderreplicationManager(zk, PATHS, lock_owner=f"w{i}")
            await um.init()
            backlog = Backlog(zk, PATHS, um, LedgerStore(zk, PATHS), clock=time.monotonic, salt=salt)
            backlog.known = {lid: LedgerPriority(lid, WorkKind.DATA_LOSS, 1, 1, ctime)
                             for lid in range(1, LEDGERS + 1)}
            assert len(await um.watched_marked_ids()) == LEDGERS
            workers.append((um, backlog, random.Random(i)))

        async def work(um: UnderreplicationManager, backlog: Backlog, rng: random.Random) -> list[int]:
            done = []
            while (lid := await um.poll_ledger_to_rereplicate(lambda ids: backlog.order(ids, rng, set()))) is not None:
                assert await um.get_marker(lid) is not None
                if await um.mark_replicated(lid):
                    done.append(lid)
            return done

        healed = await asyncio.gather(*(work(*w) for w in workers))
        for um, _b, _r in workers:
            await um.close()
        await auditor.close()
        return sum(um.lost_races for um, _b, _r in workers), healed
    finally:
        for c in clients:
            await c.stop()


async def test_spread_workers_rarely_race_for_a_lock(zk_connect):
    """Four workers with their own salts heal the 120 ledgers between them, each exactly once, losing at
    most :data:`MAX_LOST_RACES` lock races; the same queue ordered by ledger id (no salt) loses more."""
    lost, healed = await _drain(zk_connect, [random.Random(s).getrandbits(64) for s in range(WORKERS)])
    flat = [lid for h in healed for lid in h]
    assert sorted(flat) == list(range(1, LEDGERS + 1))  # every ledger once: any worker takes any ledger
    assert all(healed), [len(h) for h in healed]
    print(f"lost lock races: {lost} spread")
    assert lost <= MAX_LOST_RACES, f"{lost} lock races lost by {WORKERS} spread workers"


async def test_workers_ordered_by_ledger_id_race(zk_connect):
    """The control: without a salt every worker goes for the lowest ledger id first and the bound of
    the spread test is broken (so that bound measures the spreading)."""
    lost, healed = await _drain(zk_connect, [None] * WORKERS)
    assert sorted(lid for h in healed for lid in h) == list(range(1, LEDGERS + 1))
    print(f"lost lock races: {lost} by ledger id")
    assert lost > MAX_LOST_RACES
