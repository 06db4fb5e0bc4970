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

    def record_many(self, count: int, total: float, success: bool = True) -> None:
        """Record ``count`` values summing to ``total`` at once (each counted as their mean in the
        quantile window, at most a window's worth of samples): O(1) for a stream of millions of entries."""
        if count <= 0:
            return
        mean = total / count
        with self._lock:
            s = self._series[bool(success)]
            s.count += count
            s.sum += total
            s.window.extend([mean] * min(count, WINDOW))

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
                lab = (*self.labels, ("success", "true" if success else "false"))
                for q in QUANTILES:
                    out.append((self.name, tuple(sorted((*lab, ("quantile", repr(q))))), s.quantile(q)))
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
            fam = PMetric(full, help_text(full, ms), {"counter": "unknown", "gauge": "gauge", "summary": "summary"}[kind])
            for m in ms:
                for sname, labels, value in m.samples():
                    fam.add_sample(sname, dict(labels), value)
            yield fam

    def describe(self):
        return []


#: ``# HELP`` text of every family we export, by full name (a metric created with ``doc=`` uses its own).
#: Upstream's OpStats are latencies in ms unless said otherwise; its counters keep upstream's names
#: (no ``_total``), as dashboards written for upstream expect.
HELP: dict[str, str] = {
    "auditor_AUDIT_BOOKIES_TIME": "time of one lost-bookie audit (ms), by success (upstream)",
    "auditor_BOOKIE_TO_LEDGERS_MAP_CREATION_TIME": "time to build the bookie -> ledgers map of an audit (ms)",
    "auditor_CHECK_ALL_LEDGERS_TIME": "time of one periodic check of all ledgers (ms), by success (upstream)",
    "auditor_NUM_BOOKIES_PER_LEDGER": "bookies per ledger seen by the periodic check (a count, not ms)",
    "auditor_NUM_BOOKIE_AUDITS_DELAYED": "lost-bookie audits postponed by lostBookieRecoveryDelay",
    "auditor_NUM_DELAYED_BOOKIE_AUDITS_CANCELLED": "postponed lost-bookie audits cancelled (the bookie returned)",
    "auditor_NUM_FRAGMENTS_PER_LEDGER": "fragments per ledger seen by the periodic check (a count, not ms)",
    "auditor_NUM_LEDGERS_CHECKED": "ledgers checked by the periodic ledger check",
    "auditor_NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY":
        "ledgers with an entry on fewer than AQ bookies, last replicas check",
    "auditor_NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY":
        "ledgers with an entry on fewer than WQ bookies, last replicas check",
    "auditor_NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY": "ledgers with an entry on no bookie, last replicas check",
    "auditor_NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY": "ledgers breaking the placement policy, last placement check",
    "auditor_NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY":
        "ledgers only softly adhering to the placement policy, last placement check",
    "auditor_NUM_SKIPPING_CHECK_TASK_TIMES": "periodic checks skipped because another check was running",
    "auditor_NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD":
        "marked ledgers still under-replicated after underreplicatedLedgerRecoveryGracePeriod",
    "auditor_NUM_UNDER_REPLICATED_LEDGERS": "ledgers marked per lost-bookie audit (a count, not ms)",
    "auditor_PLACEMENT_POLICY_CHECK_TIME": "time of one placement policy check (ms), by success (upstream)",
    "auditor_REPLICAS_CHECK_TIME": "time of one replicas check (ms), by success (upstream)",
    "auditor_UNDER_REPLICATED_LEDGERS_TOTAL_SIZE": "bytes of the ledgers marked per audit (a size, not ms)",
    "auditor_URL_PUBLISH_TIME_FOR_LOST_BOOKIE": "time to publish the markers of a lost bookie (ms)",
    "auditor_election_attempts": "Auditor election votes cast by this node",
    "autorecovery_admin_requests_total":
        "admin HTTP requests audited (mutations, secret-revealing reads, refusals), by action (method and "
        "route) and result: ok, denied (401/403), rejected (other 4xx), failed (5xx) (ours)",
    "autorecovery_audit_zk_ops_total": "ZooKeeper operations of audits, by audit kind (ours)",
    "autorecovery_auditor_event_errors_total": "bookie events the Auditor failed to handle, by retriable (ours)",
    "autorecovery_auditor_index_checks_total": "consistency checks of the Auditor's bookie -> ledger index (ours)",
    "autorecovery_auditor_index_drift_found_total": "index checks that found drift from ZooKeeper (ours)",
    "autorecovery_auditor_index_drift_ledgers": "ledgers the last index check found out of date (ours)",
    "autorecovery_auditor_index_ledgers": "ledgers in the Auditor's index (ours)",
    "autorecovery_auditor_index_lost_watches": "index watches lost and not yet re-armed (ours)",
    "autorecovery_auditor_index_reconcile_mismatches_total": "ledgers a full reconcile corrected in the index (ours)",
    "autorecovery_bookie_free_disk_bytes": "free disk of each bookie from GET_BOOKIE_INFO, bytes (ours)",
    "autorecovery_bookie_total_disk_bytes": "disk capacity of each bookie from GET_BOOKIE_INFO, bytes (ours)",
    "autorecovery_maintenance_held_bookies": "bookies whose audit a maintenance window holds (ours)",
    "autorecovery_maintenance_overridden_ledgers_total":
        "ledgers healed despite a maintenance window because they fell below AQ (ours)",
    "autorecovery_maintenance_windows": "open maintenance windows (ours)",
    "autorecovery_placement_no_more_bookie_total": "placements that found no bookie to choose (ours)",
    "autorecovery_placement_probability": "chance of each bookie being chosen by disk-weight placement (ours)",
    "autorecovery_placement_weight": "disk weight of each bookie in placement (ours)",
    "autorecovery_rack_loss_guard_domains": "failure domains the rack-loss guard holds back (ours)",
    "autorecovery_rack_loss_guard_held_bookies": "bookies of domains the rack-loss guard holds back (ours)",
    "autorecovery_replication_copies_cancelled_total": "copies cancelled because their bookie returned (ours)",
    "autorecovery_replication_corrupt_source_entries_total": "entries not copied because the source copy failed its digest (ours)",
    "autorecovery_unrecoverable_ledgers_total": "ledgers this node surfaced as unrecoverable (ours)",
    "autorecovery_worker_bytes_remaining": "bytes this worker still has to copy (ours)",
    "autorecovery_worker_ledgers_blocked": "ledgers this worker cannot heal now, by reason (ours)",
    "autorecovery_worker_ledgers_remaining": "ledgers this worker still has to heal (ours)",
    "replication_worker_NUM_BYTES_READ": "bytes read per entry for re-replication (a size, not ms)",
    "replication_worker_NUM_BYTES_WRITTEN": "bytes written per entry for re-replication (a size, not ms)",
    "replication_worker_NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER":
        "failed ledgers whose lock release was deferred (lockReleaseOfFailedLedgerGracePeriod)",
    "replication_worker_NUM_ENTRIES_READ": "entries read for re-replication",
    "replication_worker_NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION": "entries no replica could serve for re-replication",
    "replication_worker_NUM_ENTRIES_WRITTEN": "entries written for re-replication",
    "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED": "ledgers fully or partly re-replicated",
    "replication_worker_NUM_NOT_ADHERING_PLACEMENT_LEDGERS_REPLICATED": "ledgers moved to adhere to the placement policy",
    "replication_worker_READ_DATA_LATENCY": "latency of reading an entry for re-replication (ms)",
    "replication_worker_WRITE_DATA_LATENCY": "latency of writing entries for re-replication (ms)",
    "replication_worker_rereplicate": "time of one re-replication pass over a ledger (ms), by success (upstream)",
}


def help_text(full: str, metrics: list[Metric]) -> str:
    """The ``# HELP`` text of a family: a metric's own ``doc``, else :data:`HELP`, else a line built
    from the name (``replication_worker_exceptions_<type>`` and other names made at run time)."""
    for m in metrics:
        if m.doc:
            return m.doc
    if full in HELP:
        return HELP[full]
    if "_exceptions_" in full:
        return f"exceptions of type {full.rsplit('_exceptions_', 1)[1]} raised in this role"
    return full.replace("_", " ")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def generate_text(registry: MetricsRegistry | None = None) -> bytes:
    """Prometheus text exposition exactly as upstream's provider writes it (counters keep their
    names: ``# TYPE auditor_NUM_LEDGERS_CHECKED counter`` / ``auditor_NUM_LEDGERS_CHECKED 3``)."""
    reg = registry or REGISTRY
    lines: list[str] = []
    for full, ms in reg.families().items():
        lines.append(f"# HELP {full} {_escape_help(help_text(full, ms))}")
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
