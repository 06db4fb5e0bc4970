"""The reports' new pure pieces against brute force: existing damage, open ledgers to their LAC, the
heal-time model against a simulation of the worker's schedule, the k-bookie and decommission what-ifs,
the per-bookie spread (PURE)."""

from __future__ import annotations

import itertools
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.reports import model, whatif

from test_model import brute_loss, ledgers

POOL = [f"b{i}:3181" for i in range(9)]


@settings(max_examples=200, deadline=None)
@given(ledgers(), st.sets(st.sampled_from(POOL)), st.sets(st.sampled_from(POOL)))
def test_damage_is_copies_already_lost(lv, dead, damaged):
    """Losing ``dead`` on top of ``damaged`` is losing both (entry by entry)."""
    d = model.domain_loss(lv, dead, frozenset(damaged))
    o, lost, heal = brute_loss(lv, dead | damaged)
    assert (d.outcome, round(d.lost_bytes, 6), round(d.heal_bytes, 6)) == (o, round(lost, 6), round(heal, 6))


@settings(max_examples=200, deadline=None)
@given(ledgers(), st.sets(st.sampled_from(POOL), max_size=3))
def test_ledger_risk_with_damage_matches_domain_loss(lv, damaged):
    tags = {b: (f"r{i % 3}", f"z{i % 2}", "reg") for i, b in enumerate(POOL)}
    dmg = frozenset(damaged)
    for kind, name, d in model.ledger_risk(lv, tags, damaged=dmg, existing=True):
        if kind == "existing":
            dead: set[str] = set()
        elif kind == "rack_pair":
            a, b = name.split("|")
            dead = {x for x in POOL if tags[x][0] in (a, b)}
        else:
            k = model.KINDS.index(kind)
            dead = {x for x in POOL if tags[x][k] == name}
        want = model.domain_loss(lv, dead, dmg)
        assert (d.outcome, round(d.lost_bytes, 6), round(d.heal_bytes, 6)) == \
            (want.outcome, round(want.lost_bytes, 6), round(want.heal_bytes, 6)), (kind, name)
        if kind != "rack_pair":
            assert {b: round(v, 6) for b, v in d.sources.items()} == {b: round(v, 6) for b, v in want.sources.items()}


def test_sources_read_each_healed_entry_once_from_its_copies():
    # E3 WQ3 AQ2, 3 entries of 100 bytes on (a, b, c); lose a: each entry read once, from b or c
    lv = model.LedgerView(1, 3, 3, 2, 2, 300, True, model.segments_of([0], [("a", "b", "c")], 2))
    d = model.domain_loss(lv, {"a"})
    assert d.heal_bytes == 300 and d.sources == {"b": 150.0, "c": 150.0}


def test_open_ledger_runs_to_its_lac():
    lv = model.LedgerView(6, 3, 2, 2, -1, 0, False,
                          model.segments_of([0, 4], [("a", "b", "c"), ("a", "b", "d")], -1))
    assert model.domain_loss(lv, {"d"}).outcome == model.NONE  # metadata only: last segment empty
    opened = model.with_lac(lv, 9, 1000)
    assert opened.segments[-1] == model.SegmentView(4, 9, ("a", "b", "d")) and opened.length == 1000
    # entries 4..9 of (a, b, d), WQ2: index 2 (d) stores e with e%3 in {1, 2}: 4, 5, 7, 8 → 4 entries
    assert model.bytes_per_bookie(opened)["d"] == pytest.approx(400)
    assert model.domain_loss(opened, {"d"}).outcome == model.BELOW_AQ
    assert model.with_lac(lv, None) is lv and model.with_lac(lv, -1) is lv  # unknown: as the metadata says


# -- heal time: the model against a simulation of the worker's schedule ---------------------------------
def simulate(chunks: list[tuple[str, str, float]], daemons: int, slots: int, daemon_rate: float,
             stream_rate: float, cap_src: int, cap_tgt: int, dt: float = 0.01) -> float:
    """Time for ``daemons`` daemons of ``slots`` streams to copy ``chunks`` (source, target, bytes), a
    stream at most ``stream_rate``, a daemon at most ``daemon_rate`` (shared by its streams), at most
    ``cap_src`` / ``cap_tgt`` streams per source / target bookie cluster-wide; greedy, as the slots take
    ledgers (a slot takes the next chunk whose caps allow it)."""
    todo = [list(c) for c in chunks]
    running: list[list] = []  # [daemon, source, target, bytes left]
    t = 0.0
    while todo or running:
        for dm in range(daemons):
            while sum(1 for r in running if r[0] == dm) < slots:
                src_load = {s: sum(1 for r in running if r[1] == s) for s in {c[0] for c in todo}}
                tgt_load = {g: sum(1 for r in running if r[2] == g) for g in {c[1] for c in todo}}
                pick = next((c for c in todo if src_load[c[0]] < cap_src and tgt_load[c[1]] < cap_tgt), None)
                if pick is None:
                    break
                todo.remove(pick)
                running.append([dm, pick[0], pick[1], pick[2]])
        for dm in range(daemons):
            mine = [r for r in running if r[0] == dm]
            if mine:
                per = min(stream_rate, daemon_rate / len(mine))
                for r in mine:
                    r[3] -= per * dt
        running = [r for r in running if r[3] > 1e-9]
        t += dt
    return t


