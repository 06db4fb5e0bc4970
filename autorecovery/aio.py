"""Small asyncio helpers shared by the edges."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


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
    except TimeoutError:
        return predicate()


#: what :func:`_poll` returns when the deadline passed first
_TIMED_OUT = object()


async def _poll(predicate: Callable[[], Awaitable[object] | object], timeout_s: float, interval_s: float) -> object:
    """``predicate``'s first truthy value (awaited when it returns a coroutine), polled every
    ``interval_s`` s, or :data:`_TIMED_OUT` once ``timeout_s`` s passed; what it raises propagates."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        res = predicate()
        if asyncio.iscoroutine(res):
            res = await res
        if res:
            return res
        if loop.time() >= deadline:
            return _TIMED_OUT
        await asyncio.sleep(interval_s)


async def wait_for(predicate: Callable[[], Awaitable[bool] | bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passes; returns whether it became true.

    Used where a condition cannot be watched (test helpers, readiness); never to synchronise on time.
    """
    return await _poll(predicate, timeout_s, interval_s) is not _TIMED_OUT


_BACKGROUND: set[asyncio.Future] = set()


def background(aw: Awaitable[object]) -> asyncio.Future:
    """Schedule ``aw`` (a coroutine or future) on the running loop from synchronous code (a ZooKeeper watch
    callback) and keep a strong reference to it until it is done.

    The event loop holds only weak references to tasks (asyncio's ``create_task`` documentation), so a
    task nobody keeps may be garbage-collected before it finishes. Returns the future; an exception it
    ends with is reported by asyncio as for any task whose result nobody retrieves.
    """
    fut = asyncio.ensure_future(aw)
    _BACKGROUND.add(fut)
    fut.add_done_callback(_BACKGROUND.discard)
    return fut


async def wait_until(predicate: Callable[[], Awaitable[object] | object], timeout_s: float,
                     what: str = "condition", interval_s: float = 0.05) -> object:
    """Like :func:`wait_for`, but returns the predicate's truthy value and raises on the deadline.

    The asynchronous twin of :func:`autorecovery.testing.waits.wait_until`.

    Raises:
        TimeoutError: ``timeout_s`` s passed (``timed out after {timeout_s}s waiting for {what}``).
    """
    res = await _poll(predicate, timeout_s, interval_s)
    if res is _TIMED_OUT:
        raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}")
    return res
