"""Rack-aware policy: scenarios ported from upstream TestRackawareEnsemblePlacementPolicy (named after the
upstream test method), plus our differences (real adherence on the single-rack path, repair fallback)."""

from __future__ import annotations

import pytest

from autorecovery.placement import (
    Adherence,
    BookieInfo,
    BookiesHealthInfo,
    ConfigError,
    NotEnoughBookiesError,
    PlacementConfig,
    RackawarePolicy,
    ScriptResolver,
    StaticResolver,
)

from _placement_testkit import DEFAULT_RR, FakeClock, bid, covered_write_quorums, make

A1, A2, A3, A4 = bid(2), bid(3), bid(4), bid(5)
BASE = {A1: "/default-region/rack1", A2: DEFAULT_RR, A3: DEFAULT_RR, A4: "/default-region/rack2"}
ENSEMBLE = [A1, A2, A3, A4]
WS = [0, 1, 2, 3]


def base_policy(props=None, local="/r1/rack1", **kw):
    p = make(RackawarePolicy, BASE, props, local=local, **kw)
    return p


# -- read ordering ------------------------------------------------------------------------------------
def test_node_down_upstream_testNodeDown():
    p = base_policy(local=DEFAULT_RR)
    p.on_cluster_changed({A2, A3, A4}, set())
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS) == [1, 2, 3, 0]


def test_node_read_only_is_not_demoted_upstream_testNodeReadOnly():
    p = base_policy()
    p.on_cluster_changed({A2, A3, A4}, {A1})
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS) == WS


def test_node_slow_upstream_testNodeSlow():
    p = base_policy()
    p.register_slow_bookie(A1, 0)
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(pending={A1: 1}), WS) == [1, 2, 3, 0]


def test_two_nodes_slow_upstream_testTwoNodesSlow():
    p = base_policy()
    p.register_slow_bookie(A1, 0)
    p.register_slow_bookie(A2, 0)
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(pending={A1: 1, A2: 2}), WS) == [2, 3, 0, 1]


def test_slow_bookie_expires_after_failure_history_expiration():
    clock = FakeClock()
    p = base_policy({"bookieFailureHistoryExpirationMSec": 1000}, clock=clock)
    p.register_slow_bookie(A1, 0)
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS) == [1, 2, 3, 0]
    clock.advance(1.5)
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS) == WS


def test_two_nodes_down_upstream_testTwoNodesDown():
    p = base_policy()
    p.on_cluster_changed({A3, A4}, set())
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS) == [2, 3, 0, 1]


def test_node_down_and_read_only_upstream_testNodeDownAndReadOnly():
    p = base_policy()
    p.on_cluster_changed({A3, A4}, {A2})
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS) == [2, 3, 1, 0]


def test_node_down_and_node_slow_upstream_testNodeDownAndNodeSlow():
    p = base_policy()
    p.register_slow_bookie(A1, 0)
    p.on_cluster_changed({A1, A3, A4}, set())
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(pending={A1: 1}), WS) == [2, 3, 0, 1]


def test_node_down_read_only_and_slow_upstream_testNodeDownAndReadOnlyAndNodeSlow():
    p = base_policy()
    p.register_slow_bookie(A3, 0)
    p.on_cluster_changed({A3, A4}, {A2})
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(pending={A3: 1}), WS) == [3, 1, 2, 0]


def test_pending_requests_reorder_upstream_testPendingRequestsReorder():
    p = base_policy({"readReorderThresholdPendingRequests": 10})
    health = BookiesHealthInfo(pending={A1: 20, A2: 7, A3: 1, A4: 5})
    assert p.reorder_read_sequence(ENSEMBLE, health, WS) == [2, 0, 1, 3]


def test_pending_requests_reorder_large_ensemble_upstream_testPendingRequestsReorderLargeEnsemble():
    a5, a6, a7 = bid(6), bid(7), bid(8)
    mapping = dict(BASE, **{a5: DEFAULT_RR, a6: DEFAULT_RR, a7: DEFAULT_RR})
    p = make(RackawarePolicy, mapping, {"readReorderThresholdPendingRequests": 10}, local="/r1/rack1")
    ens = [A1, A2, A3, A4, a5, a6, a7]
    health = BookiesHealthInfo(pending={A1: 1, A2: 20, A3: 0, A4: 12, a5: 9, a6: 2, a7: 10})
    assert p.reorder_read_sequence(ens, health, [1, 3, 5, 6]) == [5, 1, 3, 6]


