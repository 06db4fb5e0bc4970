"""Throttles of the ReplicationWorker: token buckets on an injected clock, per-bookie stream caps (PURE).

Upstream source: ``replicationRateByBytes`` (#2778, a Guava ``RateLimiter`` in
``LedgerFragmentReplicator`` acquiring an EMA of the packet size) and ``zkReplicationTaskRateLimit``
(BP-66 #4256, a ``RateLimiter`` in ``ZkLedgerUnderreplicationManager.getLedgerToRereplicate``).

Nothing here sleeps: :meth:`TokenBucket.reserve` books the tokens and returns how long the caller must
wait (seconds) before using them; the caller (an asyncio role) does the waiting. Time comes from the
``now`` callable (seconds, monotonic), so unit tests drive a fake clock.

Where we do better than upstream: the byte bucket is charged the *actual* size of each entry (upstream
charges an exponential moving average of earlier sizes, so a burst of large entries overshoots the
rate), and :class:`StreamCaps` bounds concurrent copy streams per source bookie and per target bookie
(our keys ``replicationMaxStreamsPerSourceBookie`` / ``replicationMaxStreamsPerTargetBookie``), so
several ledgers copied at once never pile onto one surviving replica or one target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

Now = Callable[[], float]


class TokenBucket:
    """A rate limiter that books capacity ahead (Guava ``RateLimiter`` semantics, GCRA form).

    Args:
        rate: tokens per second; ``<= 0`` means unlimited (every reservation waits 0).
        now: monotonic clock in seconds.
        burst_s: idle time (seconds) that may be saved up as credit; 0 means a strict pace.

    A reservation of ``n`` tokens starts at the bucket's next free instant (or now, if that passed) and
    occupies ``n / rate`` seconds after it, so over any long run the granted tokens never exceed
    ``rate * elapsed + (one reservation) + rate * burst_s``.
    """

    def __init__(self, rate: float, now: Now, burst_s: float = 0.0) -> None:
        if burst_s < 0:
            raise ValueError(f"burst_s must be >= 0, got {burst_s}")
        self.rate = float(rate)
        self.now = now
        self.burst_s = burst_s
        self._next_free = now()
        self.granted = 0.0

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def reserve(self, n: float = 1.0) -> float:
        """Book ``n`` tokens; returns the seconds to wait before using them (0 when allowed now).

        Raises:
            ValueError: when ``n`` is negative.
        """
        if n < 0:
            raise ValueError(f"cannot reserve a negative number of tokens ({n})")
        self.granted += n
        if self.unlimited:
            return 0.0
        t = self.now()
        start = max(self._next_free, t - self.burst_s)
        self._next_free = start + n / self.rate
        return max(0.0, start - t)

    def try_acquire(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens only if that needs no wait; returns whether they were taken."""
        if self.unlimited:
            self.granted += n
            return True
        t = self.now()
        start = max(self._next_free, t - self.burst_s)
        if start > t:
            return False
        self._next_free = start + n / self.rate
        self.granted += n
        return True


class StreamCaps:
    """Counts open copy streams per source bookie and per target bookie against two caps.

    Args:
        max_per_source: concurrent read streams allowed from one bookie (``<= 0`` = unlimited).
        max_per_target: concurrent write streams allowed to one bookie (``<= 0`` = unlimited).

    A copy stream reads from one source and writes to one or more targets; it may start only when the
    source and every target are below their caps (all or nothing, so no partial holds and no deadlock).
    """

    def __init__(self, max_per_source: int, max_per_target: int) -> None:
        self.max_per_source = max_per_source
        self.max_per_target = max_per_target
        self.sources: Counter[str] = Counter()
        self.targets: Counter[str] = Counter()

    def can_start(self, source: str, targets: Iterable[str]) -> bool:
        if self.max_per_source > 0 and self.sources[source] >= self.max_per_source:
            return False
        if self.max_per_target > 0:
            for t in set(targets):
                if self.targets[t] >= self.max_per_target:
                    return False
        return True

    def try_start(self, source: str, targets: Iterable[str]) -> bool:
        """Count a stream from ``source`` to ``targets`` if every cap allows it; returns whether it did."""
        targets = set(targets)
        if not self.can_start(source, targets):
            return False
        self.sources[source] += 1
        for t in targets:
            self.targets[t] += 1
        return True

    def finish(self, source: str, targets: Iterable[str]) -> None:
        """Un-count a stream started with :meth:`try_start` (same arguments)."""
        self.sources[source] -= 1
        if self.sources[source] <= 0:
            del self.sources[source]
        for t in set(targets):
            self.targets[t] -= 1
            if self.targets[t] <= 0:
                del self.targets[t]

    def source_load(self, bookie: str) -> int:
        return self.sources.get(bookie, 0)

    def pick_source(self, candidates: Iterable[str]) -> str | None:
        """The candidate with the fewest open streams that is below its cap (ties: first given)."""
        best: str | None = None
        best_load = 0
        for c in candidates:
            load = self.sources.get(c, 0)
            if self.max_per_source > 0 and load >= self.max_per_source:
                continue
            if best is None or load < best_load:
                best, best_load = c, load
        return best
