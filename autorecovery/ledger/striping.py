"""Round-robin striping: which ensemble index stores which entry (PURE, the single home of the rule).

Upstream ``RoundRobinDistributionSchedule``: in a segment whose ensemble has size E and whose ledger
has write quorum WQ, entry ``e`` is written to the WQ ensemble indexes ``(e + k) mod E`` for
``k = 0 .. WQ-1`` (``getWriteSet``). Equivalently, ensemble index ``i`` (``0 <= i < E``) stores ``e``
iff ``(i - e) mod E < WQ`` (``hasEntry``), and the write set depends only on the *residue*
``e mod E``: index ``i`` stores exactly the residues of the cyclic arc ``i-WQ+1 .. i (mod E)``. On the
number line the entries stored on ``i`` are runs of WQ consecutive ids ``[i-WQ+1 + mE, i + mE]``.

With WQ == E every index stores every entry. WQ > E is invalid ledger metadata (LedgerMetadata refuses
it), but :func:`write_set` keeps upstream's behaviour for it (indexes repeat) because the placement
adherence checks call it with short ensembles; every other function treats WQ >= E as "all".

Every function here is O(1) or O(WQ) in the length of the range, except the iterators, which yield
lazily: a ledger with ``lastEntryId`` = 2**40 never materialises a list.

Difference from upstream: ``hasEntry`` casts ``entryId + w`` to a 32-bit int before the modulus, so it
can answer wrongly for entry ids >= 2**31; Python integers do not overflow, so these are exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Protocol

__all__ = [
    "write_set",
    "index_stores",
    "residues_on_index",
    "residues_in_range",
    "count_with_residue",
    "entries_with_residue",
    "runs_on_index",
    "entries_on_index",
    "first_last_on_index",
    "count_on_index",
    "segment_holds_entries",
    "bookie_holds_entries",
    "StripedLedger",
]


class StripedSegment(Protocol):
    """What striping reads of a segment (``ledger.metadata.Segment`` has it)."""

    @property
    def first_entry_id(self) -> int: ...

    @property
    def ensemble(self) -> Sequence[str]: ...


class StripedLedger(Protocol):
    """What striping reads of a ledger's metadata (``ledger.metadata.LedgerMetadata`` has it).

    A structural type, so this module needs no import of ``ledger.metadata`` (which imports this one).
    """

    @property
    def ensemble_size(self) -> int: ...

    @property
    def write_quorum(self) -> int: ...

    @property
    def segments(self) -> Sequence[StripedSegment]: ...

    @property
    def is_closed(self) -> bool: ...

    def segment_end(self, index: int, last_entry_id: int | None = None) -> int: ...


def _check(ensemble_size: int, write_quorum: int) -> None:
    if ensemble_size < 1 or write_quorum < 1:
        raise ValueError(f"bad striping schedule E={ensemble_size} WQ={write_quorum}: both must be >= 1")


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Ensemble indexes storing ``entry_id``, in write order: ``[(e + k) mod E for k < WQ]``.

    Upstream ``RoundRobinDistributionSchedule.getWriteSet``. With WQ > E (never valid ledger metadata;
    only the placement adherence checks of short lists) indexes repeat, as upstream.

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    _check(ensemble_size, write_quorum)
    start = entry_id % ensemble_size
    return [(start + k) % ensemble_size for k in range(write_quorum)]


def index_stores(index: int, entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """Whether ensemble index ``index`` stores ``entry_id``: ``0 <= i < E`` and ``(i - e) mod E < WQ``.

    Upstream ``RoundRobinDistributionSchedule.hasEntry`` (an index outside the ensemble stores
    nothing; WQ >= E: every index in the ensemble stores every entry).

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    _check(ensemble_size, write_quorum)
    return 0 <= index < ensemble_size and (index - entry_id) % ensemble_size < write_quorum


