"""Entry ids as striped ranges, never as one object per entry (PURE).

A ledger's size is whatever its metadata claims: a CLOSED ledger with ``lastEntryId`` = 2**62 is
valid metadata whose entries nobody holds (issue 25). Planning, copying, the failure memory and the
unrecoverable record therefore describe sets of entry ids as :class:`Run` objects: the ids of
``[first, last]`` whose residue ``e mod E`` lies on the cyclic arc ``arc_end-arc_len+1 .. arc_end``
(the striping filter a range read sends, :func:`autorecovery.ledger.striping.index_stores`). A run
costs O(1) memory whatever its length; counting is O(1) (:func:`~autorecovery.ledger.striping.count_on_index`);
iterating is lazy.

:class:`Gap` is a run with the reason, per bookie, why those entries were not copied (``ENOENTRY``,
``ENOLEDGER``, ``DIGEST``, ``NOT_REGISTERED``, a transient status...). Gaps are split only where a
reason changes or an entry was copied, so a range no bookie holds stays one gap.

:class:`IntervalSet` keeps the ids a peer reported (stored, copied) as disjoint inclusive intervals.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from autorecovery.ledger.striping import count_on_index, entries_on_index, first_last_on_index, index_stores

#: Above this many entries a record lists spans of runs instead of exact id ranges.
EXACT_LIST_LIMIT = 10_000


@dataclass(frozen=True)
class Run:
    """The ids of ``[first, last]`` whose residue mod ``ensemble_size`` is on the arc
    ``arc_end-arc_len+1 .. arc_end`` (``arc_len >= ensemble_size``: every id of the range)."""

    first: int
    last: int
    arc_end: int = 0
    arc_len: int = 1
    ensemble_size: int = 1

    def count(self) -> int:
        """How many ids the run holds. O(1)."""
        return count_on_index(self.first, self.last, self.arc_end, self.ensemble_size, self.arc_len)

    def __iter__(self) -> Iterator[int]:
        return entries_on_index(self.first, self.last, self.arc_end, self.ensemble_size, self.arc_len)

    def covers(self, entry_id: int) -> bool:
        return self.first <= entry_id <= self.last and index_stores(
            self.arc_end, entry_id, self.ensemble_size, self.arc_len)

    def residues(self) -> list[int]:
        """The residues of the arc, ascending."""
        n = min(self.arc_len, self.ensemble_size)
        return sorted({(self.arc_end - k) % self.ensemble_size for k in range(n)})

    def bounds(self) -> tuple[int, int]:
        """First and last id the run holds; ``(-1, -1)`` when empty. O(1)."""
        return first_last_on_index(self.first, self.last, self.arc_end, self.ensemble_size, self.arc_len)

    def clip(self, first: int, last: int) -> Run | None:
        """The run restricted to ``[first, last]`` and tightened to its first and last id; None when empty."""
        lo, hi = first_last_on_index(max(first, self.first), min(last, self.last), self.arc_end,
                                     self.ensemble_size, self.arc_len)
        if lo < 0:
            return None
        return Run(lo, hi, self.arc_end, self.arc_len, self.ensemble_size)

    def with_residue(self, residue: int) -> Run | None:
        """The ids of this run with residue ``residue`` only (None when it holds none)."""
        if residue not in self.residues():
            return None
        return Run(self.first, self.last, residue, 1, self.ensemble_size).clip(self.first, self.last)


@dataclass(frozen=True)
class Gap:
    """A run of entries not copied, and why per bookie (``{bookie id: status}``; empty: not asked yet)."""

    run: Run
    why: Mapping[str, str] = field(default_factory=dict)

    def count(self) -> int:
        return self.run.count()

    def because(self, bookie: str, reason: str, *, keep: bool = False) -> Gap:
        """The same run with ``bookie``'s reason added (``keep``: an existing reason of it stays)."""
        if keep and bookie in self.why:
            return self
        return Gap(self.run, {**self.why, bookie: reason})


def count(runs: Iterable[Run | Gap]) -> int:
    """Total ids of ``runs`` (assumed disjoint). O(len(runs))."""
    return sum(r.count() for r in runs)


def entry_ids(runs: Iterable[Run | Gap]) -> Iterator[int]:
    """Every id of ``runs`` lazily, run after run (ascending within a run)."""
    return itertools.chain.from_iterable(r.run if isinstance(r, Gap) else r for r in runs)


def spans(runs: Iterable[Run | Gap], limit: int = EXACT_LIST_LIMIT) -> list[list[int]]:
    """Sorted inclusive ``[first, last]`` id ranges for logs and the unrecoverable record.

    Exact (the maximal runs of consecutive ids) when the runs hold at most ``limit`` ids in total; past
    that, the merged bounds of the runs (each span then holds ids of other residues too: the
    record's ``entry_count`` stays exact). O(len(runs)) memory either way.
    """
    rs = [g.run if isinstance(g, Gap) else g for g in runs]
    if count(rs) <= limit:
        return id_ranges(entry_ids(rs))
    out: list[list[int]] = []
    for lo, hi in sorted(b for b in (r.bounds() for r in rs) if b[0] >= 0):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def id_ranges(entry_ids: Iterable[int]) -> list[list[int]]:
    """Sorted inclusive ``[first, last]`` runs of consecutive ``entry_ids`` (any order, duplicates ok)."""
    out: list[list[int]] = []
    for e in sorted(set(entry_ids)):
        if out and out[-1][1] + 1 == e:
            out[-1][1] = e
        else:
            out.append([e, e])
    return out


