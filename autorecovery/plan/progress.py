"""Replication progress: bytes left, copy rate, ETA and why ledgers are blocked (PURE).

Upstream has nothing like this: an operator sees only the count of markers (``listunderreplicated -c``)
and, during decommission, "Count of Ledgers which need to be rereplicated: N" with no ids and no rate
(#2162, #3974, #3338). The worker feeds a :class:`ProgressTracker`; the admin API and the
``autorecovery_bytes_remaining`` gauge read :meth:`ProgressTracker.snapshot`.

Units: bytes, seconds (monotonic, from the injected ``now``), bytes per second.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from autorecovery.ledger.metadata import LedgerMetadata

Now = Callable[[], float]


def estimate_copy_bytes(md: LedgerMetadata, lost: Collection[str]) -> int:
    """Bytes a worker must copy to re-replicate every entry ``md`` stores on ``lost`` bookies.

    Uses the average entry size of a closed ledger (``length / (lastEntryId + 1)``) times the number
    of (entry, lost ensemble index) pairs; an open ledger (length unknown) or an empty one gives 0.
    A BP-54 move (nothing lost) is estimated by the caller with the moved indexes as ``lost``.
    """
    if not md.is_closed or md.last_entry_id < 0 or md.length <= 0:
        return 0
    lost = set(lost)
    avg = md.length / (md.last_entry_id + 1)
    e_size, wq = md.ensemble_size, md.write_quorum
    pairs = 0
    for idx, seg in enumerate(md.segments):
        first = seg.first_entry_id
        last = md.segment_end(idx)
        if last < first:
            continue
        bad = [i for i, b in enumerate(seg.ensemble) if b in lost]
        if not bad:
            continue
        n = last - first + 1
        for i in bad:
            full = n // e_size
            count = full * wq
            for e in range(first + full * e_size, last + 1):
                if (i - e) % e_size < wq:
                    count += 1
            pairs += count
    return int(round(pairs * avg))


class RateMeter:
    """Bytes per second over a sliding window of ``window_s`` seconds."""

    def __init__(self, now: Now, window_s: float = 30.0) -> None:
        self.now = now
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()
        self._sum = 0
        self._started = now()

    def add(self, nbytes: int) -> None:
        t = self.now()
        self._samples.append((t, nbytes))
        self._sum += nbytes
        self._trim(t)

    def _trim(self, t: float) -> None:
        while self._samples and self._samples[0][0] < t - self.window_s:
            _, n = self._samples.popleft()
            self._sum -= n

    def rate(self) -> float:
        """Bytes per second over the window (or since creation if that is shorter); 0 when idle."""
        t = self.now()
        self._trim(t)
        if not self._samples:
            return 0.0
        span = min(self.window_s, t - self._started)
        span = max(span, t - self._samples[0][0], 1e-3)
        return self._sum / span


@dataclass(frozen=True)
class Progress:
    """A snapshot of one worker's progress (the admin API serves it as JSON).

    Attributes:
        ledgers_remaining: marked ledgers this worker knows of that are not done (including in progress).
        ledgers_in_progress: ledgers being copied now.
        ledgers_done: ledgers this worker replicated since it started.
        bytes_remaining: estimated bytes still to copy for the known backlog.
        bytes_copied: bytes written to targets since start.
        rate_bytes_per_s: recent copy rate (sliding window).
        eta_s: ``bytes_remaining / rate`` or None when the rate is 0 or nothing is known.
        blocked: ledger id → reason it cannot progress now.
    """

    ledgers_remaining: int
    ledgers_in_progress: int
    ledgers_done: int
    bytes_remaining: int
    bytes_copied: int
    rate_bytes_per_s: float
    eta_s: float | None
    blocked: Mapping[int, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "ledgers_remaining": self.ledgers_remaining,
            "ledgers_in_progress": self.ledgers_in_progress,
            "ledgers_done": self.ledgers_done,
            "bytes_remaining": self.bytes_remaining,
            "bytes_copied": self.bytes_copied,
            "rate_bytes_per_s": round(self.rate_bytes_per_s, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            "blocked": {str(k): v for k, v in sorted(self.blocked.items())},
        }


class ProgressTracker:
    """Mutable progress state of a worker; :meth:`snapshot` returns an immutable :class:`Progress`."""

    def __init__(self, now: Now, window_s: float = 30.0) -> None:
        self.now = now
        self.meter = RateMeter(now, window_s)
        self._backlog: dict[int, int] = {}
        self._active: dict[int, list[int]] = {}  # ledger -> [planned, copied]
        self._blocked: dict[int, str] = {}
        self.done = 0
        self.bytes_copied = 0

    def set_backlog(self, estimates: Mapping[int, int]) -> None:
        """Replace the known backlog: marked ledger id → estimated bytes to copy."""
        self._backlog = dict(estimates)
        for lid in list(self._blocked):
            if lid not in self._backlog and lid not in self._active:
                del self._blocked[lid]

    def start(self, ledger_id: int, planned_bytes: int | None = None) -> None:
        """A ledger is being worked on; ``planned_bytes`` defaults to its backlog estimate."""
        if planned_bytes is None:
            planned_bytes = self._backlog.get(ledger_id, 0)
        self._active[ledger_id] = [max(0, planned_bytes), 0]
        self._blocked.pop(ledger_id, None)

    def plan(self, ledger_id: int, planned_bytes: int) -> None:
        """Refine the bytes planned for an active ledger (after its fragments were checked)."""
        if ledger_id in self._active:
            self._active[ledger_id][0] = max(0, planned_bytes)

    def copied(self, ledger_id: int, nbytes: int) -> None:
        self.meter.add(nbytes)
        self.bytes_copied += nbytes
        if ledger_id in self._active:
            self._active[ledger_id][1] += nbytes

    def finish(self, ledger_id: int, replicated: bool) -> None:
        self._active.pop(ledger_id, None)
        if replicated:
            self.done += 1
            self._backlog.pop(ledger_id, None)
            self._blocked.pop(ledger_id, None)

    def block(self, ledger_id: int, reason: str) -> None:
        self._blocked[ledger_id] = reason

    def unblock(self, ledger_id: int) -> None:
        self._blocked.pop(ledger_id, None)

    def blocked(self) -> dict[int, str]:
        return dict(self._blocked)

    def snapshot(self) -> Progress:
        remaining_ids = set(self._backlog) | set(self._active)
        rem = 0
        for lid in remaining_ids:
            if lid in self._active:
                planned, copied = self._active[lid]
                rem += max(0, planned - copied)
            else:
                rem += self._backlog.get(lid, 0)
        rate = self.meter.rate()
        eta = rem / rate if rate > 0 and rem > 0 else (0.0 if rem == 0 and not remaining_ids else None)
        return Progress(
            ledgers_remaining=len(remaining_ids),
            ledgers_in_progress=len(self._active),
            ledgers_done=self.done,
            bytes_remaining=rem,
            bytes_copied=self.bytes_copied,
            rate_bytes_per_s=rate,
            eta_s=eta,
            blocked=dict(self._blocked),
        )
