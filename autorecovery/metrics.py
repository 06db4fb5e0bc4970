"""Metrics under upstream BookKeeper's exact names (counters, gauges, OpStats).

Upstream's stats API (``org.apache.bookkeeper.stats``) has three kinds of metric, scoped by a
``StatsLogger`` and joined with ``_`` by its Prometheus provider:

* ``Counter`` → one sample named ``<scope>_<NAME>`` (no ``_total`` suffix: prometheus-client's own
  ``Counter`` would add one, which breaks dashboards written for upstream);
* ``Gauge`` → one sample ``<scope>_<NAME>``;
* ``OpStatsLogger`` (latency in ms, or a plain value) → a summary with the label
  ``success="true"|"false"``: ``<name>{success,quantile}``, ``<name>_count`` and ``<name>_sum``.

This module keeps them in a :class:`MetricsRegistry` that is also a prometheus-client *collector*
(``prometheus_client.generate_latest(registry)`` works), and :func:`generate_text` writes upstream's
exposition exactly (``# TYPE x counter`` followed by ``x 3``). Roles get their metrics with
``metrics.counter("auditor", "NUM_LEDGERS_CHECKED")``; asking twice returns the same object.

Metrics that are ours (not upstream's) use Prometheus style names, e.g.
``metrics.counter("autorecovery", "audit_zk_ops_total", labels={"audit": "lost_bookie"})``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Quantiles exported for every OpStats (upstream's Prometheus provider exports these).
QUANTILES = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
#: Values kept per OpStats series for quantiles (a sliding window of the latest values).
WINDOW = 1024

Labels = tuple[tuple[str, str], ...]


def _name(scope: str, name: str) -> str:
    return f"{scope}_{name}" if scope else name


def _labels(labels: dict[str, str] | None) -> Labels:
    return tuple(sorted((labels or {}).items()))


class Counter:
    """A monotonically increasing count (upstream ``Counter``). Thread-safe."""

    kind = "counter"

    def __init__(self, name: str, labels: Labels = (), doc: str = "") -> None:
        self.name, self.labels, self.doc = name, labels, doc
        self._value = 0
        self._lock = threading.Lock()

    def inc(self, n: int = 1) -> None:
        with self._lock:
            self._value += n

    def add(self, n: int) -> None:
        self.inc(n)

    @property
    def value(self) -> int:
        return self._value

    def samples(self) -> list[tuple[str, Labels, float]]:
        return [(self.name, self.labels, float(self._value))]


class Gauge:
    """A value that goes up and down (upstream ``Gauge``), or a function read at collection time."""

    kind = "gauge"

    def __init__(self, name: str, labels: Labels = (), doc: str = "") -> None:
        self.name, self.labels, self.doc = name, labels, doc
        self._value: float = 0
        self._fn: Callable[[], float] | None = None

    def set(self, value: float) -> None:
        self._value = value

    def inc(self, n: float = 1) -> None:
        self._value += n

    def dec(self, n: float = 1) -> None:
        self._value -= n

    def set_function(self, fn: Callable[[], float]) -> None:
        """Read the gauge from ``fn()`` at every collection (upstream registers Gauge suppliers)."""
        self._fn = fn

    @property
    def value(self) -> float:
        if self._fn is not None:
            try:
                return float(self._fn())
            except Exception:  # noqa: BLE001 - a broken supplier must not break /metrics
                return math.nan
        return self._value

    def samples(self) -> list[tuple[str, Labels, float]]:
        return [(self.name, self.labels, self.value)]


class _Series:
    __slots__ = ("count", "sum", "window")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.window: deque[float] = deque(maxlen=WINDOW)

    def quantile(self, q: float) -> float:
        if not self.window:
            return math.nan
        vals = sorted(self.window)
        return vals[min(len(vals) - 1, max(0, math.ceil(q * len(vals)) - 1))]


class OpStats:
    """Upstream ``OpStatsLogger``: latencies (ms) or values, split into success and failure series.

    ``record(value, success=True)``; ``time()`` is a context manager recording elapsed ms, as a
    failure when the block raises.
    """

    kind = "summary"

    def __init__(self, name: str, labels: Labels = (), doc: str = "") -> None:
        self.name, self.labels, self.doc = name, labels, doc
        self._series = {True: _Series(), False: _Series()}
        self._lock = threading.Lock()

    def record(self, value: float, success: bool = True) -> None:
        with self._lock:
            s = self._series[bool(success)]
            s.count += 1
            s.sum += value
            s.window.append(value)

    def count(self, success: bool = True) -> int:
        return self._series[bool(success)].count

    def total(self, success: bool = True) -> float:
        return self._series[bool(success)].sum

    def last(self, success: bool = True) -> float | None:
        w = self._series[bool(success)].window
        return w[-1] if w else None

    @contextmanager
    def time(self) -> Iterator[None]:
        start = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.record((time.monotonic() - start) * 1000.0, success=ok)

    def samples(self) -> list[tuple[str, Labels, float]]:
        out = []
        with self._lock:
            for success in (False, True):
                s = self._series[success]
                lab = self.labels + (("success", "true" if success else "false"),)
                for q in QUANTILES:
                    out.append((self.name, tuple(sorted(lab + (("quantile", repr(q)),))), s.quantile(q)))
                out.append((self.name + "_count", tuple(sorted(lab)), float(s.count)))
                out.append((self.name + "_sum", tuple(sorted(lab)), s.sum))
        return out


Metric = Counter | Gauge | OpStats


class MetricsRegistry:
    """Holds metrics by (exported name, labels); also a prometheus-client collector.

    Asking for an existing metric returns it; asking for an existing name with another kind raises
    ``ValueError`` naming the metric.
    """

    def __init__(self) -> None:
        self._metrics: dict[tuple[str, Labels], Metric] = {}
        self._lock = threading.Lock()

    def _get(self, cls: type, scope: str, name: str, labels: dict[str, str] | None, doc: str):
        full = _name(scope, name)
        key = (full, _labels(labels))
        with self._lock:
            m = self._metrics.get(key)
            if m is None:
                for (other, _), om in self._metrics.items():
                    if other == full and not isinstance(om, cls):
                        raise ValueError(f"metric {full} already registered as a {om.kind}")
                m = cls(full, key[1], doc)
                self._metrics[key] = m
            elif not isinstance(m, cls):
                raise ValueError(f"metric {full} already registered as a {m.kind}")
            return m

    def counter(self, scope: str, name: str, *, labels: dict[str, str] | None = None, doc: str = "") -> Counter:
        return self._get(Counter, scope, name, labels, doc)

    def gauge(self, scope: str, name: str, *, labels: dict[str, str] | None = None, doc: str = "") -> Gauge:
        return self._get(Gauge, scope, name, labels, doc)

    def op_stats(self, scope: str, name: str, *, labels: dict[str, str] | None = None, doc: str = "") -> OpStats:
        return self._get(OpStats, scope, name, labels, doc)

    def get(self, full_name: str, labels: dict[str, str] | None = None) -> Metric | None:
        """The metric exported as ``full_name`` (e.g. ``auditor_NUM_LEDGERS_CHECKED``), or None."""
        return self._metrics.get((full_name, _labels(labels)))

    def remove(self, full_name: str, labels: dict[str, str] | None = None) -> bool:
        """Drop one series (e.g. the gauges of a bookie that left); returns whether it existed."""
        with self._lock:
            return self._metrics.pop((full_name, _labels(labels)), None) is not None

    def families(self) -> dict[str, list[Metric]]:
        out: dict[str, list[Metric]] = {}
        with self._lock:
            for (full, _), m in sorted(self._metrics.items()):
                out.setdefault(full, []).append(m)
        return out

    # prometheus-client Collector protocol ------------------------------------------------------
    def collect(self):
        """Yield prometheus-client metric families. Counters are exported as ``unknown`` (untyped)
        so that prometheus-client does not append ``_total`` to upstream's names."""
        from prometheus_client.metrics_core import Metric as PMetric

        for full, ms in self.families().items():
            kind = ms[0].kind
            fam = PMetric(full, ms[0].doc or full, {"counter": "unknown", "gauge": "gauge", "summary": "summary"}[kind])
            for m in ms:
                for sname, labels, value in m.samples():
                    fam.add_sample(sname, dict(labels), value)
            yield fam

    def describe(self):
        return []


