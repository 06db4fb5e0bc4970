"""The per-write-set coverage predicate used while an ensemble is built position by position (PURE).

Upstream ``RRTopologyAwareCoverageEnsemble`` (rack rule; reference §4). Positions are filled 0, 1, ...,
E-1; a candidate for the next position must be acceptable to every write set containing that position
(those starting at ``p-WQ+1 .. p`` mod E; wrapping write sets already contain the early positions).
For one write set with ``s`` members so far spanning ``k`` racks, and ``m = min(WQ, minNumRacksPerWriteQuorum)``:

* WQ < 2: accept;
* ``s + m - 1 < WQ`` (still among its first WQ-m+1 members): accept;
* otherwise with ``k'`` = k (+1 if the candidate's rack is new): accept iff ``k' >= m`` or the slots left
  after this one (``WQ - s - 1``) can still reach m racks (``>= m - k'``).

A bookie already in the ensemble is always rejected (the caller checks identity).
"""

from __future__ import annotations

from autorecovery.ledger.striping import residues_on_index

__all__ = ["CoverageTracker"]


class CoverageTracker:
    """Tracks racks per write set while an ensemble of size E is filled in order.

    Args:
        ensemble_size: E. write_quorum_size: WQ. min_racks: m, already reduced to ``min(WQ, ...)``.
    """

    __slots__ = ("e", "wq", "m", "counts", "racks", "size", "_starts")

    def __init__(self, ensemble_size: int, write_quorum_size: int, min_racks: int) -> None:
        self.e = ensemble_size
        self.wq = write_quorum_size
        self.m = min_racks
        self.counts = [0] * ensemble_size
        self.racks: list[set[str]] = [set() for _ in range(ensemble_size)]
        self.size = 0
        # write sets containing position p start at the residues p stores (ledger/striping.py)
        self._starts = [residues_on_index(p, ensemble_size, write_quorum_size)
                        for p in range(ensemble_size)] if ensemble_size and write_quorum_size >= 1 else []

    def accepts(self, rack: str) -> bool:
        """Would a bookie in ``rack`` be acceptable at the next position?"""
        if self.wq < 2 or self.size >= self.e:
            return self.size < self.e
        m, wq = self.m, self.wq
        for s in self._starts[self.size]:
            c = self.counts[s]
            if c + m - 1 < wq:
                continue
            rs = self.racks[s]
            k = len(rs) + (0 if rack in rs else 1)
            if k >= m:
                continue
            if wq - c - 1 >= m - k:
                continue
            return False
        return True

    def add(self, rack: str) -> None:
        """Record a bookie in ``rack`` at the next position."""
        for s in self._starts[self.size]:
            self.counts[s] += 1
            self.racks[s].add(rack)
        self.size += 1