@pytest.mark.parametrize("pending", [{A1: 10, A2: 7, A3: 1, A4: 5}, {A1: 1, A2: 7, A3: 1, A4: 5}],
                         ids=["testPendingRequestsNoReorder1", "testPendingRequestsNoReorder2"])
def test_pending_requests_no_reorder_upstream(pending):
    p = base_policy({"readReorderThresholdPendingRequests": 10})
    assert p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(pending=pending), WS) == WS


def test_node_with_failures_upstream_testNodeWithFailures():
    p = base_policy(local=DEFAULT_RR)
    p.on_cluster_changed({A3, A4}, set())
    seq = p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(failures={A1: 20, A2: 22}), WS)
    assert [ENSEMBLE[i] for i in seq] == [A3, A4, A1, A2]


def test_failed_bookies_keep_relative_order_after_healthy_ones():
    """Upstream quirk: LOCAL_FAIL members keep their original order (the 'earlier failure first' intent is lost)."""
    p = base_policy()
    p.on_cluster_changed({A1, A2, A4}, set())  # A3 gone triggers reordering
    seq = p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(failures={A1: 50, A2: 10}), WS)
    assert seq == [3, 0, 1, 2]


def test_random_read_reordering_shuffles_only_inside_classes():
    p = base_policy({"ensembleRandomReadReordering": True})
    p.on_cluster_changed({A1, A2, A3}, set())
    seen = {tuple(p.reorder_read_sequence(ENSEMBLE, BookiesHealthInfo(), WS)) for _ in range(60)}
    assert len(seen) > 1
    assert all(s[3] == 3 for s in seen)  # the unavailable bookie stays last


def test_reorder_read_lac_sequence_appends_missing_indexes():
    p = base_policy()
    p.on_cluster_changed({A2, A3, A4}, set())
    assert p.reorder_read_lac_sequence(ENSEMBLE, BookiesHealthInfo(), [0, 1]) == [1, 0, 2, 3]


# -- replace bookie -----------------------------------------------------------------------------------
def test_replace_with_enough_bookies_in_same_rack_upstream_testReplaceBookieWithEnoughBookiesInSameRack():
    m = {A1: DEFAULT_RR, A2: "/default-region/r2", A3: "/default-region/r2", A4: "/default-region/r3"}
    p = make(RackawarePolicy, m)
    r = p.replace_bookie(1, 1, 1, [], A2, set())
    assert r.bookie == A3
    assert r.adherence == Adherence.MEETS_STRICT


def test_replace_with_enough_bookies_in_different_rack_upstream_testReplaceBookieWithEnoughBookiesInDifferentRack():
    m = {A1: DEFAULT_RR, A2: "/default-region/r2", A3: "/default-region/r3", A4: "/default-region/r4"}
    p = make(RackawarePolicy, m)
    for _ in range(20):
        r = p.replace_bookie(1, 1, 1, [], A2, {A1})
        assert r.bookie in (A3, A4)
        assert r.adherence == Adherence.MEETS_STRICT


def test_replace_with_not_enough_bookies_upstream_testReplaceBookieWithNotEnoughBookies():
    m = {A1: DEFAULT_RR, A2: "/default-region/r2", A3: "/default-region/r3", A4: "/default-region/r4"}
    p = make(RackawarePolicy, m)
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(1, 1, 1, [], A2, {A1, A3, A4})


def test_replace_in_same_rack_as_ensemble_upstream_testReplaceBookieWithEnoughBookiesInSameRackAsEnsemble():
    a1, a2, a3, a4 = bid(5), bid(2), bid(3), bid(4)
    m = {a1: "/default-rack", a2: "/r2", a3: "/r2", a4: "/r3"}
    p = make(RackawarePolicy, m)
    r = p.replace_bookie(1, 1, 1, [a2, a4], a4, set())
    assert r.bookie == a1
    assert r.ensemble == [a2, a1]
    assert r.adherence == Adherence.MEETS_STRICT


def test_replace_does_not_mutate_caller_exclude_set():
    m = {A1: DEFAULT_RR, A2: "/default-region/r2", A3: "/default-region/r3", A4: "/default-region/r4"}
    p = make(RackawarePolicy, m)
    excl = {A1}
    p.replace_bookie(2, 2, 2, [A2, A3], A2, excl)
    assert excl == {A1}


