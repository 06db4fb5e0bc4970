"""Every function of ledger/striping.py against the brute-force definition of upstream
RoundRobinDistributionSchedule (entry e is on indexes (e + k) mod E for k < WQ), for small E/WQ/ranges."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.ledger import striping
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment


def brute_write_set(e: int, E: int, WQ: int) -> list[int]:
    return [(e + k) % E for k in range(WQ)]


def brute_stores(i: int, e: int, E: int, WQ: int) -> bool:
    # upstream hasEntry: i equals one of the write set's indexes
    return any(i == (e + k) % E for k in range(WQ))


def brute_on_index(first: int, last: int, i: int, E: int, WQ: int) -> list[int]:
    return [e for e in range(first, last + 1) if brute_stores(i, e, E, WQ)]


@st.composite
def schedules(draw):
    E = draw(st.integers(1, 8))
    WQ = draw(st.integers(1, E))
    first = draw(st.integers(0, 200))
    last = draw(st.integers(first - 3, first + 200))
    i = draw(st.integers(-1, E))  # one index outside the ensemble on each side
    return E, WQ, first, last, i


@settings(max_examples=600, deadline=None)
@given(schedules())
def test_every_function_matches_brute_force(s):
    E, WQ, first, last, i = s
    expected = brute_on_index(first, last, i, E, WQ)
    for e in range(first, first + 2 * E):
        assert striping.write_set(e, E, WQ) == brute_write_set(e, E, WQ)
        assert striping.index_stores(i, e, E, WQ) == brute_stores(i, e, E, WQ)
    assert list(striping.entries_on_index(first, last, i, E, WQ)) == expected
    runs = list(striping.runs_on_index(first, last, i, E, WQ))
    assert [e for r in runs for e in r] == expected
    assert all(len(r) > 0 for r in runs)
    assert all(a[-1] + 1 < b[0] for a, b in itertools.pairwise(runs)), "runs are maximal and disjoint"
    assert striping.first_last_on_index(first, last, i, E, WQ) == ((expected[0], expected[-1]) if expected else (-1, -1))
    assert striping.count_on_index(first, last, i, E, WQ) == len(expected)
    residues = striping.residues_on_index(i, E, WQ)
    assert residues == sorted({r for r in range(E) if brute_stores(i, r, E, WQ)})
    assert residues == sorted(start for start in range(E) if i in brute_write_set(start, E, WQ))
    ids = range(first, last + 1)
    assert sorted(set(striping.residues_in_range(first, last, E))) == sorted({e % E for e in ids})
    for r in range(E):
        with_r = [e for e in ids if e % E == r]
        assert striping.count_with_residue(first, last, r, E) == len(with_r)
        assert list(striping.entries_with_residue(first, last, r, E)) == with_r


def test_no_list_is_materialised_for_a_huge_range():
    E, WQ, i = 5, 2, 2
    for last in (2**40, 2**40 + 2, 2**40 + 3):
        tail = brute_on_index(last - E + 1, last, i, E, WQ)  # striping is periodic in E
        assert striping.first_last_on_index(0, last, i, E, WQ) == (1, tail[-1])
        head = (last + 1) % E
        assert striping.count_on_index(0, last, i, E, WQ) == (last + 1) // E * WQ + len(brute_on_index(0, head - 1, i, E, WQ))
    it = striping.entries_on_index(0, 2**40, i, E, WQ)
    assert [next(it) for _ in range(4)] == [1, 2, 6, 7]


def test_bad_schedule_is_refused():
    for fn in (lambda: striping.write_set(0, 0, 1), lambda: striping.index_stores(0, 0, 3, 0),
               lambda: striping.first_last_on_index(0, 5, 0, 0, 1), lambda: striping.count_on_index(0, 5, 0, 3, 0),
               lambda: striping.entries_on_index(0, 5, 0, 3, 0), lambda: striping.runs_on_index(0, 5, 0, 0, 1),
               lambda: striping.residues_on_index(0, 0, 1)):
        with pytest.raises(ValueError, match="bad striping schedule"):
            fn()


def test_wq_above_e_write_set_repeats_as_upstream_and_every_index_stores_everything():
    assert striping.write_set(1, 2, 3) == [1, 0, 1]
    assert all(striping.index_stores(i, e, 2, 3) for i in range(2) for e in range(5))
    assert not striping.index_stores(2, 0, 2, 3)


def _md(E, WQ, segs, state, last):
    return LedgerMetadata(E, WQ, WQ, tuple(Segment(f, tuple(e)) for f, e in segs), state=state, last_entry_id=last)


def brute_holds(md: LedgerMetadata, bookie: str) -> bool:
    segs = md.segments
    for si, seg in enumerate(segs):
        is_last = si == len(segs) - 1
        if bookie not in seg.ensemble:
            continue
        if is_last and md.state != LedgerState.CLOSED:
            return True
        end = md.last_entry_id if is_last else segs[si + 1].first_entry_id - 1
        for idx, b in enumerate(seg.ensemble):
            if b == bookie and brute_on_index(seg.first_entry_id, end, idx, md.ensemble_size, md.write_quorum):
                return True
    return False


@st.composite
def ledgers(draw):
    E = draw(st.integers(1, 6))
    WQ = draw(st.integers(1, E))
    pool = [f"b{k}:1" for k in range(E + 3)]
    starts = sorted(draw(st.lists(st.integers(0, 30), min_size=0, max_size=3)))
    firsts = [0, *starts]  # repeated firsts give empty segments
    segs = [(f, draw(st.permutations(pool))[:E]) for f in firsts]
    state = draw(st.sampled_from(list(LedgerState)))
    last = draw(st.integers(firsts[-1] - 1, firsts[-1] + 20)) if state == LedgerState.CLOSED else -1
    return _md(E, WQ, segs, state, last), pool


@settings(max_examples=400, deadline=None)
@given(ledgers())
def test_bookie_holds_entries_matches_brute_force(case):
    md, pool = case
    for b in pool:
        assert striping.bookie_holds_entries(md, b) == brute_holds(md, b), b


def test_open_ledger_last_segment_may_hold_everything_closed_uses_last_entry_id():
    ens = ["a:1", "b:1", "c:1"]
    opn = _md(3, 2, [(0, ens)], LedgerState.OPEN, -1)
    assert all(striping.segment_holds_entries(opn, 0, i) for i in range(3))
    one = _md(3, 2, [(0, ens)], LedgerState.CLOSED, 0)
    assert [striping.segment_holds_entries(one, 0, i) for i in range(3)] == [True, True, False]
    # an empty non-last segment holds nothing, even with E == WQ
    full = _md(2, 2, [(0, ["a:1", "b:1"]), (0, ["a:1", "c:1"])], LedgerState.CLOSED, 4)
    assert not striping.segment_holds_entries(full, 0, 1) and not striping.bookie_holds_entries(full, "b:1")
