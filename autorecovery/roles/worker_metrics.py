"""The ReplicationWorker's metric handles (EDGE): upstream's names under ``replication_worker_``, ours
Prometheus style under ``autorecovery_``.

Upstream source: ``ReplicationWorker`` / ``ReplicationStats`` (the ``NUM_*`` counters and op stats).
"""

from __future__ import annotations

from autorecovery import metrics as metrics_mod

SCOPE = "replication_worker"
OUR_SCOPE = "autorecovery"


class WorkerMetrics:
    """The worker's metric handles (upstream names under ``replication_worker_``; ours Prometheus style)."""

    def __init__(self, registry: metrics_mod.MetricsRegistry, scope: str = SCOPE) -> None:
        self.registry, self.scope = registry, scope
        c, o = registry.counter, registry.op_stats
        self.rereplicate = o(scope, "rereplicate")
        self.replicated = c(scope, "NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED")
        self.replicated_placement = c(scope, "NUM_NOT_ADHERING_PLACEMENT_LEDGERS_REPLICATED")
        self.defer = c(scope, "NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER")
        self.unable_to_read = c(scope, "NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION")
        self.entries_read = c(scope, "NUM_ENTRIES_READ")
        self.entries_written = c(scope, "NUM_ENTRIES_WRITTEN")
        self.bytes_read = o(scope, "NUM_BYTES_READ")
        self.bytes_written = o(scope, "NUM_BYTES_WRITTEN")
        self.read_latency = o(scope, "READ_DATA_LATENCY")
        self.write_latency = o(scope, "WRITE_DATA_LATENCY")
        # per-worker figures (sum() over nodes is the cluster's work in hand); the cluster-wide counts
        # are the auditor's autorecovery_underreplicated_* / autorecovery_unrecoverable_ledgers
        self.bytes_remaining = registry.gauge(OUR_SCOPE, "worker_bytes_remaining",
                                              doc="estimated bytes this worker still has to copy for the ledgers it holds")
        self.ledgers_remaining = registry.gauge(OUR_SCOPE, "worker_ledgers_remaining",
                                                doc="ledgers this worker holds (locked: in progress or backing off)")
        self.ledgers_blocked = registry.gauge(OUR_SCOPE, "worker_ledgers_blocked",
                                              doc="still-marked ledgers this worker's last pass left blocked")
        self.unrecoverable_total = c(OUR_SCOPE, "unrecoverable_ledgers_total",
                                     doc="times a ledger was surfaced as unrecoverable")
        self.no_more_bookie = c(OUR_SCOPE, "placement_no_more_bookie_total",
                                doc="BP-54 repairs impossible: no bookie can make the segment adhere")
        self.corrupt_source_entries = c(OUR_SCOPE, "replication_corrupt_source_entries_total",
                                        doc="source copies that failed the digest check and were not copied")
        self.copies_cancelled = c(OUR_SCOPE, "replication_copies_cancelled_total",
                                  doc="fragment copies skipped or aborted because the lost bookie came back")

    #: the reasons of the adaptive throttle (autorecovery.plan.adaptive_rate), one series each
    RATE_REASONS = ("idle", "slow", "recovering", "floor")

    def rate_limit(self, bookie_id: str, limit: float | None, reason: str) -> None:
        """Publish one bookie's adaptive copy limit: ``autorecovery_replication_rate_limit_bytes_per_second``
        (-1: no limit) and ``autorecovery_replication_rate_limit_reason`` (1 for the current reason, 0 for
        the others), both labelled ``bookie``."""
        g = self.registry.gauge
        g(OUR_SCOPE, "replication_rate_limit_bytes_per_second", labels={"bookie": bookie_id},
          doc="the adaptive throttle's byte rate limit of copies through this bookie; -1 none").set(
            -1.0 if limit is None else float(limit))
        for r in self.RATE_REASONS:
            g(OUR_SCOPE, "replication_rate_limit_reason", labels={"bookie": bookie_id, "reason": r},
              doc="why the adaptive throttle limits this bookie (1: the current reason)").set(1.0 if r == reason else 0.0)

    def exception(self, exc: BaseException | None) -> None:
        """Count ``exc`` under its upstream name (or its class name); None counts nothing."""
        if exc is None:
            return
        name = getattr(exc, "upstream_name", None) or type(exc).__name__
        self.registry.counter(self.scope, f"exceptions_{name}").inc()
