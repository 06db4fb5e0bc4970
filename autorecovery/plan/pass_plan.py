"""One ReplicationWorker pass over a locked ledger, decided purely (PURE).

The worker (``roles/worker.py``) acts; this module decides, as ``audit/decisions.py`` does for the
Auditor. Upstream source: ``ReplicationWorker.rereplicate`` (re-check, fragments, open-ledger grace,
deferred lock release) and BP-54 (data loss first, placement on a later pass).

A pass is two decisions with I/O between them:

1. :func:`plan_pass` — from the ledger's metadata, the checker's bad fragments and the placement
   verdicts: the ordered actions (copy each bad closed fragment, most endangered first; or, only when
   there is no data loss, repair each non-adhering segment), whether an open fragment needs the
   open-ledger grace, and what the pass is expected to copy (for progress).
2. :func:`conclude_pass` — from what the actions achieved and a fresh re-check: what to do with the
   lock and the marker (done, defer for the open ledger, data loss fixed with placement pending,
   surface as unrecoverable, or release after a backoff).

:mod:`autorecovery.plan.pass_end` wraps both into the worker's five steps (the reading, the early and
failed endings, what each ending keeps). :func:`classify_unreadable` splits entries no replica served into data loss (every replica
definitively has no valid copy) and transient failures.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from autorecovery.audit.checker import BadFragment
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.plan.entry_runs import Gap
from autorecovery.plan.priority import fragment_copies_left

#: Reasons that prove a replica has no valid copy (as opposed to a transient failure).
DEFINITIVE = frozenset({"ENOENTRY", "ENOLEDGER", "DIGEST", "NOT_REGISTERED"})

# conclusions (what the worker does with the lock and the marker)
DONE = "done"                      # versioned delete of the marker, release the lock
DEFER_OPEN = "deferred-open"       # keep the lock; fence/close after the open-ledger grace period
DATA_LOSS_FIXED = "data-loss-fixed-placement-pending"  # release; placement on a later pass (BP-54)
UNRECOVERABLE = "unrecoverable"    # surface the side znode; release
RELEASE_LATER = "deferred-failed"  # keep the lock, release it after ``delay_ms`` (backoff)


@dataclass(frozen=True)
class CopyFragment:
    """Copy the entries of a bad closed fragment to replacement bookies, then swap them in."""

    fragment: BadFragment


@dataclass(frozen=True)
class RepairPlacement:
    """BP-54: move members of the segment starting at ``segment_first_entry_id`` so it adheres."""

    segment_first_entry_id: int


@dataclass(frozen=True)
class PassPlan:
    """What a pass does, in order.

    Attributes:
        actions: :class:`CopyFragment` then (only without data loss) :class:`RepairPlacement` items.
        open_fragment: an open (not yet closed) bad fragment exists: the pass ends with the open-ledger
            grace whatever the actions achieve.
        nothing_to_do: no data loss and no placement problem: delete the marker at once.
        estimate_bookies: bookies whose share of the ledger the pass expects to copy (progress).
    """

    actions: tuple[CopyFragment | RepairPlacement, ...]
    open_fragment: bool
    nothing_to_do: bool
    estimate_bookies: frozenset[str] = frozenset()


def plan_pass(md: LedgerMetadata, data_loss: list[BadFragment], placement_failing: list[int],
              available: Collection[str]) -> PassPlan:
    """The actions of one pass.

    Args:
        md: the ledger's metadata as read at the start of the pass.
        data_loss: the checker's bad fragments (closed and open).
        placement_failing: first entry ids of closed segments that FAIL the placement policy (only
            consulted when there is no data loss; pass [] when BP-54 repair is off).
        available: registered bookies (writable ∪ read-only).

    Closed bad fragments are ordered by the fewest readable copies of any of their entries (most
    endangered first), ties by first entry id.
    """
    if not data_loss and not placement_failing:
        return PassPlan((), False, True)
    avail = set(available)
    if data_loss:
        closed = [f for f in data_loss if f.closed]

        def danger(f: BadFragment) -> tuple[int, int]:
            seg = md.segments[md.segment_index_at(f.segment_first_entry_id)]
            left = fragment_copies_left(seg.ensemble, md.write_quorum, f.first_entry_id, f.last_entry_id,
                                        f.bad_indexes, avail - set(f.bad_bookies))
            return left, f.first_entry_id

        closed.sort(key=danger)
        lost = frozenset(b for f in data_loss for b in f.bad_bookies)
        return PassPlan(tuple(CopyFragment(f) for f in closed), any(not f.closed for f in data_loss), False, lost)
    # a placement move re-copies about one member per segment: estimate it as one member per segment
    moved = frozenset(s.ensemble[0] for s in md.segments if s.first_entry_id in set(placement_failing))
    return PassPlan(tuple(RepairPlacement(s) for s in placement_failing), False, False, moved)


@dataclass
class PassOutcome:
    """What the actions of a pass achieved (filled in by the worker as it acts).

    Attributes:
        copied / copied_placement: fragments swapped in (all / placement moves).
        retriable: reasons a later pass may succeed (a target failed, no target now, transient reads).
        unrecoverable: runs of entries no replica holds (data loss), each with {bookie: reason}
            (:class:`~autorecovery.plan.entry_runs.Gap`; never one item per entry).
        placement_impossible: segments BP-54 cannot repair ("no more bookie").
        cancelled: copies skipped because the lost bookie came back.
        readable_again / unreadable_found / unreadable_counted: what the failure memory learns from
            the pass (remembered runs read again; runs no replica served, to count and remember;
            runs the copier already counted, to remember), applied when the pass is carried out.
    """

    copied: int = 0
    copied_placement: int = 0
    retriable: list[str] = field(default_factory=list)
    unrecoverable: list[Gap] = field(default_factory=list)
    placement_impossible: list[int] = field(default_factory=list)
    cancelled: int = 0
    readable_again: list[Gap] = field(default_factory=list)
    unreadable_found: list[Gap] = field(default_factory=list)
    unreadable_counted: list[Gap] = field(default_factory=list)


@dataclass(frozen=True)
class Conclusion:
    """How a pass ends.

    Attributes:
        kind: :data:`DONE`, :data:`DEFER_OPEN`, :data:`DATA_LOSS_FIXED`, :data:`UNRECOVERABLE` or
            :data:`RELEASE_LATER`.
        outcome: the history / log word (``replicated``, ``nothing-to-do``, ``no-more-bookie``, or
            the kind itself).
        delay_ms: for :data:`RELEASE_LATER`, when to release the lock.
        reason: why the ledger is blocked (progress, logs); empty when done.
        no_more_bookie: segments left non-adhering because no bookie can fix them (logged).
    """

    kind: str
    outcome: str
    delay_ms: int = 0
    reason: str = ""
    no_more_bookie: tuple[int, ...] = ()

    @property
    def done(self) -> bool:
        return self.kind == DONE


def conclude_pass(plan: PassPlan, out: PassOutcome, *, open_pending: bool,
                  remaining_data_loss: bool = False, remaining_placement: Collection[int] = (),
                  release_delay_ms: int = 0, open_grace_ms: int = 0) -> Conclusion:
    """How the pass ends, given what it achieved and a re-check from fresh metadata.

    Args:
        plan: the pass's plan.
        out: what the actions achieved.
        open_pending: an open fragment, or an open ledger whose last segment lost a bookie (upstream
            ``isLastSegmentOpenAndMissingBookies``): the lock is kept for the grace period. When true
            the re-check arguments are not looked at (the worker need not re-check).
        remaining_data_loss / remaining_placement: the re-check (bad fragments left; segments still
            failing placement, consulted only without data loss).
        release_delay_ms: the failure memory's next lock-release delay (backoff) for this ledger.
        open_grace_ms: ``openLedgerRereplicationGracePeriod`` (for the blocked reason).
    """
    if plan.open_fragment or open_pending:
        return Conclusion(DEFER_OPEN, DEFER_OPEN, reason=f"open ledger: waiting {open_grace_ms} ms before fencing")
    rem_place = set(remaining_placement) if not remaining_data_loss else set()
    if not remaining_data_loss and rem_place <= set(out.placement_impossible):
        outcome = "replicated" if out.copied else "no-more-bookie" if rem_place else "nothing-to-do"
        return Conclusion(DONE, outcome, no_more_bookie=tuple(sorted(rem_place)))
    if not remaining_data_loss and any(isinstance(a, CopyFragment) for a in plan.actions):
        return Conclusion(DATA_LOSS_FIXED, DATA_LOSS_FIXED)
    if out.unrecoverable and not out.retriable:
        return Conclusion(UNRECOVERABLE, UNRECOVERABLE, reason="unrecoverable entries")
    reason = "; ".join(dict.fromkeys(out.retriable)) or "fragments still under-replicated after the pass"
    return Conclusion(RELEASE_LATER, RELEASE_LATER, delay_ms=release_delay_ms, reason=reason)


def classify_unreadable(unreadable: Iterable[Gap]) -> tuple[list[Gap], list[Gap]]:
    """Split runs of entries no replica served into ``(unrecoverable, transient)``.

    A run is unrecoverable when every replica answered with a reason in :data:`DEFINITIVE` (no entry,
    no ledger, corrupt copy, bookie not registered); anything else (a timeout, EIO, no answer recorded)
    may succeed later. O(runs), whatever the runs' length.
    """
    gone: list[Gap] = []
    rest: list[Gap] = []
    for g in unreadable:
        (gone if g.why and all(r in DEFINITIVE for r in g.why.values()) else rest).append(g)
    return gone, rest
