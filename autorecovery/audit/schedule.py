"""When periodic checks run (PURE). Upstream ``Auditor.start`` scheduling (§1.4 of the reference).

* Bookie check: fixed rate ``auditorPeriodicBookieCheckInterval`` s from 0; interval 0 → once at start.
* Check all ledgers / placement / replicas: fixed rate, 0 disables; the initial delay comes from the
  last completed run's ctime znode (#1683), so frequent auditor changes do not starve a weekly check.
* Fixed rate on one runner: runs never overlap; a run longer than the interval makes the next one
  start right after it.
"""

from __future__ import annotations


def initial_delay_s(interval_s: int, last_ctime_ms: int, now_ms: int) -> int:
    """Seconds to wait before the first run.

    ``last_ctime_ms`` < 0 (never ran / unreadable) → 0; else ``elapsed = max(0, (now−ctime)//1000)``
    and the delay is 0 when ``elapsed > interval`` else ``interval − elapsed``.
    """
    if last_ctime_ms < 0:
        return 0
    elapsed = max(0, (now_ms - last_ctime_ms) // 1000)
    return 0 if elapsed > interval_s else interval_s - elapsed


def next_run_s(scheduled_s: float, interval_s: float, finished_s: float) -> float:
    """Fixed-rate successor of a run scheduled at ``scheduled_s`` that finished at ``finished_s``."""
    nxt = scheduled_s + interval_s
    return nxt if nxt > finished_s else finished_s


def first_run_s(interval_s: int, last_ctime_ms: int | None, now_s: float, now_ms: int) -> float | None:
    """Absolute time (s, the ``now_s`` clock) of the first run, or None when disabled.

    ``last_ctime_ms is None`` means a check without a ctime znode (the bookie check): starts at once.
    """
    if last_ctime_ms is None:
        return now_s
    if interval_s <= 0:
        return None
    return now_s + initial_delay_s(interval_s, last_ctime_ms, now_ms)