@pytest.mark.parametrize("case", [
    # (sources: bytes read from each, targets, daemons, slots, daemon_rate, stream_rate, cap_src, cap_tgt)
    ({"s1": 40.0, "s2": 40.0, "s3": 40.0, "s4": 40.0}, 4, 4, 2, 10.0, 5.0, 2, 2),   # daemons bind
    ({"s1": 120.0, "s2": 10.0, "s3": 10.0}, 6, 6, 4, 100.0, 5.0, 2, 4),             # one hot source
    ({"s1": 30.0, "s2": 30.0, "s3": 30.0, "s4": 30.0}, 1, 8, 4, 100.0, 5.0, 4, 2),  # one target
])
def test_heal_time_is_the_bound_a_schedule_reaches(case):
    sources, ntgt, daemons, slots, drate, srate, csrc, ctgt = case
    targets = [f"t{i}" for i in range(ntgt)]
    chunks = []
    for s, nbytes in sources.items():  # 1-byte chunks spread round-robin over the targets
        for _i in range(int(nbytes)):
            chunks.append((s, targets[(len(chunks)) % ntgt], 1.0))
    total = float(sum(sources.values()))
    m = model.HealModel(daemons, drate, srate, csrc, ctgt, ntgt)
    ht = model.heal_time(total, model.SourceReads.sole_only(sources), m)
    sim = simulate(chunks, daemons, slots, drate, srate, csrc, ctgt, dt=0.05)
    assert ht.seconds is not None and ht.seconds <= sim + 0.05  # a lower bound of the schedule...
    assert sim <= ht.seconds * 1.15 + 0.2                      # ...that a greedy schedule nearly reaches


def test_heal_time_bounds_and_no_survivors():
    m = model.HealModel(daemons=10, daemon_rate=100.0, stream_rate=25.0, max_streams_per_source=4,
                        max_streams_per_target=4, targets=10)
    sole = model.SourceReads.sole_only
    assert model.heal_time(1000.0, sole({"a": 900.0, "b": 100.0}), m) == model.HealTime(9.0, "source a")
    assert model.heal_time(1000.0, sole({"a": 100.0}), m).limited_by == "daemons"
    assert model.heal_time(1000.0, None, m, {"t": 1000.0}) == model.HealTime(10.0, "target t")
    assert model.heal_time(0.0, None, m).seconds == 0.0
    assert model.heal_time(1.0, None, model.HealModel(0, 1.0, 1.0, 1, 1, 1)).seconds is None
    assert model.heal_time(1.0, None, model.HealModel(1, 1.0, 1.0, 1, 1, 0)).seconds is None
    # caps <= 0 are unlimited: only the daemons bound
    assert model.heal_time(1000.0, sole({"a": 1000.0}), model.HealModel(10, 100.0, 1.0, 0, 0, 1)).limited_by == "daemons"


# -- k bookies ---------------------------------------------------------------------------------------------
def brute_metrics(lvs, dead: set[str], damaged: frozenset[str]) -> tuple[int, float, int]:
    """Over the ledgers of which a member of ``dead`` stores a copy not lost already (a member of an
    empty segment, or of write sets with no entry, stores nothing)."""
    dl = lb = bq = 0
    for lv in lvs:
        stored = {seg.ensemble[(e + k) % lv.ensemble_size] for seg in lv.segments
                  for e in range(seg.first, seg.last + 1) for k in range(lv.write_quorum)}
        if not (stored & (dead - damaged)):
            continue
        o, lost, _h = brute_loss(lv, dead | damaged)
        dl += o == model.LOSS
        bq += o == model.BELOW_AQ
        lb += lost
    return dl, lb, bq


def sums(lvs, damaged):
    singles: dict[str, list[float]] = {}
    corr: dict[tuple[str, str], list[float]] = {}
    for lv in lvs:
        for b, d in whatif.single_losses(lv, damaged):
            m = whatif.metrics(d)
            v = singles.setdefault(b, [0.0, 0.0, 0.0])
            v[0] += m[0]
            v[1] += m[1]
            v[2] += m[2]
        for a, b, delta in whatif.pair_corrections(lv, damaged):
            v = corr.setdefault((a, b), [0.0, 0.0, 0.0])
            for i in range(3):
                v[i] += delta[i]
        both = whatif.bookie_sets(lv, damaged)
        assert both == (whatif.single_losses(lv, damaged), whatif.pair_corrections(lv, damaged))
    return {k: tuple(v) for k, v in singles.items()}, {k: tuple(v) for k, v in corr.items()}


