"""Small asyncio helpers shared by the edges."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def wait_condition(cond: asyncio.Condition, predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Wait until ``predicate()`` holds, re-checked each time ``cond`` is notified, or ``timeout_s`` s pass.

    Returns whether the predicate holds at the end (no polling: the notifier drives it).
    """
    async def waiter() -> None:
        async with cond:
            await cond.wait_for(predicate)

    try:
        await asyncio.wait_for(waiter(), timeout_s)
        return True
    except asyncio.TimeoutError:
        return predicate()
