"""The one synchronous "poll a condition with a deadline" of the test fixtures and tests.

The asynchronous counterpart is :func:`autorecovery.aio.wait_for` (returns a bool) and
:func:`autorecovery.aio.wait_until` (raises). Both poll a condition that cannot be watched; neither
synchronises on time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(pred: Callable[[], T], timeout_s: float, what: str = "condition", *, interval_s: float = 0.05,
               give_up: Callable[[], str | None] | None = None,
               detail: Callable[[], str] | None = None,
               error: Callable[[str], Exception] = AssertionError) -> T:
    """Call ``pred()`` every ``interval_s`` s until it returns a truthy value, and return that value.

    Args:
        pred: the condition; its truthy result is returned (a bool, a found object...).
        timeout_s: deadline in seconds from the call.
        what: names the condition in the error ("the bookie registered").
        interval_s: pause between two calls, in seconds.
        give_up: called after each false ``pred()``; a non-empty string stops the wait early with that
            reason (a process the wait depends on exited).
        detail: called on the deadline; its text is appended to the message (a log tail).
        error: builds the exception raised from its message (default ``AssertionError``, for tests).

    Raises:
        ``error(message)``: ``timeout_s`` passed (``timed out after {timeout_s}s waiting for {what}``, then ``detail()``), or
            ``give_up`` returned a reason (``{what}: {reason}``).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        reason = give_up() if give_up is not None else None
        if reason:
            raise error(f"{what}: {reason}")
        if time.monotonic() >= deadline:
            more = detail() if detail is not None else ""
            raise error(f"timed out after {timeout_s:g}s waiting for {what}{': ' + more if more else ''}")
        time.sleep(interval_s)  # polling a condition with a deadline
