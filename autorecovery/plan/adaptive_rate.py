"""The adaptive copy throttle (PURE): an AIMD byte rate per bookie, driven by the latency that bookie shows
the copy, against its own idle baseline.

Ours (issue 39; upstream has only the fixed ``replicationRateByBytes``): a heal should run flat out while
the bookies are idle and back off while they are slow for their clients (apache/pulsar#1981: publish
p99 from 10 to 100 ms while AutoRecovery ran). The copier reports, per bookie it reads from or writes to,
the latency of its requests (an add's time to its acknowledgement, a read's time to its answer) and the
bytes moved; every ``interval_s`` each bookie's :class:`BookieRate` takes one decision:

* **signal**: the ``quantile`` (0.9 by default) of the interval's request latencies, each request
  weighted by the entries it carried (a frozen bookie's whole window is late, not one sample of it);
* **baseline**: the lowest interval signal seen so far, aged upwards by ``baseline_drift`` per interval
  (so a baseline taken in a quieter hour does not hold the copy back for ever);
* **over budget** (the interval's signal > ``budget_factor`` × baseline, ``patience`` intervals
  in a row: one slow interval, a journal fsync or a GC pause, is not enough): the limit is cut to
  ``decrease`` × the rate the bookie moved in that interval (or × the current limit, whichever is lower),
  never below ``floor_bytes_per_s``: multiplicative decrease;
* **within budget**: a limited bookie gets ``increase_bytes_per_s`` more (additive increase); once the
  limit is above every rate the bookie actually reached, it is lifted (no limit: full speed);
* an interval without samples changes nothing (no traffic, no evidence).

The decision keeps its reason (:data:`IDLE`, :data:`SLOW`, :data:`RECOVERING`, :data:`FLOOR`) with the
figures behind it, for ``/metrics`` and the worker's progress. Nothing here sleeps or reads a clock: time
is the ``now`` argument (seconds, monotonic). The caps that do not adapt (``replicationRateByBytes``,
the per-bookie and cluster stream caps) stay, applied by the copier beside this limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: no limit: the bookie is within its latency budget (or nothing was measured yet)
IDLE = "idle"
#: the limit was cut: the bookie's latency is over the budget
SLOW = "slow"
#: the bookie is within budget again and its limit grows back
RECOVERING = "recovering"
#: over budget, but the limit is already at the floor
FLOOR = "floor"

#: samples kept per interval and bookie (the median of at most this many)
MAX_SAMPLES = 512


@dataclass(frozen=True)
class AdaptiveSettings:
    """How the adaptive throttle decides (keys ``adaptiveThrottleEnabled``,
    ``replicationLatencyBudgetFactor``, ``replicationAdaptiveFloorBytesPerSec``).

    Attributes:
        enabled: False: :meth:`AdaptiveRates.limit` is always None (no limit).
        budget_factor: latency allowed, as a multiple of the bookie's idle baseline (> 1).
        floor_bytes_per_s: the limit is never cut below this (bytes/s, > 0): a heal always progresses.
        increase_bytes_per_s: additive increase per interval (bytes/s).
        decrease: multiplicative decrease (0 < decrease < 1).
        interval_s: seconds between two decisions for one bookie.
        baseline_drift: fraction the baseline rises per interval (0: a fixed minimum).
        quantile: the latency quantile judged (0.5: the median; 0.9 by default: a burst of slow answers
            shows before it is half of them).
        patience: consecutive over-budget intervals before a cut (>= 1).
    """

    enabled: bool = True
    budget_factor: float = 2.0
    floor_bytes_per_s: float = 1024 * 1024
    increase_bytes_per_s: float = 4 * 1024 * 1024
    decrease: float = 0.5
    interval_s: float = 0.5
    baseline_drift: float = 0.01
    patience: int = 2
    quantile: float = 0.9

    def __post_init__(self) -> None:
        bad = []
        if not self.budget_factor > 1.0:
            bad.append(f"budget_factor={self.budget_factor} (must be > 1)")
        if not self.floor_bytes_per_s > 0:
            bad.append(f"floor_bytes_per_s={self.floor_bytes_per_s} (must be > 0)")
        if not 0 < self.decrease < 1:
            bad.append(f"decrease={self.decrease} (must be within 0..1, exclusive)")
        if not 0 < self.quantile < 1:
            bad.append(f"quantile={self.quantile} (must be within 0..1, exclusive)")
        if self.patience < 1:
            bad.append(f"patience={self.patience} (must be >= 1)")
        if not self.interval_s > 0 or self.increase_bytes_per_s < 0 or self.baseline_drift < 0:
            bad.append("interval_s must be > 0, increase_bytes_per_s and baseline_drift >= 0")
        if bad:
            raise ValueError("bad adaptive throttle settings: " + ", ".join(bad))


def weighted_quantile(samples: list[tuple[float, int]], q: float) -> float:
    """The smallest latency at or below which at least ``q`` of the total weight lies
    (``samples``: ``(latency, weight)``, not empty)."""
    xs = sorted(samples)
    total = sum(w for _, w in xs)
    acc = 0
    for lat, w in xs:
        acc += w
        if acc >= q * total:
            return lat
    return xs[-1][0]


@dataclass
class BookieRate:
    """One bookie's AIMD state. ``limit`` None = no limit. ``reason`` / ``detail``: the last decision."""

    limit: float | None = None
    baseline_s: float | None = None
    reason: str = IDLE
    detail: str = "no latency measured yet"
    last_median_s: float | None = None
    peak_rate: float = 0.0  # the highest rate (bytes/s) one interval moved
    decisions: int = 0
    over: int = 0  # over-budget intervals in a row
    _samples: list[tuple[float, int]] = field(default_factory=list)
    _bytes: int = 0
    _seen: int = 0
    _since: float | None = None

    def observe(self, latency_s: float, nbytes: int, now: float, entries: int = 1) -> None:
        """Record a latency (s) seen by ``entries`` requests and the body bytes they moved; a negative
        latency (unknown) counts the bytes only."""
        if self._since is None:
            self._since = now
        self._bytes += nbytes
        if latency_s < 0:
            return
        if len(self._samples) < MAX_SAMPLES:
            self._samples.append((latency_s, max(1, entries)))
        else:  # bounded: the latest samples overwrite round robin
            self._samples[self._seen % MAX_SAMPLES] = (latency_s, max(1, entries))
        self._seen += 1

    def due(self, now: float, interval_s: float) -> bool:
        return self._since is not None and now - self._since >= interval_s

    def decide(self, now: float, s: AdaptiveSettings) -> None:
        """Close the interval begun by the first sample after the previous decision (see the module
        docstring); without samples nothing changes."""
        if self._since is None or not self._samples:
            return  # bytes without a latency: no evidence either way (the interval goes on)
        elapsed = max(now - self._since, 1e-9)
        median = weighted_quantile(self._samples, s.quantile)
        rate = self._bytes / elapsed
        self._samples, self._bytes, self._seen, self._since = [], 0, 0, None
        self.decisions += 1
        self.last_median_s = median
        self.peak_rate = max(self.peak_rate, rate)
        base = self.baseline_s
        base = median if base is None else min(base * (1.0 + s.baseline_drift), median)
        self.baseline_s = base
        budget = s.budget_factor * base
        self.over = self.over + 1 if median > budget else 0
        if 0 < self.over < s.patience:
            self.detail = (f"p{s.quantile * 100:g} latency {median * 1000:.1f} ms is over the budget {budget * 1000:.1f} ms "
                           f"({self.over} of {s.patience} intervals before a cut)")
        elif self.over:
            cut = s.decrease * (rate if self.limit is None else min(rate, self.limit))
            new = max(s.floor_bytes_per_s, cut)
            self.reason = FLOOR if new <= s.floor_bytes_per_s else SLOW
            self.limit = new
            self.detail = (f"p{s.quantile * 100:g} latency {median * 1000:.1f} ms is over the budget {budget * 1000:.1f} ms "
                           f"({s.budget_factor:g} x idle {base * 1000:.1f} ms)")
        elif self.limit is not None:
            grown = self.limit + s.increase_bytes_per_s
            if grown > self.peak_rate:
                self.limit, self.reason = None, IDLE
                self.detail = f"p{s.quantile * 100:g} latency {median * 1000:.1f} ms within the budget {budget * 1000:.1f} ms"
            else:
                self.limit, self.reason = grown, RECOVERING
                self.detail = (f"p{s.quantile * 100:g} latency {median * 1000:.1f} ms within the budget {budget * 1000:.1f} ms; "
                               f"growing by {s.increase_bytes_per_s:.0f} B/s per {s.interval_s:g} s")
        else:
            self.reason = IDLE
            self.detail = f"p{s.quantile * 100:g} latency {median * 1000:.1f} ms within the budget {budget * 1000:.1f} ms"


