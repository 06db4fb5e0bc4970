"""WorkerSettings: upstream key names and defaults, our keys, bad values named (no I/O)."""

from __future__ import annotations

import pytest

from autorecovery.config.keys.table import KEY_BY_NAME
from autorecovery.errors import ConfigError
from autorecovery.config.sections import WorkerSettings
from autorecovery.roles.worker_settings import CONFIG_KEYS


def test_defaults_are_upstreams():
    s = WorkerSettings.from_properties({})
    assert (s.open_ledger_grace_ms, s.lock_release_grace_ms, s.backoff_ms, s.batch_size) == (30000, 300000, 5000, 10)
    assert (s.rate_bytes_per_s, s.task_rate_per_s, s.repair_placement, s.verification_percentage) == (-1, 0.0, False, 0)
    assert s.concurrent_ledgers == 4 and s.max_streams_per_source == 4 and s.max_streams_per_target == 4


def test_parses_upstream_and_our_keys():
    s = WorkerSettings.from_properties({
        "openLedgerRereplicationGracePeriod": "3000", "lockReleaseOfFailedLedgerGracePeriod": "64",
        "rwRereplicateBackoffMs": "500", "rereplicationEntryBatchSize": "1000", "replicationRateByBytes": "1048576",
        "zkReplicationTaskRateLimit": "0.5", "repairedPlacementPolicyNotAdheringBookieEnabled": "true",
        "auditorLedgerVerificationPercentage": "50", "replicationWorkerConcurrentLedgers": "8",
        "replicationMaxStreamsPerSourceBookie": "2", "replicationMaxStreamsPerTargetBookie": "3",
        "replicationStreamWindowBytes": "1048576", "unrelatedKey": "x",
    })
    assert s.open_ledger_grace_ms == 3000 and s.lock_release_grace_ms == 64 and s.backoff_ms == 500
    assert s.batch_size == 1000 and s.rate_bytes_per_s == 1048576 and s.task_rate_per_s == 0.5
    assert s.repair_placement is True and s.verification_percentage == 50
    assert (s.concurrent_ledgers, s.max_streams_per_source, s.max_streams_per_target) == (8, 2, 3)
    assert s.stream_window_bytes == 1048576
    assert WorkerSettings.from_properties(s.to_properties()) == s


def test_bad_values_name_every_key():
    with pytest.raises(ConfigError) as exc:
        WorkerSettings.from_properties({"rwRereplicateBackoffMs": "soon", "replicationWorkerConcurrentLedgers": "0"})
    assert "rwRereplicateBackoffMs" in str(exc.value) and "replicationWorkerConcurrentLedgers" in str(exc.value)


def test_our_keys_are_in_the_key_table():
    assert {k.name for k in CONFIG_KEYS} == {"replicationWorkerConcurrentLedgers", "replicationMaxStreamsPerSourceBookie",
                                             "replicationMaxStreamsPerTargetBookie", "replicationStreamWindowBytes",
                                             "adaptiveThrottleEnabled", "replicationLatencyBudgetFactor",
                                             "replicationAdaptiveFloorBytesPerSec"}
    assert all(KEY_BY_NAME[k.name] is k for k in CONFIG_KEYS)


def test_adaptive_throttle_keys_are_read_and_bad_values_named():
    s = WorkerSettings.from_properties({"adaptiveThrottleEnabled": "false", "replicationLatencyBudgetFactor": "1.5",
                                        "replicationAdaptiveFloorBytesPerSec": "2097152"})
    assert (s.adaptive_throttle, s.latency_budget_factor, s.adaptive_floor_bytes_per_s) == (False, 1.5, 2097152)
    assert WorkerSettings().adaptive_throttle is True
    with pytest.raises(ConfigError, match="replicationLatencyBudgetFactor"):
        WorkerSettings(latency_budget_factor=1.0)


def test_direct_construction_is_validated():
    with pytest.raises(ConfigError, match="concurrent_ledgers"):
        WorkerSettings(concurrent_ledgers=0)
    with pytest.raises(ConfigError, match="verification_percentage"):
        WorkerSettings(verification_percentage=101)
