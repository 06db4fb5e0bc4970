"""What a fragment copy returns and how it fails (EDGE): :class:`CopyResult`, :class:`TargetWriteError`.

Upstream source: ``LedgerFragmentReplicator`` (a failed write ends the fragment's copy); the result's
unreadable runs with per-replica reasons are ours (issue 25).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autorecovery.plan import entry_runs
from autorecovery.plan.entry_runs import Gap
from autorecovery.plan.pass_plan import DEFINITIVE

#: At most this many corrupt (entry, bookie) pairs are listed in a :class:`CopyResult`.
MAX_CORRUPT_LISTED = 1000


class TargetWriteError(Exception):
    """A target bookie refused or failed a write; the fragment copy is abandoned.

    Attributes: bookie_id, cause (the BookieError).
    """

    def __init__(self, bookie_id: str, cause: BaseException) -> None:
        self.bookie_id = bookie_id
        self.cause = cause
        super().__init__(f"write to target {bookie_id} failed: {cause}")


@dataclass
class CopyResult:
    """Outcome of one fragment copy.

    Attributes:
        entries_read / bytes_read: verified entries read from sources.
        entries_written / bytes_written: (entry, target) writes the targets confirmed.
        unreadable: entries no replica could serve, as :class:`~autorecovery.plan.entry_runs.Gap` runs
            (one residue each) with, per replica, why not; O(reason changes), never one item per entry.
        corrupt: (entry id, bookie) pairs whose copy failed the digest check (never written; the first
            :data:`MAX_CORRUPT_LISTED` are listed, the metric counts them all).
        aborted: why the copy stopped early, or None.
    """

    entries_read: int = 0
    bytes_read: int = 0
    entries_written: int = 0
    bytes_written: int = 0
    unreadable: list[Gap] = field(default_factory=list)
    corrupt: list[tuple[int, str]] = field(default_factory=list)
    aborted: str | None = None

    @property
    def complete(self) -> bool:
        return not self.unreadable and self.aborted is None

    def unreadable_count(self) -> int:
        """How many entries no replica could serve (O(runs))."""
        return entry_runs.count(self.unreadable)

    def unrecoverable(self) -> list[Gap]:
        """The unreadable runs for which every replica definitively has no valid copy (see :data:`DEFINITIVE`)."""
        return [g for g in self.unreadable if g.why and all(r in DEFINITIVE for r in g.why.values())]


class _Aborted(Exception):
    pass