def split_gaps(gaps: Sequence[Gap], held: Sequence[tuple[int, int]] | None, bookie: str,
               absent: str) -> tuple[list[Gap], list[Gap]]:
    """Split ``gaps`` by the id ranges ``held`` says ``bookie`` stores: ``(present, missing)``.

    ``held``: sorted disjoint inclusive ranges (a bookie's ``GetListOfEntriesOfLedger`` answer), or
    None when unknown (everything is then ``present``, to be read). ``missing`` gaps get ``bookie``'s
    reason ``absent`` (``ENOENTRY`` or ``ENOLEDGER``). O(len(gaps) + len(held)).
    """
    if held is None:
        return list(gaps), []
    present: list[Gap] = []
    missing: list[Gap] = []
    for g in gaps:
        cursor = g.run.first
        i = bisect.bisect_left(held, (g.run.first, g.run.first))
        if i > 0 and held[i - 1][1] >= g.run.first:
            i -= 1
        while cursor <= g.run.last:
            if i < len(held) and held[i][0] <= g.run.last:
                a, b = held[i]
                if a > cursor:
                    piece = g.run.clip(cursor, a - 1)
                    if piece is not None:
                        missing.append(Gap(piece, {**g.why, bookie: absent}))
                piece = g.run.clip(max(a, cursor), b)
                if piece is not None:
                    present.append(Gap(piece, g.why))
                cursor = max(cursor, b + 1)
                i += 1
            else:
                piece = g.run.clip(cursor, g.run.last)
                if piece is not None:
                    missing.append(Gap(piece, {**g.why, bookie: absent}))
                break
    return present, missing


def merge_gaps(gaps: Iterable[Gap]) -> list[Gap]:
    """Sort by first id and join neighbours with the same arc and reasons (no id between them that
    the arc holds). Keeps the list O(reason changes)."""
    out: list[Gap] = []
    for g in sorted(gaps, key=lambda g: (g.run.first, g.run.last)):
        if out:
            p = out[-1]
            pr, r = p.run, g.run
            if (pr.arc_end, pr.arc_len, pr.ensemble_size) == (r.arc_end, r.arc_len, r.ensemble_size) \
                    and p.why == g.why and Run(pr.last + 1, r.first - 1, r.arc_end, r.arc_len, r.ensemble_size).count() == 0:
                out[-1] = Gap(Run(pr.first, max(pr.last, r.last), r.arc_end, r.arc_len, r.ensemble_size), p.why)
                continue
        out.append(g)
    return out


class IntervalSet:
    """Integers as sorted disjoint inclusive intervals; adding in ascending order is O(1).

    With ``within`` (a :class:`Run`), two intervals are joined when no id of the run lies between them:
    the ids a striped stream reports (every third id of E3) then stay one interval, not one each.
    """

    def __init__(self, within: Run | None = None) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []
        self._within = within

    def _adjacent(self, hi: int, a: int) -> bool:
        """Whether an interval ending at ``hi`` and one starting at ``a`` (> hi) join."""
        if a <= hi + 1:
            return True
        w = self._within
        return w is not None and Run(hi + 1, a - 1, w.arc_end, w.arc_len, w.ensemble_size).count() == 0

    def add(self, x: int) -> None:
        self.add_range(x, x)

    def add_range(self, a: int, b: int) -> None:
        if b < a:
            return
        lo, hi = self._lo, self._hi
        if lo and a > hi[-1] and self._adjacent(hi[-1], a):
            hi[-1] = b
            return
        if not lo or a > hi[-1] + 1:
            lo.append(a)
            hi.append(b)
            return
        if a >= lo[-1]:
            hi[-1] = max(hi[-1], b)
            return
        i = bisect.bisect_left(hi, a - 1)
        j = bisect.bisect_right(lo, b + 1)
        if i >= j:
            lo.insert(i, a)
            hi.insert(i, b)
            return
        lo[i:j] = [min(a, lo[i])]
        hi[i:j] = [max(b, hi[j - 1])]

    def __len__(self) -> int:
        """Number of intervals (not of integers)."""
        return len(self._lo)

    def intervals(self) -> list[tuple[int, int]]:
        return list(zip(self._lo, self._hi, strict=True))

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self._lo, x) - 1
        return i >= 0 and self._hi[i] >= x

    def complement(self, first: int, last: int) -> list[tuple[int, int]]:
        """The intervals of ``[first, last]`` not in the set."""
        out: list[tuple[int, int]] = []
        cursor = first
        for a, b in zip(self._lo, self._hi, strict=True):
            if b < cursor:
                continue
            if a > last:
                break
            if a > cursor:
                out.append((cursor, a - 1))
            cursor = max(cursor, b + 1)
        if cursor <= last:
            out.append((cursor, last))
        return out
