"""The risk part of the fused pass: one partition's sums per failure domain, bookie and pair of bookies
(EDGE: numpy arrays in, pandas frames out; the figures come from :mod:`autorecovery.reports.riskvec`).

Per batch of ledgers, :func:`riskvec.batch_losses` gives every ledger's losses as arrays; they are summed
per key (integer-coded names) with ``np.unique`` + ``np.bincount`` and kept per batch; at the end of the
partition the batches' sums are summed again and named. The rows are those the per-ledger fold gave
(``jobs.risk_partition`` documents them); the same numbers, added in another order (a float sum's last
bit may differ, as it does between two Spark runs whose partitions arrive in another order).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from autorecovery.ledger.pulsar_names import pulsar_names
from autorecovery.reports import model, riskvec
from autorecovery.reports.riskvec import EXISTING, KIND_NAMES, RACK, RACK_PAIR

#: batches' sums kept before they are summed into one (memory: keys × COMPACT, whatever the partition's size)
COMPACT = 8
_K, _O, _N = 58, 56, 28  # key bits: kind, outcome, first name (the second name / bookie / namespace below)


def _sum(keys: np.ndarray, cols: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Unique ``keys`` and each column summed per key."""
    if not len(keys):
        return keys, [np.zeros(0) for _ in cols]
    uk, inv = np.unique(keys, return_inverse=True)
    return uk, [np.bincount(inv, weights=c, minlength=len(uk)) for c in cols]


