"""Round-robin schedule (upstream RoundRobinDistributionScheduleTest) and PlacementConfig parsing."""

from __future__ import annotations

import pytest

from autorecovery.placement import ConfigError, PLACEMENT_KEYS, PlacementConfig, bookie_has_entry, write_set
from autorecovery.placement.schedule import ensemble_write_sets, write_sets_containing


def test_write_set_examples_upstream_RoundRobinDistributionScheduleTest():
    assert write_set(0, 3, 2) == [0, 1]
    assert write_set(1, 3, 2) == [1, 2]
    assert write_set(2, 3, 2) == [2, 0]
    assert write_set(7, 5, 3) == [2, 3, 4]
    assert write_set(9, 5, 3) == [4, 0, 1]
    assert write_set(4, 3, 3) == [1, 2, 0]


def test_has_entry_matches_write_set_upstream_testDistributionSchedule():
    for e in range(1, 7):
        for wq in range(1, e + 1):
            for entry in range(0, 3 * e):
                ws = set(write_set(entry, e, wq))
                for idx in range(e):
                    assert bookie_has_entry(idx, entry, e, wq) == (idx in ws)


def test_has_entry_is_correct_beyond_32_bits():
    """Upstream's hasEntry casts to int before the modulus and breaks for ids >= 2**31; ours does not."""
    big = 2**31 + 5
    for idx in range(5):
        assert bookie_has_entry(idx, big, 5, 3) == (idx in write_set(big, 5, 3))
    assert write_set(2**63 - 1, 7, 3) == [(2**63 - 1 + k) % 7 for k in range(3)]


def test_has_entry_uses_one_rule_for_every_write_quorum():
    """Regression (issue 12): the WQ < E branch used to answer true for an index outside the ensemble
    (index 5 of E5/WQ3 'stored' entry 0, index -1 'stored' entry 2) while the WQ >= E branch said false.
    Upstream hasEntry compares with the write set's indexes, so an outside index stores nothing."""
    assert not bookie_has_entry(5, 0, 5, 3)
    assert not bookie_has_entry(-1, 2, 5, 3)
    assert not bookie_has_entry(3, 0, 3, 3)
    # WQ == E: every index stores every entry; WQ > E (invalid metadata) reads the same way
    assert all(bookie_has_entry(i, e, 3, 3) for i in range(3) for e in range(7))
    assert all(bookie_has_entry(i, e, 2, 3) for i in range(2) for e in range(7))


def test_write_set_rejects_bad_sizes():
    with pytest.raises(ValueError):
        write_set(0, 0, 1)
    with pytest.raises(ValueError):
        bookie_has_entry(0, 0, 3, 0)


def test_distinct_write_sets():
    assert ensemble_write_sets(4, 2) == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert len(ensemble_write_sets(3, 3)) == 1
    assert write_sets_containing(4, 2)[0] == (0, 3)


# -- config -------------------------------------------------------------------------------------------
def test_upstream_defaults():
    c = PlacementConfig.from_properties({})
    assert c.min_num_racks_per_write_quorum == 2
    assert c.enforce_min_num_racks_per_write_quorum is False
    assert c.min_num_zones_per_write_quorum == 2
    assert c.desired_num_zones_per_write_quorum == 3
    assert c.enforce_strict_zoneaware_placement is True
    assert c.repp_regions_to_write is None
    assert c.repp_minimum_regions_for_durability == 2
    assert c.effective_min_regions_for_durability == 0  # only read when regions are configured
    assert c.repp_enable_validation is True
    assert c.disk_weight_based_placement_enabled is False
    assert c.bookie_max_multiple_for_weight_based_placement == 3
    assert c.network_topology_stabilize_period_s == 0
    assert c.ensemble_random_read_reordering is False
    assert c.ensemble_placement_policy == "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"
    assert c.bookie_failure_history_expiration_ms == 60000


def test_parses_strings_like_upstream():
    c = PlacementConfig.from_properties({
        "minNumRacksPerWriteQuorum": "3", "enforceMinNumRacksPerWriteQuorum": "TRUE",
        "reppRegionsToWrite": "r1;r2; r3", "reppMinimumRegionsForDurability": 3,
        "diskWeightBasedPlacementEnabled": "yes", "bookieMaxMultipleForWeightBasedPlacement": "-1",
        "networkTopologyStabilizePeriodSeconds": 30, "ensembleRandomReadReordering": True})
    assert c.min_num_racks_per_write_quorum == 3
    assert c.enforce_min_num_racks_per_write_quorum is True
    assert c.repp_regions_to_write == ("r1", "r2", "r3")
    assert c.effective_min_regions_for_durability == 3
    assert c.disk_weight_based_placement_enabled is True
    assert c.bookie_max_multiple_for_weight_based_placement == -1
    assert c.network_topology_stabilize_period_s == 30


def test_unknown_key_raises_config_error_naming_it():
    with pytest.raises(ConfigError, match="minNumRackPerWriteQuorum"):
        PlacementConfig.from_properties({"minNumRackPerWriteQuorum": 2})


@pytest.mark.parametrize("key,value", [("minNumRacksPerWriteQuorum", "two"), ("minNumRacksPerWriteQuorum", True),
                                       ("enforceMinNumRacksPerWriteQuorum", "maybe"),
                                       ("minNumZonesPerWriteQuorum", -1), ("reppRegionsToWrite", 5),
                                       ("bookieMaxMultipleForWeightBasedPlacement", "x")])
def test_bad_value_raises_config_error_naming_key(key, value):
    with pytest.raises(ConfigError, match=key):
        PlacementConfig.from_properties({key: value})


def test_round_trip_and_select():
    c = PlacementConfig.from_properties({"reppRegionsToWrite": "a;b", "minNumZonesPerWriteQuorum": 1})
    assert PlacementConfig.from_properties(c.to_properties()) == c
    mixed = {"minNumRacksPerWriteQuorum": 3, "zkServers": "localhost:2181"}
    assert PlacementConfig.select(mixed) == {"minNumRacksPerWriteQuorum": 3}
    assert "reppEnableValidation" in PLACEMENT_KEYS and "zkServers" not in PLACEMENT_KEYS


def test_placement_defaults_come_from_the_key_table():
    """One default per key: PlacementConfig's defaults equal config/keys.py's (issue 9: placement said
    getBookieInfoIntervalSeconds=86400 while the key table and docs said 60; issue 12:
    reppDnsResolverClass said ScriptBasedMapping where the table says unset, which the daemon resolves
    to Pulsar /bookies rack info or the default rack; resolver_from_config reads unset as upstream's
    ScriptBasedMapping)."""
    from autorecovery.config.keys.table import KEY_BY_NAME
    from autorecovery.placement.resolvers import ScriptResolver, resolver_from_config

    d = PlacementConfig()
    assert d.get_bookie_info_interval_s == KEY_BY_NAME["getBookieInfoIntervalSeconds"].default == 60
    diffs = {k: (getattr(d, f), KEY_BY_NAME[k].default) for k, f in PlacementConfig.KEY_FIELDS.items()
             if getattr(d, f) != KEY_BY_NAME[k].default}
    assert diffs == {}
    assert PlacementConfig.from_properties({}).get_bookie_info_interval_s == 60
    assert isinstance(resolver_from_config(d), ScriptResolver)
