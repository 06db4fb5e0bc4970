"""The role sections of the settings tree: :class:`AuditorSettings` and :class:`WorkerSettings` (PURE).

They live in the config package (not in ``roles/``) so that :func:`autorecovery.config.load.load_settings`
can build ``Settings.auditor`` / ``Settings.worker`` without importing the roles (layer rule: config
must not import roles; every importer, the roles included, takes them from here).

Every key is in :data:`autorecovery.config.keys.KEYS`; each section only maps keys to fields
(:class:`~autorecovery.config.keys.sections.Section`). Field defaults equal the table's defaults
(tests/unit/config/test_settings_tree.py); the loader builds the sections from the values it parsed
once, so a default written here never overrides the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from autorecovery.audit.maintenance import guard_level
from autorecovery.config.keys.sections import Section
from autorecovery.errors import ConfigError
from autorecovery.ledger.credentials import RecoveryCredentials, parse_digest_type
from autorecovery.ledger.metadata import DigestType

__all__ = ["AuditorSettings", "WorkerSettings"]


def _digest_type(value: str) -> DigestType:
    try:
        return parse_digest_type(value, "digestType")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _password(value: str) -> bytes:
    return str(value).encode("utf-8")  # upstream getBookieRecoveryPasswd: getString(...).getBytes(UTF_8)


#: ``digestType``/``passwd`` (upstream ClientConfiguration): the fallback credentials of ledgers whose
#: metadata stores no password; both role sections read them (the Auditor's checker verifies entries,
#: the worker copies them)
_RECOVERY_KEYS = {"digestType": "recovery_digest_type", "passwd": "recovery_password"}
_RECOVERY_CONVERT = {"digestType": _digest_type, "passwd": _password}


@dataclass(frozen=True)
class AuditorSettings(Section):
    """Auditor configuration; field names are upstream keys in snake_case, with the table's defaults.

    Units: ``*_interval``, ``lost_bookie_recovery_delay``, ``*_grace_period`` in seconds;
    ``*_msec`` in ms. Keys marked (ours) are not upstream's. ``autorecovery_down_out_subtree_limit``
    holds the level with ``none`` stored as ``""`` (guard off).
    """

    auditor_periodic_check_interval: int = 604800
    auditor_periodic_bookie_check_interval: int = 86400
    auditor_periodic_placement_policy_check_interval: int = 0
    auditor_replicas_check_interval: int = 0
    auditor_ledger_verification_percentage: int = 0
    lost_bookie_recovery_delay: int = 0
    underreplicated_ledger_recovery_grace_period: int = 0
    repaired_placement_policy_not_adhering_bookie_enabled: bool = False
    auditor_max_number_of_concurrent_open_ledger_operations: int = 500
    auditor_acquire_concurrent_open_ledger_operations_time_out_msec: int = 120000
    in_flight_read_entry_num_in_ledger_checker: int = -1
    store_system_time_as_ledger_underreplicated_mark_time: bool = True
    #: (ours) the replicas check also marks ledgers with an entry below WQ copies.
    auditor_replicas_check_mark_under_replicated: bool = False
    #: (ours) seconds between full reconciles of the incremental index with ZooKeeper; 0 disables.
    auditor_ledger_index_reconcile_interval: int = 21600
    #: (ours) seconds between cheap consistency checks of the index (ids count + digest); 0 disables.
    auditor_ledger_index_check_interval: int = 60
    #: (ours) Pulsar namespaces with their own series in the by-namespace gauges (the rest: "other").
    auditor_topic_metrics_max_namespaces: int = 20
    #: (ours) rack-loss guard level: "" (off, upstream; the key's ``none``), "rack", "zone" or "region".
    autorecovery_down_out_subtree_limit: str = ""
    #: ``digestType``: digest of ledgers whose metadata stores no password (the checker verifies with it).
    recovery_digest_type: DigestType = DigestType.CRC32
    #: ``passwd`` as UTF-8 bytes (a secret: never in repr).
    recovery_password: bytes = field(default=b"", repr=False)

    #: upstream (or our) key → field name
    KEY_FIELDS: ClassVar[Mapping[str, str]] = {
        "auditorPeriodicCheckInterval": "auditor_periodic_check_interval",
        "auditorPeriodicBookieCheckInterval": "auditor_periodic_bookie_check_interval",
        "auditorPeriodicPlacementPolicyCheckInterval": "auditor_periodic_placement_policy_check_interval",
        "auditorReplicasCheckInterval": "auditor_replicas_check_interval",
        "auditorLedgerVerificationPercentage": "auditor_ledger_verification_percentage",
        "lostBookieRecoveryDelay": "lost_bookie_recovery_delay",
        "underreplicatedLedgerRecoveryGracePeriod": "underreplicated_ledger_recovery_grace_period",
        "repairedPlacementPolicyNotAdheringBookieEnabled": "repaired_placement_policy_not_adhering_bookie_enabled",
        "auditorMaxNumberOfConcurrentOpenLedgerOperations": "auditor_max_number_of_concurrent_open_ledger_operations",
        "auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec":
            "auditor_acquire_concurrent_open_ledger_operations_time_out_msec",
        "inFlightReadEntryNumInLedgerChecker": "in_flight_read_entry_num_in_ledger_checker",
        "storeSystemTimeAsLedgerUnderreplicatedMarkTime": "store_system_time_as_ledger_underreplicated_mark_time",
        "auditorReplicasCheckMarkUnderReplicated": "auditor_replicas_check_mark_under_replicated",
        "auditorLedgerIndexReconcileInterval": "auditor_ledger_index_reconcile_interval",
        "auditorLedgerIndexCheckInterval": "auditor_ledger_index_check_interval",
        "auditorTopicMetricsMaxNamespaces": "auditor_topic_metrics_max_namespaces",
        "autorecoveryDownOutSubtreeLimit": "autorecovery_down_out_subtree_limit",
        **_RECOVERY_KEYS,
    }
    #: older name of :attr:`KEY_FIELDS`
    KEYS = KEY_FIELDS
    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"autorecoveryDownOutSubtreeLimit": guard_level,
                                                              **_RECOVERY_CONVERT}

    @property
    def recovery(self) -> RecoveryCredentials:
        """``digestType``/``passwd``: what opens a ledger whose metadata stores no password."""
        return RecoveryCredentials(self.recovery_digest_type, self.recovery_password)

    def __post_init__(self) -> None:
        if self.auditor_max_number_of_concurrent_open_ledger_operations <= 0:
            raise ConfigError("auditorMaxNumberOfConcurrentOpenLedgerOperations must be > 0 "
                              f"(got {self.auditor_max_number_of_concurrent_open_ledger_operations})")
        if self.auditor_acquire_concurrent_open_ledger_operations_time_out_msec < 0:
            raise ConfigError("auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec must be >= 0")
        guard_level(self.autorecovery_down_out_subtree_limit or "none")
        if not 0 <= self.auditor_ledger_verification_percentage <= 100:
            raise ConfigError("auditorLedgerVerificationPercentage must be within 0..100 "
                              f"(got {self.auditor_ledger_verification_percentage})")


@dataclass(frozen=True)
class WorkerSettings(Section):
    """Settings of one ReplicationWorker (upstream key → field; units in the field names).

    | key | field | default |
    |---|---|---|
    | openLedgerRereplicationGracePeriod | open_ledger_grace_ms | 30000 |
    | lockReleaseOfFailedLedgerGracePeriod | lock_release_grace_ms | 300000 |
    | rwRereplicateBackoffMs | backoff_ms | 5000 |
    | rereplicationEntryBatchSize | batch_size | 10 |
    | replicationRateByBytes | rate_bytes_per_s | -1 (off) |
    | zkReplicationTaskRateLimit | task_rate_per_s | 0 (off) |
    | repairedPlacementPolicyNotAdheringBookieEnabled | repair_placement | false |
    | auditorLedgerVerificationPercentage | verification_percentage | 0 |
    | inFlightReadEntryNumInLedgerChecker | checker_in_flight | -1 |
    | replicationWorkerConcurrentLedgers (ours) | concurrent_ledgers | 4 |
    | replicationMaxStreamsPerSourceBookie (ours) | max_streams_per_source | 4 |
    | replicationMaxStreamsPerTargetBookie (ours) | max_streams_per_target | 4 |
    | replicationStreamWindowBytes (ours) | stream_window_bytes | 16 MiB |
    | adaptiveThrottleEnabled (ours) | adaptive_throttle | true |
    | replicationLatencyBudgetFactor (ours) | latency_budget_factor | 2.0 |
    | replicationAdaptiveFloorBytesPerSec (ours) | adaptive_floor_bytes_per_s | 1 MiB/s |
    | digestType | recovery_digest_type | CRC32 |
    | passwd | recovery_password (bytes, never in repr) | empty |

    ``rereplicationEntryBatchSize`` keeps its meaning as the unit of work in flight: a copy stream
    queues up to ``max(batch_size, 256)`` entries and ``stream_window_bytes`` bytes per target (upstream
    copies one batch at a time and waits for it; we stream, so the window hides the target's fsync).
    """

    open_ledger_grace_ms: int = 30000
    lock_release_grace_ms: int = 300000
    backoff_ms: int = 5000
    batch_size: int = 10
    rate_bytes_per_s: int = -1
    task_rate_per_s: float = 0.0
    repair_placement: bool = False
    verification_percentage: int = 0
    checker_in_flight: int = -1
    concurrent_ledgers: int = 4
    max_streams_per_source: int = 4
    max_streams_per_target: int = 4
    stream_window_bytes: int = 16 * 1024 * 1024
    adaptive_throttle: bool = True
    latency_budget_factor: float = 2.0
    adaptive_floor_bytes_per_s: int = 1024 * 1024
    recovery_digest_type: DigestType = DigestType.CRC32
    recovery_password: bytes = field(default=b"", repr=False)

    KEY_FIELDS: ClassVar[Mapping[str, str]] = {
        "openLedgerRereplicationGracePeriod": "open_ledger_grace_ms",
        "lockReleaseOfFailedLedgerGracePeriod": "lock_release_grace_ms",
        "rwRereplicateBackoffMs": "backoff_ms",
        "rereplicationEntryBatchSize": "batch_size",
        "replicationRateByBytes": "rate_bytes_per_s",
        "zkReplicationTaskRateLimit": "task_rate_per_s",
        "repairedPlacementPolicyNotAdheringBookieEnabled": "repair_placement",
        "auditorLedgerVerificationPercentage": "verification_percentage",
        "inFlightReadEntryNumInLedgerChecker": "checker_in_flight",
        "replicationWorkerConcurrentLedgers": "concurrent_ledgers",
        "replicationMaxStreamsPerSourceBookie": "max_streams_per_source",
        "replicationMaxStreamsPerTargetBookie": "max_streams_per_target",
        "replicationStreamWindowBytes": "stream_window_bytes",
        "adaptiveThrottleEnabled": "adaptive_throttle",
        "replicationLatencyBudgetFactor": "latency_budget_factor",
        "replicationAdaptiveFloorBytesPerSec": "adaptive_floor_bytes_per_s",
        **_RECOVERY_KEYS,
    }
    CONVERT = _RECOVERY_CONVERT

    @property
    def recovery(self) -> RecoveryCredentials:
        """``digestType``/``passwd``: what opens a ledger whose metadata stores no password."""
        return RecoveryCredentials(self.recovery_digest_type, self.recovery_password)

    def __post_init__(self) -> None:
        bad = []
        for name, low in (("concurrent_ledgers", 1), ("batch_size", 1), ("stream_window_bytes", 1),
                          ("open_ledger_grace_ms", 0), ("lock_release_grace_ms", 0), ("backoff_ms", 0)):
            if getattr(self, name) < low:
                bad.append(f"{name}={getattr(self, name)} (must be >= {low})")
        if not 0 <= self.verification_percentage <= 100:
            bad.append(f"verification_percentage={self.verification_percentage} (must be within 0..100)")
        if not self.latency_budget_factor > 1:
            bad.append(f"latency_budget_factor={self.latency_budget_factor} (replicationLatencyBudgetFactor, must be > 1)")
        if self.adaptive_floor_bytes_per_s < 1:
            bad.append(f"adaptive_floor_bytes_per_s={self.adaptive_floor_bytes_per_s} "
                       "(replicationAdaptiveFloorBytesPerSec, must be >= 1)")
        if bad:
            raise ConfigError("bad worker settings: " + ", ".join(bad))

    def loggable(self) -> dict[str, object]:
        """Field → value for a log line: ``recovery_password`` (``passwd``, a secret) shows as ``******``
        when set, the digest type by name."""
        out: dict[str, object] = {f: getattr(self, f) for f in self.KEY_FIELDS.values()}
        out["recovery_digest_type"] = self.recovery_digest_type.name
        out["recovery_password"] = "******" if self.recovery_password else ""
        return out

    def to_properties(self) -> dict[str, str]:
        """The settings as ``bk_server.conf`` strings by key (round-trips through ``from_properties``);
        ``passwd`` included in clear (a conf file holds it): never log this."""
        out = {}
        for key_name, fname in self.KEY_FIELDS.items():
            v = getattr(self, fname)
            if isinstance(v, DigestType):
                out[key_name] = "MAC" if v == DigestType.HMAC else v.name
            elif isinstance(v, bytes):
                out[key_name] = v.decode("utf-8")
            else:
                out[key_name] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out
