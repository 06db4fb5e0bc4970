"""Replication progress: bytes left, copy rate, ETA and why ledgers are blocked (PURE).

Upstream has nothing like this: an operator sees only the count of markers (``listunderreplicated -c``)
and, during decommission, "Count of Ledgers which need to be rereplicated: N" with no ids and no rate
(#2162, #3974, #3338). The worker feeds a :class:`ProgressTracker`; the admin API
(``/api/v1/autorecovery/progress``), the shell and the ``autorecovery_worker_*`` gauges read
:meth:`ProgressTracker.snapshot`.

**Cluster view, derived on every node (chosen over an auditor aggregate).** Every worker already
follows the whole marker set (its backlog refresh, woken by every marker created or deleted), with a
byte estimate per marked ledger. The cluster's progress is that set shrinking: when a ledger leaves
it (any worker finished it) its estimate counts as copied, and this node's own in-flight copies count
as they stream. :class:`ClusterRate` turns those completions into a rate averaged over a sliding
window (``rate_window_s``, default 120 s) and re-computed only when work completes, and the ETA is
``remaining / rate − time since the last completion``: between completions it falls by one second per
second, at a completion it moves by what the new rate says. Early in an episode, work in flight on
other workers is not visible yet, so the rate starts low and the ETA high and both converge, the ETA
from above; a rise is bounded by one ledger's share (issue 9 observed 86 → 39 → 413 → 320 s with the
old per-worker 30 s window, which measured only this worker's bytes against the whole cluster's
backlog). No auditor round trip
and no shared state: any node answers, and all nodes agree up to their refresh delay.

**Blocked work is reported apart and has no ETA**: ``blocked`` (ledger → reason) and
:func:`blocked_summary` ("blocked: 4 ledgers, no eligible target bookie"); the ETA covers the other
ledgers only, and is None when every remaining ledger is blocked, or when no work completed for
``stall_after_s`` although the ETA ran out (``stalled_s`` says for how long).

Units: bytes, seconds (monotonic, from the injected ``now``), bytes per second.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.ledger.striping import count_on_index

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
        for i in bad:
            pairs += count_on_index(first, last, i, e_size, wq)
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


class ClusterRate:
    """Smoothed cluster copy rate from completions, and an ETA that converges (see the module doc).

    Feed :meth:`observe` with the current remaining work (ledger id → estimated bytes left, every
    marked ledger the node knows of, blocked ones included). Bytes that left the map (finished ledgers)
    or that an estimate lost (copies streaming here) are counted as done.

    The rate is the bytes completed over the last ``window_s`` seconds (or since the episode started,
    when that is shorter) divided by that time, re-computed at each completion. Work in flight on
    other workers is invisible until it completes, so early in an episode the rate is low and the ETA
    high; both then converge (the ETA from above, so it keeps falling). Between completions the ETA
    falls one second per second.

    Args:
        now: monotonic seconds. window_s: averaging window (s); long against one ledger's copy time.
        stall_after_s: with work left, the ETA becomes None when it ran out and nothing completed for
            this long.
    """

    def __init__(self, now: Now, window_s: float = 120.0, stall_after_s: float = 60.0) -> None:
        self.now, self.window_s, self.stall_after_s = now, window_s, stall_after_s
        self.rate: float | None = None
        self._last: dict[int, int] = {}
        self._since: float | None = None  # time of the last completion (or the episode start)
        self._events: deque[tuple[float, int]] = deque()  # (time, bytes done in the episode so far)
        self._episode_done = 0
        self.done_bytes = 0

    def observe(self, remaining: Mapping[int, int]) -> None:
        """The whole backlog now (ledger id → bytes left): what went down since the last look is done."""
        done = 0
        for lid, before in self._last.items():
            after = remaining.get(lid, 0)
            if after < before:
                done += before - after
        self._last = {lid: max(0, int(b)) for lid, b in remaining.items()}
        self._account(done, empty=not remaining)

    def observe_some(self, changed: Mapping[int, int | None], *, empty: bool) -> None:
        """Like :meth:`observe` for the ledgers in ``changed`` only (None: left the backlog), the others
        unchanged since the last look; ``empty``: nothing is left at all. O(len(changed)), where
        :meth:`observe` is O(backlog): a pass ends with this (issue 29: per-ledger cost)."""
        done = 0
        for lid, after in changed.items():
            before = self._last.get(lid, 0)
            now_left = 0 if after is None else max(0, int(after))
            if now_left < before:
                done += before - now_left
            if after is None:
                self._last.pop(lid, None)
            else:
                self._last[lid] = now_left
        self._account(done, empty=empty)

    def _account(self, done: int, *, empty: bool) -> None:
        t = self.now()
        self.done_bytes += max(0, done)
        if empty:  # the queue is empty: the episode is over, the next one measures afresh
            self.rate, self._since = None, None
            self._events.clear()
            self._episode_done = 0
            return
        if self._since is None:
            self._since = t
            self._events.append((t, 0))
            return
        if done <= 0:
            return
        self._episode_done += done
        self._events.append((t, self._episode_done))
        while len(self._events) >= 2 and self._events[1][0] <= t - self.window_s:
            self._events.popleft()
        base_t, first_done = self._events[0]
        base_done = float(first_done)
        if base_t < t - self.window_s:  # interpolate the count at the window's start
            nxt_t, nxt_done = self._events[1]
            frac = (t - self.window_s - base_t) / max(nxt_t - base_t, 1e-9)
            base_t, base_done = t - self.window_s, base_done + frac * (nxt_done - base_done)
        self.rate = (self._episode_done - base_done) / max(t - base_t, 1e-3)
        self._since = t

    def stalled_s(self) -> float:
        """Seconds since the last completion (or the episode start) while work remains; 0 when idle."""
        return 0.0 if self._since is None else max(0.0, self.now() - self._since)

    def eta_s(self, unblocked_bytes: int, unblocked_ledgers: int, blocked_ledgers: int) -> float | None:
        """Seconds until the unblocked work is done: 0 when nothing is left at all, None when all that
        is left is blocked, when no rate is known yet, or when stalled (see the class doc)."""
        if unblocked_ledgers == 0:
            return 0.0 if blocked_ledgers == 0 else None
        if self.rate is None or self.rate <= 0:
            return None
        since = self.stalled_s()
        eta = unblocked_bytes / self.rate - since
        if eta <= 0:
            return None if since > self.stall_after_s else 0.0
        return eta


_RANGES = re.compile(r"\b(entries|entry|segment|ledger)\s+[\[\]0-9,\- ]+")


def blocked_reason_kind(reason: str) -> str:
    """The kind of a blocked reason, for grouping: the text before the first ``:`` or ``;``, with
    entry ranges removed (``"no eligible target bookie: not enough bookies (need 1)"`` →
    ``"no eligible target bookie"``)."""
    head = re.split(r":\s|:$|[;(]", reason, maxsplit=1)[0]
    return " ".join(_RANGES.sub(r"\1 ", head).split()) or "unknown"


def blocked_summary(blocked: Mapping[int, str]) -> str:
    """``"blocked: 4 ledgers, no eligible target bookie"`` (kinds by count, most first); ``""`` when
    nothing is blocked."""
    if not blocked:
        return ""
    kinds = Counter(blocked_reason_kind(r) for r in blocked.values())
    n = len(blocked)
    parts = [k if len(kinds) == 1 else f"{c} {k}" for k, c in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))]
    return f"blocked: {n} ledger{'s' if n != 1 else ''}, " + "; ".join(parts)


def unrecoverable_reason(record: Mapping[str, object], max_spans: int = 10) -> str:
    """The one wording of the blocked reason of a ledger surfaced as unrecoverable, from its side-znode
    document (``roles/backlog.py``, ``surface_unrecoverable``). The daemon's ``/progress``
    (``cluster.blocked``), its worker's tracker and the shell's ``decommissionbookie`` all print this
    (issue 28: they used three wordings for one block).

    ``{"entries": [[0, 9]], "entry_count": 10, "reason": "10 entries that ...", "waiting_for": ["b:3181"]}``
    → ``"unrecoverable: entries 0-9 have no readable replica (10 entries that ...); it may come back if
    b:3181 returns"``; with nobody to wait for, ``"...; needs an operator"``. At most ``max_spans`` entry
    ranges are named (then ``"... (N ranges)"``); missing or malformed fields read as unknown, never raise.
    """
    spans = record.get("entries")
    if isinstance(spans, list) and spans:
        parts = []
        for sp in spans[:max_spans]:
            lo, hi = (sp[0], sp[-1]) if isinstance(sp, list | tuple) and sp else (sp, sp)
            parts.append(f"{lo}" if lo == hi else f"{lo}-{hi}")
        more = f" ... ({len(spans)} ranges)" if len(spans) > max_spans else ""
        entries = ", ".join(parts) + more
    else:
        entries = str(spans or record.get("entry_count") or "(unknown)")
    out = f"unrecoverable: entries {entries} have no readable replica"
    if record.get("reason"):
        out += f" ({record['reason']})"
    waiting = record.get("waiting_for") or []
    names = ", ".join(map(str, waiting)) if isinstance(waiting, list | tuple) else str(waiting)
    return f"{out}; " + (f"it may come back if {names} returns" if names else "needs an operator")


@dataclass(frozen=True)
class Progress:
    """A snapshot of the cluster's re-replication as one node sees it, and of this worker's share.

    Cluster (every marked ledger this node knows of; identical on every node up to refresh delays):
        ledgers_remaining / bytes_remaining: marked ledgers that are *not* blocked, and their estimated
            bytes to copy. rate_bytes_per_s: smoothed cluster rate (:class:`ClusterRate`).
        eta_s: for the unblocked work only; 0 when nothing is left, None when unknown, all blocked or
            stalled. stalled_s: seconds since work last completed while work remains.
        blocked: ledger id → reason it cannot progress now (no ETA for these).
    This worker:
        ledgers_in_progress: ledgers it is copying now. worker_bytes_remaining: bytes it still has to
            copy for them. worker_rate_bytes_per_s: its own copy rate (30 s window).
        ledgers_done / bytes_copied: since it started.
        rate_limits: bookie id -> the adaptive copy throttle's current limit (bytes/s, None: none) and
            why (``reason``, ``detail``, ``baseline_ms``, ``latency_ms``: the last judged quantile).
    """

    ledgers_remaining: int
    ledgers_in_progress: int
    ledgers_done: int
    bytes_remaining: int
    bytes_copied: int
    rate_bytes_per_s: float
    eta_s: float | None
    blocked: Mapping[int, str] = field(default_factory=dict)
    worker_bytes_remaining: int = 0
    worker_rate_bytes_per_s: float = 0.0
    stalled_s: float = 0.0
    #: bookie id -> the adaptive copy throttle's limit and why (``plan.adaptive_rate.AdaptiveRates.snapshot``)
    rate_limits: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    @property
    def blocked_summary(self) -> str:
        return blocked_summary(self.blocked)

    def as_dict(self) -> dict:
        """``{"cluster": {...}, "worker": {...}}`` (the HTTP progress document)."""
        return {
            "cluster": {
                "ledgers_remaining": self.ledgers_remaining,
                "bytes_remaining": self.bytes_remaining,
                "rate_bytes_per_s": round(self.rate_bytes_per_s, 1),
                "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
                "stalled_s": round(self.stalled_s, 1),
                "ledgers_blocked": len(self.blocked),
                "blocked_summary": self.blocked_summary,
                "blocked": {str(k): v for k, v in sorted(self.blocked.items())},
            },
            "worker": {
                "ledgers_in_progress": self.ledgers_in_progress,
                "bytes_remaining": self.worker_bytes_remaining,
                "rate_bytes_per_s": round(self.worker_rate_bytes_per_s, 1),
                "ledgers_done": self.ledgers_done,
                "bytes_copied": self.bytes_copied,
                "rate_limits": {b: dict(v) for b, v in sorted(self.rate_limits.items())},
            },
        }


class ProgressTracker:
    """Mutable progress state of a worker; :meth:`snapshot` returns an immutable :class:`Progress`.

    ``set_backlog`` gives the whole marker set (cluster view); ``start``/``plan``/``copied``/``finish``
    this worker's own passes; ``block`` the reasons its passes found.
    """

    def __init__(self, now: Now, window_s: float = 30.0, rate_window_s: float = 120.0,
                 stall_after_s: float = 60.0) -> None:
        self.now = now
        self.meter = RateMeter(now, window_s)
        self.cluster = ClusterRate(now, rate_window_s, stall_after_s)
        self._backlog: dict[int, int] = {}
        self._active: dict[int, list[int]] = {}  # ledger -> [planned, copied]
        self._blocked: dict[int, str] = {}
        self.done = 0
        self.bytes_copied = 0

    def _remaining(self) -> dict[int, int]:
        out = dict(self._backlog)
        for lid, (planned, copied) in self._active.items():
            out[lid] = max(0, planned - copied)
        return out

    def _left(self, ledger_id: int) -> int | None:
        """Bytes left of one ledger as :meth:`_remaining` counts them; None when not in it."""
        act = self._active.get(ledger_id)
        if act is not None:
            return max(0, act[0] - act[1])
        return self._backlog.get(ledger_id)

    def _observe(self) -> None:
        self.cluster.observe(self._remaining())

    def set_backlog(self, estimates: Mapping[int, int]) -> None:
        """Replace the known backlog: marked ledger id → estimated bytes to copy. Ledgers no longer
        marked leave the backlog and their blocked reasons go with them (finished work is cleared)."""
        self._backlog = dict(estimates)
        for lid in list(self._blocked):
            if lid not in self._backlog and lid not in self._active:
                del self._blocked[lid]
        self._observe()

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
            self.cluster._last[ledger_id] = self._left(ledger_id) or 0  # a re-plan is not progress

    def copied(self, ledger_id: int, nbytes: int) -> None:
        self.meter.add(nbytes)
        self.bytes_copied += nbytes
        if ledger_id in self._active:
            self._active[ledger_id][1] += nbytes

    def finish(self, ledger_id: int, replicated: bool) -> None:
        act = self._active.pop(ledger_id, None)
        if replicated:
            self.done += 1
            self._backlog.pop(ledger_id, None)
            self._blocked.pop(ledger_id, None)
        elif act is not None and ledger_id in self._backlog:
            # not done: what it still needs is the estimate again (copied bytes of an aborted pass
            # are not progress), without counting the difference as work done
            self.cluster._last[ledger_id] = self._backlog[ledger_id]
        # only the active ledgers (copies progress) and this one changed since the last look
        self.cluster.observe_some({lid: self._left(lid) for lid in [*self._active, ledger_id]},
                                  empty=not self._backlog and not self._active)

    def block(self, ledger_id: int, reason: str) -> None:
        self._blocked[ledger_id] = reason

    def unblock(self, ledger_id: int) -> None:
        self._blocked.pop(ledger_id, None)

    def blocked(self) -> dict[int, str]:
        return dict(self._blocked)

    def snapshot(self, extra_blocked: Mapping[int, str] | None = None) -> Progress:
        """The current :class:`Progress`; ``extra_blocked`` adds reasons known elsewhere (unrecoverable
        side znodes of any worker, non-retriable failures) for marked ledgers."""
        self._observe()
        remaining = self._remaining()
        blocked = {lid: r for lid, r in self._blocked.items() if lid in remaining}
        blocked.update({lid: r for lid, r in (extra_blocked or {}).items() if lid in remaining})
        free = [lid for lid in remaining if lid not in blocked]
        free_bytes = sum(remaining[lid] for lid in free)
        worker_rem = sum(max(0, p - c) for p, c in self._active.values())
        return Progress(
            ledgers_remaining=len(free),
            ledgers_in_progress=len(self._active),
            ledgers_done=self.done,
            bytes_remaining=free_bytes,
            bytes_copied=self.bytes_copied,
            rate_bytes_per_s=self.cluster.rate or 0.0,
            eta_s=self.cluster.eta_s(free_bytes, len(free), len(blocked)),
            blocked=blocked,
            worker_bytes_remaining=worker_rem,
            worker_rate_bytes_per_s=self.meter.rate(),
            stalled_s=self.cluster.stalled_s() if remaining else 0.0,
        )
