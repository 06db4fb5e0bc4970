"""The ReplicationWorker's pass decided purely (issue 12): plan_pass / conclude_pass /
classify_unreadable, in milliseconds, with the backoff of plan.backoff on a fake clock."""

from __future__ import annotations

from autorecovery.audit.checker import BadFragment
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.plan import pass_plan as pp
from autorecovery.plan.backoff import FailureMemory
from autorecovery.plan.entry_runs import Gap, Run

A, B, C, D, E_ = "a:1", "b:1", "c:1", "d:1", "e:1"


def md(segs, last=99, closed=True):
    return LedgerMetadata(3, 2, 2, tuple(Segment(f, tuple(e)) for f, e in segs),
                          state=LedgerState.CLOSED if closed else LedgerState.OPEN, last_entry_id=last if closed else -1)


def frag(first, last, seg_first, bad, closed=True, ens=(A, B, C)):
    return BadFragment(first, last, seg_first, frozenset(bad), frozenset(ens[i] for i in bad), closed)


def test_nothing_wrong_is_done_at_once():
    plan = pp.plan_pass(md([(0, (A, B, C))]), [], [], {A, B, C})
    assert plan.nothing_to_do and plan.actions == ()
    end = pp.conclude_pass(plan, pp.PassOutcome(), open_pending=False)
    assert end.kind == pp.DONE and end.outcome == "nothing-to-do"


def test_data_loss_first_most_endangered_fragment_first_and_placement_ignored():
    m = md([(0, (A, B, C)), (50, (A, D, C))])
    safe = frag(0, 49, 0, {1})                     # b lost: every entry still has one copy on a or c
    danger = frag(50, 99, 50, {0, 2}, ens=(A, D, C))  # a and c lost: entries on (c, a) have no copy
    plan = pp.plan_pass(m, [safe, danger], [0], {A, C, D})
    assert [a.fragment for a in plan.actions] == [danger, safe]
    assert not any(isinstance(a, pp.RepairPlacement) for a in plan.actions)  # BP-54: data loss first
    assert plan.estimate_bookies == {A, B, C} and not plan.open_fragment


def test_placement_repair_only_without_data_loss():
    m = md([(0, (A, B, C)), (50, (A, D, C))])
    plan = pp.plan_pass(m, [], [50], {A, B, C, D})
    assert plan.actions == (pp.RepairPlacement(50),) and plan.estimate_bookies == {A}


def test_open_fragment_defers_whatever_the_copies_did():
    m = md([(0, (A, B, C))], closed=False)
    plan = pp.plan_pass(m, [frag(0, 9, 0, {1}, closed=False)], [], {A, C})
    assert plan.actions == () and plan.open_fragment
    end = pp.conclude_pass(plan, pp.PassOutcome(copied=1), open_pending=False, open_grace_ms=30000)
    assert end.kind == pp.DEFER_OPEN and "30000 ms" in end.reason
    # an open ledger whose last segment lost a bookie, found after the copies
    plan2 = pp.plan_pass(m, [frag(0, 9, 0, {1})], [], {A, C})
    assert pp.conclude_pass(plan2, pp.PassOutcome(copied=1), open_pending=True).kind == pp.DEFER_OPEN


def test_conclusions_after_the_recheck():
    m = md([(0, (A, B, C))])
    loss = pp.plan_pass(m, [frag(0, 99, 0, {1})], [], {A, C})
    ok = pp.conclude_pass(loss, pp.PassOutcome(copied=1), open_pending=False)
    assert ok.done and ok.outcome == "replicated"
    # data loss fixed, the ensemble now breaks placement: left for a later pass (BP-54)
    pending = pp.conclude_pass(loss, pp.PassOutcome(copied=1), open_pending=False, remaining_placement=[0])
    assert pending.kind == pp.DATA_LOSS_FIXED and not pending.done
    # placement impossible: done with "no more bookie", the segment named
    place = pp.plan_pass(m, [], [0], {A, B, C})
    nmb = pp.conclude_pass(place, pp.PassOutcome(placement_impossible=[0]), open_pending=False,
                           remaining_placement=[0])
    assert nmb.done and nmb.outcome == "no-more-bookie" and nmb.no_more_bookie == (0,)
    # entries nobody holds and nothing retriable: surfaced
    gone = pp.PassOutcome(unrecoverable=[Gap(Run(5, 5), {B: "NOT_REGISTERED", C: "ENOENTRY"})])
    assert pp.conclude_pass(loss, gone, open_pending=False, remaining_data_loss=True).kind == pp.UNRECOVERABLE
    # a retriable reason wins over surfacing; the lock is released after the backoff delay
    gone.retriable.append("target x:1 failed")
    mem = FailureMemory(30000)
    end = pp.conclude_pass(loss, gone, open_pending=False, remaining_data_loss=True,
                           release_delay_ms=mem.next_release_delay_ms(7))
    assert end.kind == pp.RELEASE_LATER and end.reason == "target x:1 failed" and end.delay_ms == 30000 // 32


def test_classify_unreadable_definitive_versus_transient():
    runs = {1: {A: "ENOENTRY", B: "DIGEST"}, 2: {A: "UNAVAILABLE"}, 3: {}, 4: {C: "NOT_REGISTERED", D: "ENOLEDGER"}}
    gone, rest = pp.classify_unreadable([Gap(Run(e, e), why) for e, why in runs.items()])
    assert [g.run.first for g in gone] == [1, 4] and [g.run.first for g in rest] == [2, 3]
