"""Exponential backoff with full jitter and a cap, for the retry loops at the edges.

The ``n``-th delay (``n`` = 0, 1, ... since the last :meth:`Backoff.reset`) is drawn uniformly from
``[0, min(cap_s, base_s * 2**n)]`` ("full jitter", AWS Architecture Blog, *Exponential Backoff And
Jitter*, 2015). Without jitter every client that lost ZooKeeper at the same moment retries in the same
instant after it comes back; the random spread keeps the mean wait near half the plain exponential
one and the longest wait at ``cap_s``, the bound each loop had before.

Pure logic apart from :meth:`Backoff.sleep`; the random source and the sleep are injectable.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable


class Backoff:
    """Delays for one retry loop: full jitter over a doubling ceiling, capped.

    Args:
        base_s: ceiling of the first delay, in seconds (> 0).
        cap_s: largest ceiling, in seconds (>= ``base_s``).
        rng: returns a float in ``[0, 1)``; default :func:`random.random`.
        sleep: ``async sleep(seconds)``; default :func:`asyncio.sleep`.

    Raises:
        ValueError: ``base_s <= 0`` or ``cap_s < base_s``, naming both.
    """

    def __init__(self, base_s: float, cap_s: float, *, rng: Callable[[], float] = random.random,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        if not 0 < base_s <= cap_s:
            raise ValueError(f"backoff needs 0 < base_s <= cap_s, got base_s={base_s} cap_s={cap_s}")
        self.base_s, self.cap_s = base_s, cap_s
        self._rng, self._sleep = rng, sleep
        self.attempt = 0

    def ceiling(self) -> float:
        """The upper bound of the next delay, in seconds: ``min(cap_s, base_s * 2**attempt)``."""
        return min(self.cap_s, self.base_s * 2.0 ** min(self.attempt, 64))

    def next_delay(self) -> float:
        """Draw the next delay in seconds (``[0, ceiling()]``) and count the attempt."""
        d = self._rng() * self.ceiling()
        self.attempt += 1
        return d

    def reset(self) -> None:
        """Start again from ``base_s`` (after a success)."""
        self.attempt = 0

    async def sleep(self) -> float:
        """Wait the next delay (a backoff between retries, not synchronisation); returns it in seconds."""
        d = self.next_delay()
        await self._sleep(d)
        return d
