"""In-memory bookie → ledger index, kept current incrementally (PURE).

Upstream ``BookieLedgerIndexer`` rebuilds ``bookie → ledgers`` from *every* ledger's metadata on every
audit: O(ledgers) ZooKeeper reads per bookie loss (thousands of outstanding reads killed sessions,
#2802). Better than upstream: this index is built once when the auditor is elected and then updated
ledger by ledger from ZooKeeper watches (``roles.auditor.LedgerTreeWatcher``), so the ledgers of a lost
bookie are known with **no metadata reads**; a slow full reconcile (:meth:`BookieLedgerIndex.reconcile`)
checks it against ZooKeeper.

Precise marking, also better than upstream (which marks every ledger whose ensembles list the lost
bookie): :func:`holds_entries` (the rule is :func:`autorecovery.ledger.striping.segment_holds_entries`)
says whether a bookie index of a segment stores any entry. A CLOSED ledger's segment whose entry range
puts nothing on that index (an empty segment, or fewer entries than E−WQ+1 with E > WQ) is not marked;
the last segment of a ledger that is not CLOSED always counts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from autorecovery.ledger.metadata import LedgerMetadata, Segment
from autorecovery.ledger.striping import bookie_holds_entries, segment_holds_entries


#: Whether ensemble index ``bookie_index`` of segment ``segment_index`` stores ≥1 entry (the last
#: segment of a ledger that is not CLOSED always counts); the rule is
#: :func:`autorecovery.ledger.striping.segment_holds_entries`.
holds_entries = segment_holds_entries


@dataclass
class ReconcileReport:
    """Differences found by a full reconcile (all already applied to the index)."""

    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)

    @property
    def mismatches(self) -> int:
        return len(self.added) + len(self.removed) + len(self.changed)


_MASK64 = (1 << 64) - 1


def mix_id(ledger_id: int) -> int:
    """A 64-bit mix of a ledger id (splitmix64's finaliser), so that sums of mixed ids differ when the
    sets of ids differ (with overwhelming probability), unlike sums of the ids themselves."""
    z = (ledger_id + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


@dataclass
class IdDigest:
    """Order-independent digest of a set of ledger ids: their count and the sum (mod 2^64) of
    :func:`mix_id` of each. Adding and removing an id are O(1), so the index keeps its digest current
    and a consistency check compares it with a digest streamed from a listing of the ledger tree
    without holding a second set of 1M ids (issue 9)."""

    count: int = 0
    total: int = 0

    def add(self, ledger_id: int) -> None:
        self.count += 1
        self.total = (self.total + mix_id(ledger_id)) & _MASK64

    def discard(self, ledger_id: int) -> None:
        self.count -= 1
        self.total = (self.total - mix_id(ledger_id)) & _MASK64

    @classmethod
    def of(cls, ids: Iterable[int]) -> "IdDigest":
        d = cls()
        for lid in ids:
            d.add(lid)
        return d


class BookieLedgerIndex:
    """ledger id → metadata, and bookie id → ids of ledgers whose ensembles list it.

    Bookie ids and segments are interned, so 100k ledgers over a few dozen bookies share their
    strings and ensembles. :attr:`digest` (:class:`IdDigest`) follows the indexed ids.
    """

    def __init__(self) -> None:
        self._md: dict[int, LedgerMetadata] = {}
        self._by_bookie: dict[str, set[int]] = {}
        self._segments: dict[Segment, Segment] = {}
        self.updates = 0
        self.digest = IdDigest()

    # -- mutation ---------------------------------------------------------------------------
    def _intern(self, md: LedgerMetadata) -> LedgerMetadata:
        segs = []
        for s in md.segments:
            got = self._segments.get(s)
            if got is None:
                got = Segment(s.first_entry_id, tuple(sys.intern(b) for b in s.ensemble))
                self._segments[got] = got
            segs.append(got)
        # drop the password: the auditor never needs it, and it is per-ledger memory
        return replace(md, segments=tuple(segs), password=b"")

    def put(self, ledger_id: int, md: LedgerMetadata) -> bool:
        """Insert or replace a ledger; returns True when the index changed."""
        old = self._md.get(ledger_id)
        md = self._intern(md)
        if old is not None and _same(old, md):
            return False
        old_bookies = old.all_bookies() if old is not None else set()
        new_bookies = md.all_bookies()
        for b in old_bookies - new_bookies:
            s = self._by_bookie.get(b)
            if s is not None:
                s.discard(ledger_id)
                if not s:
                    del self._by_bookie[b]
        for b in new_bookies - old_bookies:
            self._by_bookie.setdefault(b, set()).add(ledger_id)
        if old is None:
            self.digest.add(ledger_id)
        self._md[ledger_id] = md
        self.updates += 1
        return True

    def remove(self, ledger_id: int) -> bool:
        """Forget a deleted ledger; returns True when it was indexed."""
        old = self._md.pop(ledger_id, None)
        if old is None:
            return False
        self.digest.discard(ledger_id)
        for b in old.all_bookies():
            s = self._by_bookie.get(b)
            if s is not None:
                s.discard(ledger_id)
                if not s:
                    del self._by_bookie[b]
        self.updates += 1
        return True

    def clear(self) -> None:
        self._md.clear()
        self._by_bookie.clear()
        self._segments.clear()
        self.digest = IdDigest()

    # -- queries ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._md)

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._md

    def get(self, ledger_id: int) -> LedgerMetadata | None:
        return self._md.get(ledger_id)

    def ledger_ids(self) -> list[int]:
        return sorted(self._md)

    def items(self) -> list[tuple[int, LedgerMetadata]]:
        """A sorted snapshot of (ledger id, metadata) pairs."""
        return sorted(self._md.items())

    def bookies(self) -> set[str]:
        """Every bookie that appears in some ensemble."""
        return set(self._by_bookie)

    def ledgers_of(self, bookie: str) -> frozenset[int]:
        """Ids of ledgers whose ensembles list ``bookie`` (upstream's index, imprecise)."""
        return frozenset(self._by_bookie.get(bookie, ()))

    def ledgers_to_mark(self, lost: Iterable[str]) -> dict[int, list[str]]:
        """ledger id → lost bookies that hold entries of it (precise marking; no metadata reads)."""
        out: dict[int, list[str]] = {}
        for b in sorted(set(lost)):
            for lid in self._by_bookie.get(b, ()):
                if bookie_holds_entries(self._md[lid], b):
                    out.setdefault(lid, []).append(b)
        return out

    def total_length(self, ledger_ids: Iterable[int]) -> int:
        """Sum of metadata ``length`` (bytes) of the given ledgers (UNDER_REPLICATED_LEDGERS_TOTAL_SIZE)."""
        return sum(self._md[lid].length for lid in ledger_ids if lid in self._md)

    # -- reconcile --------------------------------------------------------------------------
    def diff(self, scan: Mapping[int, LedgerMetadata]) -> ReconcileReport:
        """Differences between the index and a full scan (``scan`` = ledger id → metadata)."""
        rep = ReconcileReport()
        for lid, md in scan.items():
            have = self._md.get(lid)
            if have is None:
                rep.added.append(lid)
            elif not _same(have, md):
                rep.changed.append(lid)
        rep.removed = [lid for lid in self._md if lid not in scan]
        rep.added.sort()
        rep.changed.sort()
        rep.removed.sort()
        return rep

    def reconcile(self, scan: Mapping[int, LedgerMetadata]) -> ReconcileReport:
        """Make the index equal to ``scan`` and report what differed."""
        rep = self.diff(scan)
        for lid in rep.added + rep.changed:
            self.put(lid, scan[lid])
        for lid in rep.removed:
            self.remove(lid)
        return rep


def _same(a: LedgerMetadata, b: LedgerMetadata) -> bool:
    return (a.state == b.state and a.last_entry_id == b.last_entry_id and a.length == b.length
            and a.ensemble_size == b.ensemble_size and a.write_quorum == b.write_quorum
            and a.ack_quorum == b.ack_quorum and a.segments == b.segments)
