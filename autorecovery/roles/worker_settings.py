"""ReplicationWorker settings: upstream keys and defaults, plus the worker keys that are ours (PURE).

Upstream keys keep their names, units and defaults (``openLedgerRereplicationGracePeriod`` 30000 ms,
``lockReleaseOfFailedLedgerGracePeriod`` 300000 ms, ``rwRereplicateBackoffMs`` 5000 ms,
``rereplicationEntryBatchSize`` 10, ``replicationRateByBytes`` -1, ``zkReplicationTaskRateLimit`` 0, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from autorecovery.config.keys import KEY_BY_NAME, OURS, Key
from autorecovery.errors import ConfigError

#: Keys that are ours (declared here so the config loader does not call them unknown).
CONFIG_KEYS: tuple[Key, ...] = (
    Key("replicationWorkerConcurrentLedgers", "int", 4, "count",
        "ledgers one worker re-replicates at the same time (upstream: 1)", origin=OURS, group="worker",
        min_value=1),
    Key("replicationMaxStreamsPerSourceBookie", "int", 4, "count",
        "concurrent copy streams one worker reads from a single bookie; <= 0 unlimited", origin=OURS,
        group="worker"),
    Key("replicationMaxStreamsPerTargetBookie", "int", 4, "count",
        "concurrent copy streams one worker writes to a single bookie; <= 0 unlimited", origin=OURS,
        group="worker"),
    Key("replicationStreamWindowBytes", "int", 16 * 1024 * 1024, "bytes",
        "body bytes queued per target between a copy stream's read and its write (memory bound; at least "
        "one entry, at most max(rereplicationEntryBatchSize, 256) entries)", origin=OURS, group="worker",
        min_value=1),
)
_OUR_KEYS = {k.name: k for k in CONFIG_KEYS}


@dataclass(frozen=True)
class WorkerSettings:
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

    def __post_init__(self) -> None:
        bad = []
        for name, low in (("concurrent_ledgers", 1), ("batch_size", 1), ("stream_window_bytes", 1),
                          ("open_ledger_grace_ms", 0), ("lock_release_grace_ms", 0), ("backoff_ms", 0)):
            if getattr(self, name) < low:
                bad.append(f"{name}={getattr(self, name)} (must be >= {low})")
        if not 0 <= self.verification_percentage <= 100:
            bad.append(f"verification_percentage={self.verification_percentage} (must be within 0..100)")
        if bad:
            raise ConfigError("bad worker settings: " + ", ".join(bad))

    @staticmethod
    def key_map() -> dict[str, str]:
        """config key → field name."""
        return {
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
        }

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "WorkerSettings":
        """Parse the worker's keys from raw ``bk_server.conf`` properties (other keys are ignored).

        Raises:
            ConfigError: naming every key with a bad value.
        """
        values: dict[str, Any] = {}
        errors: list[str] = []
        for key_name, fname in cls.key_map().items():
            if key_name not in props:
                continue
            key = KEY_BY_NAME.get(key_name) or _OUR_KEYS[key_name]
            raw = props[key_name]
            try:
                values[fname] = key.parse(raw) if isinstance(raw, str) else raw
            except ConfigError as exc:
                errors.append(str(exc))
        if errors:
            raise ConfigError("; ".join(errors))
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        out = {}
        for key_name, fname in self.key_map().items():
            v = getattr(self, fname)
            out[key_name] = ("true" if v else "false") if isinstance(v, bool) else str(v)
        return out
