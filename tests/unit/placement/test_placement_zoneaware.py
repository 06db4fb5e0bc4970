"""Zone-aware policy: scenarios ported from upstream TestZoneawareEnsemblePlacementPolicy (named after the
upstream test method), plus our minimum-swap repair (upstream has none for this policy)."""

from __future__ import annotations

import pytest

from autorecovery.placement import (
    Adherence,
    BookieInfo,
    BookiesHealthInfo,
    ConfigError,
    NotEnoughBookiesError,
    PlacementConfig,
    StaticResolver,
    ZoneawarePolicy,
)

from _placement_testkit import FakeClock, bid, make

DZ = "/default-zone/default-upgradedomain"
A = {i: bid(i + 1) for i in range(1, 15)}  # A[1] = 127.0.0.2 (upstream addr1) ...


def zmap(**locs):
    return {A[int(k[1:])]: v for k, v in locs.items()}


def test_not_enough_rw_bookies_upstream_testNotEnoughRWBookies():
    m = {A[i]: f"/zone{i}/ud1" for i in range(1, 7)}
    props = {"desiredNumZonesPerWriteQuorum": 1, "minNumZonesPerWriteQuorum": 1}
    p = make(ZoneawarePolicy, m, props, writable={A[1], A[2], A[3]})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 3, 2)
    p.on_cluster_changed({A[1], A[2], A[3]}, {A[4], A[5], A[6]})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 3, 2)
    p.on_cluster_changed(set(), {A[i] for i in range(1, 7)})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 3, 2)


def test_enough_rw_bookies_upstream_testEnoughRWBookies():
    m = {A[i]: f"/zone{i}/ud1" for i in range(1, 7)}
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 2})
    r = p.new_ensemble(6, 3, 2)
    assert set(r.ensemble) == set(m) and r.adherence == Adherence.MEETS_STRICT
    r = p.new_ensemble(3, 3, 2)
    assert len(set(r.ensemble)) == 3 and r.adherence == Adherence.MEETS_STRICT


def test_with_default_bookies_upstream_testWithDefaultBookies():
    m = {A[i]: f"/zone{i}/ud1" for i in range(1, 5)}
    default = {A[5]: DZ, A[6]: DZ, A[7]: DZ}
    p = make(ZoneawarePolicy, {**m, **default}, {"desiredNumZonesPerWriteQuorum": 4})
    for _ in range(3):
        assert not set(p.new_ensemble(4, 4, 2).ensemble) & set(default)
        r = p.new_ensemble(3, 3, 2)
        assert not set(r.ensemble) & set(default) and r.adherence == Adherence.MEETS_STRICT


def test_min_zones_per_write_quorum_upstream_testMinZonesPerWriteQuorum():
    m = {A[1]: "/zone1/ud1", A[2]: "/zone2/ud1", A[3]: "/zone3/ud1", A[4]: "/zone1/ud2", A[5]: "/zone2/ud2",
         A[6]: "/zone3/ud2", A[7]: "/zone1/ud3", A[8]: "/zone2/ud3", A[9]: DZ, A[10]: DZ}
    rw = {A[i] for i in (1, 2, 3, 4, 5, 6, 9, 10)}
    props = {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 3}
    p = make(ZoneawarePolicy, m, props, writable=rw, readonly={A[7], A[8]})
    r = p.new_ensemble(4, 4, 2)
    assert set(r.ensemble) <= rw and len(set(r.ensemble)) == 4 and not {A[9], A[10]} & set(r.ensemble)
    assert r.adherence == Adherence.MEETS_SOFT
    with pytest.raises(ValueError):
        p.new_ensemble(4, 3, 2)
    p2 = make(ZoneawarePolicy, m, {**props, "enforceStrictZoneawarePlacement": False}, writable=rw,
              readonly={A[7], A[8]})
    r = p2.new_ensemble(4, 3, 2)
    assert len(set(r.ensemble)) == 4 and r.adherence == Adherence.FAIL


