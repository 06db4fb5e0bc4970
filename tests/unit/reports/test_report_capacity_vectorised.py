"""The capacity part's batch sums (``reports/capacityvec.py`` via ``jobs.capacity_partition``) against
``model.bytes_per_bookie`` summed ledger after ledger in Python dicts: the very same floats (PURE)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.ledger.striping import count_on_index
from autorecovery.reports import capacityvec, jobs, model

from test_model import ledgers


@settings(max_examples=200, deadline=None)
@given(st.integers(-30, 60), st.integers(-1, 80), st.integers(1, 7), st.integers(1, 7))
def test_entries_on_indexes_is_count_on_index(first, last, E, WQ):
    got = capacityvec.entries_on_indexes(np.array([first]), np.array([last]), E, WQ)
    assert got[0].tolist() == [count_on_index(first, last, i, E, WQ) for i in range(E)]


class _Row:
    def __init__(self, ctime: int) -> None:
        self.ctime = ctime


class _Batch(jobs.Prepared):
    """Views handed over as the fused pass hands them (no Arrow frame needed)."""

    def __init__(self, views) -> None:  # a test double
        self.views = views
        self.adherence = {}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(ledgers(), st.booleans(), st.integers(0, 10**9)), min_size=1, max_size=6),
                min_size=1, max_size=3))
def test_capacity_sums_equal_bytes_per_bookie_bit_for_bit(drawn):
    # lengths that do not divide into entries: fractional bytes per entry, so the order of float sums shows
    batches = [[(dataclasses.replace(lv, length=length), new) for lv, new, length in b] for b in drawn]
    used: dict[str, float] = {}
    recent: dict[str, float] = {}
    count: dict[str, int] = {}
    for batch in batches:
        for lv, new in batch:
            for b, nbytes in model.bytes_per_bookie(lv).items():
                used[b] = used.get(b, 0.0) + nbytes
                if new:
                    recent[b] = recent.get(b, 0.0) + nbytes
            for b in {m for seg in lv.segments for m in seg.ensemble}:
                count[b] = count.get(b, 0) + 1
                used.setdefault(b, 0.0)
    frames = [_Batch([(lv, _Row(10 if new else 0)) for lv, new in batch]) for batch in batches]
    got = pd.concat(list(jobs.capacity_partition(5)(iter(frames)))).set_index("bookie_id")
    assert sorted(got.index) == sorted(used)
    for b in used:
        assert got.loc[b, "used_bytes"] == used[b], b  # exact, not approximately
        assert got.loc[b, "recent_bytes"] == recent.get(b, 0.0), b
        assert got.loc[b, "ledgers"] == count[b], b
