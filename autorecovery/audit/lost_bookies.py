"""The Auditor's lost-bookie path as one reducer: read -> decide -> act (PURE).

Upstream ``Auditor.submitAuditTask``, ``submitLostBookieRecoveryDelayChangedEvent`` and the
delayed ``auditTask`` (§4.1 of the reference). The Auditor (``roles/auditor.py``) *reads* the inputs
(the registered bookies, the ``lostBookieRecoveryDelay`` znode, the index's bookies), :func:`decide`
*decides* from them and the previous :class:`LostState` (which bookies are lost now and since when,
whether an audit is postponed, cancelled or due), and the Auditor *acts* on the :class:`Step`
(arms/disarms the delayed audit, counts ``NUM_BOOKIE_AUDITS_DELAYED`` /
``NUM_DELAYED_BOOKIE_AUDITS_CANCELLED``, audits, logs).

The ``lostBookieRecoveryDelay`` state machine itself is :class:`~autorecovery.audit.decisions.LostBookieTracker`;
:func:`decide` works on a copy of it, so the state passed in is never changed. The since-times of
lost bookies (the rack-loss guard's settle clock, the heal history's "lost since") are kept by
:func:`lost_since_after` (through :func:`observe` for the Auditor), the one place they are updated;
:func:`decide` leaves them as they are.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from autorecovery.audit.decisions import NOTHING, Decision, LostBookieTracker

T = TypeVar("T", int, float)


class LostEvent(enum.Enum):
    """What happened, as far as the lost-bookie path is concerned."""

    BOOKIES = "bookies"  # writable ∪ read-only changed
    DELAY = "delay"  # the lostBookieRecoveryDelay znode was written
    FIRE = "fire"  # the delayed audit's timer went off
    RELEASED = "released"  # maintenance windows ended for lost bookies: the delay applies from now
    RETRY_AUDIT = "retry_audit"  # a failed audit (or the guard's settle time): audit again


@dataclass(frozen=True)
class Inputs:
    """What the Auditor read for one event.

    Attributes:
        event: the :class:`LostEvent`.
        now_s: monotonic clock, s (the same clock as the tracker's ``pending_at``).
        available: registered bookies (writable ∪ read-only).
        indexed: bookies named by some ledger's ensemble in the index.
        delay_s: ``lostBookieRecoveryDelay`` read now (s); needed for BOOKIES, DELAY and RELEASED.
        in_ensemble: whether the index lists a bookie in some ensemble (None: count every lost bookie).
        timer_current: for FIRE, whether the timer that fired is the one armed last (a stale one is ignored).
        released: for RELEASED, the lost bookies whose maintenance window ended.
    """

    event: LostEvent
    now_s: float
    available: frozenset[str] = frozenset()
    indexed: frozenset[str] = frozenset()
    delay_s: int | None = None
    in_ensemble: Callable[[str], bool] | None = None
    timer_current: bool = True
    released: frozenset[str] = frozenset()


@dataclass(frozen=True)
class LostState:
    """The lost-bookie path's state between two events.

    Attributes:
        tracker: upstream's ``knownBookies`` / ``bookiesToBeAudited`` / pending audit.
        lost_since: lost bookie -> monotonic s this auditor first saw it gone.
    """

    tracker: LostBookieTracker
    lost_since: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What :func:`decide` says: the next state, what to do, and who is lost now.

    Attributes:
        state: the next :class:`LostState`.
        decision: the :class:`~autorecovery.audit.decisions.Decision` the Auditor carries out.
        lost: indexed bookies not registered now (sorted).
    """

    state: LostState
    decision: Decision
    lost: tuple[str, ...]


def lost_since_after(previous: Mapping[str, T], lost: Iterable[str], available: Iterable[str], now: T) -> dict[str, T]:
    """Since-times after a look at the cluster: a bookie back in ``available`` is forgotten, one in
    ``lost`` keeps its first time (``now`` when newly lost). Any clock (s or ms): ``now``'s."""
    avail = set(available)
    out = {b: t for b, t in previous.items() if b not in avail}
    for b in lost:
        if b not in avail:
            out.setdefault(b, now)
    return out


def observe(state: LostState, available: Iterable[str], indexed: Iterable[str], now_s: float) -> LostState:
    """``state`` after a look at the registrations: the since-times of the indexed bookies not
    registered now (:func:`lost_since_after`); the tracker is left as it is."""
    avail = frozenset(available)
    lost = [b for b in indexed if b not in avail]
    return LostState(state.tracker, lost_since_after(state.lost_since, lost, avail, now_s))


def copy_tracker(t: LostBookieTracker) -> LostBookieTracker:
    """An independent copy of ``t`` (its sets copied)."""
    c = LostBookieTracker(t.known, t.previous_delay)
    c.to_audit = set(t.to_audit)
    c.pending_at = t.pending_at
    return c


def decide(state: LostState, inp: Inputs) -> Step:
    """One lost-bookie event: the next state and the decision.

    Raises:
        ValueError: ``delay_s`` missing for an event that needs it.
    """
    t = copy_tracker(state.tracker)
    lost = tuple(sorted(inp.indexed - inp.available))
    ev = inp.event
    if ev in (LostEvent.BOOKIES, LostEvent.DELAY, LostEvent.RELEASED) and inp.delay_s is None:
        raise ValueError(f"lost-bookie event {ev.value}: delay_s not given")
    d: Decision
    if ev is LostEvent.BOOKIES:
        assert inp.delay_s is not None
        d = t.on_bookies_changed(inp.available, inp.delay_s, inp.now_s, inp.in_ensemble)
    elif ev is LostEvent.RELEASED:
        assert inp.delay_s is not None
        t.known |= inp.released
        d = t.on_bookies_changed(inp.available, inp.delay_s, inp.now_s, inp.in_ensemble)
    elif ev is LostEvent.DELAY:
        assert inp.delay_s is not None
        d = t.on_delay_changed(inp.delay_s, inp.now_s)
    elif ev is LostEvent.FIRE:
        d = t.on_pending_fired(inp.now_s) if inp.timer_current else NOTHING
    else:
        d = Decision(audit_now=True)
    return Step(LostState(t, dict(state.lost_since)), d, lost)


__all__ = ["Inputs", "LostEvent", "LostState", "Step", "copy_tracker", "decide", "lost_since_after", "observe"]
