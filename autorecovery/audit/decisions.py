"""Lost-bookie audit decisions: ``lostBookieRecoveryDelay`` as a state machine (PURE).

Upstream ``Auditor.submitAuditTask`` and ``submitLostBookieRecoveryDelayChangedEvent`` (§4.1 of the
reference). Events go in with the current time in seconds (any monotonic clock); a :class:`Decision`
comes out and the edge carries it out (run the audit, arm or cancel the delayed audit, count metrics).

* one lost bookie → the audit is delayed by ``delay`` s (``NUM_BOOKIE_AUDITS_DELAYED``);
* a second loss during the delay → audit at once, the pending one is cancelled;
* a lost bookie that no ledger's ensemble lists any more (``in_ensemble``: the auditor's index says it
  was healed, but it was never decommissioned) is not counted: it has nothing to audit, so it neither
  arms a delayed audit nor makes the next single loss a "multiple bookie failure" (upstream counts it:
  its ``knownBookies`` starts from every cookie, so a new auditor audits the next loss at once);
* the lost bookie comes back inside the delay → the pending audit is cancelled
  (``NUM_DELAYED_BOOKIE_AUDITS_CANCELLED``), so a rolling restart marks nothing;
* the delay znode is rewritten with the same value or with 0 → audit now (``triggeraudit``);
  another value re-arms a pending audit that many seconds from now.

``known`` starts as every bookie with a cookie, so a bookie that died before this auditor started is
noticed on the first event (#4419).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """What the edge must do after an event.

    Attributes:
        audit_now: run the bookie audit immediately.
        schedule_at: arm the delayed audit at this time (s, same clock as the events); None = leave it.
        cancel_pending: disarm the pending delayed audit.
        delayed: add to NUM_BOOKIE_AUDITS_DELAYED. cancelled: add to NUM_DELAYED_BOOKIE_AUDITS_CANCELLED.
        lost: bookies tracked as lost when the decision was taken (for logs).
    """

    audit_now: bool = False
    schedule_at: float | None = None
    cancel_pending: bool = False
    delayed: int = 0
    cancelled: int = 0
    lost: frozenset[str] = frozenset()


NOTHING = Decision()


class LostBookieTracker:
    """State of upstream's ``knownBookies`` / ``bookiesToBeAudited`` / ``auditTask``.

    Args:
        known: bookies known to exist (cookies ∪ currently available).
        delay_s: the current ``lostBookieRecoveryDelay`` (the value read from the znode).
    """

    def __init__(self, known: Iterable[str], delay_s: int) -> None:
        self.known: set[str] = set(known)
        self.to_audit: set[str] = set()
        self.pending_at: float | None = None
        self.previous_delay = delay_s

    @property
    def pending(self) -> bool:
        """A delayed audit is armed (periodic checks skip their runs meanwhile, #3818)."""
        return self.pending_at is not None

    def on_bookies_changed(self, available: Iterable[str], delay_s: int, now_s: float,
                           in_ensemble: Callable[[str], bool] | None = None) -> Decision:
        """Writable ∪ read-only changed (read-only bookies are not lost).

        Args:
            in_ensemble: whether some ledger's ensemble lists a bookie (the auditor's index); a lost
                bookie for which it is False is dropped from the lost set (nothing to audit). None =
                count every lost bookie, as upstream.
        """
        available = set(available)
        cancelled = 0
        cancel = False
        self.known |= available
        if self.to_audit and self.to_audit <= self.known:
            # every tracked bookie is back: the delayed audit is not needed any more
            if self.pending_at is not None:
                cancelled, cancel = 1, True
                self.pending_at = None
            self.to_audit.clear()
        self.to_audit |= self.known - available
        if in_ensemble is not None:
            idle = {b for b in self.to_audit if not in_ensemble(b)}
            self.known -= idle  # lost all the same: noticed again only once it is back and goes again
            self.to_audit -= idle
        if not self.to_audit:
            return Decision(cancel_pending=cancel, cancelled=cancelled)
        self.known -= self.to_audit
        lost = frozenset(self.to_audit)
        if delay_s == 0:
            self.to_audit.clear()
            was = self.pending_at is not None
            self.pending_at = None
            return Decision(audit_now=True, cancel_pending=cancel or was, cancelled=cancelled + int(was), lost=lost)
        if len(self.to_audit) > 1:
            # multiple bookie failures: do not delay
            if self.pending_at is not None:
                cancelled, cancel = cancelled + 1, True
                self.pending_at = None
            self.to_audit.clear()
            return Decision(audit_now=True, cancel_pending=cancel, cancelled=cancelled, lost=lost)
        if self.pending_at is None:
            self.pending_at = now_s + delay_s
            return Decision(schedule_at=self.pending_at, cancel_pending=cancel, delayed=1, cancelled=cancelled, lost=lost)
        return Decision(cancel_pending=cancel, cancelled=cancelled, lost=lost)

    def on_delay_changed(self, delay_s: int, now_s: float) -> Decision:
        """The ``lostBookieRecoveryDelay`` znode was written (even with the same value)."""
        was_pending = self.pending_at is not None
        cancelled = int(was_pending)
        self.pending_at = None
        prev, self.previous_delay = self.previous_delay, delay_s
        lost = frozenset(self.to_audit)
        if delay_s == 0 or delay_s == prev:
            self.to_audit.clear()
            return Decision(audit_now=True, cancel_pending=was_pending, cancelled=cancelled, lost=lost)
        if was_pending:
            self.pending_at = now_s + delay_s
            return Decision(schedule_at=self.pending_at, cancel_pending=True, delayed=1, cancelled=cancelled, lost=lost)
        return NOTHING

    def on_pending_fired(self, now_s: float) -> Decision:
        """The delayed audit's time came."""
        if self.pending_at is None:
            return NOTHING
        self.pending_at = None
        lost = frozenset(self.to_audit)
        self.to_audit.clear()
        return Decision(audit_now=True, lost=lost)
