"""Backoff maths and per-worker failure memory of the ReplicationWorker (PURE).

Upstream source: ``ReplicationWorker.deferLedgerLockReleaseOfFailedLedger`` and the two Guava caches
``replicationFailedLedgers`` / ``unableToReadEntriesForReplication`` (max 2000 ledgers each).

After a pass that left a ledger under-replicated, the worker keeps the ledger's lock (so no other worker
spins on it) and releases it after::

    delay(n) = base * 2**n   for n < 5        base = lockReleaseOfFailedLedgerGracePeriod // 32
    delay(n) = lockReleaseOfFailedLedgerGracePeriod   afterwards

where ``n`` is how many times *this* worker already failed the ledger. With the default grace of
300000 ms that is 9375, 18750, 37500, 75000, 150000, then 300000 ms forever; with 64 ms it is
2, 4, 8, 16, 32, 64, 64, ... (``min(cap, base * 2**n)``, upstream's
``testDeferLedgerLockReleaseForReplicationWorker``).

Where we do better than upstream: the failure count of a ledger is reset when it is finally replicated
(upstream never resets it, so a ledger that failed five times once starts at the cap the next time it
is lost), and the memory of unreadable entries is kept per ledger as runs (:mod:`autorecovery.plan.entry_runs`,
O(runs) whatever a ledger claims to hold) whose first entries the worker reads *first* on the next
attempt, so a retry that cannot succeed fails before writing anything.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from autorecovery.plan.entry_runs import Gap, Run

#: Upstream's number of doubling steps before the delay reaches the cap (2^5 = 32).
DOUBLING_STEPS = 5
#: Upstream caps both failure caches at 2000 ledgers.
DEFAULT_MAX_LEDGERS = 2000
#: Unreadable runs remembered per ledger (the newest are kept).
MAX_RUNS_PER_LEDGER = 1000


def _same_arc(a: Run, b: Run) -> bool:
    return (a.arc_end, a.arc_len, a.ensemble_size) == (b.arc_end, b.arc_len, b.ensemble_size)


def lock_release_delay_ms(grace_ms: int, num_failed: int) -> int:
    """Delay in ms before releasing the lock of a ledger this worker failed ``num_failed`` times before.

    Args:
        grace_ms: ``lockReleaseOfFailedLedgerGracePeriod`` in ms (the cap); ``<= 0`` gives 0.
        num_failed: earlier failures of this ledger by this worker (0 for the first failure).

    Returns:
        ``min(grace_ms, (grace_ms // 32) * 2**num_failed)`` for ``num_failed < 5``, else ``grace_ms``.

    Raises:
        ValueError: when ``num_failed`` is negative.
    """
    if num_failed < 0:
        raise ValueError(f"num_failed must be >= 0, got {num_failed}")
    if grace_ms <= 0:
        return 0
    if num_failed >= DOUBLING_STEPS:
        return grace_ms
    base = grace_ms // (2**DOUBLING_STEPS)
    return min(grace_ms, base * 2**num_failed)


class _Lru(OrderedDict):
    """An OrderedDict that forgets its least recently touched key beyond ``max_len`` keys."""

    def __init__(self, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len

    def touch(self, key, default):
        if key in self:
            self.move_to_end(key)
        else:
            self[key] = default
            while len(self) > self.max_len:
                self.popitem(last=False)
        return self[key]


class FailureMemory:
    """Per-worker memory of failed ledgers and of entries that could not be read.

    Args:
        grace_ms: ``lockReleaseOfFailedLedgerGracePeriod`` in ms.
        max_ledgers: bound on remembered ledgers per table (upstream 2000), least recently used evicted.

    Attributes:
        delays: every delay handed out, ``(ledger_id, delay_ms)`` in order (tests and the admin API read
            it; bounded to the last 1000).
    """

    def __init__(self, grace_ms: int, max_ledgers: int = DEFAULT_MAX_LEDGERS) -> None:
        self.grace_ms = grace_ms
        self._failed: _Lru = _Lru(max_ledgers)
        self._unreadable: _Lru = _Lru(max_ledgers)
        self.delays: list[tuple[int, int]] = []

    # -- failed ledgers ----------------------------------------------------------------------
    def failures(self, ledger_id: int) -> int:
        """How many times this worker failed ``ledger_id`` since it was last replicated."""
        return self._failed.get(ledger_id, 0)

    def next_release_delay_ms(self, ledger_id: int) -> int:
        """Count one more failure of ``ledger_id`` and return the lock-release delay in ms for it."""
        n = self._failed.touch(ledger_id, 0)
        self._failed[ledger_id] = n + 1
        delay = lock_release_delay_ms(self.grace_ms, n)
        self.delays.append((ledger_id, delay))
        del self.delays[:-1000]
        return delay

    def delays_for(self, ledger_id: int) -> list[int]:
        """The delays (ms) handed out for ``ledger_id``, oldest first."""
        return [d for lid, d in self.delays if lid == ledger_id]

    # -- unreadable entries --------------------------------------------------------------------
    def add_unreadable(self, ledger_id: int, gaps: Iterable[Gap]) -> int:
        """Remember runs of entries of ``ledger_id`` that no replica served (replacing remembered runs
        of the same arc that they overlap); returns how many entries were new. At most
        :data:`MAX_RUNS_PER_LEDGER` runs are kept per ledger (the newest)."""
        runs: list[Gap] = self._unreadable.touch(ledger_id, [])
        new = 0
        for g in gaps:
            old = [x for x in runs if _same_arc(x.run, g.run) and x.run.first <= g.run.last and g.run.first <= x.run.last]
            covered = sum(c.count() for x in old if (c := g.run.clip(x.run.first, x.run.last)) is not None)
            new += g.count() - covered
            runs[:] = [x for x in runs if x not in old]
            for x in old:  # what an old run held outside the new one stays remembered
                for piece in (x.run.clip(x.run.first, g.run.first - 1), x.run.clip(g.run.last + 1, x.run.last)):
                    if piece is not None:
                        runs.append(Gap(piece, x.why))
            runs.append(g)
        runs.sort(key=lambda x: (x.run.first, x.run.arc_end))
        del runs[:-MAX_RUNS_PER_LEDGER]
        return new

    def unreadable(self, ledger_id: int, first: int | None = None, last: int | None = None) -> list[Gap]:
        """Remembered unreadable runs of ``ledger_id`` (clipped to ``[first, last]`` if given), by first id."""
        out = []
        for g in self._unreadable.get(ledger_id, []):
            run = g.run.clip(g.run.first if first is None else first, g.run.last if last is None else last)
            if run is not None:
                out.append(Gap(run, g.why))
        return out

    def readable_again(self, ledger_id: int, gaps: Iterable[Gap]) -> None:
        """Forget remembered runs that overlap ``gaps`` (their probe was read successfully)."""
        runs = self._unreadable.get(ledger_id)
        if runs is None:
            return
        for g in gaps:
            runs[:] = [x for x in runs if not (_same_arc(x.run, g.run)
                                              and x.run.first <= g.run.last and g.run.first <= x.run.last)]

    # -- success -------------------------------------------------------------------------------
    def replicated(self, ledger_id: int) -> None:
        """The ledger is fully replicated: forget its failures and unreadable entries."""
        self._failed.pop(ledger_id, None)
        self._unreadable.pop(ledger_id, None)
