"""Copy one segment's entries to new bookies, then swap them into the ensemble (EDGE).

The one place where a fragment copy becomes a metadata change, used by the ReplicationWorker (data loss
and BP-54 placement moves), the admin ``recover`` and, through it, ``decommissionbookie``. Upstream
source: ``LedgerFragmentReplicator.replicate`` then ``updateEnsembleInfo`` (a read-modify-write of the
ledger metadata replacing the old bookie in that segment).

:meth:`SegmentReplicator.replicate` runs a :class:`~autorecovery.plan.targets.FragmentPlan` through the
:class:`~autorecovery.roles.copier.FragmentCopier` and, only when every entry was copied and verified,
CASes the ledger metadata. The CAS is guarded (each guard is a reason the swap is refused):

* the segment still exists (same first entry id) — an ensemble change or a concurrent repair may
  have replaced it;
* it is not the open last segment of an open ledger — the writer still adds to it;
* a member is swapped only if it is still the bookie the copy replaced (another worker or an
  operator may have moved it already);
* the new ensemble has no duplicate bookie;
* the update is a versioned CAS loop (``LedgerStore.update``): never a blind overwrite, and the
  ledger's metadata format version is kept (``formats.serialize``).

Nothing here decides *what* to copy: that is :mod:`autorecovery.plan` (pure).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

import structlog

from autorecovery.ledger.credentials import DEFAULT_CREDENTIALS, RecoveryCredentials, recovery_digest, recovery_master_key
from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.plan.targets import FragmentPlan
from autorecovery.roles.copier import FragmentCopier
from autorecovery.roles.copy_result import CopyResult, TargetWriteError
from autorecovery.zk.ledgers import LedgerStore

log = structlog.get_logger("autorecovery.replicator")

SWAPPED = "swapped"            # copied and the ensemble now names the new bookies
UNCHANGED = "unchanged"        # copied, but every member had already been replaced by someone else
TARGET_FAILED = "target-failed"  # a target refused a write (``bad_target``); nothing changed
ABORTED = "aborted"            # should_abort() said stop; nothing changed
INCOMPLETE = "incomplete"      # some entries could not be read (``copy.unreadable``); nothing changed
SEGMENT_CHANGED = "segment-changed"  # a CAS guard refused the swap (``detail``); the copy is wasted


@dataclass
class ReplicateResult:
    """What :meth:`SegmentReplicator.replicate` did.

    Attributes:
        status: one of :data:`SWAPPED`, :data:`UNCHANGED`, :data:`TARGET_FAILED`, :data:`ABORTED`,
            :data:`INCOMPLETE`, :data:`SEGMENT_CHANGED`.
        metadata: the ledger's metadata after the call (the new one when swapped, else the given one).
        copy: the copier's result (None when the copy raised :class:`TargetWriteError`).
        replaced: old bookie → new bookie actually swapped.
        detail: why nothing changed (empty when swapped).
        bad_target / cause: the target that refused a write and its error (:data:`TARGET_FAILED`).
        version: the metadata znode's version of ``metadata`` when the call wrote or read it (the
            :data:`SWAPPED` CAS, or the re-read of a lost race); None otherwise.
    """

    status: str
    metadata: LedgerMetadata
    copy: CopyResult | None = None
    replaced: dict[str, str] | None = None
    detail: str = ""
    bad_target: str | None = None
    cause: BaseException | None = None
    version: int | None = None


class _Refused(Exception):
    pass


def swap_members(cur: LedgerMetadata, seg_first: int, old_ensemble: tuple[str, ...],
                 replacements: dict[int, str]) -> tuple[LedgerMetadata, dict[str, str]] | None:
    """The guarded ensemble swap (PURE): ``cur`` with ``replacements`` (ensemble index → new bookie)
    applied to the segment starting at ``seg_first``, where the member is still ``old_ensemble``'s.

    Returns ``(new metadata, old bookie → new bookie actually swapped)``, or None when there is nothing
    left to swap.

    Raises:
        _Refused: the segment is gone, is the open last segment, or the swap would duplicate a bookie.
    """
    i = next((k for k, s in enumerate(cur.segments) if s.first_entry_id == seg_first), None)
    if i is None:
        raise _Refused(f"segment at {seg_first} is gone")
    if not cur.is_closed and i == len(cur.segments) - 1:
        raise _Refused(f"segment at {seg_first} is the open last segment")
    cur_ens = cur.segments[i].ensemble
    swap = {old_ensemble[j]: new for j, new in replacements.items()
            if cur_ens[j] == old_ensemble[j] and new != old_ensemble[j]}
    if not swap:
        return None
    out = cur.with_segment_replaced(seg_first, swap)
    if len(set(out.segments[i].ensemble)) != len(out.segments[i].ensemble):
        raise _Refused(f"replacement would duplicate a bookie in segment {seg_first}")
    return out, swap


class SegmentReplicator:
    """Copy plan → copier → guarded CAS.

    Args:
        store: ledger metadata store (the CAS).
        copier: the fragment copier (its throttles and stream caps are the caller's).
        credentials: ``digestType``/``passwd``: the digest and master key of a ledger whose metadata
            stores no password (format v1; :mod:`autorecovery.ledger.credentials`, upstream
            ``BookKeeperAdmin``'s administrative open); a ledger whose metadata has one uses its own.
    """

    def __init__(self, store: LedgerStore, copier: FragmentCopier, *,
                 credentials: RecoveryCredentials = DEFAULT_CREDENTIALS) -> None:
        self.store = store
        self.copier = copier
        self.credentials = credentials

    async def replicate(
        self,
        ledger_id: int,
        md: LedgerMetadata,
        seg_first: int,
        plan: FragmentPlan,
        *,
        registered: Callable[[], Collection[str]],
        skip_sources: Collection[str] = (),
        should_abort: Callable[[], str | None] = lambda: None,
        on_bytes: Callable[[int], None] = lambda n: None,
        version: int | None = None,
        listings: dict | None = None,
    ) -> ReplicateResult:
        """Copy the segment at ``seg_first`` of ``md`` as ``plan`` says and swap the targets in.

        Args:
            registered: current writable ∪ read-only bookies (sources that are not are skipped).
            skip_sources: bookies never read from (a lost bookie whose copies cannot be trusted).
            should_abort / on_bytes: passed to the copier (polled between entries / bytes written).
            version: the metadata znode's version ``md`` was read at, when the caller knows it: the CAS
                then starts from ``md`` instead of reading the metadata again (one ZooKeeper read less
                per fragment, issue 29); it is still a versioned CAS, so a change since that read is
                a BadVersion, re-read and the guards run again on the latest metadata.
            listings: what the segment's bookies store of the ledger, as the caller just asked them
                (passed to the copier: not asked again).

        Returns a :class:`ReplicateResult`; the metadata changes only when ``status`` is
        :data:`SWAPPED`. Errors other than a target's write failure (ZooKeeper, a bookie read the
        copier could not classify) propagate.
        """
        seg = next((s for s in md.segments if s.first_entry_id == seg_first), None)
        if seg is None:
            return ReplicateResult(SEGMENT_CHANGED, md, detail=f"segment at {seg_first} is gone")
        ensemble = tuple(seg.ensemble)
        try:
            res = await self.copier.copy(
                ledger_id=ledger_id, master_key=recovery_master_key(md, self.credentials), ensemble=ensemble,
                write_quorum=md.write_quorum, plan=plan, registered=registered, skip_sources=skip_sources,
                should_abort=should_abort, on_bytes=on_bytes, digest=recovery_digest(md, self.credentials),
                # a closed ledger's whole payload bounds what any copy of it reads (small ones take no
                # cluster-wide stream slots: FragmentCopier.SLOTLESS_COPY_BYTES)
                estimated_bytes=md.length if md.is_closed else None, listings=listings)
        except TargetWriteError as exc:
            return ReplicateResult(TARGET_FAILED, md, detail=str(exc), bad_target=exc.bookie_id, cause=exc.cause)
        if res.aborted:
            return ReplicateResult(ABORTED, md, res, detail=f"copy aborted: {res.aborted}")
        if not res.complete:
            return ReplicateResult(INCOMPLETE, md, res, detail=f"{res.unreadable_count()} entries could not be read")
        repl = dict(plan.replacements)
        applied: list[dict[str, str]] = [{}]  # what the last run of the CAS loop swapped

        def transform(cur: LedgerMetadata) -> LedgerMetadata | None:
            res = swap_members(cur, seg_first, ensemble, repl)
            applied[0] = res[1] if res is not None else {}
            return res[0] if res is not None else None

        try:
            new_md, new_version = await self.store.update(
                ledger_id, transform, current=(md, version) if version is not None else None)
        except _Refused as exc:
            return ReplicateResult(SEGMENT_CHANGED, md, res, detail=str(exc))
        if not applied[0]:
            return ReplicateResult(UNCHANGED, new_md, res, replaced={}, detail="members already replaced",
                                   version=new_version)
        # DEBUG: the worker's one INFO line per pass names the swap (issue 29: log lines per ledger)
        log.debug("fragment replicated", ledger_id=ledger_id, segment_first_entry_id=seg_first, replaced=applied[0],
                  entries=res.entries_read, bytes=res.bytes_written)
        return ReplicateResult(SWAPPED, new_md, res, replaced=applied[0], version=new_version)
