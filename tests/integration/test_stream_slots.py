"""Cluster-wide per-bookie stream caps (issue 12): N workers must not open N × cap streams on one
bookie. Real ZooKeeper, one session per "worker"."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.zk.bridge import ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.paths import Paths
from autorecovery.zk.stream_slots import ClusterStreamSlots

pytestmark = pytest.mark.integration

S, S2, T1, T2 = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181"


async def test_slots_hold_across_workers_all_or_none_and_die_with_the_session(zk_connect):
    zks = [await ZkClient(zk_connect).start() for _ in range(3)]
    try:
        paths = Paths("/ledgers")
        a, b, c = (ClusterStreamSlots(z, paths, 1, 1, f"worker-{n}") for n, z in enumerate(zks))
        held_a = await a.acquire(S, [T1])
        assert await a.holders(S) == {"src-0": "worker-0"} and await a.holders(T1) == {"tgt-0": "worker-0"}
        # another worker wants the same source: it waits (the cap is cluster-wide, not per process)
        waiting = asyncio.ensure_future(b.acquire(S, [T2]))
        assert await wait_for(lambda: b.waits >= 1, 10)
        assert not waiting.done()
        assert await b.holders(T2) == {}  # all or none: it holds no target slot while it waits
        await a.release(held_a)
        held_b = await asyncio.wait_for(waiting, 10)
        assert await b.holders(S) == {"src-0": "worker-1"} and await b.holders(T2) == {"tgt-0": "worker-1"}
        # a worker that dies releases its slots with its session
        waiting_c = asyncio.ensure_future(c.acquire(S2, [T2]))
        assert await wait_for(lambda: c.waits >= 1, 10)
        assert await c.holders(S2) == {}
        await zks[1].stop()  # worker 1's session ends; its ephemeral slots go
        held_c = await asyncio.wait_for(waiting_c, 15)
        assert len(held_c) == 2 and held_b  # b held two slots until its session ended
        await c.release(held_c)
        assert await c.holders(S2) == {} and await c.holders(T2) == {}
    finally:
        for z in zks:
            await z.stop()


async def test_zero_cap_means_unlimited_and_writes_nothing(zk_connect):
    zk = await ZkClient(zk_connect).start()
    try:
        slots = ClusterStreamSlots(zk, Paths("/ledgers"), 0, 0, "w")
        assert await slots.acquire(S, [T1, T2]) == []
        assert await zk.exists("/ledgers/underreplication/streams") is None
    finally:
        await zk.stop()



async def test_waiters_on_a_full_bookie_write_nothing_and_wake_on_the_release(zk_connect):
    """Five workers wait for the one target slot of T1. While it is full none of them writes (no source
    slot taken and given back: reads, and at most a failed create on T1 when it loses the race for a
    freed slot), and each release hands the slot on through the child watch, well before the fallback
    wait."""
    zks = [await ZkClient(zk_connect).start() for _ in range(6)]
    creates = [0] * 6
    for n, z in enumerate(zks):  # count the slots each worker creates (ZooKeeper writes)
        def counting(orig, n=n):
            async def multi(ops):
                results = await orig(ops)
                if not any(isinstance(r, Exception) for r in results):  # a failed transaction wrote nothing
                    creates[n] += sum(1 for op in ops if op.kind == "create")
                return results
            return multi
        z.multi = counting(z.multi)
    try:
        paths = Paths("/ledgers")
        slots = [ClusterStreamSlots(z, paths, 4, 1, f"worker-{n}") for n, z in enumerate(zks)]
        held = await slots[0].acquire(S, [T1])
        waiting = {asyncio.ensure_future(slots[n].acquire(f"10.0.1.{n}:3181", [T1])): n for n in range(1, 6)}
        assert await wait_for(lambda: all(s.waits >= 1 for s in slots[1:]), 10)
        loop = asyncio.get_running_loop()
        for _ in range(5):
            t = loop.time()
            await slots[0].release(held)
            done, _ = await asyncio.wait(list(waiting), timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1 and loop.time() - t < 2.0  # the watch, not the 5 s fallback
            winner = done.pop()
            n = waiting.pop(winner)
            held = winner.result()
            assert await slots[0].holders(T1) == {"tgt-0": f"worker-{n}"}
            for other in waiting.values():  # nobody else holds its source slot meanwhile
                assert await slots[0].holders(f"10.0.1.{other}:3181") == {}
        assert not waiting
        # each waiter created its two slots once, however many releases it saw while waiting: losing a
        # race for T1 costs a failed create on T1, never a source slot taken and given back
        assert creates[1:] == [2] * 5, creates
    finally:
        for z in zks:
            await z.stop()


async def test_copies_of_one_process_share_its_reads_and_its_watch(zk_connect):
    """Eight copies of one worker wait for the single target slot of T1 (a worker runs several ledgers
    at once). Each hand-off costs the process a few reads of the slot directories, however many of its
    copies wait: they share one listing and one child watch per bookie (before, every waiting copy read
    and re-armed its own watch on each release)."""
    owner_zk, zk = await ZkClient(zk_connect).start(), await ZkClient(zk_connect).start()
    reads = [0]
    orig = zk.get_children

    async def counting(*a, **kw):
        reads[0] += 1
        return await orig(*a, **kw)

    zk.get_children = counting
    try:
        paths = Paths("/ledgers")
        owner = ClusterStreamSlots(owner_zk, paths, 4, 1, "other-worker")
        slots = ClusterStreamSlots(zk, paths, 4, 1, "worker")
        held = await owner.acquire(S, [T1])
        waiting = [asyncio.ensure_future(slots.acquire(f"10.0.2.{n}:3181", [T1])) for n in range(8)]
        assert await wait_for(lambda: slots.waits >= 8, 10)
        reads[0] = 0
        loop = asyncio.get_running_loop()
        t = loop.time()
        await owner.release(held)
        for _ in range(8):  # each copy takes the slot in turn and gives it back
            done, _ = await asyncio.wait(waiting, timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1 and loop.time() - t < 2.0  # the shared watch, not the 5 s fallback
            task = done.pop()
            waiting.remove(task)
            t = loop.time()
            await slots.release(task.result())
        assert not waiting
        # a few per hand-off (re-arming T1's watch, each copy's first read of its own source): 144 when
        # every waiting copy read and re-armed on its own
        assert reads[0] <= 6 * 8, reads[0]
    finally:
        await owner_zk.stop()
        await zk.stop()


async def test_targets_in_flight_needs_no_read(zk_connect):
    """The spread signal (issue 29): this process's own target slots and every worker's slots in its
    last listing of a bookie, counted without a ZooKeeper request."""
    zk_a, zk_b = await ZkClient(zk_connect).start(), await ZkClient(zk_connect).start()
    try:
        paths = Paths("/ledgers")
        a = ClusterStreamSlots(zk_a, paths, 4, 2, "worker-a")
        b = ClusterStreamSlots(zk_b, paths, 4, 2, "worker-b")
        held_a = await a.acquire(S, [T1])
        assert a.targets_in_flight() == {T1: 1}
        held_b = await b.acquire(S2, [T1])  # b's hint of T1 was empty: it takes tgt-0, fails, reads
        assert sorted(n.rsplit("/", 1)[1] for n in held_a + held_b) == ["src-0", "src-0", "tgt-0", "tgt-1"]
        ops = zk_b.ops
        assert b.targets_in_flight({T2: 3}) == {T1: 2, T2: 3}  # a's slot seen in b's listing, and its own
        assert zk_b.ops == ops
        await a.release(held_a)
        await b.release(held_b)
        assert b.targets_in_flight() == {T1: 1}  # a's release is not seen without a read: a hint only
        assert a.targets_in_flight() == {}
    finally:
        await zk_a.stop()
        await zk_b.stop()


async def test_release_after_the_session_ended_does_not_raise(zk_connect):
    """The chaos campaign (issue 26) saw 'Task exception was never retrieved': a release shielded from
    a cancelled copy met an expired session and raised. The slots are ephemeral, gone with the session,
    so the release is done: it must return quietly, and leave the slots to other workers."""
    zk, other = await ZkClient(zk_connect).start(), await ZkClient(zk_connect).start()
    try:
        slots = ClusterStreamSlots(zk, Paths("/ledgers"), 1, 1, "worker-0")
        held = await slots.acquire(S, [T1])
        assert len(held) == 2
        await zk.stop()  # the session ends while the copy still holds its slots
        await slots.release(held)
        watcher = ClusterStreamSlots(other, Paths("/ledgers"), 1, 1, "worker-1")
        assert await watcher.holders(S) == {} and await watcher.holders(T1) == {}
    finally:
        await zk.stop()
        await other.stop()
