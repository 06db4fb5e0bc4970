"""How a worker pass ends, decided purely (issue 30): decide / conclude / failed and what each ending
keeps and reports (the lock kept, the slot's backoff, progress, op-stats success)."""

from __future__ import annotations

from autorecovery.audit.checker import BadFragment
from autorecovery.errors import NoSuchLedgerError, ZooKeeperError
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.plan import pass_end as pe
from autorecovery.plan import pass_plan as pp
from autorecovery.plan.entry_runs import Gap, Run

A, B, C = "a:1", "b:1", "c:1"
MD = LedgerMetadata(3, 2, 2, (Segment(0, (A, B, C)),), state=LedgerState.CLOSED, last_entry_id=99)
LOSS = BadFragment(0, 99, 0, frozenset({1}), frozenset({B}), True)


def test_not_marked_and_nothing_wrong_end_at_once():
    gone = pe.decide(pe.Reading(MD, marked=False, data_loss=[LOSS]), {A, C})
    assert gone == pe.Ending(pe.NOT_MARKED, "not-marked") and gone.ok and not gone.keeps_lock
    fine = pe.decide(pe.Reading(MD, True, (3, 0, []), [], [0]), {A, B, C})  # placement only with BP-54 verdicts
    assert isinstance(fine, pp.PassPlan) and fine.actions == (pp.RepairPlacement(0),)
    done = pe.decide(pe.Reading(MD, True, (3, 0, [B]), [], []), {A, B, C})
    assert isinstance(done, pe.Ending) and done.kind == pp.DONE and done.finished and done.success and done.ok


def test_data_loss_ignores_placement_verdicts():
    plan = pe.decide(pe.Reading(MD, True, (3, 0, [B]), [LOSS], [0]), {A, C})
    assert isinstance(plan, pp.PassPlan) and plan.actions == (pp.CopyFragment(LOSS),)


def test_conclusions_say_what_the_worker_keeps():
    plan = pe.decide(pe.Reading(MD, True, (3, 0, [B]), [LOSS], []), {A, C})
    assert isinstance(plan, pp.PassPlan)
    fixed = pe.conclude(plan, pp.PassOutcome(copied=1), pe.Recheck(False), open_grace_ms=0)
    assert fixed.outcome == "replicated" and fixed.finished and fixed.ok and not fixed.keeps_lock
    left = pe.conclude(plan, pp.PassOutcome(retriable=["target b:1 failed"]), pe.Recheck(False, True), open_grace_ms=0)
    assert left.kind == pp.RELEASE_LATER and left.keeps_lock and not left.ok and left.reason == "target b:1 failed"
    opened = pe.conclude(plan, pp.PassOutcome(), pe.Recheck(True), open_grace_ms=500)
    assert opened.kind == pp.DEFER_OPEN and opened.keeps_lock and "500 ms" in opened.reason
    lost = pe.conclude(plan, pp.PassOutcome(unrecoverable=[Gap(Run(5, 5))]), pe.Recheck(False, True), open_grace_ms=0)
    assert lost.kind == pp.UNRECOVERABLE and not lost.keeps_lock and not lost.ok
    placement_left = pe.conclude(plan, pp.PassOutcome(copied=1), pe.Recheck(False, False, [0]), open_grace_ms=0)
    assert placement_left.kind == pp.DATA_LOSS_FIXED and placement_left.ok and placement_left.success
    assert not placement_left.finished


def test_failures_deleted_retriable_or_skipped():
    deleted = pe.failed(NoSuchLedgerError(7), deleted=True, retriable=False)
    assert deleted.kind == pe.DELETED and deleted.outcome == "deleted" and not deleted.ok
    exc = ZooKeeperError("connection loss")
    again = pe.failed(exc, deleted=False, retriable=True)
    assert again.kind == pe.FAILED and again.error is exc and "connection loss" in again.reason
    skipped = pe.failed(ValueError("bad"), deleted=False, retriable=False)
    assert skipped.kind == pe.NOT_RETRIABLE and skipped.outcome == "failed"
    assert skipped.reason.startswith("not retriable: ValueError: bad")
    assert not any(e.keeps_lock or e.ok for e in (deleted, again, skipped, pe.CANCELLED_ENDING, pe.UNSTARTED))


def test_remembered_runs_are_clipped_to_the_fragment():
    runs = [Gap(Run(0, 9), {A: "EIO"}), Gap(Run(40, 60))]
    got = pe.remembered_in(runs, 50, 99)
    assert [(g.run.first, g.run.last) for g in got] == [(50, 60)]
    assert pe.remembered_in(runs, 10, 39) == []