class AdaptiveRates:
    """Every bookie's :class:`BookieRate` under one :class:`AdaptiveSettings`.

    ``observe`` after each answer the copier sees, ``limit`` before each hand-over (it also takes the
    decisions that are due), ``snapshot`` for metrics and progress.
    """

    def __init__(self, settings: AdaptiveSettings | None = None) -> None:
        self.settings = settings or AdaptiveSettings()
        self.bookies: dict[str, BookieRate] = {}

    def observe(self, bookie_id: str, latency_s: float, nbytes: int, now: float, entries: int = 1) -> None:
        if not self.settings.enabled:
            return
        st = self.bookies.get(bookie_id)
        if st is None:
            st = self.bookies[bookie_id] = BookieRate()
        st.observe(latency_s, nbytes, now, entries)

    def limit(self, bookie_id: str, now: float) -> float | None:
        """The bookie's current limit in bytes/s (None: none), after the decision due at ``now``."""
        st = self.bookies.get(bookie_id)
        if st is None or not self.settings.enabled:
            return None
        if st.due(now, self.settings.interval_s):
            st.decide(now, self.settings)
        return st.limit

    def snapshot(self) -> dict[str, dict[str, object]]:
        """bookie id → ``{"limit_bytes_per_s": float | None, "reason", "detail", "baseline_ms",
        "latency_ms": the last interval's judged quantile}`` (JSON-ready)."""
        return {b: {"limit_bytes_per_s": st.limit, "reason": st.reason, "detail": st.detail,
                    "baseline_ms": None if st.baseline_s is None else round(st.baseline_s * 1000, 3),
                    "latency_ms": None if st.last_median_s is None else round(st.last_median_s * 1000, 3)}
                for b, st in sorted(self.bookies.items())}
