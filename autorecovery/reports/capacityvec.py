"""Bytes each bookie stores, over a batch of ledgers at once with numpy (PURE).

Same figures as :func:`model.bytes_per_bookie` summed ledger after ledger, bit for bit: each (segment,
ensemble index) stores ``count_on_index`` entries (upstream round robin: the residues of the arc
``i-WQ+1 .. i`` mod E, :func:`autorecovery.ledger.striping.count_on_index`), worth ``entries ×
bytes_per_entry``; the shares are added with ``np.add.at`` in the per-ledger function's order (ledger,
segment, index), so every float sum is the same. No I/O; E >= 1 and WQ >= 1 assumed (valid metadata).
"""

from __future__ import annotations

import numpy as np


def entries_on_indexes(first: np.ndarray, last: np.ndarray, E: int, WQ: int) -> np.ndarray:
    """``out[k, i]``: entries of ``first[k]..last[k]`` that ensemble index ``i`` stores (``n × E``, int64;
    zeros for an empty range), for segments of ensemble size ``E`` and write quorum ``WQ``."""
    n = len(first)
    if WQ >= E:
        return np.repeat(np.maximum(last - first + 1, 0)[:, None], E, axis=1)
    res = np.empty((n, E), np.int64)  # entries with e mod E == s
    for s in range(E):
        start = first + np.mod(s - first, E)
        res[:, s] = np.where(start > last, 0, np.floor_divide(last - start, E) + 1)
    out = np.zeros((n, E), np.int64)
    for i in range(E):
        for k in range(WQ):
            out[:, i] += res[:, (i - k) % E]
    return out


class BookieBytes:
    """Per-bookie sums (indexed by the caller's bookie codes): ``used`` and ``recent`` bytes, ``ledgers``
    holding the bookie, and ``seen`` (a member of some ledger, even with 0 bytes)."""

    def __init__(self) -> None:
        self.used = np.zeros(0)
        self.recent = np.zeros(0)
        self.ledgers = np.zeros(0, np.int64)
        self.seen = np.zeros(0, bool)

    def _grow(self, n: int) -> None:
        if n > len(self.used):
            size = max(n, 2 * len(self.used), 64)
            for name in ("used", "recent", "ledgers", "seen"):
                a = getattr(self, name)
                b = np.zeros(size, a.dtype)
                b[:len(a)] = a
                setattr(self, name, b)

    def add(self, seg_ledger: np.ndarray, seg_E: np.ndarray, seg_WQ: np.ndarray, seg_first: np.ndarray,
            seg_last: np.ndarray, seg_bpe: np.ndarray, seg_recent: np.ndarray, mem_code: np.ndarray,
            mem_seg: np.ndarray, mem_idx: np.ndarray, ledger_members: np.ndarray) -> None:
        """Fold a batch: per segment its ledger (row in the batch, ascending), E, WQ, first and last entry
        ids, bytes per entry and whether its ledger is recent; per ensemble member (in ledger, segment,
        index order) its bookie code, segment row and ensemble index; ``ledger_members``: each ledger's
        distinct member codes, concatenated."""
        top = max(int(mem_code.max(initial=-1)), int(ledger_members.max(initial=-1))) + 1
        self._grow(top)
        count = np.zeros(len(mem_code), np.int64)
        for E, WQ in set(zip(seg_E.tolist(), seg_WQ.tolist(), strict=True)):
            rows = np.flatnonzero((seg_E == E) & (seg_WQ == WQ))
            per = entries_on_indexes(seg_first[rows], seg_last[rows], E, WQ)
            at = np.full(len(seg_E), -1, np.int64)
            at[rows] = np.arange(len(rows))
            mine = at[mem_seg] >= 0
            ok = mine & (mem_idx < E)
            count[ok] = per[at[mem_seg[ok]], mem_idx[ok]]
        share = np.flatnonzero(count > 0)  # the per-ledger function adds only stored shares
        nbytes = count[share] * seg_bpe[mem_seg[share]]
        # a bookie in several segments of a ledger: its shares are summed for the ledger first (in segment
        # order), then added to the bookie's total, ledger after ledger, as model.bytes_per_bookie's dict is
        key = seg_ledger[mem_seg[share]] * top + mem_code[share]
        uk, inv = np.unique(key, return_inverse=True)
        per = np.zeros(len(uk))
        np.add.at(per, inv, nbytes)
        codes = uk % top
        np.add.at(self.used, codes, per)
        recent = np.zeros(len(uk), bool)
        recent[inv] = seg_recent[mem_seg[share]]
        np.add.at(self.recent, codes[recent], per[recent])
        np.add.at(self.ledgers, ledger_members, 1)
        self.seen[mem_code] = True
