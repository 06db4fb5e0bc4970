"""The Auditor's metric handles (EDGE): upstream's names under ``auditor_``, ours under ``autorecovery_``.

Upstream source: ``AuditorStats`` (op stats, counters and gauges of the auditor and its check tasks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autorecovery import metrics

SCOPE = "auditor"


class AuditorMetrics:
    """The metric handles of the :class:`~autorecovery.roles.auditor.Auditor`.

    Args:
        reg: the registry. index_size: ``() -> ledgers in the index`` (a gauge function).
        lost_watches: ``() -> watches the ledger tree lost`` (a gauge function).

    Attributes:
        m: handle by name (upstream's ``AuditorStats`` names, and ours).
        zk_ops: ``autorecovery_audit_zk_ops_total`` by audit (``lost_bookie``, ``bookie_check``, each check).
    """

    def __init__(self, reg: metrics.MetricsRegistry, index_size: Callable[[], int],
                 lost_watches: Callable[[], int]) -> None:
        self.m = self._metrics(reg, index_size, lost_watches)
        self.zk_ops: dict[str, metrics.Counter] = {
            k: reg.counter("autorecovery", "audit_zk_ops_total", labels={"audit": k})
            for k in ("lost_bookie", "bookie_check", "check_all_ledgers", "placement_check",
                      "replicas_check", "index_reconcile", "index_consistency")}

    @staticmethod
    def _metrics(reg: metrics.MetricsRegistry, index_size: Callable[[], int],
                 lost_watches: Callable[[], int]) -> dict[str, Any]:
        op = ("NUM_UNDER_REPLICATED_LEDGERS", "UNDER_REPLICATED_LEDGERS_TOTAL_SIZE", "URL_PUBLISH_TIME_FOR_LOST_BOOKIE",
              "BOOKIE_TO_LEDGERS_MAP_CREATION_TIME", "AUDIT_BOOKIES_TIME", "CHECK_ALL_LEDGERS_TIME",
              "PLACEMENT_POLICY_CHECK_TIME", "REPLICAS_CHECK_TIME", "NUM_FRAGMENTS_PER_LEDGER", "NUM_BOOKIES_PER_LEDGER")
        cnt = ("NUM_LEDGERS_CHECKED", "NUM_BOOKIE_AUDITS_DELAYED", "NUM_DELAYED_BOOKIE_AUDITS_CANCELLED",
               "NUM_SKIPPING_CHECK_TASK_TIMES")
        gauges = ("NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY", "NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY",
                  "NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD", "NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY",
                  "NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY",
                  "NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY")
        m: dict[str, Any] = {}
        for n in op:
            m[n] = reg.op_stats(SCOPE, n)
        for n in cnt:
            m[n] = reg.counter(SCOPE, n)
        for n in gauges:
            m[n] = reg.gauge(SCOPE, n)
        m["election_attempts"] = reg.counter(SCOPE, "election_attempts")
        m["index_ledgers"] = reg.gauge("autorecovery", "auditor_index_ledgers")
        m["index_ledgers"].set_function(index_size)
        m["index_mismatches"] = reg.counter("autorecovery", "auditor_index_reconcile_mismatches_total")
        m["index_drift"] = reg.gauge("autorecovery", "auditor_index_drift_ledgers")
        m["index_checks"] = reg.counter("autorecovery", "auditor_index_checks_total")
        m["index_drift_found"] = reg.counter("autorecovery", "auditor_index_drift_found_total")
        m["index_lost_watches"] = reg.gauge("autorecovery", "auditor_index_lost_watches")
        m["index_lost_watches"].set_function(lost_watches)
        m["maint_windows"] = reg.gauge("autorecovery", "maintenance_windows")
        m["maint_held"] = reg.gauge("autorecovery", "maintenance_held_bookies")
        m["guard_domains"] = reg.gauge("autorecovery", "rack_loss_guard_domains")
        m["guard_held"] = reg.gauge("autorecovery", "rack_loss_guard_held_bookies")
        m["data_first"] = reg.counter("autorecovery", "maintenance_overridden_ledgers_total")
        m["event_errors"] = {r: reg.counter("autorecovery", "auditor_event_errors_total", labels={"retriable": r},
                                            doc="failed bookie-change/delay/audit events, by retriable")
                             for r in ("true", "false")}
        return m
