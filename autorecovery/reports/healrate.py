"""One daemon's copy rate measured from the cluster's heal history (PURE).

``autorecovery export`` copies the heal episodes the auditor records under
``underreplication/history`` (``zk/history.py``; ``shell history --json`` shows the same documents)
into the snapshot's ``history.json``. The reports' heal-time model (``model.heal_time``) takes one
daemon's copy rate; an episode gives the cluster's: bytes healed over the time from detection to
close, shared by the daemons that healed its ledgers (its ``workers``).

    rate = Σ bytes_healed / Σ (duration_s × daemons that healed)     over the closed episodes that
                                                                     healed bytes in a positive time

The duration starts at detection, so it includes ``lostBookieRecoveryDelay``, the audit and the
re-checks: the measured rate is at most the copy rate, and a heal time computed from it is on the
long side of what the copies alone take. No episode of that kind → None (the caller falls back on an
assumed rate and says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MeasuredRate:
    """``bytes_per_s``: one daemon's rate (bytes/s); ``episodes``: how many episodes it is from;
    ``bytes``: bytes they healed; ``daemon_seconds``: Σ duration × daemons (s)."""

    bytes_per_s: float
    episodes: int
    bytes: float
    daemon_seconds: float


def measured_rate(episodes: Iterable[Mapping[str, Any]]) -> MeasuredRate | None:
    """The rate over ``episodes`` (dicts as ``Episode.as_dict`` writes them: ``state``, ``duration_s``,
    ``bytes_healed``, ``workers`` {daemon: ledgers}); records missing a field or with a non-numeric one
    are skipped. None when no closed episode healed bytes in a positive time."""
    total = span = 0.0
    n = 0
    for ep in episodes:
        try:
            if ep.get("state") == "open" or ep.get("closed_ms") is None:
                continue
            nbytes, dur = float(ep.get("bytes_healed") or 0), float(ep.get("duration_s") or 0)
            workers = ep.get("workers") or {}
            daemons = max(1, len([w for w, k in workers.items() if k])) if isinstance(workers, Mapping) else 1
        except (TypeError, ValueError, AttributeError):
            continue
        if nbytes <= 0 or dur <= 0:
            continue
        total += nbytes
        span += dur * daemons
        n += 1
    if not n:
        return None
    return MeasuredRate(total / span, n, total, span)
