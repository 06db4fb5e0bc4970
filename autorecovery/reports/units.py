"""Humanised figures for the report page (PURE): bytes in binary units, durations and days in the unit a
planner reads, and which unit a summary key carries (from its name's suffix).

``humanize`` formats bytes (``naturalsize(binary=True)``: B, KiB, MiB, GiB, TiB, PiB, EiB); durations are ours
(humanize's ``naturaldelta`` rounds 5.4 hours to "5 hours", and a heal-time figure must not drop that much).
"""

from __future__ import annotations

import math
from typing import Any

import humanize

def kind_of(key: str) -> str:
    """The kind of figure a summary key or table column holds, from the words of its name: ``rate``
    (bytes ... per_s), ``bytes_per_day``, ``bytes`` (``used_bytes``, ``heal_bytes_below_ack_quorum``,
    ``bytes_to_copy``), ``duration`` (``..._time_s``, ``..._s``: seconds), ``days``, ``ms`` or ``plain``."""
    words = key.lower().split("_")
    if "bytes" in words or key.lower() == "bytes":
        if "per" in words and words[-1] == "day":
            return "bytes_per_day"
        if "per" in words and "s" in words[words.index("per"):]:
            return "rate"
        return "bytes"
    if "days" in words:
        return "days"
    if words[-1] == "ms":
        return "ms"
    if words[-1] == "s" and len(words) > 1:
        return "duration"
    return "plain"


def size(n: float | None) -> str:
    """Bytes as ``812 B``, ``1.398 GiB`` (powers of 1024, four significant figures, never an exponent);
    ``unknown`` for None or a negative value (a bookie that did not report its disk)."""
    if n is None or not isinstance(n, (int, float)) or math.isnan(n) or n < 0:
        return "unknown"
    if n < 1024:
        return f"{int(round(n))} B"
    if n >= 1024 ** 6:  # EiB: humanize's largest unit below ZiB; %.0f keeps it free of an exponent
        return str(humanize.naturalsize(n, binary=True, format="%.0f"))
    return str(humanize.naturalsize(n, binary=True, format="%.4g"))


def duration(seconds: float | None) -> str:
    """Seconds as ``45 s``, ``12.5 min``, ``5.4 h`` or ``3.2 days`` (three significant figures)."""
    if seconds is None or not isinstance(seconds, (int, float)) or math.isnan(seconds) or seconds < 0:
        return "unknown"
    if math.isinf(seconds):
        return "never"
    for limit, div, unit in ((90, 1, "s"), (90 * 60, 60, "min"), (48 * 3600, 3600, "h")):
        if seconds < limit:
            return f"{_sig(seconds / div)} {unit}"
    return f"{_sig(seconds / 86400)} days"


def days(d: float | None) -> str:
    """Days as ``17.5 days`` or ``3.2 years`` beyond two years; ``never`` when nothing grows."""
    if d is None or not isinstance(d, (int, float)) or math.isnan(d) or d < 0:
        return "unknown"
    if math.isinf(d):
        return "never"
    return f"{_sig(d / 365)} years" if d >= 730 else f"{_sig(d)} days"


def number(v: Any) -> str:
    """An integer with thousands separators, a float with three significant figures, a list as its items
    joined by ", " (``none`` when empty), a mapping as ``key value`` pairs, else ``str`` — never a
    Python repr (``['a']``)."""
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "—"}[v]
    if isinstance(v, (list, tuple, set, frozenset)):
        return ", ".join(number(x) for x in v) if v else "none"
    if isinstance(v, dict):
        return ", ".join(f"{k} {number(x)}" for k, x in v.items()) if v else "none"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        return _sig(v)
    return str(v)


def figure(key: str, v: Any) -> str:
    """``v`` formatted by the kind of ``key`` (:func:`kind_of`)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return number(v)
    kind = kind_of(key)
    if kind == "bytes":
        return size(v)
    if kind == "rate":
        return size(v) + "/s"
    if kind == "bytes_per_day":
        return size(v) + "/day"
    if kind == "duration":
        return duration(v)
    if kind == "days":
        return days(v)
    if kind == "ms":
        return timestamp(v) if "time" in key.lower().split("_") else duration(v / 1000)
    return number(v)


def timestamp(ms: float) -> str:
    """Milliseconds since the epoch as ``2026-05-28 20:26 UTC``."""
    import datetime

    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return number(ms)


def _sig(x: float) -> str:
    """Three significant figures, without an exponent: 0.523, 12.5, 245, 244,860."""
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{round(x):,}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{digits}f}"
