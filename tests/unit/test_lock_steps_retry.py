"""The background retry of a failed lock release (``roles/lock_steps.py``): it backs off, retries only
ZooKeeper failures, ends when the worker stops, and lets cancellation through (pure logic: a fake
marker manager and a fake clock's sleep).

Before, the retry ran ``release_own`` every 0.5 s inside ``suppress(Exception)`` for as long as the lock
was held: a failure that is no outage (a bug) was retried forever without a word.
"""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from autorecovery.errors import ZooKeeperError
from autorecovery.roles import lock_steps
from autorecovery.roles.lock_steps import LockSteps

LID = 7


class FakeManager:
    """The part of ``UnderreplicationManager`` that :meth:`LockSteps.release` uses: ``held``,
    ``release`` (always fails: ZooKeeper unreachable) and ``release_own`` (``outcomes`` in turn: an
    exception to raise, or None to succeed and forget the lock)."""

    def __init__(self, outcomes):
        self.held = {LID: 3}
        self.outcomes = list(outcomes)
        self.own_calls = 0

    async def release(self, lid):
        raise ZooKeeperError(f"ZooKeeper operation on /locks/urL{lid:010d} failed: connection loss")

    async def release_own(self, lid):
        self.own_calls += 1
        got = self.outcomes.pop(0) if self.outcomes else None
        if got is not None:
            raise got
        self.held.pop(lid, None)


class Clock:
    def __init__(self):
        self.slept: list[float] = []

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        await asyncio.sleep(0)


def _steps(um, clock, stopping=lambda: False):
    released = []
    steps = LockSteps(um, sleep=clock.sleep, stopping=stopping, released=lambda: released.append(1))
    return steps, released


async def test_zookeeper_failures_back_off_and_the_release_settles():
    fails = [ZooKeeperError("connection loss")] * 6
    um, clock = FakeManager(fails), Clock()
    steps, released = _steps(um, clock)
    await steps.release(LID)
    task = steps.deferred[LID]
    await asyncio.wait_for(task, 5)
    assert um.own_calls == 7 and LID not in um.held and released == [1]
    assert clock.slept == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # doubling, capped at RELEASE_RETRY_MAX_S
    assert LID not in steps.deferred


async def test_a_release_still_failing_is_said_again_every_so_many_retries(monkeypatch):
    monkeypatch.setattr(lock_steps, "RELEASE_RETRY_LOG_EVERY", 3)
    um, clock = FakeManager([ZooKeeperError("connection loss")] * 7), Clock()
    steps, _ = _steps(um, clock)
    with capture_logs() as logs:
        await steps.release(LID)
        await asyncio.wait_for(steps.deferred[LID], 5)
    again = [e for e in logs if e["event"].startswith("lock release still failing")]
    assert [e["attempts"] for e in again] == [3, 6]
    assert all(e["log_level"] == "warning" and e["ledger_id"] == LID for e in again)


async def test_an_error_that_is_no_outage_ends_the_retry_and_is_logged():
    um, clock = FakeManager([TypeError("a bug in the release")] * 1000), Clock()
    steps, released = _steps(um, clock)
    with capture_logs() as logs:
        await steps.release(LID)
        await asyncio.wait_for(steps.deferred[LID], 5)  # before: retried forever
    assert um.own_calls == 1 and LID in um.held and released == []
    (err,) = [e for e in logs if e["log_level"] == "error"]
    assert err["ledger_id"] == LID and err["error_type"] == "TypeError" and "restart the daemon" in err["event"]
    assert LID not in steps.deferred


async def test_the_retry_ends_once_the_worker_stops():
    stop = []
    um, clock = FakeManager([ZooKeeperError("connection loss")] * 1000), Clock()
    steps, released = _steps(um, clock, stopping=lambda: bool(stop))

    async def sleep(s):
        clock.slept.append(s)
        if len(clock.slept) == 3:
            stop.append(1)
        await asyncio.sleep(0)

    steps.sleep = sleep
    await steps.release(LID)
    await asyncio.wait_for(steps.deferred[LID], 5)
    assert um.own_calls == 3 and LID in um.held and released == []  # left to the worker's stop


async def test_cancelling_the_retry_propagates():
    gate, entered = asyncio.Event(), asyncio.Event()

    async def sleep(s):
        entered.set()
        await gate.wait()

    um = FakeManager([ZooKeeperError("connection loss")] * 1000)
    steps = LockSteps(um, sleep=sleep, stopping=lambda: False, released=lambda: None)
    await steps.release(LID)
    task = steps.deferred[LID]
    await asyncio.wait_for(entered.wait(), 5)  # in its first pause
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled() and LID not in steps.deferred
