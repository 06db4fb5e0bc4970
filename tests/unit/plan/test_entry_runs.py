"""Entry ids as runs (issue 25): planning and the run arithmetic stay O(fragments) in time and memory
whatever a ledger's metadata claims (10M entries, 2**62 entries)."""

from __future__ import annotations

import random
import time
import tracemalloc

import pytest

from autorecovery.audit.checker import entries_to_read
from autorecovery.plan import entry_runs
from autorecovery.plan.entry_runs import Gap, IntervalSet, Run, merge_gaps, split_gaps
from autorecovery.plan.targets import plan_fragment_copy

ENS3 = ("a:1", "b:1", "c:1")


def _bounded(fn, max_bytes: int = 1_000_000, max_s: float = 6.0):
    """Run ``fn`` and assert its peak traced memory (bytes) and its CPU time (s, this process's, so a
    loaded machine does not fail it): the bounds catch a size-proportional blow-up, not a slow run."""
    tracemalloc.start()
    t0 = time.process_time()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    dt = time.process_time() - t0
    assert peak < max_bytes, f"peak {peak} bytes"
    assert dt < max_s, f"{dt:.2f} s"
    return out


@pytest.mark.parametrize("last", [10_000_000 - 1, 2**62])
def test_plan_of_a_huge_fragment_is_bounded(last):
    # E3/WQ2, index 0 lost: two streams, counts exact, nothing per entry
    plan = _bounded(lambda: plan_fragment_copy(ensemble=ENS3, write_quorum=2, first=0, last=last,
                                               replacements={0: "n:1"}, readable={"b:1", "c:1"}))
    # index 0 stores the residues 0 and 2 (mod 3)
    want = sum(len(range(r, last + 1, 3)) for r in (0, 2))
    assert plan.entries_to_read == plan.entries_to_write == want
    assert entry_runs.count(s.run() for s in plan.streams) == want


@pytest.mark.parametrize("last", [10_000_000 - 1, 2**62])
def test_unsourced_entries_of_a_huge_fragment_are_runs(last):
    # WQ1 and the only replica of residue 0 lost: unsourced = every third entry, as one run
    plan = _bounded(lambda: plan_fragment_copy(ensemble=ENS3, write_quorum=1, first=0, last=last,
                                               replacements={0: "n:1"}, readable={"b:1", "c:1"}))
    assert len(plan.unsourced) == 1
    assert entry_runs.count(plan.unsourced) == last // 3 + 1
    assert plan.unsourced[0].bounds() == (0, last - last % 3)


def test_stored_entry_counts_are_exact():
    for e_size, wq in [(3, 2), (5, 3), (4, 4), (1, 1)]:
        for idx in range(e_size):
            for first, last in [(0, 0), (0, 17), (4, 29), (7, 6)]:
                run = Run(first, last, idx, wq, e_size)
                ids = [e for e in range(first, last + 1) if (idx - e) % e_size < wq]
                assert list(run) == ids and run.count() == len(ids)


def test_sampling_a_huge_fragment_is_lazy():
    it = _bounded(lambda: entries_to_read(0, 2**62, 0, 3, 2, percentage=1, rng=random.Random(1)))
    first = _bounded(lambda: [next(it) for _ in range(50)])
    assert first[0] == 0 and first == sorted(first) and len(set(first)) == 50
    every = _bounded(lambda: entries_to_read(0, 10_000_000 - 1, 0, 3, 2, percentage=100))
    assert [next(every) for _ in range(5)] == [0, 2, 3, 5, 6]


def test_split_by_what_a_bookie_holds():
    g = Gap(Run(0, 2**62, 0, 2, 3), {"a:1": "MISSING"})
    present, missing = split_gaps([g], [(0, 9), (100, 109)], "b:1", "ENOENTRY")
    assert [(x.run.first, x.run.last) for x in present] == [(0, 9), (101, 108)]  # residues 0 and 2
    assert [(x.run.first, x.run.last) for x in missing] == [(11, 99), (110, 2**62 - 1)]
    assert all(x.why == {"a:1": "MISSING", "b:1": "ENOENTRY"} for x in missing)
    assert present[0].why == {"a:1": "MISSING"}
    everything, none = split_gaps([g], None, "b:1", "")
    assert everything == [g] and none == []
    nothing, gone = split_gaps([g], [], "b:1", "ENOLEDGER")
    assert nothing == [] and len(gone) == 1 and gone[0].why == {"a:1": "MISSING", "b:1": "ENOLEDGER"}
    assert gone[0].count() == g.count()


def test_merge_joins_neighbours_with_the_same_reasons():
    why = {"a:1": "ENOENTRY"}
    gs = [Gap(Run(6, 2**62, 0, 1, 3), why), Gap(Run(0, 3, 0, 1, 3), why), Gap(Run(9, 12, 0, 1, 3), {"x": "EIO"})]
    out = merge_gaps(gs)
    assert [(x.run.first, x.run.last) for x in out] == [(0, 2**62), (9, 12)]


def test_spans_are_exact_when_small_and_bounded_when_huge():
    small = [Gap(Run(0, 8, 0, 1, 3)), Gap(Run(1, 1, 1, 1, 3))]
    assert entry_runs.spans(small) == [[0, 1], [3, 3], [6, 6]]
    huge = [Gap(Run(0, 2**62, r, 1, 3)) for r in range(3)]
    assert _bounded(lambda: entry_runs.spans(huge)) == [[0, 2**62]]


def test_interval_set():
    s = IntervalSet()
    for x in [1, 2, 3, 7, 5, 6, 10]:
        s.add(x)
    assert s.intervals() == [(1, 3), (5, 7), (10, 10)]
    assert 6 in s and 4 not in s
    s.add_range(4, 9)
    assert s.intervals() == [(1, 10)]
    assert s.complement(0, 12) == [(0, 0), (11, 12)]


def test_interval_set_joins_over_ids_a_striped_stream_does_not_carry():
    s = IntervalSet(Run(0, 10**9, 1, 1, 3))  # residue 1 of E3: 1, 4, 7, ...
    _bounded(lambda: [s.add(e) for e in range(1, 300_000, 3)], max_bytes=5_000_000, max_s=15.0)
    assert s.intervals() == [(1, 299_998)]
    s.add(300_004)  # 300_001 missing: a real hole
    assert len(s) == 2 and s.complement(0, 300_004) == [(0, 0), (299_999, 300_003)]
