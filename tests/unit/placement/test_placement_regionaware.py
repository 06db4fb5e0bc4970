"""Region-aware policy: scenarios ported from upstream TestRegionAwareEnsemblePlacementPolicy (named after the
upstream test method) and our per-write-set region adherence (upstream's check always says MEETS_STRICT)."""

from __future__ import annotations

import pytest

from autorecovery.placement import (
    Adherence,
    BookiesHealthInfo,
    ConfigError,
    NotEnoughBookiesError,
    RegionawarePolicy,
    UNKNOWN_REGION,
)

from _placement_testkit import DEFAULT_RR, bid, make

A1, A2, A3, A4 = bid(2), bid(3), bid(4), bid(5)
BASE = {A1: "/r1/rack1", A2: DEFAULT_RR, A3: DEFAULT_RR, A4: "/r1/rack2"}
ENS = [A1, A2, A3, A4]
WS = [0, 1, 2, 3]


def region_policy(local, props=None, announce=True, **kw):
    p = make(RegionawarePolicy, BASE, props, local=local, **kw)
    if not announce:
        p.on_cluster_changed(set(), set())
    return p


def test_not_reorder_read_if_in_default_rack_upstream_testNotReorderReadIfInDefaultRack():
    p = region_policy(DEFAULT_RR, announce=False)
    assert p.my_region == UNKNOWN_REGION
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(), WS) == WS


def test_node_in_same_region_upstream_testNodeInSameRegion():
    p = region_policy("/r1/rack3")
    assert p.my_region == "r1"
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(), WS) == [0, 3, 1, 2]


def test_node_not_in_same_regions_upstream_testNodeNotInSameRegions():
    p = region_policy("/r2/rack1", announce=False)
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(), WS) == WS


def test_node_down_upstream_testNodeDown():
    p = region_policy("/r1/rack1")
    p.on_cluster_changed({A2, A3, A4}, set())
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(), WS) == [3, 1, 2, 0]


def test_node_read_only_upstream_testNodeReadOnly():
    """With a known client region upstream always reorders, so read-only bookies do move back."""
    p = region_policy("/r1/rack1")
    p.on_cluster_changed({A2, A3, A4}, {A1})
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(), WS) == [3, 1, 2, 0]


def test_node_slow_upstream_testNodeSlow():
    p = region_policy("/r1/rack1")
    p.register_slow_bookie(A1, 0)
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(pending={A1: 1}), WS) == [3, 1, 2, 0]


def test_two_nodes_slow_upstream_testTwoNodesSlow():
    p = region_policy("/r1/rack1")
    p.register_slow_bookie(A1, 0)
    p.register_slow_bookie(A2, 0)
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(pending={A1: 1, A2: 2}), WS) == [3, 2, 0, 1]


def test_two_nodes_down_upstream_testTwoNodesDown():
    p = region_policy("/r1/rack1")
    p.on_cluster_changed({A3, A4}, set())
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(), WS) == [3, 2, 0, 1]


def test_node_down_and_node_slow_upstream_testNodeDownAndNodeSlow():
    p = region_policy("/r1/rack1")
    p.register_slow_bookie(A1, 0)
    p.on_cluster_changed({A1, A3, A4}, set())
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(pending={A1: 1}), WS) == [3, 2, 0, 1]


def test_node_down_read_only_and_slow_upstream_testNodeDownAndReadOnlyAndNodeSlow():
    p = region_policy("/r1/rack1")
    p.register_slow_bookie(A3, 0)
    p.on_cluster_changed({A3, A4}, {A2})
    assert p.reorder_read_sequence(ENS, BookiesHealthInfo(pending={A3: 1}), WS) == [3, 1, 2, 0]


def test_first_remote_is_promoted_to_position_two():
    """Upstream: only the first remote bookie moves, to position min(#leading locals, 2)."""
    ids = [bid(i) for i in range(10, 15)]
    m = {ids[0]: "/r1/a", ids[1]: "/r1/b", ids[2]: "/r1/c", ids[3]: "/r2/a", ids[4]: "/r2/b"}
    p = make(RegionawarePolicy, m, local="/r1/x")
    assert p.reorder_read_sequence(ids, BookiesHealthInfo(), [0, 1, 2, 3, 4]) == [0, 1, 3, 2, 4]


