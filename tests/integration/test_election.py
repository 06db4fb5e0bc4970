"""Auditor election on a real ZooKeeper: order, failover, session-expiry rejoin (upstream
AuditorBookieTest / AutoRecoveryMainTest.testAutoRecoverySessionLoss, better: the expired node rejoins)."""

from __future__ import annotations

import asyncio
import time

import pytest
from kazoo.client import KazooClient

from autorecovery.zk.bridge import NoNodeError, ZkClient
from autorecovery.aio import wait_for
from autorecovery.zk.election import (AuditorElector, current_auditor, decode_vote, elector_loop, encode_vote,
                                       sorted_votes)
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
SESSION_MS = 2000


@pytest.fixture
def chroot(zk_connect):
    """A fresh chroot on the session ZooKeeper (tests/conftest.py)."""
    return zk_connect


def expire_session(hosts: str, zk: ZkClient) -> None:
    """Expire ``zk``'s session from outside: connect with its session id and password, then close."""
    sid, passwd = zk.client_id
    other = KazooClient(hosts=hosts, client_id=(sid, passwd), timeout=SESSION_MS / 1000)
    other.start(10)
    other.stop()
    other.close()


async def test_first_vote_wins_and_successor_takes_over(chroot):
    clients = [await ZkClient(chroot, session_timeout_ms=SESSION_MS).start() for _ in range(3)]
    electors = [AuditorElector(c, P, f"10.0.0.{i}:3181") for i, c in enumerate(clients)]
    await electors[0].run_for_leadership()
    others = []
    for e in electors[1:]:  # vote one after the other so that the order is known
        others.append(asyncio.ensure_future(e.run_for_leadership()))
        assert await wait_for(lambda: e.vote_path is not None, 5)  # noqa: B023 - run before the loop rebinds it
    assert await current_auditor(clients[1], P) == "10.0.0.0:3181"
    data, _ = await clients[1].get(P.auditor_election)
    assert decode_vote(data) == "10.0.0.0:3181"
    assert not any(t.done() for t in others)
    # the auditor's process dies: its session closes, the next candidate wins
    await clients[0].stop()
    await asyncio.wait_for(others[0], 10)
    assert not others[1].done()
    assert await current_auditor(clients[2], P) == "10.0.0.1:3181"
    votes = sorted_votes(await clients[2].get_children(P.auditor_election))
    assert electors[0].vote_path.rsplit("/", 1)[1] not in votes
    # clean resignation hands over too
    await electors[1].resign()
    await asyncio.wait_for(others[1], 10)
    assert await current_auditor(clients[2], P) == "10.0.0.2:3181"
    for c in clients[1:]:
        await c.stop()


async def test_no_auditor_without_candidates(chroot):
    c = await ZkClient(chroot).start()
    assert await current_auditor(c, P) is None
    await c.stop()


async def test_session_expiry_stops_roles_and_rejoins(chroot):
    clients = [await ZkClient(chroot, session_timeout_ms=SESSION_MS).start() for _ in range(2)]
    events: list[tuple[int, str, float]] = []

    def cbs(i):
        async def elected():
            events.append((i, "elected", time.monotonic()))

        async def lost():
            events.append((i, "lost", time.monotonic()))

        async def session_lost():
            events.append((i, "session_lost", time.monotonic()))

        return elected, lost, session_lost

    tasks = []
    for i, c in enumerate(clients):
        el, lo, sl = cbs(i)
        tasks.append(asyncio.ensure_future(elector_loop(c, P, f"node{i}:3181", el, lo, on_session_lost=sl)))
        if i == 0:
            assert await wait_for(lambda: (0, "elected") in [(e[0], e[1]) for e in events], 10)
    assert await current_auditor(clients[1], P) == "node0:3181"

    t0 = time.monotonic()
    await asyncio.to_thread(expire_session, chroot, clients[0])
    # node1 takes over within one session timeout (+ slack for the server's session tick)
    assert await wait_for(lambda: (1, "elected") in [(e[0], e[1]) for e in events], SESSION_MS / 1000 + 3)
    took = next(e[2] for e in events if e[:2] == (1, "elected")) - t0
    assert took < SESSION_MS / 1000 + 3
    # node0 stopped its role cleanly and came back as a candidate with a new session
    assert await wait_for(lambda: (0, "lost") in [(e[0], e[1]) for e in events], SESSION_MS / 1000 + 3)
    assert await wait_for(lambda: (0, "session_lost") in [(e[0], e[1]) for e in events], 5)

    async def node0_is_candidate() -> bool:
        for v in sorted_votes(await clients[1].get_children(P.auditor_election)):
            try:
                data, _ = await clients[1].get(f"{P.auditor_election}/{v}")
            except NoNodeError:  # the vote went away meanwhile
                continue
            if decode_vote(data) == "node0:3181":
                return True
        return False

    assert await wait_for(node0_is_candidate, 15)
    assert await current_auditor(clients[0], P) == "node1:3181"
    # when node1 goes, node0 is auditor again
    tasks[1].cancel()
    await asyncio.gather(tasks[1], return_exceptions=True)
    assert (1, "lost") in [(e[0], e[1]) for e in events]
    assert await wait_for(lambda: [(e[0], e[1]) for e in events].count((0, "elected")) == 2, 10)
    tasks[0].cancel()
    await asyncio.gather(tasks[0], return_exceptions=True)
    for c in clients:
        await c.stop()