# -- new ensemble -------------------------------------------------------------------------------------
def test_new_ensemble_with_single_rack_upstream_testNewEnsembleWithSingleRack():
    m = {bid(i): DEFAULT_RR for i in (6, 7, 8, 9)}
    p = make(RackawarePolicy, m)
    for e in (3, 4):
        r = p.new_ensemble(e, 2, 2)
        assert covered_write_quorums(r.ensemble, 2, 2, m) == 0
        assert r.adherence == Adherence.FAIL


def test_single_rack_path_reports_real_adherence_not_always_fail():
    """Ours: upstream answers FAIL on the single-rack path even for WQ=1; a WQ=1 ensemble does adhere."""
    m = {bid(i): DEFAULT_RR for i in (6, 7, 8, 9)}
    p = make(RackawarePolicy, m)
    assert p.new_ensemble(3, 1, 1).adherence == Adherence.MEETS_STRICT


def test_single_rack_with_enforce_min_num_racks_upstream_testSingleRackWithEnforceMinNumRacks():
    m = {bid(i): DEFAULT_RR for i in (2, 3, 4, 5)}
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 2, "enforceMinNumRacksPerWriteQuorum": True})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(3, 2, 2)


def _racks(n_racks, per_rack, prefix="128.0.0."):
    m, by_rack = {}, {}
    for i in range(n_racks):
        for j in range(per_rack):
            b = f"{prefix}{i * per_rack + j}:3181"
            m[b] = f"/default-region/r{i}"
            by_rack.setdefault(m[b], []).append(b)
    return m, by_rack


def test_new_ensemble_with_enforce_min_num_racks_upstream_testNewEnsembleWithEnforceMinNumRacks():
    m, _ = _racks(3, 5)
    default = {f"128.0.0.{100 + i}:3181": DEFAULT_RR for i in range(5)}
    p = make(RackawarePolicy, {**m, **default}, {"minNumRacksPerWriteQuorum": 4,
                                                "enforceMinNumRacksPerWriteQuorum": True}, local=DEFAULT_RR)
    assert len(p.topology.bookies_in_rack(DEFAULT_RR)) == 5  # upstream gauge NUM_WRITABLE_BOOKIES_IN_DEFAULT_RACK
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(8, 4, 4)
    r = p.new_ensemble(15, 3, 3)
    assert covered_write_quorums(r.ensemble, 3, 4, m) == 15
    assert r.adherence == Adherence.MEETS_STRICT
    assert not set(r.ensemble) & set(default)


def test_new_ensemble_sufficient_racks_and_enforce_upstream_testNewEnsembleWithSufficientRacksAndEnforceMinNumRacks():
    m, _ = _racks(5, 20)
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 4, "enforceMinNumRacksPerWriteQuorum": True})
    for e in range(3, 40):
        r = p.new_ensemble(e, 3, 3)
        assert covered_write_quorums(r.ensemble, 3, 4, m) == e
        assert r.adherence == Adherence.MEETS_STRICT


def test_replace_bookie_with_enforce_min_num_racks_upstream_testReplaceBookieWithEnforceMinNumRacks():
    m, _ = _racks(3, 5)
    default = {f"127.0.0.{100 + i}:3181": DEFAULT_RR for i in range(5)}
    mapping = {**m, **default}
    resolver = StaticResolver(mapping)
    p = RackawarePolicy(PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": 4,
                                                          "enforceMinNumRacksPerWriteQuorum": True}), resolver)
    writable = set(mapping)
    p.on_cluster_changed(writable, set())
    ens = p.new_ensemble(15, 3, 3).ensemble
    victim, other_rack = ens[7], m[ens[8]]
    n1 = "128.0.0.100:3181"
    resolver.set_location(n1, other_rack)
    writable.add(n1)
    p.on_cluster_changed(writable, set())
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(15, 3, 3, ens, victim, set())
    n2 = "128.0.0.101:3181"
    resolver.set_location(n2, "/default-region/r100")
    writable.add(n2)
    p.on_cluster_changed(writable, set())
    r = p.replace_bookie(15, 3, 3, ens, victim, set())
    assert r.bookie == n2 and r.adherence == Adherence.MEETS_STRICT
    with pytest.raises(NotEnoughBookiesError):
        p.replace_bookie(15, 3, 3, ens, victim, {n2})
    n3 = "128.0.0.102:3181"
    resolver.set_location(n3, m[victim])
    writable.add(n3)
    p.on_cluster_changed(writable, set())
    r = p.replace_bookie(15, 3, 3, ens, victim, {n2})
    assert r.bookie == n3 and r.adherence == Adherence.MEETS_STRICT


