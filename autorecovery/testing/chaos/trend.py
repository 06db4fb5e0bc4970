"""RSS and open-fd trends of a chaos campaign's processes over a soak (PURE: no I/O; issue 26).

The campaign samples every bookie and daemon (``/proc`` via psutil, see
:class:`autorecovery.testing.chaos.checks.Sampler`) every few seconds and feeds :meth:`Trends.add`.
A process killed and started again is a new *incarnation* (a new pid) of the same name: its memory
starts from scratch, so a slope is only meaningful within one incarnation. Per name the report gives the
start, peak and end values and the least-squares slope per hour of the **longest** incarnation, with
its first :data:`WARMUP_S` seconds left out (start-up growth: imports, caches, gRPC channels).

A process is *flat* when that incarnation spans at least :data:`MIN_SPAN_S` (after warm-up) and its
RSS slope is at most :data:`RSS_FLAT_MIB_PER_H` MiB/h and its fd slope at most :data:`FDS_FLAT_PER_H`
per hour; *growing* when either bound is exceeded; *too short* otherwise (no incarnation lived long
enough: the faults kept restarting it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: seconds of an incarnation's start left out of its slope
WARMUP_S = 60.0
#: shortest incarnation (after warm-up, seconds) whose slope is judged
MIN_SPAN_S = 600.0
#: flat bounds: RSS growth in MiB per hour, open fds per hour
RSS_FLAT_MIB_PER_H = 16.0
FDS_FLAT_PER_H = 4.0


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(t seconds, value)`` points, in value units per hour (0.0 for fewer
    than two distinct times)."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / var * 3600.0


@dataclass
class Incarnation:
    """One pid's samples: ``(t monotonic s, rss bytes, open fds)`` in time order."""

    pid: int
    samples: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last sample (0.0 without samples)."""
        return self.samples[-1][0] - self.samples[0][0] if self.samples else 0.0

    def steady(self) -> list[tuple[float, int, int]]:
        """The samples after the first :data:`WARMUP_S` seconds."""
        t0 = self.samples[0][0] if self.samples else 0.0
        return [s for s in self.samples if s[0] - t0 >= WARMUP_S]


@dataclass
class Trends:
    """name (``bookie-0``, ``daemon-3``) → pid → :class:`Incarnation`, in order of first sample."""

    procs: dict[str, dict[int, Incarnation]] = field(default_factory=dict)

    def add(self, name: str, pid: int, t: float, rss: int, fds: int) -> None:
        """Record one sample of process ``name`` (pid ``pid``): ``t`` monotonic s, ``rss`` bytes, ``fds`` count."""
        self.procs.setdefault(name, {}).setdefault(pid, Incarnation(pid)).samples.append((t, rss, fds))

    def summary(self, name: str) -> dict[str, float | int | str]:
        """Figures of ``name``: ``rss_start``/``rss_peak``/``rss_end`` (bytes) and ``rss_slope_mib_h``,
        ``fds_start``/``fds_peak``/``fds_end`` and ``fds_slope_h`` over its longest incarnation (peaks
        over all), ``span_s`` of that incarnation after warm-up, ``incarnations``, ``samples`` and
        ``verdict`` (``flat``, ``growing`` or ``too short``, see the module docstring).

        Raises:
            KeyError: ``name`` was never sampled.
        """
        incs = list(self.procs[name].values())
        longest = max(incs, key=lambda i: i.span_s)
        steady = longest.steady()
        span = steady[-1][0] - steady[0][0] if len(steady) > 1 else 0.0
        rss_slope = slope_per_hour([(t, r / 2**20) for t, r, _ in steady])
        fds_slope = slope_per_hour([(t, float(f)) for t, _, f in steady])
        if span < MIN_SPAN_S:
            verdict = "too short"
        elif rss_slope > RSS_FLAT_MIB_PER_H or fds_slope > FDS_FLAT_PER_H:
            verdict = "growing"
        else:
            verdict = "flat"
        every = [s for i in incs for s in i.samples]
        first, last = (steady or longest.samples)[0], longest.samples[-1]
        return {"rss_start": first[1], "rss_peak": max(s[1] for s in every), "rss_end": last[1],
                "rss_slope_mib_h": round(rss_slope, 2), "fds_start": first[2], "fds_peak": max(s[2] for s in every),
                "fds_end": last[2], "fds_slope_h": round(fds_slope, 2), "span_s": round(span, 1),
                "incarnations": len(incs), "samples": len(every), "verdict": verdict}

    def summaries(self) -> dict[str, dict[str, float | int | str]]:
        """name → :meth:`summary` for every process sampled, names sorted."""
        return {name: self.summary(name) for name in sorted(self.procs)}