def test_min_uds_not_available_upstream_testMinUDsNotAvailable():
    m = {A[1]: "/zone1/ud1", A[2]: "/zone2/ud1", A[3]: "/zone3/ud1", A[4]: "/zone1/ud1", A[5]: "/zone2/ud1",
         A[6]: "/zone3/ud1", A[7]: "/zone1/ud3", A[8]: "/zone2/ud3", A[9]: DZ, A[10]: DZ}
    rw = {A[i] for i in (1, 2, 3, 4, 5, 6, 9, 10)}
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 2},
             writable=rw, readonly={A[7], A[8]})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 6, 2)
    r = p.new_ensemble(6, 3, 2)
    assert r.adherence == Adherence.MEETS_STRICT
    assert set(r.ensemble) == {A[i] for i in range(1, 7)}
    for i in range(6):
        zones = {p.zone_of(r.ensemble[(i + j) % 6]) for j in range(3)}
        assert len(zones) == 3


def test_unique_uds_upstream_testUniqueUds():
    m = {}
    for i in range(1, 13):
        zone = 1 if i <= 6 else 2
        ud = (i - 1) % 6 // 2 + 1
        m[A[i]] = f"/zone{zone}/ud{ud}"
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 2})
    r = p.new_ensemble(6, 6, 2)
    assert len(set(r.ensemble)) == 6 and r.adherence == Adherence.MEETS_SOFT
    assert len({p.location_of(b) for b in r.ensemble}) == 6
    for i in range(5):
        assert p.zone_of(r.ensemble[i]) != p.zone_of(r.ensemble[i + 1])


def test_uniform_distribution_min_zone_min_uds_upstream_testNewBookieUniformDistributionWithMinZoneAndMinUDs():
    m = {}
    for i in range(1, 13):
        zone = (i - 1) // 4 + 1
        ud = (i - 1) % 4 // 2 + 1
        m[A[i]] = f"/zone{zone}/ud{ud}"
    m[A[13]] = DZ
    m[A[14]] = DZ
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 5, "minNumZonesPerWriteQuorum": 3})
    r = p.new_ensemble(6, 6, 4)
    assert r.adherence == Adherence.MEETS_SOFT
    assert len({p.location_of(b) for b in r.ensemble}) == 6
    assert len({p.zone_of(b) for b in r.ensemble[:3]}) == 3
    for i in range(3):
        a, b = p.zone_and_ud(r.ensemble[i]), p.zone_and_ud(r.ensemble[i + 3])
        assert a[0] == b[0] and a[1] != b[1]


def _replace_cluster():
    m = {}
    for i in range(1, 13):
        zone = (i - 1) // 4 + 1
        ud = (i - 1) % 4 // 2 + 1
        m[A[i]] = f"/zone{zone}/ud{ud}"
    m[A[13]] = DZ
    m[A[14]] = DZ
    return m


def test_replace_bookie_upstream_testReplaceBookie():
    m = _replace_cluster()
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 3, "minNumZonesPerWriteQuorum": 3})
    ens = [A[1], A[5], A[9], A[3], A[7], A[11]]
    r = p.replace_bookie(6, 6, 2, ens, A[7], set())
    assert r.bookie == A[8] and r.adherence == Adherence.MEETS_STRICT
    r = p.replace_bookie(6, 3, 2, ens, A[7], {A[8]})
    assert r.bookie == A[6]
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(6, 3, 2, ens, A[7], {A[8], A[6]})


def test_replace_bookie_min_uds_upstream_testReplaceBookieMinUDs():
    m = {A[1]: "/zone1/ud1", A[2]: "/zone2/ud1", A[3]: "/zone3/ud1"}
    m.update({A[i]: "/zone3/ud2" for i in range(4, 10)})
    m.update({A[10]: DZ, A[11]: DZ})
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 3})
    ens = [A[1], A[2], A[3], A[4], A[5], A[6]]
    r = p.replace_bookie(6, 6, 2, ens, A[4], set())
    assert p.location_of(r.bookie) == "/zone3/ud2"
    assert r.adherence == Adherence.MEETS_SOFT


def test_are_acked_bookies_adhering_upstream_testAreAckedBookiesAdheringToPlacementPolicy():
    m = {A[i]: f"/zone{(i - 1) % 3 + 1}/ud{(i - 1) // 3 + 1}" for i in range(1, 10)}
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 2})
    assert not p.are_acked_bookies_adhering({A[1], A[4]}, 10, 2)
    assert not p.are_acked_bookies_adhering({A[1], A[2]}, 10, 3)
    assert p.are_acked_bookies_adhering({A[1], A[2]}, 10, 2)
    p = make(ZoneawarePolicy, m, {"desiredNumZonesPerWriteQuorum": 4, "minNumZonesPerWriteQuorum": 4})
    assert not p.are_acked_bookies_adhering({A[1], A[2], A[3]}, 4, 3)
    assert p.are_acked_bookies_adhering({A[1], A[2], A[3]}, 3, 3)
    assert not p.are_acked_bookies_adhering({A[1], A[2], A[4]}, 3, 3)


