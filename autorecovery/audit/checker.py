"""Ledger fragments and their verdicts: the decision half of upstream's ``LedgerChecker`` (PURE).

The edge half (``autorecovery.roles.checker.LedgerChecker``) sends the reads this module plans and
feeds the answers back. Source: upstream ``LedgerChecker.checkLedger`` / ``verifyLedgerFragment`` and
``LedgerFragment`` (master).

* Fragments: one per segment, ``[start_i, start_{i+1} - 1]``; the last segment runs to ``lac``
  (closed ledger: ``lastEntryId``; open ledger: the LAC read from bookies, raised to the segment start).
  When the last segment would hold exactly one entry (``start == last``) the entry may never have been
  written: :func:`fragments_of` returns it as a *probe* and the edge keeps it only if some bookie of
  its write set answers something other than NoSuchEntry/NoSuchLedger (:func:`probe_says_exists`).
* Per fragment and ensemble index: the first and last entry that index stores; an index that stores
  nothing in the fragment is bad only when its bookie is unavailable; otherwise the planned entries
  (:func:`entries_to_read`) are read and any failed read or digest mismatch makes the index bad.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import entries_on_index, first_last_on_index, index_stores, write_set

#: Bookie answers that prove an entry absent (the probe of a one-entry last fragment).
ABSENT_STATUSES = frozenset({"ENOENTRY", "ENOLEDGER"})


@dataclass(frozen=True)
class Fragment:
    """Entries ``first_entry_id..last_entry_id`` of the segment starting at ``segment_first_entry_id``.

    ``last_entry_id < first_entry_id`` describes an empty fragment (e.g. a closed empty ledger).
    ``closed`` follows upstream LedgerFragment.isClosed (only closed fragments may be copied).
    """

    first_entry_id: int
    last_entry_id: int
    segment_first_entry_id: int
    ensemble: tuple[str, ...]
    ensemble_size: int
    write_quorum: int
    closed: bool

    def stored_range(self, index: int) -> tuple[int, int]:
        """First and last entry stored on ``index`` inside the fragment; ``(-1, -1)`` when none."""
        return first_last_on_index(self.first_entry_id, self.last_entry_id, index, self.ensemble_size, self.write_quorum)


@dataclass(frozen=True)
class BadFragment:
    """A fragment with at least one bad ensemble index (upstream: the subset fragment of bad indexes).

    Attributes:
        first_entry_id, last_entry_id: the fragment's range (inclusive).
        segment_first_entry_id: key of the segment whose ensemble must be fixed.
        bad_indexes: ensemble indexes that failed; bad_bookies: their bookie ids.
        closed: the fragment may be copied (see :class:`Fragment`).
        reason: ``"DATA_LOSS"`` (upstream ReplicateType.DATA_LOSS).
    """

    first_entry_id: int
    last_entry_id: int
    segment_first_entry_id: int
    bad_indexes: frozenset[int]
    bad_bookies: frozenset[str]
    closed: bool
    reason: str = "DATA_LOSS"


def fragments_of(md: LedgerMetadata, lac: int | None = None) -> tuple[list[Fragment], Fragment | None]:
    """Fragments to check, and the last fragment when it needs a probe first (else None).

    Args:
        md: ledger metadata.
        lac: last add confirmed for an open ledger (ignored when closed; -1 when unknown).
    """
    closed = md.state == LedgerState.CLOSED
    last = md.last_entry_id if closed else (-1 if lac is None else lac)
    segs = md.segments
    last_start = segs[-1].first_entry_id
    out: list[Fragment] = []
    for i in range(len(segs) - 1):
        frag_closed = closed or last >= segs[-1].first_entry_id - 1
        out.append(Fragment(segs[i].first_entry_id, segs[i + 1].first_entry_id - 1, segs[i].first_entry_id,
                            segs[i].ensemble, md.ensemble_size, md.write_quorum, frag_closed))
    end = last
    if not closed and end < last_start:
        end = last_start
    tail = Fragment(last_start, end, last_start, segs[-1].ensemble, md.ensemble_size, md.write_quorum, closed)
    if end == last_start:
        return out, tail
    out.append(tail)
    return out, None


def probe_entry(frag: Fragment) -> tuple[int, list[int]]:
    """The entry to probe and the ensemble indexes of its write set."""
    e = frag.first_entry_id
    return e, write_set(e, frag.ensemble_size, frag.write_quorum)


def probe_known_without_reads(frag: Fragment, available: Collection[str],
                              proven: Collection[tuple[int, str]] = ()) -> bool:
    """True when the probe of ``frag`` (see :func:`probe_entry`) says "may exist" without a read: a member
    of the entry's write set is not registered (upstream sends it the read, gets an error, and
    ``EntryExistsCallback`` counts an error as "may exist"), or holds the entry as ``proven``
    ``(segment first entry id, bookie id)`` pairs say (issue 29: the probe of every one-entry ledger of a
    lost bookie cost a registration lookup and a connection attempt to it)."""
    _e, indexes = probe_entry(frag)
    return any(frag.ensemble[i] not in available or (frag.segment_first_entry_id, frag.ensemble[i]) in proven
               for i in indexes)


def probe_says_exists(statuses: Iterable[str]) -> bool:
    """True when any answer is not NoSuchEntry/NoSuchLedger (errors and timeouts count: the entry
    *may* exist, so the fragment is checked, as upstream's EntryExistsCallback)."""
    return any(s not in ABSENT_STATUSES for s in statuses)


def entries_to_read(first_b: int, last_b: int, index: int, ensemble_size: int, write_quorum: int,
                    percentage: int = 0, rng: random.Random | None = None) -> Iterator[int]:
    """Entries of ``[first_b, last_b]`` to read from ensemble index ``index``, ascending, yielded lazily
    (upstream verifyLedgerFragment sampling).

    ``percentage`` 0 → first and last only; otherwise ``n = len·pct/100`` entries, one random stored
    entry per bucket of ``len/n``, always with first and last; ``n ≥ len`` → every stored entry.
    O(WQ + bucket) memory whatever the range's length (a fragment may claim 2**62 entries; the caller
    stops at the first failed read).
    """
    if first_b < 0:
        return iter(())
    if first_b == last_b:
        return iter((first_b,))
    length = last_b - first_b + 1
    n = length * percentage // 100
    if n >= length:
        return entries_on_index(first_b, last_b, index, ensemble_size, write_quorum)
    if n <= 0:
        return iter((first_b, last_b))
    return _sampled(first_b, last_b, index, ensemble_size, write_quorum, max(1, length // n), rng or random.Random())


def _sampled(first_b: int, last_b: int, index: int, ensemble_size: int, write_quorum: int, bucket: int,
             rng: random.Random) -> Iterator[int]:
    yield first_b
    for start in range(first_b, last_b + 1, bucket):
        stop = min(last_b, start + bucket - 1)
        # a bucket is about 100/percentage ids (at most ~100): its candidates are a small list
        cands = [e for e in range(start, stop + 1) if index_stores(index, e, ensemble_size, write_quorum)]
        pick = rng.choice(cands) if cands else None
        if pick is not None and first_b < pick < last_b:
            yield pick
    yield last_b


def index_is_bad(first_b: int, bookie_available: bool, read_failures: int) -> bool:
    """Verdict for one ensemble index of a fragment.

    No stored entry → bad iff the bookie is unavailable (upstream: an empty fragment on a dead bookie
    is reported as missing). Otherwise bad when the bookie is unavailable or any read failed.
    """
    if not bookie_available:
        return True
    if first_b < 0:
        return False
    return read_failures > 0


def bad_fragment(frag: Fragment, bad: Mapping[int, str]) -> BadFragment | None:
    """The BadFragment for ``frag`` given ``{bad index: bookie id}``, or None when nothing is bad."""
    if not bad:
        return None
    return BadFragment(frag.first_entry_id, frag.last_entry_id, frag.segment_first_entry_id,
                       frozenset(bad), frozenset(bad.values()), frag.closed)


def bad_bookies(fragments: Iterable[BadFragment]) -> list[str]:
    """Union of the bad bookies of ``fragments``, sorted (the replicas the auditor marks)."""
    return sorted({b for f in fragments for b in f.bad_bookies})