class RiskFold:
    """Folds batches of ``(ledger view, row)`` into the risk rows of one partition."""

    def __init__(self, tags: Mapping[str, tuple[str, str, str]], kinds: tuple[str, ...], gone: frozenset[str],
                 bookie_sets: bool) -> None:
        self.tables = riskvec.Tables(tags, gone)
        self.allowed = np.array([EXISTING] + [RACK + k for k, name in enumerate(model.KINDS) if name in kinds])
        self.bookie_sets = bookie_sets
        self.ns = riskvec.Codes([""])
        self.ns_of: dict[Any, int] = {}
        self.parts: dict[str, list[tuple[np.ndarray, list[np.ndarray]]]] = {"risk": [], "src": [], "k1": [], "k2": []}

    def _namespace(self, ml: Any) -> int:
        c = self.ns_of.get(ml)
        if c is None:
            ns = pulsar_names({"pulsar/managed-ledger": ml})[1] if ml else ""
            c = self.ns_of[ml] = self.ns.code(ns)
        return c

    def step(self, views: Sequence[tuple[model.LedgerView, Any]], gone: frozenset[str]) -> None:
        """Fold one batch (``views`` as ``jobs._views`` gives them)."""
        marked: dict[int, frozenset[str]] = {}
        ns = np.zeros(len(views), np.int64)
        for i, (_lv, row) in enumerate(views):
            mk = getattr(row, "marked", None)
            if mk is not None and not (isinstance(mk, float) and mk != mk):
                marked[i] = frozenset(str(b) for b in mk)  # the replicas its markers name (jobs.damaged_of)
            ns[i] = self._namespace(row.managed_ledger)
        b = riskvec.batch_losses([v[0] for v in views], self.tables, marked)
        self._risk(b, ns)
        if self.bookie_sets:
            one = b.one_outcome
            self.parts["k1"].append(_sum(b.one_bookie, [(one == model.LOSS).astype(float), b.one_lost,
                                                        (one == model.BELOW_AQ).astype(float), b.one_heal]))
            self.parts["k2"].append(_sum((b.two_a << 32) | b.two_b,
                                         [b.two_dl.astype(float), b.two_lost, b.two_below.astype(float)]))
        for name, width in (("risk", 3), ("src", 2), ("k1", 4), ("k2", 3)):
            if len(self.parts[name]) >= COMPACT:  # the kept sums stay sized by keys, not by batches
                self.parts[name] = [self._total(name, width)]

    def _risk(self, b: riskvec.BatchLosses, ns: np.ndarray) -> None:
        kind, outcome, n1, n2 = b.dom_kind, b.dom_outcome, b.dom_name, b.dom_name2
        some = outcome != model.NONE
        dom = some & np.isin(kind, self.allowed)
        base = (kind << _K) | (outcome << _O) | ((n1 + 1) << _N)
        by_ns = dom & (kind == RACK) & (outcome >= model.BELOW_AQ) & (ns[b.dom_ledger] > 0)
        pair = kind == RACK_PAIR
        keys = [base[dom], base[by_ns] | ns[b.dom_ledger[by_ns]], base[pair & some] | (n2[pair & some] + 1)]
        sign = [np.ones(int(dom.sum())), np.ones(int(by_ns.sum())), np.ones(int((pair & some).sum()))]
        lost = [b.dom_lost[dom], b.dom_lost[by_ns], b.dom_lost[pair & some]]
        heal = [b.dom_heal[dom], b.dom_heal[by_ns], b.dom_heal[pair & some]]
        # each pair of racks less the single-rack losses of both racks (the driver adds their totals back)
        if pair.any():
            nr = len(self.tables.kinds[0].names) + 1
            rk = kind == RACK
            at = b.dom_ledger[rk] * nr + n1[rk]
            order = np.argsort(at, kind="stable")
            at = at[order]
            r_out, r_lost, r_heal = outcome[rk][order], b.dom_lost[rk][order], b.dom_heal[rk][order]
            pl, p1, p2 = b.dom_ledger[pair], n1[pair], n2[pair]
            for r in (p1, p2):
                j = np.searchsorted(at, pl * nr + r)
                o = r_out[j]
                ok = o != model.NONE
                keys.append((RACK_PAIR << _K) | (o[ok] << _O) | ((p1[ok] + 1) << _N) | (p2[ok] + 1))
                sign.append(-np.ones(int(ok.sum())))
                lost.append(-r_lost[j][ok])
                heal.append(-r_heal[j][ok])
        self.parts["risk"].append(_sum(np.concatenate(keys), [np.concatenate(sign), np.concatenate(lost),
                                                              np.concatenate(heal)]))
        src = np.isin(b.src_kind, self.allowed)
        self.parts["src"].append(_sum((b.src_kind[src] << _K) | ((b.src_name[src] + 1) << _N) | b.src_bookie[src],
                                      [b.src_bytes[src], b.src_sole[src]]))

    def _total(self, name: str, width: int) -> tuple[np.ndarray, list[np.ndarray]]:
        got = self.parts[name]
        if not got:
            return np.zeros(0, np.int64), [np.zeros(0) for _ in range(width)]
        return _sum(np.concatenate([k for k, _c in got]), [np.concatenate([c[i] for _k, c in got]) for i in range(width)])

    def finish(self) -> Iterator[pd.DataFrame]:
        """The partition's rows: ``kloss``, ``risk`` and ``heal_src`` frames (see ``jobs.risk_partition``)."""
        bk = self.tables.bookies.names
        racks = self.tables.kinds[0].names
        k1, (dl1, lost1, below1, heal1) = self._total("k1", 4)
        k2, (dl2, lost2, below2) = self._total("k2", 3)
        n1, n2 = len(k1), len(k2)
        yield pd.DataFrame({"part": "kloss", "kind": ["bookie"] * n1 + ["bookie_pair"] * n2,
                            "name": [bk[c] for c in k1.tolist()] + [f"{bk[k >> 32]}|{bk[k & 0xFFFFFFFF]}"
                                                                    for k in k2.tolist()],
                            "ledgers": np.concatenate([dl1, dl2]), "lost_bytes": np.concatenate([lost1, lost2]),
                            "bytes": np.concatenate([below1, below2]), "heal_bytes": np.concatenate([heal1, np.zeros(n2)])})
        keys, (cnt, lost, heal) = self._total("risk", 3)
        kinds, outs, names, tails = [], [], [], []
        low = (1 << _N) - 1
        for k in keys.tolist():
            kind, o, a, rest = k >> _K, (k >> _O) & 3, ((k >> _N) & ((1 << (_O - _N)) - 1)) - 1, k & low
            kinds.append(KIND_NAMES[kind])
            outs.append(o)
            if kind == RACK_PAIR:
                names.append(f"{racks[a]}|{racks[rest - 1]}")
                tails.append("")
            else:
                names.append("" if kind == EXISTING else self.tables.kinds[kind - 1].names[a])
                tails.append(self.ns.names[rest])
        yield pd.DataFrame({"part": "risk", "kind": kinds, "name": names, "outcome": outs, "namespace": tails,
                            "ledgers": cnt, "lost_bytes": lost, "heal_bytes": heal})
        keys, (nbytes, sole) = self._total("src", 2)
        kinds, names, books = [], [], []
        for k in keys.tolist():
            kind, a = k >> _K, ((k >> _N) & ((1 << (_O - _N)) - 1)) - 1
            kinds.append(KIND_NAMES[kind])
            names.append("" if kind == EXISTING else self.tables.kinds[kind - 1].names[a])
            books.append(bk[k & low])
        # heal_bytes of a heal_src row: the bytes only that bookie can serve (model.SourceReads)
        yield pd.DataFrame({"part": "heal_src", "kind": kinds, "name": names, "bookie_id": books, "bytes": nbytes,
                            "heal_bytes": sole})