def test_weighted_placement_upstream_testWeightedPlacement():
    m = {A[1]: "/zone1/ud1", A[2]: "/zone1/ud2", A[3]: "/zone2/ud1", A[4]: "/zone2/ud2", A[5]: DZ}
    p = make(ZoneawarePolicy, m, {"diskWeightBasedPlacementEnabled": True,
                                  "bookieMaxMultipleForWeightBasedPlacement": -1, "minNumZonesPerWriteQuorum": 0})
    p.update_bookie_info({b: BookieInfo(1000, 1000) if b == A[4] else BookieInfo(100, 100) for b in m})
    counts = dict.fromkeys(m, 0)
    for _ in range(20000):
        counts[p.new_ensemble(1, 1, 1).ensemble[0]] += 1
    assert counts[A[5]] == 0
    assert abs(counts[A[4]] / counts[A[3]] - 10) < 1
    counts = {A[3]: 0, A[4]: 0}
    for _ in range(20000):
        b = p.replace_bookie(1, 1, 1, [A[2]], A[2], {A[1]}).bookie
        counts[b] += 1
    assert abs(counts[A[4]] / counts[A[3]] - 10) < 1


def test_placement_on_stabilize_network_topology_upstream_testPlacementOnStabilizeNetworkTopology():
    m = {A[i]: f"/zone{i}/ud1" for i in range(1, 5)}
    clock = FakeClock()
    p = make(ZoneawarePolicy, m, {"networkTopologyStabilizePeriodSeconds": 99999}, clock=clock)
    assert p.on_cluster_changed({A[1], A[2], A[3]}, set()) == set()  # upstream: deadBookies.isEmpty()
    for _ in range(5):
        r = p.new_ensemble(3, 3, 2)
        assert A[4] not in r.ensemble and r.adherence == Adherence.MEETS_STRICT
    r = p.new_ensemble(4, 4, 2)
    assert A[4] in r.ensemble and r.adherence == Adherence.MEETS_STRICT


def test_create_new_ensemble_randomly_upstream_testCreateNewEnsembleRandomly():
    m = {A[1]: "/zone1/ud1", A[2]: "/zone1/ud1", A[3]: "/zone1/ud1", A[4]: DZ, A[5]: "/zone1/ud1"}
    props = {"enforceStrictZoneawarePlacement": False, "minNumZonesPerWriteQuorum": 3,
             "desiredNumZonesPerWriteQuorum": 4}
    p = make(ZoneawarePolicy, m, props)
    r = p.new_ensemble(4, 3, 2, {A[5]})
    assert len(set(r.ensemble)) == 4 and A[5] not in r.ensemble and r.adherence == Adherence.FAIL
    p.on_cluster_changed({A[1], A[2], A[3], A[5]}, {A[4]})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(4, 3, 2, {A[5]})


def test_replace_bookie_randomly_upstream_testReplaceBookieRandomly():
    m = {A[i]: "/zone1/ud1" for i in range(1, 7)}
    m[A[7]] = DZ
    props = {"enforceStrictZoneawarePlacement": False, "minNumZonesPerWriteQuorum": 3,
             "desiredNumZonesPerWriteQuorum": 4}
    rw = {A[1], A[2], A[3], A[4], A[5], A[7]}
    p = make(ZoneawarePolicy, m, props, writable=rw, readonly={A[6]})
    ens = [A[1], A[2], A[3], A[4]]
    r = p.replace_bookie(4, 3, 2, ens, A[3], {A[5]})
    assert r.bookie == A[7] and r.adherence == Adherence.FAIL
    p.on_cluster_changed(rw - {A[7]}, {A[6]})
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(4, 3, 2, ens, A[3], {A[5], A[7]})


