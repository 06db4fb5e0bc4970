"""Hypothesis properties on random topologies (rack, region and zone-aware; strict and non-strict):

* new_ensemble adheres whenever any adhering ensemble exists (brute-force oracle);
* no excluded, read-only or dead bookie is ever chosen (new_ensemble, replace_bookie, replace_to_adhere);
* replace_to_adhere uses exactly the brute-force minimum number of swaps (clusters of up to 12 bookies),
  and never more than upstream's greedy;
* weighted selection frequencies match the capped weights within 5% over 100k draws.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from autorecovery.placement import (
    Adherence,
    NotEnoughBookiesError,
    PlacementConfig,
    RackawarePolicy,
    RegionawarePolicy,
    StaticResolver,
    WeightedRandomSelection,
    ZoneawarePolicy,
)

from _placement_testkit import any_adhering, brute_min_swaps

COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEFAULT_RR = "/default-region/default-rack"
DEFAULT_ZU = "/default-zone/default-upgradedomain"


@st.composite
def scenarios(draw, max_n: int = 8, max_e: int = 5, brute_budget: bool = False,
              kinds: tuple[str, ...] = ("rack", "rack", "region", "zone", "zone-nonstrict")):
    kind = draw(st.sampled_from(kinds))
    e = draw(st.integers(1, max_e))
    props: dict = {}
    if kind.startswith("zone"):
        wq = draw(st.sampled_from([w for w in range(1, e + 1) if e % w == 0]))
        min_zones = draw(st.integers(0, max(0, min(2, wq - 1))))
        props["minNumZonesPerWriteQuorum"] = min_zones
        props["desiredNumZonesPerWriteQuorum"] = draw(st.integers(max(min_zones, 1), 3))
        props["enforceStrictZoneawarePlacement"] = kind == "zone"
    else:
        wq = draw(st.integers(1, e))
        props["minNumRacksPerWriteQuorum"] = draw(st.sampled_from([1, 2, 2, 3]))
        props["enforceMinNumRacksPerWriteQuorum"] = draw(st.booleans())
    aq = draw(st.integers(1, wq))
    if kind == "region" and draw(st.booleans()):
        props["reppRegionsToWrite"] = "g0;g1;g2"
        props["reppMinimumRegionsForDurability"] = 2
    if brute_budget:
        max_n = 12 if e <= 3 else (9 if e == 4 else 7)
    n = draw(st.integers(max(2, e), max_n))
    groups = draw(st.integers(1, 4))
    subs = draw(st.integers(1, 3))
    mapping = {}
    for i in range(n):
        b = f"10.0.0.{i}:3181"
        if draw(st.integers(0, 9)) == 0:
            continue  # unknown to the resolver: default location
        g, s = draw(st.integers(0, groups - 1)), draw(st.integers(0, subs - 1))
        mapping[b] = f"/g{g}/r{s}" if kind == "region" else (f"/z{g}/u{s}" if kind.startswith("zone")
                                                              else f"/dc/r{g * subs + s}")
    bookies = [f"10.0.0.{i}:3181" for i in range(n)]
    left = set(draw(st.lists(st.sampled_from(bookies), max_size=2)))
    readonly = set(draw(st.lists(st.sampled_from(bookies), max_size=2))) - left
    exclude = set(draw(st.lists(st.sampled_from(bookies), max_size=2)))
    seed = draw(st.integers(0, 2**16))
    cls = {"rack": RackawarePolicy, "region": RegionawarePolicy}.get(kind, ZoneawarePolicy)
    policy = cls(PlacementConfig.from_properties(props), StaticResolver(mapping), None, random.Random(seed))
    policy.on_cluster_changed(set(bookies), set())
    dead = policy.on_cluster_changed(set(bookies) - left - readonly, readonly)
    ens_pool = [*bookies, "10.9.9.9:3181"]
    if draw(st.booleans()):
        current = draw(st.lists(st.sampled_from(ens_pool), min_size=e, max_size=e, unique=True))
    else:  # clustered: neighbours by location, i.e. a typically broken but often fixable ensemble
        by_loc = sorted(bookies, key=lambda b: (mapping.get(b, ""), b))
        start = draw(st.integers(0, len(by_loc) - e))
        current = by_loc[start:start + e]
        draw(st.randoms(use_true_random=False)).shuffle(current)
    if e >= 3 and draw(st.integers(0, 7)) == 0:  # a corrupt ensemble naming one bookie twice
        current[draw(st.integers(1, e - 1))] = current[0]
    return policy, e, wq, aq, exclude, readonly, dead, current


def _banned(policy, exclude, readonly, dead):
    return set(exclude) | set(readonly) | set(dead) | (set(policy._writable) - set(policy.known_bookies))


@settings(max_examples=70, **COMMON)
@given(scenarios())
def test_new_ensemble_adheres_whenever_feasible(sc):
    policy, e, wq, aq, exclude, _readonly, _dead, _ = sc
    try:
        r = policy.new_ensemble(e, wq, aq, exclude)
    except NotEnoughBookiesError:
        assert not any_adhering(policy, e, wq, aq, exclude)
        return
    except ValueError:
        assume(False)
        return
    assert len(r.ensemble) == e and len(set(r.ensemble)) == e
    assert r.adherence == policy.is_ensemble_adhering(r.ensemble, wq, aq)
    if r.adherence == Adherence.FAIL:
        assert not any_adhering(policy, e, wq, aq, exclude)


@settings(max_examples=70, **COMMON)
@given(scenarios(max_n=9))
def test_no_excluded_read_only_or_dead_bookie_is_ever_chosen(sc):
    policy, e, wq, aq, exclude, readonly, dead, current = sc
    banned = _banned(policy, exclude, readonly, dead)
    try:
        r = policy.new_ensemble(e, wq, aq, exclude)
        assert not set(r.ensemble) & banned
    except (NotEnoughBookiesError, ValueError):
        pass
    try:
        rb = policy.replace_bookie(e, wq, aq, current, current[0], exclude)
        assert rb.bookie not in banned and rb.bookie not in current
        assert rb.ensemble[0] == rb.bookie and rb.ensemble[1:] == current[1:]
    except NotEnoughBookiesError:
        pass
    rr = policy.replace_to_adhere(e, wq, aq, exclude, current)
    for i in rr.replaced:
        assert rr.ensemble[i] not in banned
    for i in set(range(e)) - set(rr.replaced):
        assert rr.ensemble[i] == current[i]
    assert len(set(rr.ensemble)) == len(rr.ensemble) or rr.ensemble == current


@settings(max_examples=200, **COMMON)
@given(scenarios(brute_budget=True))
def test_replace_to_adhere_equals_brute_force_minimum(sc):
    policy, e, wq, aq, exclude, _readonly, _dead, current = sc
    r = policy.replace_to_adhere(e, wq, aq, exclude, current)
    assert r.exact
    expected = brute_min_swaps(policy, current, wq, aq, exclude)
    got = None if r.adherence == Adherence.FAIL else r.swaps
    event(f"swaps={got}")
    assert got == expected
    if got is not None:
        assert policy.is_ensemble_adhering(r.ensemble, wq, aq) == r.adherence != Adherence.FAIL
    else:
        assert r.ensemble == current


@settings(max_examples=80, **COMMON)
@given(scenarios(max_n=12, kinds=("rack",)))
def test_repair_never_uses_more_swaps_than_upstream_greedy(sc):
    policy, e, wq, aq, exclude, _readonly, _dead, current = sc
    ours = policy.replace_to_adhere(e, wq, aq, exclude, current)
    greedy = policy.upstream_replace_to_adhere(e, wq, aq, exclude, current)
    if greedy.adherence != Adherence.FAIL:
        assert ours.adherence != Adherence.FAIL and ours.swaps <= greedy.swaps


@settings(max_examples=25, derandomize=True, **COMMON)
@given(st.dictionaries(st.sampled_from([f"b{i}" for i in range(5)]),
                       st.one_of(st.just(0), st.integers(200, 1000)), min_size=1, max_size=5),
       st.sampled_from([-1, 1, 1.5, 2, 3, 4]), st.integers(0, 1000))
def test_weighted_selection_frequency_matches_capped_weights(weights, multiple, seed):
    sel = WeightedRandomSelection(weights, multiple, random.Random(seed))
    expected = sel.probabilities()
    draws = 100_000
    counts = dict.fromkeys(weights, 0)
    for _ in range(draws):
        counts[sel.select()] += 1
    for k, p in expected.items():
        assert abs(counts[k] / draws - p) <= 0.05 * p, (k, counts[k] / draws, p)
    # the capped weights really are capped at multiple x median
    from statistics import median
    if multiple > 0 and median(weights.values()) > 0:
        assert max(sel.effective.values()) <= multiple * median(weights.values()) + 1e-9