def test_replace_in_same_region_upstream_testReplaceBookieWithEnoughBookiesInSameRegion():
    m = {A1: DEFAULT_RR, A2: "/region1/r1", A3: "/region1/r2", A4: "/default-region/r3"}
    p = make(RegionawarePolicy, m)
    assert p.replace_bookie(1, 1, 1, [], A2, set()).bookie == A3


def test_replace_in_different_region_upstream_testReplaceBookieWithEnoughBookiesInDifferentRegion():
    m = {A1: DEFAULT_RR, A2: "/region1/r2", A3: "/region2/r3", A4: "/region3/r4"}
    p = make(RegionawarePolicy, m)
    for _ in range(20):
        assert p.replace_bookie(1, 1, 1, [], A2, {A1}).bookie in (A3, A4)


def test_new_ensemble_not_enough_bookies_upstream_testNewEnsembleBookieWithNotEnoughBookies():
    m = {A1: DEFAULT_RR, A2: "/region2/r2", A3: "/region3/r3", A4: "/region4/r4"}
    p = make(RegionawarePolicy, m)
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(5, 5, 3)


def test_replace_not_enough_bookies_upstream_testReplaceBookieWithNotEnoughBookies():
    m = {A1: DEFAULT_RR, A2: "/region2/r2", A3: "/region3/r3", A4: "/region4/r4"}
    p = make(RegionawarePolicy, m)
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(1, 1, 1, [], A2, {A1, A3, A4})


def test_new_ensemble_one_empty_region_upstream_testNewEnsembleBookieWithOneEmptyRegion():
    m = {A1: DEFAULT_RR, A2: "/region2/r2", A3: "/region3/r3", A4: "/region4/r4"}
    p = make(RegionawarePolicy, m)
    assert len(p.new_ensemble(3, 3, 3).ensemble) == 3
    p.on_cluster_changed({A2, A3, A4}, set())
    r = p.new_ensemble(3, 3, 3)
    assert set(r.ensemble) == {A2, A3, A4} and r.adherence == Adherence.MEETS_STRICT


def test_new_ensemble_with_single_region_upstream_testNewEnsembleWithSingleRegion():
    m = {bid(i): "/region1/r2" for i in (2, 3, 4, 5)}
    p = make(RegionawarePolicy, m)
    for e in (3, 4):
        r = p.new_ensemble(e, 2, 2)
        assert r.adherence == Adherence.FAIL
        assert p.is_ensemble_adhering(r.ensemble, 2, 2) == Adherence.FAIL


def test_new_ensemble_with_multiple_regions_upstream_testNewEnsembleWithMultipleRegions():
    m = {bid(2): DEFAULT_RR, bid(3): "/region1/r2", bid(4): "/region1/r2", bid(5): "/region1/r2"}
    p = make(RegionawarePolicy, m)
    for e in (3, 4):
        r = p.new_ensemble(e, 2, 2)
        assert r.adherence == Adherence.FAIL  # 2 racks only; E=3 is an odd cycle and E=4 needs 2 default bookies


def test_new_ensemble_with_enough_regions_upstream_testNewEnsembleWithEnoughRegions():
    m = {bid(2): "/default-region/default-rack1", bid(3): "/region1/r2", bid(4): "/region2/r3",
         bid(5): "/region3/r4", bid(6): "/default-region/default-rack2", bid(7): "/region1/r12",
         bid(8): "/region2/r13", bid(9): "/region3/r14"}
    p = make(RegionawarePolicy, m)
    r = p.new_ensemble(3, 2, 2)
    assert len({p.region_of(b) for b in r.ensemble}) == 3 and r.adherence == Adherence.MEETS_STRICT
    r = p.new_ensemble(4, 2, 2)
    assert len({p.region_of(b) for b in r.ensemble}) == 4 and r.adherence == Adherence.MEETS_STRICT