def test_is_ensemble_adhering_upstream_testIsEnsembleAdheringToPlacementPolicy():
    m = {A[1]: "/zone1/ud1", A[2]: "/zone1/ud2", A[3]: "/zone1/ud2", A[4]: "/zone2/ud1", A[5]: "/zone2/ud2",
         A[6]: "/zone2/ud2", A[7]: "/zone3/ud1", A[8]: "/zone3/ud2", A[9]: "/zone3/ud2", A[10]: DZ}
    p = ZoneawarePolicy(PlacementConfig.from_properties({"minNumZonesPerWriteQuorum": 2,
                                                          "desiredNumZonesPerWriteQuorum": 3}), StaticResolver(m))
    adh = p.is_ensemble_adhering
    assert adh([A[1], A[2], A[3]], 3, 2) == Adherence.FAIL
    assert adh([A[1], A[2], A[4]], 3, 2) == Adherence.MEETS_SOFT
    assert adh([A[1], A[4], A[7]], 3, 2) == Adherence.MEETS_STRICT
    assert adh([A[1], A[4]], 2, 2) == Adherence.FAIL
    assert adh([A[2], A[3], A[4]], 3, 2) == Adherence.FAIL
    assert adh([A[1], A[4], A[7], A[10]], 4, 2) == Adherence.FAIL
    assert adh([A[1], A[4], A[7], A[8], A[9]], 5, 2) == Adherence.MEETS_STRICT
    assert adh([A[1], A[4], A[7], A[2], A[8], A[9]], 3, 2) == Adherence.FAIL
    assert adh([A[1], A[4], A[9], A[2], A[8], A[7]], 3, 2) == Adherence.FAIL
    assert adh([A[1], A[4], A[9], A[2], A[7], A[8]], 3, 2) == Adherence.MEETS_SOFT


def test_min_zones_greater_than_desired_is_a_config_error():
    with pytest.raises(ConfigError, match="minNumZonesPerWriteQuorum"):
        ZoneawarePolicy(PlacementConfig.from_properties({"minNumZonesPerWriteQuorum": 4,
                                                          "desiredNumZonesPerWriteQuorum": 3}))


def test_zone_aware_reads_are_not_reordered_and_slow_is_ignored():
    m = {A[i]: f"/zone{i}/ud1" for i in range(1, 5)}
    p = make(ZoneawarePolicy, m)
    p.register_slow_bookie(A[1], 3)
    p.on_cluster_changed({A[2], A[3], A[4]}, set())
    assert p.reorder_read_sequence([A[1], A[2], A[3], A[4]], BookiesHealthInfo(), [0, 1, 2, 3]) == [0, 1, 2, 3]


def test_zone_repair_minimum_swaps_prefers_strict():
    """Ours: upstream has no zone-aware BP-54 repair. Two members share zone1/ud1 -> FAIL; one swap fixes it,
    and among one-swap fixes a third zone (MEETS_STRICT) is chosen over a second UD of zone1 (MEETS_SOFT)."""
    m = {A[1]: "/zone1/ud1", A[2]: "/zone1/ud1", A[3]: "/zone2/ud1", A[4]: "/zone1/ud2", A[5]: "/zone3/ud1"}
    p = make(ZoneawarePolicy, m, {"minNumZonesPerWriteQuorum": 2, "desiredNumZonesPerWriteQuorum": 3})
    ens = [A[1], A[2], A[3]]
    assert p.is_ensemble_adhering(ens, 3, 2) == Adherence.FAIL
    r = p.replace_to_adhere(3, 3, 2, set(), ens)
    assert r.swaps == 1 and r.adherence == Adherence.MEETS_STRICT and A[5] in r.ensemble
    r = p.replace_to_adhere(3, 3, 2, {A[5]}, ens)
    assert r.swaps == 1 and r.adherence == Adherence.MEETS_SOFT and A[4] in r.ensemble


def test_zone_repair_with_bad_shape_returns_fail_unchanged():
    m = {A[i]: f"/zone{i}/ud1" for i in range(1, 6)}
    p = make(ZoneawarePolicy, m)
    ens = [A[1], A[1], A[2], A[3]]
    r = p.replace_to_adhere(4, 3, 2, set(), ens)  # E mod WQ != 0: no adhering ensemble of this shape
    assert r.adherence == Adherence.FAIL and r.ensemble == ens and r.swaps == 0