def generate_text(registry: "MetricsRegistry | None" = None) -> bytes:
    """Prometheus text exposition exactly as upstream's provider writes it (counters keep their
    names: ``# TYPE auditor_NUM_LEDGERS_CHECKED counter`` / ``auditor_NUM_LEDGERS_CHECKED 3``)."""
    reg = registry or REGISTRY
    lines: list[str] = []
    for full, ms in reg.families().items():
        lines.append(f"# TYPE {full} {ms[0].kind}")
        for m in ms:
            for sname, labels, value in m.samples():
                lab = ",".join(f'{k}="{v}"' for k, v in labels)
                v = "NaN" if math.isnan(value) else repr(float(value))
                lines.append(f"{sname}{{{lab}}} {v}" if lab else f"{sname} {v}")
    return ("\n".join(lines) + "\n").encode()


#: The process-wide registry used by the roles (the daemon serves it on /metrics).
REGISTRY = MetricsRegistry()


def counter(scope: str, name: str, **kw) -> Counter:
    """A counter in the process registry, e.g. ``counter("auditor", "NUM_LEDGERS_CHECKED")``."""
    return REGISTRY.counter(scope, name, **kw)


def gauge(scope: str, name: str, **kw) -> Gauge:
    return REGISTRY.gauge(scope, name, **kw)


def op_stats(scope: str, name: str, **kw) -> OpStats:
    return REGISTRY.op_stats(scope, name, **kw)