def test_new_ensemble_pick_different_rack_upstream_testNewEnsembleWithPickDifferentRack():
    a1, a2, a3, a4, a5 = (bid(i) for i in range(1, 6))
    m = {a1: "/region-1/r1", a2: "/region-1/r1", a3: "/region-1/r2", a4: "/region-1/r3", a5: "/region-2/r1"}
    # upstream's case sets enforceMinNumFaultDomainsForWrite=false: the policy accepts the key (only the add
    # path reads it, upstream PendingAddOp) and places the same way
    p = make(RegionawarePolicy, m, {"minNumRacksPerWriteQuorum": 2, "enforceMinNumFaultDomainsForWrite": False})
    assert p.config.enforce_min_num_fault_domains_for_write is False
    for _ in range(50):
        r = p.new_ensemble(4, 4, 2)
        assert not {a1, a2} <= set(r.ensemble)
        assert r.adherence == Adherence.MEETS_SOFT  # 4 replicas in 2 regions
    p.on_cluster_changed({a1, a2, a3, a5}, set())
    for _ in range(50):
        r = p.new_ensemble(4, 4, 2)
        assert {a1, a2} <= set(r.ensemble) and r.adherence == Adherence.MEETS_SOFT


def test_new_ensemble_common_rack_upstream_testNewEnsembleWithMultipleRacksWithCommonRack():
    m = {bid(i): "/region1/r1" for i in range(1, 7)}
    m.update({bid(7): "/region1/r2", bid(8): "/region1/r3", bid(9): "/region2/r1", bid(10): "/region3/r1"})
    p = make(RegionawarePolicy, m, {"enforceMinNumRacksPerWriteQuorum": True, "minNumRacksPerWriteQuorum": 3})
    for _ in range(50):
        r = p.new_ensemble(10, 10, 2)
        assert len(set(r.ensemble)) == 10 and r.adherence != Adherence.FAIL


def test_new_ensemble_three_regions_upstream_testNewEnsembleWithThreeRegions():
    m = {bid(2): "/region2/r1", bid(3): "/region1/r2", bid(4): "/region2/r3", bid(5): "/region3/r4",
         bid(6): "/region1/r11", bid(7): "/region1/r12", bid(8): "/region2/r13", bid(9): "/region3/r14",
         bid(10): "/region2/r23", bid(11): "/region1/r24"}
    p = make(RegionawarePolicy, m)
    for e in (6, 7):
        r = p.new_ensemble(e, e, 4)
        assert {bid(5), bid(9)} <= set(r.ensemble) and len(r.ensemble) == e
        assert len({p.region_of(b) for b in r.ensemble}) == 3
        assert r.adherence == Adherence.MEETS_SOFT


def test_regions_are_interleaved_so_write_sets_span_regions():
    """Ours: upstream places each region's picks contiguously (write sets inside one region)."""
    m = {f"10.0.{g}.{i}:3181": f"/g{g}/r{i % 3}" for g in range(3) for i in range(6)}
    p = make(RegionawarePolicy, m)
    r = p.new_ensemble(6, 3, 2)
    assert r.adherence == Adherence.MEETS_STRICT
    for i in range(6):
        assert len({p.region_of(r.ensemble[(i + j) % 6]) for j in range(3)}) == 3


# -- our adherence (upstream: always MEETS_STRICT) ----------------------------------------------------
def test_region_adherence_is_really_checked():
    m = {bid(1): "/g1/a", bid(2): "/g1/b", bid(3): "/g2/a", bid(4): "/g3/a", bid(5): "/g1/a"}
    p = make(RegionawarePolicy, m)
    assert p.is_ensemble_adhering([bid(1), bid(3), bid(4)], 3, 2) == Adherence.MEETS_STRICT
    assert p.is_ensemble_adhering([bid(1), bid(2), bid(3)], 3, 2) == Adherence.MEETS_SOFT
    assert p.is_ensemble_adhering([bid(1), bid(5), bid(2)], 2, 2) == Adherence.FAIL  # one rack in (0,1)


def test_region_durability_makes_ack_quorum_span_regions():
    m = {bid(1): "/g1/a", bid(2): "/g1/b", bid(3): "/g2/a", bid(4): "/g2/b", bid(5): "/g3/a"}
    p = make(RegionawarePolicy, m, {"reppRegionsToWrite": "g1;g2;g3", "reppMinimumRegionsForDurability": 2})
    # WQ=3, AQ=3: one region must not hold 3 replicas of a write set
    assert p.is_ensemble_adhering([bid(1), bid(2), bid(3)], 3, 3) == Adherence.MEETS_SOFT
    # AQ=2 is rejected for new ensembles (2 <= 3 - 3//2) as upstream, and judged FAIL here: g1 holds 2 >= AQ
    assert p.is_ensemble_adhering([bid(1), bid(2), bid(3)], 3, 2) == Adherence.FAIL
    with pytest.raises(ValueError):
        p.new_ensemble(3, 3, 2)
    r = p.new_ensemble(5, 3, 3)
    assert r.adherence != Adherence.FAIL
    assert all(p._durability_ok([p._label_of(r.ensemble[(i + j) % 5]) for j in range(3)], 3) for i in range(5))