def test_new_ensemble_with_multiple_racks_upstream_testNewEnsembleWithMultipleRacks():
    a1, a2, a3, a4 = bid(1), bid(2), bid(3), bid(4)
    m = {a1: DEFAULT_RR, a2: "/default-region/r2", a3: "/default-region/r2", a4: "/default-region/r2"}
    p = make(RackawarePolicy, m)
    for e in (3, 4):
        r = p.new_ensemble(e, 2, 2)
        assert 1 <= covered_write_quorums(r.ensemble, 2, 2, m) < 3
        assert r.adherence == Adherence.FAIL


@pytest.mark.parametrize("min_racks,e,wq", [(4, 12, 6), (6, 6, 6), (6, 10, 10), (5, 24, 12)])
def test_min_num_racks_per_write_quorum_upstream_testMinNumRacksPerWriteQuorumOfRacks(min_racks, e, wq):
    m, _ = _racks(6, 5)
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": min_racks})
    r = p.new_ensemble(e, wq, wq)
    assert covered_write_quorums(r.ensemble, wq, min_racks, m) == e
    assert r.adherence == Adherence.MEETS_STRICT


def test_new_ensemble_with_enough_racks_upstream_testNewEnsembleWithEnoughRacks():
    m = {bid(2): DEFAULT_RR, bid(3): "/default-region/r2", bid(4): "/default-region/r3", bid(5): "/default-region/r4",
         bid(6): DEFAULT_RR, bid(7): "/default-region/r2", bid(8): "/default-region/r3", bid(9): "/default-region/r4"}
    p = make(RackawarePolicy, m)
    r = p.new_ensemble(3, 3, 2)
    assert covered_write_quorums(r.ensemble, 3, 2, m) == 3 and r.adherence == Adherence.MEETS_STRICT
    r = p.new_ensemble(4, 4, 2)
    assert covered_write_quorums(r.ensemble, 4, 2, m) == 4 and r.adherence == Adherence.MEETS_STRICT


def test_remove_bookie_from_cluster_upstream_testRemoveBookieFromCluster():
    m = {A1: DEFAULT_RR, A2: "/default-region/r2", A3: "/default-region/r2", A4: "/default-region/r3"}
    p = make(RackawarePolicy, m)
    dead = p.on_cluster_changed({A2, A3, A4}, set())
    assert dead == {A1}
    assert A1 not in p.known_bookies


def test_new_ensemble_excludes_default_rack_upstream_testNewEnsembleExcludesDefaultRackBookiesEnforceMinNumRacks():
    m, _ = _racks(5, 20)
    default = {f"127.0.0.{100 + i}:3181": DEFAULT_RR for i in range(10)}
    p = make(RackawarePolicy, {**m, **default}, {"minNumRacksPerWriteQuorum": 4,
                                                "enforceMinNumRacksPerWriteQuorum": True})
    for e in range(3, 30, 3):
        r = p.new_ensemble(e, 3, 3)
        assert not set(r.ensemble) & set(default)
        assert r.adherence == Adherence.MEETS_STRICT


def test_local_rack_is_first_pick():
    m, _by_rack = _racks(4, 5)
    p = make(RackawarePolicy, m, local="/default-region/r2")
    for _ in range(10):
        assert m[p.new_ensemble(3, 2, 2).ensemble[0]] == "/default-region/r2"
    p2 = make(RackawarePolicy, m, {"ignoreLocalNodeInPlacementPolicy": True}, local="/default-region/r2")
    firsts = {m[p2.new_ensemble(3, 2, 2).ensemble[0]] for _ in range(40)}
    assert len(firsts) > 1


def test_read_only_and_excluded_bookies_are_never_chosen():
    m, _ = _racks(3, 4)
    ro = {"128.0.0.0:3181", "128.0.0.5:3181"}
    excl = {"128.0.0.9:3181"}
    p = make(RackawarePolicy, m, writable=set(m) - ro, readonly=ro)
    for _ in range(50):
        r = p.new_ensemble(5, 3, 2, excl)
        assert not set(r.ensemble) & (ro | excl)
        assert p.replace_bookie(5, 3, 2, r.ensemble, r.ensemble[2], excl).bookie not in ro | excl


