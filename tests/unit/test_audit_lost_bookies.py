"""The lost-bookie reducer (autorecovery.audit.lost_bookies): hand-built inputs, no I/O."""

from __future__ import annotations

import pytest

from autorecovery.audit.decisions import LostBookieTracker
from autorecovery.audit.lost_bookies import (
    Inputs,
    LostEvent,
    LostState,
    copy_tracker,
    decide,
    lost_since_after,
    observe,
)

A, B, C = "a:3181", "b:3181", "c:3181"
ALL = frozenset({A, B, C})


def fresh(delay: int = 30) -> LostState:
    return LostState(LostBookieTracker(ALL, delay))


def bookies(state: LostState, available: frozenset[str], now: float, delay: int = 30) -> object:
    return decide(state, Inputs(LostEvent.BOOKIES, now, available=available, indexed=ALL, delay_s=delay))


def test_one_loss_is_postponed_by_the_delay():
    step = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30))
    assert step.decision.schedule_at == 130.0 and step.decision.delayed == 1
    assert not step.decision.audit_now
    assert step.lost == (A,)
    assert step.state.tracker.pending_at == 130.0


def test_the_state_passed_in_is_never_changed():
    s0 = fresh()
    decide(s0, Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30))
    assert s0.tracker.pending_at is None and s0.tracker.to_audit == set() and s0.tracker.known == set(ALL)


def test_a_second_loss_during_the_delay_audits_now_and_cancels_the_pending_one():
    s1 = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30)).state
    step = decide(s1, Inputs(LostEvent.BOOKIES, 110.0, available=ALL - {A, B}, indexed=ALL, delay_s=30))
    assert step.decision.audit_now and step.decision.cancel_pending and step.decision.cancelled == 1
    assert step.state.tracker.pending_at is None
    assert step.lost == (A, B)


def test_the_bookie_back_inside_the_delay_cancels_the_audit():
    s1 = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30)).state
    step = decide(s1, Inputs(LostEvent.BOOKIES, 120.0, available=ALL, indexed=ALL, delay_s=30))
    assert step.decision.cancelled == 1 and step.decision.cancel_pending and not step.decision.audit_now
    assert step.lost == ()


def test_the_timer_that_fired_audits_only_when_it_is_the_current_one():
    s1 = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30)).state
    stale = decide(s1, Inputs(LostEvent.FIRE, 130.0, available=ALL - {A}, indexed=ALL, timer_current=False))
    assert not stale.decision.audit_now and stale.state.tracker.pending_at == 130.0
    due = decide(s1, Inputs(LostEvent.FIRE, 130.0, available=ALL - {A}, indexed=ALL))
    assert due.decision.audit_now and due.decision.lost == frozenset({A})
    assert due.state.tracker.pending_at is None


def test_rewriting_the_delay_with_its_value_audits_now():
    s1 = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30)).state
    step = decide(s1, Inputs(LostEvent.DELAY, 105.0, delay_s=30))
    assert step.decision.audit_now and step.decision.cancelled == 1


def test_a_new_delay_re_arms_the_pending_audit_from_now():
    s1 = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL, delay_s=30)).state
    step = decide(s1, Inputs(LostEvent.DELAY, 105.0, delay_s=60))
    assert step.decision.schedule_at == 165.0 and not step.decision.audit_now
    assert step.state.tracker.previous_delay == 60


def test_a_lost_bookie_in_no_ensemble_arms_nothing():
    step = decide(fresh(), Inputs(LostEvent.BOOKIES, 100.0, available=ALL - {A}, indexed=ALL - {A}, delay_s=30,
                                  in_ensemble=lambda b: b != A))
    assert step.decision.schedule_at is None and not step.decision.audit_now
    assert step.state.tracker.pending_at is None


def test_released_bookies_are_lost_anew_under_the_delay():
    # a bookie known lost but held by a window: the tracker forgot it (known -= to_audit after an audit)
    t = LostBookieTracker(ALL - {A}, 30)
    step = decide(LostState(t), Inputs(LostEvent.RELEASED, 200.0, available=ALL - {A}, indexed=ALL, delay_s=30,
                                       released=frozenset({A})))
    assert step.decision.schedule_at == 230.0 and step.decision.lost == frozenset({A})
    assert A not in t.known  # the input tracker is untouched


def test_retry_audit_audits_now_and_keeps_the_tracker():
    s0 = fresh()
    step = decide(s0, Inputs(LostEvent.RETRY_AUDIT, 1.0))
    assert step.decision.audit_now
    assert step.state.tracker.known == s0.tracker.known and step.state.tracker is not s0.tracker


def test_an_event_that_needs_the_delay_without_it_is_refused_naming_the_event():
    with pytest.raises(ValueError, match="delay"):
        decide(fresh(), Inputs(LostEvent.BOOKIES, 1.0, available=ALL, indexed=ALL))


def test_lost_since_keeps_the_first_time_and_forgets_a_returned_bookie():
    since = lost_since_after({}, [A, B], {C}, 10.0)
    assert since == {A: 10.0, B: 10.0}
    since = lost_since_after(since, [A, B], {C}, 20.0)
    assert since == {A: 10.0, B: 10.0}, "a bookie still lost keeps its first time"
    since = lost_since_after(since, [A], {B, C}, 30.0)
    assert since == {A: 10.0}
    since = lost_since_after(since, [A, B], {C}, 40.0)
    assert since == {A: 10.0, B: 40.0}, "lost again: since the new time"


def test_lost_since_ignores_a_lost_bookie_that_is_available():
    assert lost_since_after({}, [A], {A}, 5) == {}


def test_observe_updates_since_times_and_leaves_the_tracker():
    s0 = fresh()
    s1 = observe(s0, ALL - {B}, ALL, 7.0)
    assert s1.lost_since == {B: 7.0}
    assert s1.tracker is s0.tracker and s0.lost_since == {}
    s2 = observe(s1, ALL, ALL, 9.0)
    assert s2.lost_since == {}


def test_decide_carries_the_since_times_over_unchanged():
    s1 = observe(fresh(), ALL - {A}, ALL, 3.0)
    step = decide(s1, Inputs(LostEvent.BOOKIES, 50.0, available=ALL - {A}, indexed=ALL, delay_s=30))
    assert step.state.lost_since == {A: 3.0}


def test_copy_tracker_is_independent():
    t = LostBookieTracker(ALL, 5)
    t.to_audit.add(A)
    t.pending_at = 9.0
    c = copy_tracker(t)
    c.to_audit.add(B)
    c.known.discard(C)
    assert t.to_audit == {A} and C in t.known
    assert c.pending_at == 9.0 and c.previous_delay == 5