def test_region_durability_config_checks():
    with pytest.raises(ConfigError, match="reppMinimumRegionsForDurability"):
        make(RegionawarePolicy, {}, {"reppRegionsToWrite": "g1", "reppMinimumRegionsForDurability": 2})


def test_region_repair_fixes_blocked_ensemble_with_minimum_swaps():
    m = {f"10.0.{g}.{i}:3181": f"/g{g}/r{i}" for g in range(3) for i in range(4)}
    p = make(RegionawarePolicy, m, {"reppRegionsToWrite": "g0;g1;g2", "reppMinimumRegionsForDurability": 2})
    ens = ["10.0.0.0:3181", "10.0.0.1:3181", "10.0.0.2:3181"]  # all in g0 -> an ack quorum of 3 in one region
    assert p.is_ensemble_adhering(ens, 3, 3) == Adherence.FAIL
    r = p.replace_to_adhere(3, 3, 3, set(), ens)
    # one swap is enough to stop FAIL (g0 keeps 2 < AQ replicas); MEETS_STRICT would need a second swap,
    # and the repair minimises swaps first
    assert r.swaps == 1 and r.adherence == Adherence.MEETS_SOFT
    assert p.region_of(r.ensemble[r.replaced[0]]) != "g0"


# -- stabilize period, local rack, feature switches (issue 16: parity with upstream's own tests) ---------
def _regions(mapping_by_octet: dict[int, str]) -> dict[str, str]:
    return {bid(i): loc for i, loc in mapping_by_octet.items()}


def _num_regions(p: RegionawarePolicy, ensemble) -> int:
    return len({p.region_of(b) for b in ensemble})


def test_region_stabilize_period_keeps_departed_bookie_out_of_dead_set():
    """Upstream testPlacementOnStabilizeNetworkTopology (rack- and zone-aware classes), for regions: a bookie
    that leaves within networkTopologyStabilizePeriodSeconds is not reported dead."""
    from _placement_testkit import FakeClock

    m = _regions({2: "/region1/r1", 3: "/region2/r2", 4: "/region3/r3", 5: "/region1/r4"})
    clock = FakeClock()
    p = make(RegionawarePolicy, m, {"networkTopologyStabilizePeriodSeconds": 60}, clock=clock)
    assert p.on_cluster_changed(set(m) - {bid(5)}, set()) == set()
    clock.advance(61)
    assert p.on_cluster_changed(set(m) - {bid(5)}, set()) == {bid(5)}


def test_new_ensemble_pick_local_region_bookies_upstream_testNewEnsemblePickLocalRegionBookies():
    """Upstream testNewEnsemblePickLocalRegionBookies: the client sits in /region1/r2; every ensemble holds a
    bookie of that rack; with the local rack gone, one of the local region."""
    m = _regions({10: "/region1/r1", 2: "/region2/r2", 3: "/region2/r2", 4: "/region2/r2", 5: "/region3/r3",
                  6: "/region4/r4", 7: "/region5/r5", 8: "/region1/r2", 9: "/region1/r2"})
    p = make(RegionawarePolicy, m, local="/region1/r2")
    for _ in range(100):
        ens = p.new_ensemble(3, 3, 2).ensemble
        assert bid(8) in ens or bid(9) in ens, ens
        assert not (bid(2) in ens and bid(3) in ens), ens
    p.on_cluster_changed(set(m) - {bid(8), bid(9)}, set())
    for _ in range(100):
        ens = p.new_ensemble(3, 3, 2).ensemble
        assert bid(10) in ens and bid(8) not in ens and bid(9) not in ens, ens


def test_local_rack_is_not_preferred_without_a_local_node():
    """Control for the test above: with ignoreLocalNodeInPlacementPolicy the local rack is not favoured."""
    m = _regions({10: "/region1/r1", 5: "/region3/r3", 6: "/region4/r4", 7: "/region5/r5", 8: "/region1/r2"})
    p = make(RegionawarePolicy, m, {"ignoreLocalNodeInPlacementPolicy": True}, local="/region1/r2")
    seen = {bid(8) in p.new_ensemble(3, 3, 2).ensemble for _ in range(200)}
    assert seen == {True, False}