async def test_a_vote_left_by_a_connection_loss_is_adopted_not_a_deadlock(chroot):
    """Issue 26 (chaos campaign: 3 minutes without an auditor): a vote this session created but lost
    track of (a create that failed with ConnectionLoss after the server made the znode, a rejoin
    while disconnected) must not sit first in line forever. Candidate B votes behind it and watches
    it; A's elector, on the same session, adopts it and is elected instead of voting behind B."""
    za = await ZkClient(chroot, session_timeout_ms=SESSION_MS).start()
    zb = await ZkClient(chroot, session_timeout_ms=SESSION_MS).start()
    a, b = AuditorElector(za, P, "10.0.0.1:3181"), AuditorElector(zb, P, "10.0.0.2:3181")
    try:
        await a._ensure_parents()
        orphan = await za.create(f"{P.auditor_election}/V_", encode_vote("10.0.0.1:3181"), ephemeral=True,
                                 sequence=True)
        tb = asyncio.ensure_future(b.run_for_leadership())
        assert await wait_for(lambda: b.vote_path is not None, 5)
        await asyncio.wait_for(a.run_for_leadership(), 5)
        assert a.elected and a.vote_path == orphan
        assert sorted_votes(await za.get_children(P.auditor_election)) == [orphan.rsplit("/", 1)[1],
                                                                        b.vote_path.rsplit("/", 1)[1]]
        assert not tb.done()
        await a.resign()  # the adopted vote goes away like any other: B takes over
        await asyncio.wait_for(tb, 10)
        assert b.elected
    finally:
        await za.stop()
        await zb.stop()


async def test_a_failed_vote_withdrawal_does_not_end_the_election_loop(chroot):
    """Chaos campaign (issue 26): a ConnectionLoss while withdrawing the vote ended the loop, and the
    daemon's watchdog then stopped the whole daemon ("the election loop ended"). The loop must log,
    rejoin and be elected again."""
    from autorecovery.zk.bridge import ConnectionLoss

    zk = await ZkClient(chroot, session_timeout_ms=SESSION_MS).start()
    elected: list[float] = []
    electors: list[AuditorElector] = []

    async def on_elected():
        elected.append(time.monotonic())

    async def on_lost():
        pass

    def created(e: AuditorElector) -> None:
        electors.append(e)
        if len(electors) == 1:  # the first withdrawal meets a connection loss
            async def failing_resign() -> None:
                raise ConnectionLoss()
            e.resign = failing_resign  # type: ignore[method-assign]

    task = asyncio.ensure_future(elector_loop(zk, P, "node0:3181", on_elected, on_lost, elector_created=created))
    try:
        assert await wait_for(lambda: len(elected) == 1, 10)
        await zk.delete(electors[0].vote_path)  # step down: the loop withdraws (fails) and rejoins
        assert await wait_for(lambda: len(elected) == 2, 15), "the loop did not run for auditor again"
        assert not task.done(), task.exception() if task.done() and not task.cancelled() else "ended"
        assert await current_auditor(zk, P) == "node0:3181"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await zk.stop()
