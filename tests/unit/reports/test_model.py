"""The reports' pure model against brute force: every entry and every write set enumerated (PURE)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.ledger.pulsar_names import pulsar_names
from autorecovery.reports import model


def brute_stored(first: int, last: int, E: int, WQ: int) -> dict[int, list[int]]:
    """entry id -> ensemble indexes storing it, by the definition of round robin."""
    return {e: [(e + k) % E for k in range(WQ)] for e in range(first, last + 1)}


def brute_loss(lv: model.LedgerView, dead: set[str]) -> tuple[int, float, float]:
    outcome, lost, heal = model.NONE, 0.0, 0.0
    bpe = lv.bytes_per_entry
    for seg in lv.segments:
        for idxs in brute_stored(seg.first, seg.last, lv.ensemble_size, lv.write_quorum).values():
            gone = [i for i in idxs if seg.ensemble[i] in dead]
            if not gone:
                continue
            left = lv.write_quorum - len(gone)
            if left == 0:
                outcome = max(outcome, model.LOSS)
                lost += bpe
            else:
                outcome = max(outcome, model.BELOW_AQ if left < lv.ack_quorum else model.COPY)
                heal += bpe * len(gone)
    return outcome, lost, heal


@st.composite
def ledgers(draw):
    E = draw(st.integers(1, 6))
    WQ = draw(st.integers(1, E))
    AQ = draw(st.integers(1, WQ))
    last = draw(st.integers(-1, 40))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, last)), max_size=2)))) if last > 1 else []
    firsts = [0, *cuts]
    pool = [f"b{i}:3181" for i in range(9)]
    ens = [tuple(draw(st.permutations(pool))[:E]) for _ in firsts]
    segs = model.segments_of(firsts, ens, last)
    return model.LedgerView(7, E, WQ, AQ, last, (last + 1) * 100, True, segs)


@settings(max_examples=300, deadline=None)
@given(ledgers(), st.sets(st.sampled_from([f"b{i}:3181" for i in range(9)])))
def test_domain_loss_matches_brute_force(lv, dead):
    d = model.domain_loss(lv, dead)
    o, lost, heal = brute_loss(lv, dead)
    assert (d.outcome, round(d.lost_bytes, 6), round(d.heal_bytes, 6)) == (o, round(lost, 6), round(heal, 6))


@settings(max_examples=300, deadline=None)
@given(ledgers())
def test_bytes_per_bookie_matches_brute_force(lv):
    want: dict[str, float] = {}
    for seg in lv.segments:
        for idxs in brute_stored(seg.first, seg.last, lv.ensemble_size, lv.write_quorum).values():
            for i in idxs:
                want[seg.ensemble[i]] = want.get(seg.ensemble[i], 0.0) + lv.bytes_per_entry
    got = model.bytes_per_bookie(lv)
    assert {b: round(v, 6) for b, v in got.items()} == {b: round(v, 6) for b, v in want.items()}
    # every stored copy is counted once: the total is WQ copies of every entry
    assert round(sum(got.values()), 6) == round(lv.write_quorum * lv.length, 6)


def test_hand_worked_e3_wq2_on_two_racks():
    """E3/WQ2 write sets are (0,1), (1,2), (2,0): two racks cannot separate all three (demo note), so
    losing the rack holding two members loses the entries of the write set inside it."""
    lv = model.LedgerView(1, 3, 2, 2, 5, 600, True, model.segments_of([0], [("a1", "a2", "b1")], 5))
    loc = {"a1": {"rack": "A"}, "a2": {"rack": "A"}, "b1": {"rack": "B"}}
    d = model.domain_loss(lv, model.members_in(lv, loc, "rack", "A"))
    # entries 0 and 3 live on (0,1) = a1,a2: lost; 1,4 on (1,2) and 2,5 on (2,0) keep b1's copy
    assert d == model.DomainLoss(model.LOSS, 200.0, 400.0)
    d = model.domain_loss(lv, model.members_in(lv, loc, "rack", "B"))
    assert d == model.DomainLoss(model.BELOW_AQ, 0.0, 400.0)
    assert model.ledger_domains(lv, loc, ("rack",)) == [("rack", "A"), ("rack", "B"), ("rack_pair", "A|B")]


def test_pulsar_names_and_helpers():
    assert pulsar_names({"pulsar/managed-ledger": b"public/default/persistent/orders"}) == (
        "public", "public/default", "persistent://public/default/orders")
    assert pulsar_names(None) == ("", "", "")
    assert model.days_until_full(100.0, 10.0) == 10.0 and model.days_until_full(5.0, 0.0) is None
    assert model.copy_time_s(1000.0, 2, 100.0) == 5.0 and model.copy_time_s(1.0, 1, -1) is None
    assert model.residue_counts(5, 4, 3) == [0, 0, 0]


@settings(max_examples=200, deadline=None)
@given(ledgers(), st.dictionaries(st.sampled_from([f"b{i}:3181" for i in range(9)]),
                                  st.tuples(st.sampled_from("ABC"), st.sampled_from("XY"), st.just("R"))))
def test_ledger_risk_equals_domain_loss_per_domain(lv, tags):
    loc = {b: {"rack": t[0], "zone": t[1], "region": t[2]} for b, t in tags.items()}
    got = model.ledger_risk(lv, tags)
    want = [(kind, name, model.domain_loss(lv, model.members_in(lv, loc, kind, name)))
            for kind, name in model.ledger_domains(lv, loc, ("rack", "zone", "region"))]
    key = lambda x: (x[0], x[1])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