THREE_REGIONS_WITH_DISABLE = _regions({
    2: "/region2/r1", 3: "/region1/r2", 4: "/region2/r3", 5: "/region3/r4", 6: "/region1/r11",
    7: "/region1/r12", 8: "/region2/r13", 9: "/region3/r14", 10: "/region2/r23", 11: "/region1/r24"})


def test_new_ensemble_three_regions_with_disable_upstream_testNewEnsembleWithThreeRegionsWithDisable():
    """Upstream testNewEnsembleWithThreeRegionsWithDisable: the per-region disallow feature, flipped at run time."""
    p = make(RegionawarePolicy, THREE_REGIONS_WITH_DISABLE,
             {"reppDisallowBookiePlacementInRegionFeatureName": "disallowBookies"})
    want = {bid(2), bid(4), bid(5), bid(8), bid(9), bid(10)}  # region2 + region3
    p.features.set("disallowBookies", True, scope="region1")
    ens = p.new_ensemble(6, 6, 4).ensemble
    assert set(ens) == want and _num_regions(p, ens) == 2
    p.features.set("disallowBookies", True, scope="region2")
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 6, 4)
    p.features.set("disallowBookies", False, scope="region2")
    ens = p.new_ensemble(6, 6, 4).ensemble
    assert set(ens) == want and _num_regions(p, ens) == 2


def test_disallowed_regions_key_presets_the_feature():
    """reppDisallowedRegions (ours) is the static form of the same switch; the repair respects it too."""
    p = make(RegionawarePolicy, THREE_REGIONS_WITH_DISABLE, {"reppDisallowedRegions": "region1"})
    assert p.disallowed_regions() == {"region1"}
    for _ in range(20):
        assert p.region_of(p.new_ensemble(3, 2, 2).ensemble[0]) != "region1"
    p.features.set("disallowBookiePlacementInRegion", False, scope="region1")
    assert any("region1" in {p.region_of(b) for b in p.new_ensemble(6, 6, 4).ensemble} for _ in range(20))


def test_all_regions_disallowed_falls_back_to_every_region():
    """Upstream: when no region is available, newEnsemble picks at random from every bookie."""
    p = make(RegionawarePolicy, THREE_REGIONS_WITH_DISABLE, {"reppDisallowedRegions": "region1;region2;region3"})
    assert len(p.new_ensemble(6, 6, 4).ensemble) == 6


NINE_IN_THREE_REGIONS = _regions({
    2: "/region1/r1", 3: "/region1/r2", 4: "/region1/r3", 5: "/region2/r4", 6: "/region2/r11",
    7: "/region2/r12", 8: "/region3/r13", 9: "/region3/r14", 10: "/region3/r23"})
REGION2 = {bid(5), bid(6), bid(7)}


def _three_regions_replace(min_durability: int, disable_durability: bool, disable_one_region: bool) -> None:
    """Upstream testEnsembleWithThreeRegionsReplaceInternal."""
    props = {"reppRegionsToWrite": "region1;region2;region3", "reppMinimumRegionsForDurability": min_durability,
             "reppEnableDurabilityEnforcementInReplace": min_durability > 1,
             "reppDisallowBookiePlacementInRegionFeatureName": "disallowBookies"}
    p = make(RegionawarePolicy, NINE_IN_THREE_REGIONS, props)
    if disable_durability:
        p.features.set("repp_disable_durability_enforcement", True)
    aq = 5 if min_durability > 2 else 4
    ens = p.new_ensemble(6, 6, aq).ensemble
    assert len(ens) == 6 and _num_regions(p, ens) == 3
    if disable_one_region:
        p.features.set("disallowBookies", True, scope="region2")
        for b in sorted(REGION2 & set(ens)):
            r = p.replace_bookie(6, 6, aq, ens, b, set())
            ens = r.ensemble
        assert _num_regions(p, ens) == 2 and set(ens) == set(NINE_IN_THREE_REGIONS) - REGION2
        return
    if bid(5) in ens:
        victim, expected = bid(5), (bid(7) if bid(6) in ens else bid(6))
    else:
        victim, expected = bid(6), bid(5)
    r = p.replace_bookie(6, 6, aq, ens, victim, set())
    assert r.bookie == expected and _num_regions(p, r.ensemble) == 3
    durable = min_durability > 1 and not p.durability_disabled
    if durable:
        with pytest.raises(NotEnoughBookiesError):
            p.replace_bookie(6, 6, aq, ens, victim, {expected})
    else:
        assert p.replace_bookie(6, 6, aq, ens, victim, {expected}).bookie not in REGION2