# -- weights ------------------------------------------------------------------------------------------
def test_weighted_replace_in_same_rack_upstream_testWeightedPlacementAndReplaceBookieWithEnoughBookiesInSameRack():
    a1, a2, a3, a4 = bid(1), bid(2), bid(3), bid(4)
    m = {a1: DEFAULT_RR, a2: "/default-region/r2", a3: "/default-region/r2", a4: "/default-region/r2"}
    p = make(RackawarePolicy, m, {"diskWeightBasedPlacementEnabled": True,
                                  "bookieMaxMultipleForWeightBasedPlacement": -1})
    p.update_bookie_info({a1: BookieInfo(100, 100), a2: BookieInfo(100, 100), a3: BookieInfo(100, 100),
                          a4: BookieInfo(1000, 1000)})
    counts = {a3: 0, a4: 0}
    for _ in range(20000):
        r = p.replace_bookie(1, 1, 1, [], a2, set())
        assert r.adherence == Adherence.MEETS_STRICT
        counts[r.bookie] += 1
    assert abs(counts[a4] / counts[a3] - 10) < 1


def test_weighted_replace_other_racks_upstream_testWeightedPlacementAndReplaceBookieWithoutEnoughBookiesInSameRack():
    a0, a1, a2, a3, a4 = "126.0.0.1:3181", bid(1), bid(2), bid(3), bid(4)
    m = {a0: "/default-region/r0", a1: DEFAULT_RR, a2: "/default-region/r2", a3: "/default-region/r3",
         a4: "/default-region/r4"}
    p = make(RackawarePolicy, m, {"diskWeightBasedPlacementEnabled": True,
                                  "bookieMaxMultipleForWeightBasedPlacement": 4})
    p.update_bookie_info({a0: BookieInfo(50, 50), a1: BookieInfo(100, 100), a2: BookieInfo(100, 100),
                          a3: BookieInfo(200, 200), a4: BookieInfo(500, 500)})
    counts = dict.fromkeys((a0, a1, a3, a4), 0)
    for _ in range(20000):
        r = p.replace_bookie(1, 1, 1, [], a2, set())
        counts[r.bookie] += 1
    median = 150  # of the remaining weights 50, 100, 200, 500
    assert abs(counts[a4] / (median / 100 * counts[a1]) - 4) < 1
    assert abs(counts[a4] / counts[a3] - median * 4 / 200) < 1


def test_weighted_new_ensemble_upstream_testWeightedPlacementAndNewEnsembleWithEnoughBookiesInSameRack():
    ids = [bid(i) for i in range(1, 10)]
    racks = [DEFAULT_RR] + ["/default-region/r2"] * 4 + ["/default-region/r3"] * 4
    m = dict(zip(ids, racks, strict=True))
    p = make(RackawarePolicy, m, {"diskWeightBasedPlacementEnabled": True,
                                  "bookieMaxMultipleForWeightBasedPlacement": 4})
    heavy = {ids[4], ids[8]}
    p.update_bookie_info({b: BookieInfo(1000, 1000) if b in heavy else BookieInfo(100, 100) for b in ids})
    counts = dict.fromkeys(ids, 0)
    for _ in range(6000):
        r = p.new_ensemble(3, 2, 2)
        assert covered_write_quorums(r.ensemble, 2, 2, m) >= 2
        for b in r.ensemble:
            counts[b] += 1
    assert abs(counts[ids[4]] / counts[ids[1]] - 4) < 0.5
    assert abs(counts[ids[8]] / counts[ids[5]] - 4) < 0.5


def test_weighted_new_ensemble_not_enough_upstream_testWeightedPlacementAndNewEnsembleWithoutEnoughBookies():
    ids = [bid(i) for i in range(1, 6)]
    m = dict(zip(ids, [DEFAULT_RR, "/default-region/r2", "/default-region/r2", "/default-region/r3",
                       "/default-region/r3"], strict=True))
    p = make(RackawarePolicy, m, {"diskWeightBasedPlacementEnabled": True,
                                  "bookieMaxMultipleForWeightBasedPlacement": 4})
    p.update_bookie_info({b: BookieInfo(w, w) for b, w in zip(ids, (100, 100, 1000, 100, 1000), strict=True)})
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(3, 2, 2, set(ids[:4]))
    assert p.new_ensemble(1, 1, 1, set(ids[:4])).ensemble == [ids[4]]


