"""The vectorised risk model (``reports/riskvec.py``) against the per-ledger function it replaces in the
risk pass, ``whatif.ledger_losses``: the very same floats for every domain, source, bookie and pair of
bookies, on random batches of ledgers (PURE)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.reports import model, riskvec, whatif

from test_model import ledgers

POOL = [f"b{i}:3181" for i in range(9)]


def _tags(racks: list[int], zones: list[int]) -> dict[str, tuple[str, str, str]]:
    # the last bookie is in no location table ("unknown" everywhere), as a bookie missing from the snapshot's
    return {b: (f"r{racks[i]}", f"z{zones[i]}", "reg") for i, b in enumerate(POOL[:-1])}


def _same_shape(lv: model.LedgerView, perm: list[str], scale: int) -> model.LedgerView:
    """``lv`` with its bookies renamed by ``perm`` and its entries spread on other lengths: same shape."""
    ren = dict(zip(POOL, perm, strict=True))
    segs = tuple(model.SegmentView(s.first, s.last, tuple(ren[b] for b in s.ensemble)) for s in lv.segments)
    return model.LedgerView(lv.ledger_id + 1, lv.ensemble_size, lv.write_quorum, lv.ack_quorum, lv.last_entry_id,
                            lv.length * scale + 7, lv.closed, segs)


@settings(max_examples=150, deadline=None)
@given(st.lists(ledgers(), min_size=1, max_size=5), st.lists(st.permutations(POOL), min_size=1, max_size=4),
       st.lists(st.integers(0, 3), min_size=8, max_size=8), st.lists(st.integers(0, 1), min_size=8, max_size=8),
       st.sets(st.sampled_from(POOL), max_size=2), st.dictionaries(st.integers(0, 30), st.sets(st.sampled_from(POOL),
                                                                                             max_size=2)),
       st.sampled_from([1, 3, riskvec.MIN_SHAPE]))
def test_batch_losses_equal_ledger_losses_bit_for_bit(base, perms, racks, zones, gone, marks, min_shape):
    # several ledgers of each shape (renamed bookies, other lengths) so that the array path runs
    lvs = [lv if k == 0 else _same_shape(lv, perm, k + 1) for lv in base for k, perm in enumerate(perms)]
    tags = _tags(racks, zones)
    marked = {i: frozenset(v) for i, v in marks.items() if i < len(lvs) and v}
    tables = riskvec.Tables(tags, gone)
    got = riskvec.per_ledger(riskvec.batch_losses(lvs, tables, marked, min_shape=min_shape), tables, len(lvs))
    for i, lv in enumerate(lvs):
        want = whatif.ledger_losses(lv, tags, frozenset(gone) | marked.get(i, frozenset()))
        assert got[i][0] == want[0], (i, lv)
        # singles carry no sources (the per-ledger function's memo may hand one over): figures only
        assert [(b, d[:3]) for b, d in got[i][1]] == [(b, d[:3]) for b, d in want[1]], (i, lv)
        assert got[i][2] == want[2], (i, lv)


def test_batch_losses_on_a_known_ledger():
    """E3/WQ2/AQ2 over racks A, A, B: losing rack A loses every entry striped on (a1, a2) — a third of them."""
    lv = model.LedgerView(1, 3, 2, 2, 8, 900, True, model.segments_of([0], [("a1", "a2", "b1")], 8))
    tags = {"a1": ("A", "z", "r"), "a2": ("A", "z", "r"), "b1": ("B", "z", "r")}
    tables = riskvec.Tables(tags)
    b = riskvec.batch_losses([lv] * 4, tables, min_shape=1)
    (domains, singles, pairs), *_ = riskvec.per_ledger(b, tables, 4)
    rack_a = dict(((k, n), d) for k, n, d in domains)[("rack", "A")]
    assert rack_a[:3] == (model.LOSS, 300.0, 600.0)  # residue 0 on (a1, a2) lost; 1 and 2 keep b1
    assert rack_a[3] == {"b1": 600.0}
    assert [s for s, _d in singles] == ["a1", "a2", "b1"]
    assert ("a1", "a2", (1, 300.0, -2)) in pairs
