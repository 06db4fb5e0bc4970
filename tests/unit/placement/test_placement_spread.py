"""SpreadReplacer: replacements spread over every bookie that keeps the ensemble adhering (issue 29 item 2)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from autorecovery.errors import NotEnoughBookiesError
from autorecovery.placement import Adherence, BookieInfo, DefaultPolicy, RackawarePolicy, RegionawarePolicy
from autorecovery.placement.spread import SpreadReplacer, spread_weights
from autorecovery.plan.targets import choose_replacements

from _placement_testkit import make

LOST, SURVIVOR = "lost:1", "survivor:1"


def _cluster(n_other_racks: int = 5, per_rack: int = 2) -> dict[str, str]:
    """The lost bookie's rack /r0 keeps one survivor; the ensemble's other members sit in /r1 and /r2;
    ``n_other_racks`` further racks hold ``per_rack`` bookies each."""
    m = {LOST: "/r0", SURVIVOR: "/r0", "m1:1": "/r1", "m2:1": "/r2"}
    for r in range(3, 3 + n_other_racks):
        for j in range(per_rack):
            m[f"b{r}-{j}:1"] = f"/r{r}"
    return m


def _heal(policy, replacer_factory, n: int) -> Counter:
    """Replace LOST in ``n`` ledgers of ensemble [m1, m2, LOST] (E3 WQ2 AQ2); count the targets."""
    got: Counter = Counter()
    for _ in range(n):
        repl = choose_replacements(ensemble=["m1:1", "m2:1", LOST], bad_indexes=[2],
                                   replace_bookie=replacer_factory(), ensemble_size=3, write_quorum=2, ack_quorum=2)
        ens = ["m1:1", "m2:1", repl[2]]
        assert policy.is_ensemble_adhering(ens, 2, 2) == Adherence.MEETS_STRICT
        got[repl[2]] += 1
    return got


def _rack_policy(mapping: dict[str, str], seed: int = 11):
    writable = set(mapping) - {LOST}
    return make(RackawarePolicy, mapping, writable=writable, seed=seed)


def test_upstream_rule_sends_every_copy_to_the_one_survivor():
    p = _rack_policy(_cluster())
    got = _heal(p, lambda: p.replace_bookie, 200)
    assert got == Counter({SURVIVOR: 200})


def test_spread_uses_every_adhering_bookie_and_never_breaks_adherence():
    mapping = _cluster(n_other_racks=5, per_rack=2)
    p = _rack_policy(mapping)
    got = _heal(p, lambda: SpreadReplacer(p), 1100)
    eligible = {b for b, r in mapping.items() if r not in ("/r1", "/r2")} - {LOST}
    assert set(got) == eligible  # 11 bookies: the survivor and the 10 elsewhere
    fair = 1100 / len(eligible)
    for b in eligible:
        assert 0.5 * fair < got[b] < 1.6 * fair, (b, got[b], fair)
    # /r1 and /r2 bookies would break the write sets {0,2} / {1,2}: never chosen
    assert not {"m1:1", "m2:1"} & set(got)


def test_members_racks_are_excluded_when_only_they_remain():
    # only the survivor keeps adherence (no other racks): spreading must not break adherence
    mapping = {LOST: "/r0", SURVIVOR: "/r0", "m1:1": "/r1", "m2:1": "/r2", "x1:1": "/r1", "x2:1": "/r2"}
    p = _rack_policy(mapping)
    got = _heal(p, lambda: SpreadReplacer(p), 50)
    assert got == Counter({SURVIVOR: 50})


def test_full_bookie_gets_none_and_free_space_weighs():
    mapping = _cluster(n_other_racks=3, per_rack=1)
    p = _rack_policy(mapping)
    tb = 1 << 40
    info = {b: BookieInfo(tb, tb // 2) for b in mapping}
    info["b3-0:1"] = BookieInfo(tb, 0)  # full
    info["b4-0:1"] = BookieInfo(tb, tb)  # twice the free space of the others
    p.update_bookie_info(info)
    got = _heal(p, lambda: SpreadReplacer(p), 900)
    assert got["b3-0:1"] == 0
    assert set(got) == {SURVIVOR, "b4-0:1", "b5-0:1"}
    assert got["b4-0:1"] > 1.5 * got["b5-0:1"]
    assert got["b4-0:1"] > 1.5 * got[SURVIVOR]


def test_in_flight_copies_push_choices_elsewhere():
    mapping = _cluster(n_other_racks=2, per_rack=1)
    p = _rack_policy(mapping)
    busy = {SURVIVOR: 9}  # 9 copies already streaming into the survivor
    got = _heal(p, lambda: SpreadReplacer(p, busy), 900)
    assert got[SURVIVOR] < 0.25 * min(got["b3-0:1"], got["b4-0:1"])
    w = spread_weights(p, [SURVIVOR, "b3-0:1"], busy)
    assert w[SURVIVOR] == pytest.approx(w["b3-0:1"] / 10)


def test_picks_of_one_fragment_count_as_in_flight():
    p = make(DefaultPolicy, {f"b{i}:1": "/r" for i in range(6)}, writable={f"b{i}:1" for i in range(2, 6)})
    r = SpreadReplacer(p)
    repl = choose_replacements(ensemble=["b0:1", "b1:1"], bad_indexes=[0, 1], replace_bookie=r,
                               ensemble_size=2, write_quorum=2, ack_quorum=2)
    assert len(set(repl.values())) == 2
    assert sum(r.in_flight.values()) == 2 and all(r.in_flight[b] == 1 for b in repl.values())


def test_seeded_policy_is_deterministic():
    runs = []
    for _ in range(2):
        p = _rack_policy(_cluster(), seed=5)
        runs.append([choose_replacements(ensemble=["m1:1", "m2:1", LOST], bad_indexes=[2],
                                         replace_bookie=SpreadReplacer(p), ensemble_size=3, write_quorum=2,
                                         ack_quorum=2)[2] for _ in range(30)])
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 3


def test_no_eligible_bookie_raises_as_the_policy_does():
    mapping = {LOST: "/r0", "m1:1": "/r1", "m2:1": "/r2"}
    p = make(RackawarePolicy, mapping, {"enforceMinNumRacksPerWriteQuorum": "true", "minNumRacksPerWriteQuorum": 2},
             writable=set(mapping) - {LOST})
    with pytest.raises(NotEnoughBookiesError):
        SpreadReplacer(p)(3, 2, 2, ["m1:1", "m2:1", LOST], LOST, frozenset())


@pytest.mark.parametrize("seed", range(40))
def test_never_worse_than_the_policys_own_choice(seed):
    """Random rack layouts, ensembles, excludes and enforcement: the spread pick's adherence is at least
    the policy's own pick's, it is never excluded, read-only, default-rack under enforcement, or a member."""
    rng = random.Random(seed)
    racks = [f"/r{i}" for i in range(rng.randint(1, 5))] + ["/default-region/default-rack"]
    mapping = {f"k{i}:1": rng.choice(racks) for i in range(rng.randint(4, 14))}
    enforce = rng.random() < 0.5
    props = {"minNumRacksPerWriteQuorum": rng.randint(1, 3), "enforceMinNumRacksPerWriteQuorum": str(enforce).lower()}
    bookies = sorted(mapping)
    readonly = set(rng.sample(bookies, rng.randint(0, 2)))
    e = rng.randint(2, min(5, len(bookies)))
    wq = rng.randint(1, e)
    ens = rng.sample(bookies, e)
    lost = ens[rng.randrange(e)]
    writable = set(bookies) - readonly - {lost}
    p = make(RackawarePolicy, mapping, props, writable=writable, readonly=readonly, seed=seed)
    excl = frozenset(rng.sample(bookies, rng.randint(0, 2)))
    try:
        own = p.replace_bookie(e, wq, wq, ens, lost, excl)
    except NotEnoughBookiesError:
        return
    for _ in range(10):
        p.rng = random.Random(seed)  # same draws for both
        res = SpreadReplacer(p, rng=rng)(e, wq, wq, ens, lost, excl)
        b = res.bookie
        assert b is not None and b not in excl and b not in readonly and b not in ens
        assert res.adherence >= own.adherence
        assert res.adherence == p.is_ensemble_adhering(res.ensemble, wq, wq)
        if enforce:
            assert mapping[b] != "/default-region/default-rack"


def test_region_policy_keeps_disallowed_regions_out():
    mapping = {LOST: "/reg1/r0", SURVIVOR: "/reg1/r0", "m1:1": "/reg1/r1", "m2:1": "/reg2/r2",
               "c1:1": "/reg2/r3", "c2:1": "/reg3/r4"}
    p = make(RegionawarePolicy, mapping, writable=set(mapping) - {LOST})
    got = Counter()
    for _ in range(200):
        res = SpreadReplacer(p)(3, 2, 2, ["m1:1", "m2:1", LOST], LOST, frozenset())
        assert res.adherence >= p.replace_bookie(3, 2, 2, ["m1:1", "m2:1", LOST], LOST).adherence
        got[res.bookie] += 1
    assert len(got) >= 2
