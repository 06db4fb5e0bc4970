"""BP-54 replace_to_adhere: the seed's worked examples, upstream's repair tests, and minimality."""

from __future__ import annotations

import random

import pytest

from autorecovery.placement import (
    Adherence,
    BookieInfo,
    PlacementConfig,
    RackawarePolicy,
    StaticResolver,
    solve_min_swaps,
)

from _placement_testkit import brute_min_swaps, make


def bk(i):
    return f"bookie{i}:3181"


def bp54_example1(seed=0):
    m = {bk(i): f"/rack{(i - 1) // 3 + 1}" for i in range(1, 10)}
    return make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 2}, seed=seed), m


def bp54_example2(seed=0):
    m = {bk(1): "/rack1", bk(2): "/rack1", bk(3): "/rack1", bk(4): "/rack2", bk(5): "/rack2", bk(6): "/rack2"}
    return make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 2}, seed=seed), m


@pytest.mark.parametrize("seed", range(5))
def test_bp54_example_1_is_fixed_with_exactly_one_swap(seed):
    """Seed: 9 bookies in racks 1..3, E=5 WQ=2, [b1,b4,b7,b2,b3] (racks 1,2,3,1,1): only b3 is replaced."""
    p, m = bp54_example1(seed)
    cur = [bk(1), bk(4), bk(7), bk(2), bk(3)]
    assert p.is_ensemble_adhering(cur, 2, 2) == Adherence.FAIL
    r = p.replace_to_adhere(5, 2, 2, set(), cur)
    assert r.swaps == 1 and r.replaced == (4,)
    assert r.ensemble[:4] == cur[:4]
    assert m[r.ensemble[4]] != "/rack1" and r.ensemble[4] in {bk(5), bk(6), bk(8), bk(9)}
    assert r.adherence == Adherence.MEETS_STRICT == p.is_ensemble_adhering(r.ensemble, 2, 2)


@pytest.mark.parametrize("seed", range(5))
def test_bp54_example_2_is_fixed_with_exactly_one_swap(seed):
    """Seed: racks r1={b1,b2,b3}, r2={b4,b5,b6}, E=4 WQ=2, [b1,b2,b4,b3]: replace only b1 by an r2 bookie
    (base 0 of upstream's greedy would change 3)."""
    p, _m = bp54_example2(seed)
    cur = [bk(1), bk(2), bk(4), bk(3)]
    r = p.replace_to_adhere(4, 2, 2, set(), cur)
    assert r.swaps == 1 and r.replaced == (0,)
    assert r.ensemble[1:] == cur[1:] and r.ensemble[0] in {bk(5), bk(6)}
    assert r.adherence == Adherence.MEETS_STRICT


def test_upstream_greedy_also_fixes_bp54_examples_with_one_swap():
    p, _ = bp54_example1()
    assert p.upstream_replace_to_adhere(5, 2, 2, set(), [bk(1), bk(4), bk(7), bk(2), bk(3)]).swaps == 1
    p, _ = bp54_example2()
    assert p.upstream_replace_to_adhere(4, 2, 2, set(), [bk(1), bk(2), bk(4), bk(3)]).swaps == 1


def _racks(n_racks, per_rack):
    return {f"128.0.0.{i * per_rack + j}:3181": f"/default-region/r{i}"
            for i in range(n_racks) for j in range(per_rack)}


def test_replace_not_adhering_upstream_testReplaceNotAdheringPlacementPolicyBookie():
    m = _racks(3, 3)
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 3, "enforceMinNumRacksPerWriteQuorum": True})
    known = ["128.0.0.0:3181", "128.0.0.1:3181", "128.0.0.2:3181"]
    assert p.is_ensemble_adhering(known, 3, 3) == Adherence.FAIL
    r = p.replace_to_adhere(3, 3, 3, set(), known)
    assert r.swaps == 2 and r.adherence == Adherence.MEETS_STRICT
    unknown = ["128.0.0.100:3181", "128.0.0.101:3181", "128.0.0.102:3181"]
    assert p.is_ensemble_adhering(unknown, 3, 3) == Adherence.FAIL
    r = p.replace_to_adhere(3, 3, 3, set(), unknown)
    assert r.swaps == 3 and r.adherence == Adherence.MEETS_STRICT