def test_ensemble_three_regions_replace_upstream_testEnsembleWithThreeRegionsReplace():
    """Upstream testEnsembleWithThreeRegionsReplace (durability 3)."""
    _three_regions_replace(3, False, False)


def test_three_regions_replace_disable_one_region_upstream_testEnsembleWithThreeRegionsReplaceDisableOneRegion():
    """Upstream testEnsembleWithThreeRegionsReplaceDisableOneRegion."""
    _three_regions_replace(2, False, True)


def test_three_regions_replace_min_durability_one_upstream_testEnsembleWithThreeRegionsReplaceMinDurabilityOne():
    """Upstream testEnsembleWithThreeRegionsReplaceMinDurabilityOne."""
    _three_regions_replace(1, False, False)


def test_three_regions_replace_disable_durability_upstream_testEnsembleWithThreeRegionsReplaceDisableDurability():
    """Upstream testEnsembleWithThreeRegionsReplaceDisableDurability."""
    _three_regions_replace(1, True, False)


def test_three_regions_replace_durability_feature_lifts_replace_enforcement():
    """Ours, on upstream's scenario: durability 3 refuses a cross-region replacement until the feature is on."""
    props = {"reppRegionsToWrite": "region1;region2;region3", "reppMinimumRegionsForDurability": 3}
    p = make(RegionawarePolicy, NINE_IN_THREE_REGIONS, props)
    ens = p.new_ensemble(6, 6, 5).ensemble
    victim = sorted(REGION2 & set(ens))[0]
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(6, 6, 5, ens, victim, REGION2)
    p.features.set("repp_disable_durability_enforcement", True)
    assert p.replace_bookie(6, 6, 5, ens, victim, REGION2).bookie not in REGION2


ALL_IN_REGION1 = _regions({i: f"/region1/r{i}" for i in range(2, 11)})


def _durability_disabled(min_durability: int, disable_durability: bool) -> RegionawarePolicy:
    """Upstream testEnsembleDurabilityDisabledInternal: every bookie in region1, three regions to write."""
    props = {"reppRegionsToWrite": "region1;region2;region3", "reppMinimumRegionsForDurability": min_durability,
             "reppEnableDurabilityEnforcementInReplace": min_durability > 1}
    p = make(RegionawarePolicy, ALL_IN_REGION1, props)
    if disable_durability:
        p.features.set("repp_disable_durability_enforcement", True)
    ens = p.new_ensemble(6, 6, 4).ensemble
    assert len(ens) == 6
    assert p.replace_bookie(6, 6, 4, ens, ens[2], set()).bookie not in ens
    return p


def test_ensemble_min_durability_one_upstream_testEnsembleMinDurabilityOne():
    """Upstream testEnsembleMinDurabilityOne."""
    _durability_disabled(1, False)


def test_ensemble_disable_durability_upstream_testEnsembleDisableDurability():
    """Upstream testEnsembleDisableDurability; ours adds the control: with the feature off again, one region
    cannot hold a durable ensemble and the auditor's judgement says FAIL."""
    p = _durability_disabled(2, True)
    ens = p.new_ensemble(6, 6, 4).ensemble
    assert p.is_ensemble_adhering(ens, 6, 4) != Adherence.FAIL
    p.features.set("repp_disable_durability_enforcement", False)
    assert p.durability == 2
    assert p.is_ensemble_adhering(ens, 6, 4) == Adherence.FAIL
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(6, 6, 4)


def test_disable_durability_key_presets_the_feature():
    """reppDisableDurability (ours) starts with the feature on, under the name reppDisableDurabilityFeatureName."""
    props = {"reppRegionsToWrite": "region1;region2", "reppDisableDurability": True,
             "reppDisableDurabilityFeatureName": "noDurability"}
    p = make(RegionawarePolicy, ALL_IN_REGION1, props)
    assert p.durability_disabled and p.durability == 1
    assert len(p.new_ensemble(4, 4, 3).ensemble) == 4
    p.features.set("noDurability", False)
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(4, 4, 3)