def residues_on_index(index: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """The residues ``e mod E`` whose entries ``index`` stores, ascending (the arc ``i-WQ+1 .. i``).

    These are also the start indexes of the write sets that contain ``index`` (upstream
    ``RRTopologyAwareCoverageEnsemble`` walks them). Empty for an index outside ``[0, E)``.

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    _check(ensemble_size, write_quorum)
    if not 0 <= index < ensemble_size:
        return []
    return sorted({(index - k) % ensemble_size for k in range(min(write_quorum, ensemble_size))})


def residues_in_range(first: int, last: int, ensemble_size: int) -> range | list[int]:
    """The distinct residues ``e mod E`` of the ids in ``[first, last]`` (empty when ``last < first``).

    ``range(E)`` once the range spans E ids, else at most E-1 residues in id order. O(min(n, E)).
    """
    n = last - first + 1
    if n <= 0:
        return []
    if n >= ensemble_size:
        return range(ensemble_size)
    return [e % ensemble_size for e in range(first, last + 1)]


def count_with_residue(first: int, last: int, residue: int, ensemble_size: int) -> int:
    """How many ids in ``[first, last]`` are ``≡ residue (mod E)``; 0 when ``last < first``. O(1)."""
    start = first + ((residue - first) % ensemble_size)
    return 0 if start > last else (last - start) // ensemble_size + 1


def entries_with_residue(first: int, last: int, residue: int, ensemble_size: int) -> range:
    """The ids in ``[first, last]`` that are ``≡ residue (mod E)``, as a lazy ascending range."""
    return range(first + ((residue - first) % ensemble_size), last + 1, ensemble_size)


def runs_on_index(first: int, last: int, index: int, ensemble_size: int, write_quorum: int) -> Iterator[range]:
    """The entries of ``[first, last]`` stored on ``index`` as ascending, disjoint, non-empty runs.

    Each run is a ``range`` of at most WQ consecutive ids (one run ``[first, last]`` when WQ >= E);
    runs are yielded lazily, one per E ids.

    Raises:
        ValueError: E < 1 or WQ < 1 (at the call, not at the first ``next``).
    """
    _check(ensemble_size, write_quorum)
    return _runs(first, last, index, ensemble_size, write_quorum)


def _runs(first: int, last: int, index: int, ensemble_size: int, write_quorum: int) -> Iterator[range]:
    if last < first or not 0 <= index < ensemble_size:
        return
    if write_quorum >= ensemble_size:
        yield range(first, last + 1)
        return
    # runs are [index - WQ + 1 + m*E, index + m*E]; start with the first run ending at or after `first`
    run_end = index + ((first - index + ensemble_size - 1) // ensemble_size) * ensemble_size
    while True:
        lo = max(first, run_end - write_quorum + 1)
        if lo > last:
            return
        yield range(lo, min(last, run_end) + 1)
        run_end += ensemble_size


def entries_on_index(first: int, last: int, index: int, ensemble_size: int, write_quorum: int) -> Iterator[int]:
    """The entry ids of ``[first, last]`` stored on ``index``, ascending, yielded lazily.

    Raises:
        ValueError: E < 1 or WQ < 1 (at the call).
    """
    return itertools.chain.from_iterable(runs_on_index(first, last, index, ensemble_size, write_quorum))


def first_last_on_index(first: int, last: int, index: int, ensemble_size: int, write_quorum: int) -> tuple[int, int]:
    """First and last entry ids of ``[first, last]`` stored on ``index``; ``(-1, -1)`` when none. O(1).

    Upstream ``LedgerFragment.getFirstStoredEntryId`` / ``getLastStoredEntryId`` (which scan up to E
    ids from each end with ``hasEntry``; here the next run start / previous run end is computed).

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    _check(ensemble_size, write_quorum)
    if last < first or not 0 <= index < ensemble_size:
        return -1, -1
    if write_quorum >= ensemble_size:
        return first, last
    lo = first if (index - first) % ensemble_size < write_quorum else \
        first + ((index - write_quorum + 1 - first) % ensemble_size)
    if lo > last:
        return -1, -1
    hi = last - ((last - index) % ensemble_size) if (index - last) % ensemble_size >= write_quorum else last
    return lo, hi


def _stored_below(x: int, index: int, ensemble_size: int, write_quorum: int) -> int:
    """How many ids ``e`` with ``0 <= e < x`` (x >= 0) index ``index`` stores (0 <= index < E, WQ < E)."""
    full, rem = divmod(x, ensemble_size)
    a = index - write_quorum + 1  # the arc a .. index (mod E); a > -E
    part = max(0, min(index, rem - 1) - max(a, 0) + 1)
    if a < 0:
        part += max(0, (rem - 1) - (a + ensemble_size) + 1)
    return full * write_quorum + part


def count_on_index(first: int, last: int, index: int, ensemble_size: int, write_quorum: int) -> int:
    """How many entry ids of ``[first, last]`` index ``index`` stores; 0 when ``last < first``. O(1).

    Raises:
        ValueError: E < 1 or WQ < 1.
    """
    _check(ensemble_size, write_quorum)
    if last < first or not 0 <= index < ensemble_size:
        return 0
    if write_quorum >= ensemble_size:
        return last - first + 1
    # shift by a multiple of E so both ends are >= 0 (striping is periodic in E)
    shift = 0 if first >= 0 else ((-first) // ensemble_size + 1) * ensemble_size
    return (_stored_below(last + 1 + shift, index, ensemble_size, write_quorum)
            - _stored_below(first + shift, index, ensemble_size, write_quorum))


def segment_holds_entries(md: StripedLedger, segment_index: int, bookie_index: int) -> bool:
    """Whether ensemble index ``bookie_index`` of segment ``segment_index`` stores (or may store) ≥1 entry.

    The last segment of a ledger that is not CLOSED always counts: entries may still arrive, and
    ``lastEntryId`` means nothing yet (upstream BOOKKEEPER-237/325). Otherwise the segment's range
    (``LedgerMetadata.segment_end``: the last segment ends at ``lastEntryId``) must hold an entry striped to the index (upstream
    ``BookKeeperAdmin.areEntriesOfSegmentStoredInTheBookie``, via :func:`first_last_on_index`). An empty
    segment holds nothing, even with E == WQ (upstream answers true there for a non-last segment).
    """
    if segment_index == len(md.segments) - 1 and not md.is_closed:
        return True
    first, last = md.segments[segment_index].first_entry_id, md.segment_end(segment_index)
    return first_last_on_index(first, last, bookie_index, md.ensemble_size, md.write_quorum)[0] != -1


def bookie_holds_entries(md: StripedLedger, bookie: str) -> bool:
    """Whether ``bookie`` stores (or may store) ≥1 entry of the ledger in any segment, at any index it
    holds there (see :func:`segment_holds_entries`; upstream
    ``BookKeeperAdmin.areEntriesOfLedgerStoredInTheBookie``)."""
    for si, seg in enumerate(md.segments):
        for bi, b in enumerate(seg.ensemble):
            if b == bookie and segment_holds_entries(md, si, bi):
                return True
    return False
