"""DefaultPolicy (upstream DefaultEnsemblePlacementPolicy, BookKeeperDiskSpaceWeightedLedgerPlacementTest),
policy_from_name, sticky reads and the shared interface."""

from __future__ import annotations

import random

import pytest

from autorecovery.placement import (
    Adherence,
    BookieInfo,
    BookiesHealthInfo,
    ConfigError,
    DefaultPolicy,
    NotEnoughBookiesError,
    PlacementConfig,
    RackawarePolicy,
    RegionawarePolicy,
    ZoneawarePolicy,
    policy_from_name,
)

from _placement_testkit import bid


def default_policy(n=6, props=None, readonly=(), seed=3):
    p = DefaultPolicy(PlacementConfig.from_properties(props or {}), rng=random.Random(seed))
    ids = [bid(i) for i in range(1, n + 1)]
    p.on_cluster_changed(set(ids) - set(readonly), set(readonly))
    return p, ids


def test_default_new_ensemble_random_distinct_and_excluded():
    p, ids = default_policy()
    for _ in range(30):
        r = p.new_ensemble(3, 2, 2, {ids[0]})
        assert len(set(r.ensemble)) == 3 and ids[0] not in r.ensemble
        assert r.adherence == Adherence.MEETS_STRICT
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 2, 2, {ids[0]})
    assert p.new_ensemble(0, 0, 0).ensemble == [] and p.new_ensemble(0, 0, 0).adherence == Adherence.FAIL


def test_default_never_uses_read_only_bookies():
    p, _ids = default_policy(readonly=(bid(1), bid(2)))
    for _ in range(30):
        assert not {bid(1), bid(2)} & set(p.new_ensemble(4, 2, 2).ensemble)
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(5, 2, 2)


def test_default_replace_excludes_current_ensemble():
    p, ids = default_policy(4)
    r = p.replace_bookie(3, 2, 2, ids[:3], ids[1], set())
    assert r.bookie == ids[3] and r.ensemble == [ids[0], ids[3], ids[2]] and r.replaced == (1,)
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(3, 2, 2, ids[:3], ids[1], {ids[3]})


def test_default_weighted_inclusion_upstream_BookKeeperDiskSpaceWeightedLedgerPlacementTest():
    """8 bookies of weight 1 and 2 of weight 3, E=3: inclusion ratio about 2.45 (upstream accepts 3 +/- 1)."""
    p, ids = default_policy(10, {"diskWeightBasedPlacementEnabled": True})
    p.update_bookie_info({b: BookieInfo(3 << 30, (3 if i >= 8 else 1) << 30) for i, b in enumerate(ids)})
    counts = dict.fromkeys(ids, 0)
    for _ in range(6000):
        for b in p.new_ensemble(3, 2, 2).ensemble:
            counts[b] += 1
    heavy = (counts[ids[8]] + counts[ids[9]]) / 2
    light = sum(counts[b] for b in ids[:8]) / 8
    assert 2.0 < heavy / light < 4.0


def test_default_update_bookie_info_is_merged():
    p, ids = default_policy(3, {"diskWeightBasedPlacementEnabled": True})
    p.update_bookie_info({ids[0]: BookieInfo(100, 40)})
    p.update_bookie_info({ids[1]: BookieInfo(100, 60)})
    assert p.weight_of(ids[0]) == 40 and p.weight_of(ids[1]) == 60 and p.weight_of(ids[2]) == 0


def test_topology_aware_update_bookie_info_is_rebuilt():
    p = RackawarePolicy(PlacementConfig())
    p.update_bookie_info({"a:1": BookieInfo(100, 40)})
    p.update_bookie_info({"b:1": BookieInfo(100, 60)})
    assert p.weight_of("a:1") == 0 and p.weight_of("b:1") == 60


def test_default_adherence_and_repair_are_trivial():
    p, ids = default_policy()
    assert p.is_ensemble_adhering([ids[0], ids[0]], 2, 2) == Adherence.MEETS_STRICT
    r = p.replace_to_adhere(2, 2, 2, set(), [ids[0], "gone:1"])
    assert r.ensemble == [ids[0], "gone:1"] and r.adherence == Adherence.MEETS_STRICT and r.swaps == 0
    assert p.are_acked_bookies_adhering({ids[0]}, 3, 2)
    assert p.reorder_read_sequence(ids[:3], BookiesHealthInfo(), [2, 0, 1]) == [2, 0, 1]


def test_dead_bookies_are_those_that_left_and_are_not_read_only():
    p, ids = default_policy(4)
    assert p.on_cluster_changed({ids[0], ids[1]}, {ids[2]}) == {ids[3]}
    assert p.on_cluster_changed({ids[0]}, {ids[2]}) == {ids[1]}


def test_sticky_read_bookie_index_default():
    p, _ = default_policy()

    class Md:
        ensemble_size = 5

    first = p.sticky_read_bookie_index(Md())
    assert 0 <= first < 5
    assert p.sticky_read_bookie_index(Md(), 4) == 0
    assert p.sticky_read_bookie_index(3, 1) == 2
    assert len({p.sticky_read_bookie_index(Md()) for _ in range(100)}) > 1


@pytest.mark.parametrize("name,cls", [
    ("org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy", RackawarePolicy),
    ("org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy", RegionawarePolicy),
    ("org.apache.bookkeeper.client.ZoneawareEnsemblePlacementPolicy", ZoneawarePolicy),
    ("org.apache.bookkeeper.client.DefaultEnsemblePlacementPolicy", DefaultPolicy),
    ("RackawareEnsemblePlacementPolicy", RackawarePolicy),
    ("regionaware", RegionawarePolicy),
    ("ZONEAWARE", ZoneawarePolicy),
    ("DefaultPolicy", DefaultPolicy),
])
def test_policy_from_name(name, cls):
    p = policy_from_name(name, PlacementConfig())
    assert type(p) is cls and p.upstream_class.endswith(cls.upstream_class.rsplit(".", 1)[1])


def test_policy_from_name_uses_config_default_and_rejects_unknown():
    assert type(policy_from_name(None, PlacementConfig())) is RackawarePolicy  # upstream client default
    with pytest.raises(ConfigError, match="ensemblePlacementPolicy"):
        policy_from_name("com.example.MyPolicy", PlacementConfig())


def test_location_of_reports_network_location():
    from autorecovery.placement import StaticResolver
    p = policy_from_name("rackaware", PlacementConfig(), StaticResolver({"a:1": "/dc/r1"}))
    p.on_cluster_changed({"a:1"}, set())
    assert p.location_of("a:1") == "/dc/r1"
    assert p.location_of("zz:1") == "/default-region/default-rack"
    assert default_policy()[0].location_of("x:1") == "/default-region/default-rack"


def test_adherence_ordering():
    assert Adherence.FAIL < Adherence.MEETS_SOFT < Adherence.MEETS_STRICT
    assert min(Adherence.MEETS_STRICT, Adherence.MEETS_SOFT) == Adherence.MEETS_SOFT
    assert str(Adherence.MEETS_SOFT) == "MEETS_SOFT"