def test_no_more_rack_upstream_testReplaceNotAdheringPlacementPolicyBookieWithNoMoreRackBookie():
    m = _racks(2, 3)
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 3, "enforceMinNumRacksPerWriteQuorum": True})
    for cur in (["128.0.0.0:3181", "128.0.0.1:3181", "128.0.0.2:3181"],
                ["128.0.0.100:3181", "128.0.0.101:3181", "128.0.0.102:3181"]):
        r = p.replace_to_adhere(3, 3, 3, set(), cur)
        assert r.adherence == Adherence.FAIL and r.ensemble == cur and r.swaps == 0 and r.exact


def test_one_rack_left_returns_fail_unchanged():
    """The DR story of BP-54: while only one rack is up no fix exists; nothing is changed."""
    m = {bk(i): "/rack1" for i in range(1, 5)}
    m.update({bk(i): "/rack2" for i in range(5, 9)})
    p = make(RackawarePolicy, m, writable={bk(i) for i in range(1, 5)})
    cur = [bk(1), bk(2), bk(3), bk(4)]
    r = p.replace_to_adhere(4, 2, 2, set(), cur)
    assert r.adherence == Adherence.FAIL and r.ensemble == cur
    p.on_cluster_changed(set(m), set())  # the rack comes back
    r = p.replace_to_adhere(4, 2, 2, set(), cur)
    assert r.adherence == Adherence.MEETS_STRICT and r.swaps == 2
    # E=3, WQ=2 over 2 racks is an odd cycle: never fixable (upstream: "impossible cases return FAIL")
    r = p.replace_to_adhere(3, 2, 2, set(), cur[:3])
    assert r.adherence == Adherence.FAIL and r.ensemble == cur[:3]


def test_six_bookies_two_racks_minimum_is_two_where_upstream_may_use_three():
    """Reference §7: racks r1,r1,r1,r2,r2,r2 with E=6 WQ=2 - upstream gives 2 or 3 changes; ours is always 2."""
    m = {bk(i): "/r1" for i in (1, 2, 3)}
    m.update({bk(i): "/r2" for i in (4, 5, 6)})
    cur = [bk(i) for i in range(1, 7)]
    for seed in range(20):
        p = make(RackawarePolicy, m, seed=seed)
        r = p.replace_to_adhere(6, 2, 2, set(), cur)
        assert r.swaps == 2 and r.adherence == Adherence.MEETS_STRICT
        g = p.upstream_replace_to_adhere(6, 2, 2, set(), cur)
        assert g.adherence == Adherence.FAIL or g.swaps >= r.swaps
    assert brute_min_swaps(p, cur, 2, 2, set()) == 2


def test_already_adhering_is_returned_unchanged():
    p, _ = bp54_example1()
    cur = [bk(1), bk(4), bk(7)]
    r = p.replace_to_adhere(3, 2, 2, set(), cur)
    assert r.ensemble == cur and r.swaps == 0 and r.adherence == Adherence.MEETS_STRICT


def test_dead_read_only_and_excluded_members_are_replaced_survivors_stay():
    m = {bk(i): f"/rack{i % 3}" for i in range(1, 13)}
    p = make(RackawarePolicy, m, writable=set(m) - {bk(2), bk(3)}, readonly={bk(3)})
    cur = [bk(1), bk(2), bk(3), bk(4), bk(5)]  # bk2 dead, bk3 read-only
    r = p.replace_to_adhere(5, 3, 2, {bk(4)}, cur)  # bk4 excluded
    assert r.adherence == Adherence.MEETS_STRICT
    assert set(r.replaced) == {1, 2, 3} and r.swaps == 3  # the minimum: only the unusable members move
    assert r.ensemble[0] == bk(1) and r.ensemble[4] == bk(5)  # survivors stay in place
    new = {r.ensemble[i] for i in r.replaced}
    assert not new & {bk(2), bk(3), bk(4)}
    assert r.swaps == brute_min_swaps(p, cur, 3, 2, {bk(4)})


def test_default_rack_members_are_replaced_under_enforcement():
    m = {bk(1): "/default-region/default-rack", bk(2): "/x/r1", bk(3): "/x/r2", bk(4): "/x/r3"}
    p = make(RackawarePolicy, m, {"enforceMinNumRacksPerWriteQuorum": True})
    r = p.replace_to_adhere(3, 2, 2, set(), [bk(1), bk(2), bk(3)])
    assert r.replaced == (0,) and r.ensemble[0] == bk(4)


