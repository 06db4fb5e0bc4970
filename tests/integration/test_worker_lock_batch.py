"""Ledgers locked in one batch are passed each on its own (issue 29): a ledger of the batch whose
metadata CAS keeps failing stays marked and unlocked for a retry, while the others of the same batch
are healed; once its CAS can succeed it is healed too."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.errors import BadVersionError
from autorecovery.config.sections import WorkerSettings
from autorecovery.aio import wait_for

from test_worker_support import FAST, open_env

pytestmark = pytest.mark.integration


async def test_a_failing_cas_in_a_lock_batch_keeps_the_others_and_the_marker(cluster_factory):
    cluster = await asyncio.to_thread(cluster_factory, bookies=4)
    env = await open_env(cluster)
    try:
        b = cluster.bookie_ids()
        ids = [(await env.write(b[:2], 2, 2, 2, 3, size=64, full=True)).ledger_id for _ in range(4)]
        bad = ids[1]
        await env.stop_bookie(b[1])
        await env.um.mark_many({lid: [b[1]] for lid in ids})
        batches: list[list[int]] = []
        blocked = asyncio.Event()
        blocked.set()
        cas_refused: list[int] = []

        def spy_on(w) -> None:
            acquire_many, write = w.um.acquire_many, w.store.write

            async def spy_acquire(lids):
                got = await acquire_many(lids)
                batches.append(list(got))
                return got

            async def racing_write(lid, md, version):
                if lid == bad and blocked.is_set():  # someone else wins every CAS of this ledger
                    cas_refused.append(lid)
                    raise BadVersionError(f"metadata of ledger {lid} changed (test)")
                return await write(lid, md, version)

            w.um.acquire_many = spy_acquire
            w.store.write = racing_write

        w = await env.start_worker(WorkerSettings(**{**FAST, "concurrent_ledgers": 4}), before_start=spy_on)

        async def healed(lid: int) -> bool:
            md, _ = await env.bk.ledgers.read(lid)
            return b[1] not in md.segments[0].ensemble and await env.um.get_marker(lid) is None

        async def others_healed() -> bool:
            return all([await healed(lid) for lid in ids if lid != bad])

        assert await wait_for(others_healed, 60, interval_s=0.1), w.history[-20:]
        assert any(bad in batch and len(batch) > 1 for batch in batches), batches  # locked with others
        # a pass over the refused ledger ended (every CAS lost: failed, retried later)
        assert await wait_for(lambda: any(lid == bad for lid, _ in w.history), 60), w.history[-20:]
        assert cas_refused and all(outcome != "replicated" for lid, outcome in w.history if lid == bad)
        # ... and left it marked and unhealed
        assert await env.um.get_marker(bad) is not None
        md, _ = await env.bk.ledgers.read(bad)
        assert b[1] in md.segments[0].ensemble
        blocked.clear()  # the racer is gone: a retry heals it
        assert await wait_for(lambda: healed(bad), 60, interval_s=0.1), w.history[-20:]
        assert await wait_for(lambda: not w.um.held, 10)
    finally:
        await env.close()
