"""What a live drain (BP-56) of one bookie moves, and where (PURE).

BP-56 (bookkeeper#3456/#3457) asks for draining a *running* bookie: every ledger segment that names it
gets another member, copied while the bookie still serves reads, before the bookie is stopped and
decommissioned with nothing left to copy. Upstream never shipped it; ``decommissionbookie`` needs the
bookie stopped first, which leaves each of its fragments one copy short for the whole copy.

:func:`plan_drain` decides, from ledger metadata and the current membership only (no I/O):

* every segment of a **closed** ledger whose ensemble names the bookie is a :class:`SegmentMove`: the
  replacement comes from the placement policy's ``replace_bookie`` (the same call a lost bookie's
  fragment gets, through :func:`~autorecovery.plan.targets.choose_replacements`), the drained bookie
  and read-only bookies excluded, and targets already chosen for the same ledger excluded too;
* a replacement that would make an adhering ensemble fail the policy (``is_ensemble_adhering`` →
  ``FAIL``), or no replacement at all, is a **blocker** naming the ledger and why; a drain with any
  blocker is refused as a whole (the drained bookie is the last one that keeps those ledgers
  adhering: add a bookie in its fault domain first);
* an **open** ledger naming the bookie is listed as waiting: its writer still adds to the last
  segment, so it is moved once the writer closes it (Pulsar rolls ledgers; the job re-plans).

Bytes are the entries the bookie's ensemble index stores in that segment times the ledger's average
entry size (``length / (lastEntryId + 1)``); the ETA is bytes over a rate in bytes/s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from autorecovery.errors import NotEnoughBookiesError
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.ledger.striping import count_on_index
from autorecovery.plan.targets import ReplaceFn, choose_replacements

#: Rate (bytes/s) a dry run's ETA assumes when no throttle is configured (``replicationRateByBytes``
#: <= 0): a conservative single-stream copy rate between two bookies on one network.
ASSUMED_RATE_BYTES_PER_S = 50 * 1024 * 1024

AdheringFn = Callable[[list[str], int, int], Any]  # (ensemble, WQ, AQ) -> Adherence (FAIL == 0)


@dataclass(frozen=True)
class SegmentMove:
    """One closed segment to move off the drained bookie.

    Attributes:
        ledger_id: the ledger. first_entry_id / last_entry_id: the segment's entry range (inclusive;
            last < first for an empty segment). index: the drained bookie's ensemble index.
        target: the replacement bookie id. bytes: estimated bytes to copy.
        ensemble: the segment's ensemble now; new_ensemble: after the move.
    """

    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    index: int
    target: str
    bytes: int
    ensemble: tuple[str, ...]
    new_ensemble: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"ledger": self.ledger_id, "first_entry": self.first_entry_id, "last_entry": self.last_entry_id,
                "index": self.index, "target": self.target, "bytes": self.bytes,
                "ensemble": list(self.ensemble), "new_ensemble": list(self.new_ensemble)}


@dataclass
class DrainPlan:
    """The whole drain: moves, open ledgers waiting for their writer, blockers.

    Attributes:
        bookie_id: the drained bookie. moves: every closed segment to move, ledger id then entry order.
        waiting_open: ids of open ledgers naming the bookie (moved once closed).
        blocked: ledger id → why no placement-adhering replacement exists.
    """

    bookie_id: str
    moves: list[SegmentMove] = field(default_factory=list)
    waiting_open: list[int] = field(default_factory=list)
    blocked: dict[int, str] = field(default_factory=dict)

    @property
    def bytes_total(self) -> int:
        return sum(m.bytes for m in self.moves)

    @property
    def ledgers(self) -> list[int]:
        """Ledger ids with at least one move, ascending."""
        return sorted({m.ledger_id for m in self.moves})

    @property
    def done(self) -> bool:
        """Nothing names the bookie any more: it can be stopped and decommissioned with nothing to copy."""
        return not self.moves and not self.waiting_open and not self.blocked

    def eta_s(self, rate_bytes_per_s: float) -> float | None:
        """Seconds to copy :attr:`bytes_total` at ``rate_bytes_per_s``; None when the rate is not > 0."""
        return self.bytes_total / rate_bytes_per_s if rate_bytes_per_s > 0 else None

    def as_dict(self, rate_bytes_per_s: float = 0.0) -> dict[str, Any]:
        return {"bookie_id": self.bookie_id, "moves": [m.as_dict() for m in self.moves],
                "ledgers": len(self.ledgers), "segments": len(self.moves), "bytes": self.bytes_total,
                "eta_s": self.eta_s(rate_bytes_per_s), "waiting_open": list(self.waiting_open),
                "blocked": {str(k): v for k, v in sorted(self.blocked.items())}, "done": self.done}


def segment_bytes(md: LedgerMetadata, seg_index: int, bookie_index: int) -> int:
    """Estimated bytes the member at ``bookie_index`` of segment ``seg_index`` stores (0 for an open or
    empty ledger, whose length is not known)."""
    if not md.is_closed or md.last_entry_id < 0 or md.length <= 0:
        return 0
    first = md.segments[seg_index].first_entry_id
    last = md.segment_end(seg_index)
    if last < first:
        return 0
    avg = md.length / (md.last_entry_id + 1)
    return int(round(count_on_index(first, last, bookie_index, md.ensemble_size, md.write_quorum) * avg))


def plan_ledger(ledger_id: int, md: LedgerMetadata, bookie_id: str, *, replace_bookie: ReplaceFn,
                is_adhering: AdheringFn | None, writable: Collection[str], readonly: Collection[str]
                ) -> tuple[list[SegmentMove], str | None]:
    """Moves for one closed ledger naming ``bookie_id``, or ``([], why)`` when one segment blocks.

    Targets chosen for earlier segments of the same ledger are not reused for later ones (spreads the
    copy; the policy decides whether that is possible)."""
    moves: list[SegmentMove] = []
    used: set[str] = set()
    for i, seg in enumerate(md.segments):
        if bookie_id not in seg.ensemble:
            continue
        idx = seg.ensemble.index(bookie_id)
        spare = set(writable) - {bookie_id} - set(readonly)
        repl: dict[int, str] = {}
        why = ""
        for exclude in ({bookie_id} | used, {bookie_id}):  # spread over targets when the policy can
            try:
                repl = choose_replacements(
                    ensemble=seg.ensemble, bad_indexes=[idx], replace_bookie=replace_bookie,
                    ensemble_size=md.ensemble_size, write_quorum=md.write_quorum, ack_quorum=md.ack_quorum,
                    exclude=exclude, readonly=readonly, writable=spare)
                break
            except NotEnoughBookiesError as exc:
                why = str(exc)
        if not repl:
            return [], f"segment {seg.first_entry_id}: no replacement for {bookie_id}: {why}"
        target = repl.get(idx)
        if target is None or target == bookie_id:
            return [], f"segment {seg.first_entry_id}: no replacement for {bookie_id} outside the ensemble"
        new_ens = list(seg.ensemble)
        new_ens[idx] = target
        if is_adhering is not None:
            before = int(is_adhering(list(seg.ensemble), md.write_quorum, md.ack_quorum))
            after = int(is_adhering(new_ens, md.write_quorum, md.ack_quorum))
            if after == 0 and before != 0:
                return [], (f"segment {seg.first_entry_id}: {bookie_id} is the last bookie that keeps ensemble "
                            f"{list(seg.ensemble)} adhering to the placement policy (the best replacement, "
                            f"{target}, fails it); add a bookie in its fault domain")
        used.add(target)
        moves.append(SegmentMove(ledger_id, seg.first_entry_id, md.segment_end(i), idx, target,
                                 segment_bytes(md, i, idx), tuple(seg.ensemble), tuple(new_ens)))
    return moves, None


def plan_drain(bookie_id: str, ledgers: Mapping[int, LedgerMetadata], *, replace_bookie: ReplaceFn,
               is_adhering: AdheringFn | None, writable: Collection[str], readonly: Collection[str] = ()
               ) -> DrainPlan:
    """The drain plan of ``bookie_id`` over ``ledgers`` (id → metadata; ledgers not naming the bookie
    are ignored). See the module docstring for the rules; never raises for a ledger that cannot be
    moved (it is a blocker)."""
    plan = DrainPlan(bookie_id)
    for lid in sorted(ledgers):
        md = ledgers[lid]
        if bookie_id not in md.all_bookies():
            continue
        if not md.is_closed:
            plan.waiting_open.append(lid)
            continue
        moves, why = plan_ledger(lid, md, bookie_id, replace_bookie=replace_bookie, is_adhering=is_adhering,
                                 writable=writable, readonly=readonly)
        if why is not None:
            plan.blocked[lid] = why
        plan.moves.extend(moves)
    return plan