def test_weights_prefer_targets_with_more_free_disk():
    m = {bk(i): "/rack1" for i in (1, 2, 3)}
    m.update({bk(4): "/rack2", bk(5): "/rack3", bk(6): "/rack4"})
    p = make(RackawarePolicy, m, {"diskWeightBasedPlacementEnabled": True})
    p.update_bookie_info({bk(4): BookieInfo(10, 1), bk(5): BookieInfo(10, 9), bk(6): BookieInfo(10, 3)})
    for _ in range(10):
        r = p.replace_to_adhere(3, 3, 2, set(), [bk(1), bk(2), bk(3)])
        assert r.swaps == 1 and r.ensemble[r.replaced[0]] == bk(5)


def test_search_budget_gives_up_without_a_non_minimal_answer():
    m = {bk(i): f"/rack{i % 2}" for i in range(1, 30)}
    p = make(RackawarePolicy, m, repair_max_nodes=5)
    cur = [bk(i) for i in (1, 3, 5, 7, 9, 11)]  # all in /rack1
    r = p.replace_to_adhere(6, 2, 2, set(), cur)
    assert r.exact is False and r.adherence == Adherence.FAIL and r.ensemble == cur


def test_length_mismatch_is_rejected():
    p, _ = bp54_example1()
    with pytest.raises(ValueError):
        p.replace_to_adhere(4, 2, 2, set(), [bk(1), bk(4), bk(7)])


def test_new_ensemble_repairs_what_upstream_greedy_leaves_failing():
    """Racks A:1, B:1, C:2 with E=4 WQ=2: upstream's greedy can end with C,C adjacent (FAIL); the only
    adhering layouts alternate C with A/B, and ours always finds one."""
    m = {bk(1): "/A", bk(2): "/B", bk(3): "/C", bk(4): "/C"}
    greedy_failed = 0
    for seed in range(40):
        p = make(RackawarePolicy, m, seed=seed)
        r = p.new_ensemble(4, 2, 2)
        assert r.adherence == Adherence.MEETS_STRICT
        ens = p._greedy(p.topology, 4, 2, 2, set())
        greedy_failed += p.is_ensemble_adhering(ens, 2, 2) == Adherence.FAIL
    assert greedy_failed > 0


def test_solver_directly_with_two_level_labels():
    labels = [("z1", "u1"), ("z1", "u1"), ("z2", "u1")]
    pool = {("z1", "u1"): ["a", "b"], ("z2", "u1"): ["c"], ("z3", "u1"): ["d"], ("z1", "u2"): ["e"]}

    def judge(ws):
        zones = {}
        for z, u in ws:
            zones.setdefault(z, []).append(u)
        if any(len(us) > 1 and len(set(us)) == 1 for us in zones.values()):
            return Adherence.FAIL
        return Adherence.MEETS_STRICT if len(zones) >= 3 else Adherence.MEETS_SOFT

    out = solve_min_swaps(["a", "b", "c"], 3, labels, pool, judge, two_level=True, soft_possible=True,
                          rng=random.Random(1))
    assert out.changed in ((0,), (1,)) and out.adherence == Adherence.MEETS_STRICT and "d" in out.ensemble


def test_policy_config_unchanged_by_repair():
    cfg = PlacementConfig.from_properties({"minNumRacksPerWriteQuorum": 2})
    p = RackawarePolicy(cfg, StaticResolver({bk(1): "/a", bk(2): "/a", bk(3): "/b"}))
    p.on_cluster_changed({bk(1), bk(2), bk(3)}, set())
    p.replace_to_adhere(2, 2, 2, set(), [bk(1), bk(2)])
    assert p.config is cfg


def test_duplicated_member_is_replaced_by_same_rack_bookie_when_that_is_minimal():
    """A corrupt ensemble listing a bookie twice: the repair also makes members distinct, and the copy's best
    replacement is in the same rack (the own-label shortcut must not apply to duplicates)."""
    x, a2, a3 = bk(1), bk(2), bk(3)
    y, z, q, r_ = bk(4), bk(5), bk(6), bk(7)
    m = {x: "/A", a2: "/A", a3: "/A", y: "/B", z: "/B", q: "/B", r_: "/B"}
    p = make(RackawarePolicy, m, {"minNumRacksPerWriteQuorum": 2})
    cur = [x, y, x, z, q, r_]  # (z,q) and (q,r) are single-rack
    assert p.is_ensemble_adhering(cur, 2, 2) == Adherence.FAIL
    res = p.replace_to_adhere(6, 2, 2, set(), cur)
    assert res.adherence == Adherence.MEETS_STRICT and len(set(res.ensemble)) == 6
    assert res.swaps == brute_min_swaps(p, cur, 2, 2, set()) == 2