# -- stabilize period, rack changes, default rack ----------------------------------------------------
def test_placement_on_stabilize_network_topology_upstream_testPlacementOnStabilizeNetworkTopology():
    clock = FakeClock()
    p = base_policy({"networkTopologyStabilizePeriodSeconds": 99999}, local=DEFAULT_RR, clock=clock)
    dead = p.on_cluster_changed({A1, A2, A3}, set())
    assert dead == set()  # within the stabilize period a departed bookie is not dead (upstream)
    for _ in range(5):
        r = p.new_ensemble(3, 2, 2)
        assert A4 not in r.ensemble and r.adherence == Adherence.FAIL
    r = p.new_ensemble(4, 2, 2)
    assert A4 in r.ensemble and r.adherence == Adherence.FAIL
    clock.advance(100000)
    with pytest.raises(NotEnoughBookiesError):
        p.new_ensemble(4, 2, 2)


def test_stabilize_period_delays_dead_report_then_reports_once():
    """Stabilize period (upstream StabilizeNetworkTopology): no dead bookie while it runs, also on later
    changes; ours: once it has run out the next change reports the bookie still gone, exactly once."""
    clock = FakeClock()
    p = base_policy({"networkTopologyStabilizePeriodSeconds": 30}, local=DEFAULT_RR, clock=clock)
    assert p.on_cluster_changed({A1, A2, A3}, set()) == set()
    clock.advance(29)
    assert p.on_cluster_changed({A1, A2}, set()) == set()  # A3 leaves; A4 still inside its period
    clock.advance(2)  # A4's period ran out, A3's did not
    assert p.on_cluster_changed({A1, A2}, {A3}) == {A4}
    assert p.on_cluster_changed({A1, A2}, set()) == set()  # reported once; A3 read-only then gone: not dead yet
    clock.advance(60)
    assert p.on_cluster_changed({A1, A2, A4}, set()) == {A3}  # A4 back: not reported


def test_without_stabilize_period_a_departed_bookie_is_dead_at_once():
    p = base_policy(local=DEFAULT_RR)
    assert p.on_cluster_changed({A1, A2, A3}, set()) == {A4}


def test_update_topology_with_rack_change_upstream_testUpdateTopologyWithRackChange():
    n = [bid(100 + i) for i in range(4)]
    resolver = StaticResolver({b: DEFAULT_RR for b in n})
    p = RackawarePolicy(PlacementConfig(), resolver)
    p.on_cluster_changed(set(n), set())
    assert len(p.topology.bookies_in_rack(DEFAULT_RR)) == 4
    resolver.set_location(n[2], "/default-region/r4")
    p.on_bookie_rack_change([n[2]])
    assert len(p.topology.bookies_in_rack(DEFAULT_RR)) == 3
    assert p.location_of(n[2]) == "/default-region/r4"


def test_num_bookies_in_default_rack_upstream_testNumBookiesInDefaultRackGauge():
    n1, n2, n3, n4 = (bid(100 + i) for i in range(4))
    resolver = StaticResolver({n1: DEFAULT_RR, n2: "/default-region/r2", n3: "/default-region/r3", n4: DEFAULT_RR})
    p = RackawarePolicy(PlacementConfig(), resolver)
    in_default = lambda: len(p.topology.bookies_in_rack(DEFAULT_RR))  # noqa: E731
    p.on_cluster_changed({n1, n2}, {n3, n4})
    assert in_default() == 1
    p.on_cluster_changed({n1, n2, n4}, {n3})
    assert in_default() == 2
    resolver.set_location(n4, "/default-region/r4")
    p.on_bookie_rack_change([n4])
    assert in_default() == 1
    p.on_cluster_changed(set(), {n3})
    assert in_default() == 0


def test_unknown_bookies_get_default_rack_and_depth_mismatch_is_rejected():
    m = {bid(1): "/r1", bid(2): "/r2"}
    p = make(RackawarePolicy, m, writable=set(m) | {bid(3)})
    assert p.location_of(bid(3)) == DEFAULT_RR
    assert bid(3) in p.rejected and bid(3) not in p.known_bookies  # depth 2 vs 1, as upstream
    p2 = make(RackawarePolicy, m, writable=set(m) | {bid(3)}, default_rack="/default-rack")
    assert bid(3) in p2.known_bookies and p2.location_of(bid(3)) == "/default-rack"


