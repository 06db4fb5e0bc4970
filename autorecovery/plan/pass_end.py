"""How one ReplicationWorker pass ends: the reading, the decision and the ending as values (PURE).

The worker's pass (``roles/worker.py`` ``ReplicationWorker._rereplicate``) is five steps::

    reading  = await steps.read(lid)              # I/O: metadata, marker, checker, placement
    decision = decide(reading, available)         # PURE (here)
    check    = await steps.act(...)               # I/O: copies + CAS, then a re-check
    ending   = conclude(decision, outcome, check) # PURE (here)
    await effects.carry_out(lid, ending, ...)     # I/O: marker, lock, backlog, memory, tracker, logs

This module holds the values that pass between the steps (:class:`Reading`, :class:`Recheck`,
:class:`Ending`) and the two decisions: :func:`decide` (nothing to do, not marked, or the
:class:`~autorecovery.plan.pass_plan.PassPlan`) and :func:`conclude` / :func:`failed` (how the pass
ends). The plan and the conclusion proper are :mod:`autorecovery.plan.pass_plan`; this module adds the
early endings (ledger deleted, not marked, nothing to do) and the failed ones (an exception), and says
per ending what the worker keeps (the lock) and reports (history word, success). Upstream source:
``ReplicationWorker.rereplicate`` (its early returns and its catch blocks).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from autorecovery.audit.checker import BadFragment
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.plan import pass_plan as pp
from autorecovery.plan.entry_runs import Gap

# endings that are not a conclusion of pass_plan (the pass stopped early or failed)
DELETED = "deleted"          # the ledger is gone: delete its marker, forget it
NOT_MARKED = "not-marked"    # someone else finished it: nothing to do
FAILED = "failed"            # a retriable error: release the lock, the slot backs off
NOT_RETRIABLE = "not-retriable"  # an error retrying cannot fix: skip until the ledger is marked again
CANCELLED = "cancelled"      # the worker is stopping

_KEEPS_LOCK = frozenset({pp.DEFER_OPEN, pp.RELEASE_LATER})
_OK = frozenset({pp.DONE, pp.DATA_LOSS_FIXED, NOT_MARKED})
_FINISHED = frozenset({"replicated", "nothing-to-do", "no-more-bookie"})


@dataclass(frozen=True)
class Reading:
    """What the read step saw of a locked ledger.

    Attributes:
        md: the ledger's metadata.
        marked: the ledger still has an under-replication marker (None of the rest is read otherwise).
        marker: ``(version, ctime, replicas)`` of the marker when marked.
        data_loss: the checker's bad fragments (closed and open).
        placement_failing: first entry ids of closed segments failing placement (BP-54 on, only
            looked at without data loss).
        remembered: unreadable runs this worker remembers for the ledger (probed before copying).
    """

    md: LedgerMetadata
    marked: bool
    marker: tuple[int, int, list[str]] | None = None
    data_loss: list[BadFragment] = field(default_factory=list)
    placement_failing: list[int] = field(default_factory=list)
    remembered: list[Gap] = field(default_factory=list)


@dataclass(frozen=True)
class Recheck:
    """The re-check after the actions: an open ledger still pending (then nothing else was read), or
    what is left from fresh metadata."""

    open_pending: bool
    remaining_data_loss: bool = False
    remaining_placement: Sequence[int] = ()


@dataclass(frozen=True)
class Ending:
    """How a pass ends; the worker carries out exactly this.

    Attributes:
        kind: a :mod:`~autorecovery.plan.pass_plan` conclusion kind (``DONE``, ``DEFER_OPEN``,
            ``DATA_LOSS_FIXED``, ``UNRECOVERABLE``, ``RELEASE_LATER``) or :data:`DELETED`,
            :data:`NOT_MARKED`, :data:`FAILED`, :data:`NOT_RETRIABLE`, :data:`CANCELLED`.
        outcome: the history / log word.
        reason: why the ledger is blocked (progress, logs); empty when not blocked.
        no_more_bookie: segments BP-54 cannot fix (``DONE`` only; logged).
        error: the exception of a failed ending.
    """

    kind: str
    outcome: str
    reason: str = ""
    no_more_bookie: tuple[int, ...] = ()
    error: BaseException | None = field(default=None, compare=False)

    @property
    def keeps_lock(self) -> bool:
        """The lock stays held past the pass (released later by a deferred task)."""
        return self.kind in _KEEPS_LOCK

    @property
    def ok(self) -> bool:
        """The pass did not fail: the slot goes on without backoff."""
        return self.kind in _OK

    @property
    def finished(self) -> bool:
        """The ledger is whole (progress counts it replicated)."""
        return self.outcome in _FINISHED

    @property
    def success(self) -> bool:
        """The pass counts as a success in ``replication_worker_rereplicate``."""
        return self.finished or self.outcome.startswith(pp.DATA_LOSS_FIXED)


#: The ending before anything is known (an error in the very first step).
UNSTARTED = Ending(FAILED, FAILED)
CANCELLED_ENDING = Ending(CANCELLED, CANCELLED)


def decide(reading: Reading, available: Collection[str]) -> pp.PassPlan | Ending:
    """The pass's plan, or how it ends at once (not marked any more; nothing wrong → delete the marker)."""
    if not reading.marked:
        return Ending(NOT_MARKED, NOT_MARKED)
    plan = pp.plan_pass(reading.md, reading.data_loss, reading.placement_failing if not reading.data_loss else [],
                        available)
    if plan.nothing_to_do:
        return Ending(pp.DONE, "nothing-to-do")
    return plan


def conclude(plan: pp.PassPlan, out: pp.PassOutcome, check: Recheck, *, open_grace_ms: int) -> Ending:
    """How a pass that acted ends (:func:`~autorecovery.plan.pass_plan.conclude_pass`); the backoff
    delay of ``RELEASE_LATER`` is the failure memory's, asked when the ending is carried out."""
    c = pp.conclude_pass(plan, out, open_pending=check.open_pending,
                         remaining_data_loss=check.remaining_data_loss,
                         remaining_placement=check.remaining_placement, open_grace_ms=open_grace_ms)
    return Ending(c.kind, c.outcome, c.reason, c.no_more_bookie)


def failed(exc: BaseException, *, deleted: bool, retriable: bool) -> Ending:
    """The ending of a pass that raised ``exc``: the ledger was deleted (``NoSuchLedgerError``), a
    retriable error, or one retrying cannot fix."""
    if deleted:
        return Ending(DELETED, DELETED, error=exc)
    if retriable:
        return Ending(FAILED, FAILED, f"{type(exc).__name__}: {exc}", error=exc)
    return Ending(NOT_RETRIABLE, FAILED,
                  f"not retriable: {type(exc).__name__}: {exc} (skipped until the ledger is marked again)", error=exc)


def remembered_in(runs: Sequence[Gap], first: int, last: int) -> list[Gap]:
    """The remembered unreadable ``runs`` clipped to entries ``first..last`` (as
    :meth:`~autorecovery.plan.backoff.FailureMemory.unreadable`)."""
    out = []
    for g in runs:
        run = g.run.clip(first, last)
        if run is not None:
            out.append(Gap(run, g.why))
    return out
