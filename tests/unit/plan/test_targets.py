"""Copy-stream planning and replacement choice (pure)."""

from __future__ import annotations

import random

import pytest

from autorecovery.errors import NotEnoughBookiesError
from autorecovery.plan import entry_runs
from autorecovery.plan.targets import choose_replacements, plan_fragment_copy, residue_count
from autorecovery.rpc.convert import stored_on

ENS3 = ("a:1", "b:1", "c:1")


def _delivered(plan, first, last):
    """entry -> set of targets it is written to, using the bookie's filter rule (stored_on)."""
    out: dict[int, set[str]] = {}
    for s in plan.streams:
        for e in range(first, last + 1):
            if stored_on(e, s.ensemble_size, s.arc_len, s.arc_end):
                out.setdefault(e, set()).update(s.targets)
    return out


def _needed(ensemble, wq, first, last, replacements):
    out: dict[int, set[str]] = {}
    for e in range(first, last + 1):
        for i, new in replacements.items():
            if stored_on(e, len(ensemble), wq, i):
                out.setdefault(e, set()).add(new)
    return out


def test_residue_count():
    assert residue_count(0, 9, 0, 3) == 4  # 0 3 6 9
    assert residue_count(0, 9, 2, 3) == 3  # 2 5 8
    assert residue_count(5, 5, 2, 3) == 1
    assert residue_count(5, 4, 0, 3) == 0
    assert residue_count(7, 8, 0, 3) == 0


def test_e3_wq2_one_lost_reads_only_what_target_lacks():
    # index 0 stores residues 0 (write set {0,1}) and 2 (write set {2,0})
    plan = plan_fragment_copy(ensemble=ENS3, write_quorum=2, first=0, last=29,
                              replacements={0: "n:1"}, readable={"b:1", "c:1"})
    assert plan.unsourced == ()
    assert sorted((s.source, s.residues()) for s in plan.streams) == [("b:1", [0]), ("c:1", [2])]
    assert plan.entries_to_read == 20 and plan.entries_to_write == 20
    assert _delivered(plan, 0, 29) == _needed(ENS3, 2, 0, 29, {0: "n:1"})
    for s in plan.streams:
        assert list(s.entry_ids()) == [e for e in range(30) if e % 3 == s.residues()[0]]


def test_e_equals_wq_spreads_residues_over_sources_and_merges_arcs():
    plan = plan_fragment_copy(ensemble=ENS3, write_quorum=3, first=0, last=9,
                              replacements={0: "n:1"}, readable={"b:1", "c:1"})
    assert plan.entries_to_read == 10
    assert {s.source for s in plan.streams} == {"b:1", "c:1"}
    assert _delivered(plan, 0, 9) == _needed(ENS3, 3, 0, 9, {0: "n:1"})
    # one source only: all three residues merge into a single full-circle stream
    single = plan_fragment_copy(ensemble=ENS3, write_quorum=3, first=0, last=9,
                                replacements={0: "n:1", 1: "m:1"}, readable={"c:1"})
    assert len(single.streams) == 1 and single.streams[0].arc_len == 3
    assert set(single.streams[0].targets) == {"n:1", "m:1"}
    assert single.entries_to_write == 20


def test_two_lost_of_three_fan_out_to_both_targets():
    plan = plan_fragment_copy(ensemble=ENS3, write_quorum=2, first=0, last=11,
                              replacements={0: "n:1", 1: "m:1"}, readable={"c:1"})
    need = _needed(ENS3, 2, 0, 11, {0: "n:1", 1: "m:1"})
    # residue 0 lives only on {0,1}: both lost, no source
    assert list(entry_runs.entry_ids(plan.unsourced)) == [0, 3, 6, 9]
    got = _delivered(plan, 0, 11)
    for e, t in need.items():
        if e % 3 == 0:
            assert e not in got
        else:
            assert got[e] == t


def test_placement_move_may_read_from_the_bookie_moved_out():
    plan = plan_fragment_copy(ensemble=ENS3, write_quorum=3, first=0, last=5,
                              replacements={1: "r2:1"}, readable=set(ENS3))
    assert plan.unsourced == ()
    assert all(s.source in ENS3 for s in plan.streams)
    assert _delivered(plan, 0, 5) == _needed(ENS3, 3, 0, 5, {1: "r2:1"})


def test_last_resort_sources_only_where_nothing_else_holds_the_residue():
    # a is lost; b was flagged by the checker but is still registered: residue 0 ({a, b}) can only
    # come from b, residue 2 ({c, a}) must come from c
    plan = plan_fragment_copy(ensemble=ENS3, write_quorum=2, first=0, last=11,
                              replacements={0: "n:1", 1: "m:1"}, readable={"c:1"}, last_resort={"b:1"})
    assert plan.unsourced == ()
    src = {r: s.source for s in plan.streams for r in s.residues()}
    assert src == {0: "b:1", 1: "c:1", 2: "c:1"}