def test_unconfigured_script_resolver_is_fatal_only_under_enforcement():
    RackawarePolicy(PlacementConfig(), ScriptResolver(None))
    with pytest.raises(ConfigError, match="networkTopologyScriptFileName"):
        RackawarePolicy(PlacementConfig.from_properties({"enforceMinNumRacksPerWriteQuorum": True}),
                        ScriptResolver(None))


# -- adherence ----------------------------------------------------------------------------------------
def test_is_ensemble_adhering_counts_only_known_bookies():
    m = {bid(1): "/r/a", bid(2): "/r/b", bid(3): "/r/c"}
    p = make(RackawarePolicy, m)
    assert p.is_ensemble_adhering([bid(1), bid(2), bid(3)], 2, 2) == Adherence.MEETS_STRICT
    assert p.is_ensemble_adhering([bid(1), bid(2), bid(9)], 2, 2) == Adherence.FAIL  # bid(9) adds no rack
    assert p.is_ensemble_adhering([], 2, 2) == Adherence.FAIL


def test_enforcement_fails_write_sets_with_default_rack():
    m = {bid(1): "/r/a", bid(2): DEFAULT_RR, bid(3): "/r/c"}
    assert make(RackawarePolicy, m).is_ensemble_adhering([bid(1), bid(2), bid(3)], 2, 2) == Adherence.MEETS_STRICT
    p = make(RackawarePolicy, m, {"enforceMinNumRacksPerWriteQuorum": True})
    assert p.is_ensemble_adhering([bid(1), bid(2), bid(3)], 2, 2) == Adherence.FAIL


def test_acked_bookies_adhering_uses_min_of_wq_and_min_racks():
    m = {bid(1): "/r/a", bid(2): "/r/a", bid(3): "/r/c"}
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 3})
    assert not p.are_acked_bookies_adhering({bid(1), bid(2)}, 3, 2)
    assert p.are_acked_bookies_adhering({bid(1), bid(3)}, 2, 2)
    assert not p.are_acked_bookies_adhering({bid(1), bid(3)}, 3, 2)


def test_notify_rack_change_upstream_TestRackawarePolicyNotificationUpdates_testNotifyRackChange():
    a1, a2, a3, a4 = "127.0.1.1:3181", "127.0.1.2:3181", "127.0.1.3:3181", "127.0.1.4:3181"
    m = {a1: "/default-region/rack-1", a2: "/default-region/rack-2", a3: "/default-region/rack-2",
         a4: "/default-region/rack-2"}
    resolver = StaticResolver(m)
    p = RackawarePolicy(PlacementConfig(), resolver)
    p.on_cluster_changed(set(m), set())
    r = p.new_ensemble(3, 2, 2)
    assert 1 <= covered_write_quorums(r.ensemble, 2, 2, m) < 3
    assert a1 in r.ensemble
    resolver.set_location(a2, "/default-region/rack-3")
    p.on_bookie_rack_change([a2])
    m[a2] = "/default-region/rack-3"
    r = p.new_ensemble(3, 2, 1)
    assert covered_write_quorums(r.ensemble, 2, 2, m) == 3
    assert a1 in r.ensemble and a2 in r.ensemble


def test_rack_change_of_every_bookie_to_another_depth_keeps_them_all():
    """A /bookies document appearing after start moves every bookie from the default rack (depth 2) to
    one-level racks: all of them must be re-added, not only the last one."""
    ids = [f"127.0.0.1:{3181 + i}" for i in range(4)]
    resolver = StaticResolver({})
    p = RackawarePolicy(PlacementConfig(), resolver)
    p.on_cluster_changed(set(ids), set())
    assert len(p.known_bookies) == 4
    for i, b in enumerate(ids):
        resolver.set_location(b, f"/rack{i % 2}")
    p.on_bookie_rack_change()
    assert p.known_bookies == frozenset(ids) and not p.rejected
    assert p.new_ensemble(4, 2, 2).adherence == Adherence.MEETS_STRICT


def test_rejected_bookie_is_retried_when_the_depth_allows_it():
    m = {bid(1): "/r1", bid(2): "/x/r2"}
    p = make(RackawarePolicy, m, writable={bid(1)})
    p.on_cluster_changed({bid(1), bid(2)}, set())
    assert bid(2) in p.rejected
    p.on_cluster_changed({bid(2)}, set())  # bid(1) leaves: the topology is empty, bid(2) now fits
    assert bid(2) in p.known_bookies and not p.rejected
