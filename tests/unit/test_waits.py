"""The sync and async wait_until helpers: value returned, deadline, early give-up (pure logic)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from autorecovery.aio import wait_until as async_wait_until
from autorecovery.testing.waits import wait_until


def test_returns_the_first_truthy_value() -> None:
    calls = itertools.count()
    assert wait_until(lambda: [None, 0, "found"][min(next(calls), 2)], 5, interval_s=0.001) == "found"


def test_deadline_names_the_condition_and_adds_detail() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the bookie: log tail"):
        wait_until(lambda: False, 0.05, "the bookie", interval_s=0.01, detail=lambda: "log tail")


def test_give_up_stops_early_with_the_chosen_error() -> None:
    class Exited(Exception):
        pass

    polls = []
    with pytest.raises(Exited, match=r"^startup: process exited$"):
        wait_until(lambda: polls.append(1), 30, "startup", give_up=lambda: "process exited" if polls else None,
                   error=Exited)
    assert len(polls) == 1


def test_async_twin_returns_value_and_raises_timeout() -> None:
    n = itertools.count()

    async def pred() -> int:
        return next(n) >= 2 and 7

    async def main() -> None:
        assert await async_wait_until(pred, 5, interval_s=0.001) == 7
        with pytest.raises(TimeoutError, match="waiting for nothing"):
            await async_wait_until(lambda: None, 0.02, "nothing", interval_s=0.005)

    asyncio.run(main())
