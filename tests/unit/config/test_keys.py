"""The key table: parsing, bounds, suggestions (PURE, milliseconds)."""

from __future__ import annotations

import pytest

from autorecovery.config import keys as K
from autorecovery.errors import ConfigError


def test_names_are_unique_and_typed():
    names = [k.name for k in K.KEYS]
    assert len(names) == len(set(names))
    for k in K.KEYS:
        assert k.type in {"int", "float", "bool", "str"}, k.name
        assert k.origin in {K.UPSTREAM, K.OURS}, k.name
        if k.default is not None and k.type in ("int", "float"):
            # every default passes its own bounds
            assert k.parse(str(k.default)) == k.default, k.name


def test_upstream_defaults_match_reference():
    # reference §2 (ServerConfiguration / ClientConfiguration defaults)
    expected = {
        "auditorPeriodicCheckInterval": 604800,
        "auditorPeriodicBookieCheckInterval": 86400,
        "auditorPeriodicPlacementPolicyCheckInterval": 0,
        "auditorReplicasCheckInterval": 0,
        "lostBookieRecoveryDelay": 0,
        "openLedgerRereplicationGracePeriod": 30000,
        "lockReleaseOfFailedLedgerGracePeriod": 300000,
        "rwRereplicateBackoffMs": 5000,
        "rereplicationEntryBatchSize": 10,
        "replicationRateByBytes": -1,
        "zkTimeout": 10000,
        "auditorMaxNumberOfConcurrentOpenLedgerOperations": 500,
        "auditorAcquireConcurrentOpenLedgerOperationsTimeOutMSec": 120000,
        "minNumRacksPerWriteQuorum": 2,
        "getBookieInfoRetryIntervalSeconds": 60,
        "getBookieInfoTimeoutSecs": 5,
        "bookieMaxMultipleForWeightBasedPlacement": 3,
    }
    for name, value in expected.items():
        assert K.KEY_BY_NAME[name].default == value, name
    # the one deliberate difference, documented
    bi = K.KEY_BY_NAME["getBookieInfoIntervalSeconds"]
    assert (bi.default, bi.upstream_default) == (60, 86400)


@pytest.mark.parametrize("raw,value", [("true", True), ("FALSE", False), ("yes", True), ("off", False), (" 1 ", True)])
def test_bool_parsing(raw, value):
    assert K.KEY_BY_NAME["storeSystemTimeAsLedgerUnderreplicatedMarkTime"].parse(raw) is value


@pytest.mark.parametrize("name,raw,fragment", [
    ("zkTimeout", "ten", "expected an integer"),
    ("zkTimeout", "0", "out of range: allowed 1..2147483647 ms"),
    ("zkTimeout", "1.5", "expected an integer"),
    ("auditorLedgerVerificationPercentage", "101", "out of range: allowed 0..100 %"),
    ("repairedPlacementPolicyNotAdheringBookieEnabled", "maybe", "expected true or false"),
    ("logFormat", "xml", "expected one of"),
    ("zkReplicationTaskRateLimit", "nan", "expected a finite number"),
])
def test_bad_values_name_key_and_value(name, raw, fragment):
    with pytest.raises(ConfigError) as ei:
        K.KEY_BY_NAME[name].parse(raw)
    msg = str(ei.value)
    assert name in msg and repr(raw) in msg and fragment in msg


def test_suggest_did_you_mean():
    assert K.suggest("zktimeout") == "zkTimeout"
    assert K.suggest("lostBookieRecovryDelay") == "lostBookieRecoveryDelay"
    assert K.suggest("auditorPeriodicCheckIntrval") == "auditorPeriodicCheckInterval"
    assert K.suggest("completelyDifferent") is None


def test_pulsar_policy_switches():
    assert K.pulsar_policy(None, None) is None
    assert K.pulsar_policy(True, None) == K.RACKAWARE_CLASS
    assert K.pulsar_policy(True, True) == K.REGIONAWARE_CLASS
    assert K.pulsar_policy(False, False) == K.DEFAULT_POLICY_CLASS
    for alias, target in K.PULSAR_ALIASES.items():
        assert (alias.startswith("bookkeeper") or alias in ("metadataStoreUrl", "zookeeperServers")) and target in K.KEY_BY_NAME