def test_in_place_rewrite_never_reads_from_itself():
    plan = plan_fragment_copy(ensemble=ENS3, write_quorum=3, first=0, last=2,
                              replacements={0: "a:1"}, readable=set(ENS3))
    assert all(s.source != "a:1" for s in plan.streams)


def test_empty_fragment_and_source_load():
    empty = plan_fragment_copy(ensemble=ENS3, write_quorum=2, first=0, last=-1,
                               replacements={0: "n:1"}, readable={"b:1"})
    assert empty.streams == () and empty.replacements == {0: "n:1"}
    loaded = plan_fragment_copy(ensemble=ENS3, write_quorum=3, first=0, last=9,
                                replacements={0: "n:1"}, readable={"b:1", "c:1"}, source_load={"b:1": 10})
    assert {s.source for s in loaded.streams} == {"c:1"}
    with pytest.raises(ValueError):
        plan_fragment_copy(ensemble=ENS3, write_quorum=2, first=0, last=3, replacements={5: "x:1"}, readable=ENS3)


@pytest.mark.parametrize("seed", range(30))
def test_random_plans_deliver_exactly_what_is_needed(seed):
    rng = random.Random(seed)
    e = rng.randint(1, 7)
    wq = rng.randint(1, e)
    ens = tuple(f"b{i}:1" for i in range(e))
    first = rng.randint(0, 20)
    last = first + rng.randint(-1, 40)
    bad = rng.sample(range(e), rng.randint(1, e))
    repl = {i: f"n{i}:1" for i in bad}
    readable = {b for i, b in enumerate(ens) if i not in bad}
    plan = plan_fragment_copy(ensemble=ens, write_quorum=wq, first=first, last=last,
                              replacements=repl, readable=readable)
    need = _needed(ens, wq, first, last, repl)
    got: dict[int, set[str]] = {}
    reads = 0
    for s in plan.streams:
        assert s.source in readable
        ids = list(s.entry_ids())
        reads += len(ids)
        for x in ids:
            assert stored_on(x, e, wq, s.source_index), "source must store what it streams"
            assert x not in got, "an entry is read by exactly one stream"
            got[x] = set(s.targets)
    assert reads == plan.entries_to_read
    unsourced = set(entry_runs.entry_ids(plan.unsourced))
    for x in range(first, last + 1):
        if x in unsourced:
            assert x not in got and x in need
        elif x in need:
            assert got[x] == need[x]
        else:
            assert x not in got


class FakePolicy:
    def __init__(self, writable, readonly=()):
        self.writable = list(writable)
        self.readonly = set(readonly)
        self.calls = []

    def replace_bookie(self, e, wq, aq, current, old, exclude):
        self.calls.append((list(current), old, set(exclude)))
        for b in self.writable:
            if b not in exclude and b not in current:
                return type("R", (), {"bookie": b, "adherence": None})()
        raise NotEnoughBookiesError(f"none for {old}")


def test_choose_replacements_accumulates_excludes_and_sees_earlier_choices():
    pol = FakePolicy(["a:1", "b:1", "c:1", "x:1", "y:1"])
    out = choose_replacements(ensemble=("a:1", "b:1", "c:1"), bad_indexes=[0, 1], replace_bookie=pol.replace_bookie,
                              ensemble_size=3, write_quorum=2, ack_quorum=2)
    assert out == {0: "x:1", 1: "y:1"}
    assert pol.calls[1][0] == ["x:1", "b:1", "c:1"]
    assert "x:1" in pol.calls[1][2] and "a:1" in pol.calls[1][2]


def test_choose_replacements_never_takes_read_only_and_raises_when_none():
    class Liar(FakePolicy):
        # a policy with a stale view offers a bookie that has turned read-only meanwhile
        def replace_bookie(self, e, wq, aq, current, old, exclude):
            if not self.calls:
                self.calls.append("lied")
                return type("R", (), {"bookie": "ro:1"})()
            return super().replace_bookie(e, wq, aq, current, old, exclude)

    pol = Liar(["z:1"])
    out = choose_replacements(ensemble=("a:1", "b:1"), bad_indexes=[0], replace_bookie=pol.replace_bookie,
                              ensemble_size=2, write_quorum=2, ack_quorum=2, readonly={"ro:1"})
    assert out == {0: "z:1"}
    with pytest.raises(NotEnoughBookiesError, match="index 0"):
        choose_replacements(ensemble=("a:1", "b:1"), bad_indexes=[0], replace_bookie=FakePolicy([]).replace_bookie,
                            ensemble_size=2, write_quorum=2, ack_quorum=2)


def test_choose_replacements_in_place_when_bad_bookie_is_writable_again():
    # #3905: E == number of bookies, the bookie lost its disk and came back with the same id
    pol = FakePolicy(["a:1", "b:1", "c:1"])
    out = choose_replacements(ensemble=("a:1", "b:1", "c:1"), bad_indexes=[2], replace_bookie=pol.replace_bookie,
                              ensemble_size=3, write_quorum=3, ack_quorum=2, writable={"a:1", "b:1", "c:1"})
    assert out == {2: "c:1"}