@settings(max_examples=150, deadline=None)
@given(st.lists(ledgers(), min_size=1, max_size=6), st.sets(st.sampled_from(POOL[:3]), max_size=1))
def test_worst_sets_of_k_bookies_match_brute_force(lvs, damaged):
    dmg = frozenset(damaged)
    singles, corr = sums(lvs, dmg)
    live = [b for b in POOL if b not in dmg]
    for (a, b), got in whatif.worst_pairs(singles, corr, top=len(live) ** 2, bookies=live):
        want = brute_metrics(lvs, {a, b}, dmg)
        assert (got[0], round(got[1], 6), got[2]) == (want[0], round(want[1], 6), want[2])
    best2 = max((brute_metrics(lvs, set(c), dmg) for c in itertools.combinations(live, 2)),
                key=lambda v: whatif.severity(*v))
    top2 = whatif.worst_pairs(singles, corr, top=1, bookies=live)
    if best2[0] or best2[1] or best2[2]:
        assert whatif.severity(*top2[0][1])[0::2] == whatif.severity(*best2)[0::2]
        assert top2[0][1][1] == pytest.approx(best2[1])
    # k = 3: exact figures for the triples it names, never worse than the true worst
    pairs = dict(whatif.worst_pairs(singles, corr, top=5, bookies=live))
    tcorr: dict[tuple[str, str, str], list[float]] = {}
    for lv in lvs:
        for a, b, c, delta in whatif.triple_corrections(lv, list(pairs), dmg):
            v = tcorr.setdefault((a, b, c), [0.0, 0.0, 0.0])
            for i in range(3):
                v[i] += delta[i]
    worst3 = max(whatif.severity(*brute_metrics(lvs, set(c), dmg)) for c in itertools.combinations(live, 3))
    for ids, got in whatif.worst_triples(pairs, singles, {k: tuple(v) for k, v in tcorr.items()}, live, top=3):
        want = brute_metrics(lvs, set(ids), dmg)
        assert (got[0], round(got[1], 6), got[2]) == (want[0], round(want[1], 6), want[2]), ids
        assert whatif.severity(*want) <= worst3


def test_decommission_shares_entry_by_entry():
    lv = model.LedgerView(1, 3, 2, 2, 8, 900, True, model.segments_of([0, 6], [("a", "b", "c"), ("a", "d", "c")], 8))
    shares = whatif.decommission_shares(lv, "b")
    # segment 0 (entries 0..5): b is index 1, stores e%3 in {0, 1}: 4 entries of 100; the other copy is
    # a (e%3 == 0: set (0,1)) or c (e%3 == 1: set (1,2))
    assert shares == [(0, 1, 400.0, {"a": 200.0, "c": 200.0}, {"a": 200.0, "c": 200.0})]  # WQ 2: one other copy
    assert [s[2] for s in whatif.decommission_shares(lv, "a")] == [400.0, 200.0]


def test_spread_matches_statistics():
    vals = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0, 8.0, 4.0, 6.0, 10.0]
    s = model.spread(vals)
    assert (s["count"], s["min"], s["p50"], s["p90"], s["max"]) == (10, 1.0, 5.0, 9.0, 10.0)
    assert s["stddev"] == pytest.approx(statistics.pstdev(vals)) and s["max_over_mean"] == pytest.approx(10 / 5.5)
    assert model.spread([])["p50"] is None and model.spread([0.0, 0.0])["max_over_mean"] is None


@settings(max_examples=300, deadline=None)
@given(ledgers(), st.sets(st.sampled_from(POOL), max_size=3))
def test_ledger_losses_equal_ledger_risk_and_bookie_sets_exactly(lv, damaged):
    """The risk pass's memoised evaluation gives the very floats of the two functions it replaces."""
    tags = {b: (f"r{i % 3}", f"z{i % 2}", "reg") for i, b in enumerate(POOL[:-1])}  # the last bookie: "unknown"
    dmg = frozenset(damaged)
    domains, singles, pairs = whatif.ledger_losses(lv, tags, dmg)
    want = model.ledger_risk(lv, tags, damaged=dmg, existing=True)
    assert [(k, n) for k, n, _d in domains] == [(k, n) for k, n, _d in want]
    for (kind, name, d), (_k, _n, w) in zip(domains, want, strict=True):
        assert d[:3] == (w.outcome, w.lost_bytes, w.heal_bytes), (kind, name)
        assert (d[3] or {}) == dict(w.sources), (kind, name)
        assert (d[4] or {}) == dict(w.sole), (kind, name)
    w1, w2 = whatif.bookie_sets(lv, dmg)
    assert [(b, d[:3]) for b, d in singles] == [(b, (w.outcome, w.lost_bytes, w.heal_bytes)) for b, w in w1]
    assert [whatif.loss_metrics(d) for _b, d in singles] == [whatif.metrics(w) for _b, w in w1]
    assert pairs == w2
