"""The risk model of :func:`whatif.ledger_losses` over a batch of ledgers at once, with numpy (PURE).

Same figures as calling :func:`whatif.ledger_losses` on each ledger, bit for bit (tested on random
ledgers, ``tests/unit/reports/test_risk_vectorised.py``): ledgers are grouped by *shape* — ensemble
size E, write quorum WQ, ack quorum AQ and the pattern of each segment's ensemble as positions of the
ledger's distinct bookies (first seen first: ``(0, 1, 2)``, then ``(0, 3, 2)`` after an ensemble change)
— and each shape is evaluated with array operations over its ledgers, one column per position. Which
bookies, racks, zones and regions a ledger uses, which of its copies are already lost, and how many
entries each (segment, residue) holds vary per ledger as arrays; the order of every float sum is the
order of the per-ledger function (adding an exact 0.0 where a group does not count changes nothing),
so the per-ledger figures are identical. Shapes held by fewer than :data:`MIN_SHAPE` ledgers of the
batch take the per-ledger function (an array pass costs about the same whatever the batch size).

Names are replaced by integer codes (:class:`Codes`, one table per kind of name), and orders that the
per-ledger function takes from names (a pair of bookies ``a < b``, a pair of racks ``"a|b"``) are taken
from the codes' ranks by name. Striping is upstream's round robin (:func:`ledger.striping.write_set`).
No I/O; raises nothing for valid metadata (E, WQ >= 1: ``write_set``'s ValueError otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autorecovery.ledger.striping import write_set
from autorecovery.reports.model import BELOW_AQ, COPY, KINDS, LOSS, NONE, UNKNOWN, LedgerView

#: Shapes held by fewer ledgers of a batch are evaluated ledger by ledger (:func:`whatif.ledger_losses`).
MIN_SHAPE = 24

#: Domain kinds as coded in :attr:`BatchLosses.dom_kind`: ``existing`` (the damage, nothing more lost),
#: the failure domains of :data:`model.KINDS`, then pairs of racks.
EXISTING, RACK, ZONE, REGION, RACK_PAIR = 0, 1, 2, 3, 4
KIND_NAMES = ("existing", *KINDS, "rack_pair")


class Codes:
    """Names to dense integer codes (first seen first) and back; :meth:`ranks` orders codes by name."""

    __slots__ = ("names", "index", "_ranks")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self._ranks: np.ndarray | None = None
        for n in names:
            self.code(n)

    def code(self, name: str) -> int:
        """The code of ``name``, assigned on first sight."""
        c = self.index.get(name)
        if c is None:
            c = self.index[name] = len(self.names)
            self.names.append(name)
            self._ranks = None
        return c

    def ranks(self) -> np.ndarray:
        """``ranks()[code]``: the rank of the code's name among all names (comparing ranks = comparing names)."""
        if self._ranks is None or len(self._ranks) != len(self.names):
            order = sorted(range(len(self.names)), key=self.names.__getitem__)
            r = np.empty(len(self.names), np.int64)
            r[order] = np.arange(len(self.names))
            self._ranks = r
        return self._ranks


class Tables:
    """The code tables of a partition: bookies, and the rack, zone and region names, with each bookie's
    tag codes (``tags[bookie] = (rack, zone, region)``; a bookie missing from it is ``"unknown"`` in each)."""

    def __init__(self, tags: Mapping[str, tuple[str, str, str]], gone: Iterable[str] = ()) -> None:
        self.tags = tags
        self.bookies = Codes(sorted(tags))
        self.kinds = (Codes(), Codes(), Codes())
        self._tag: list[list[int]] = [[], [], []]
        self._gone = frozenset(gone)
        self._gone_flag: list[bool] = []
        for b in self.bookies.names:
            self._add_tags(b)
        self._arrays: tuple[np.ndarray, ...] | None = None

    def _add_tags(self, b: str) -> None:
        t = self.tags.get(b, UNKNOWN)
        for k in range(3):
            self._tag[k].append(self.kinds[k].code(t[k]))
        self._gone_flag.append(b in self._gone)

    def bookie(self, b: str) -> int:
        """The code of bookie ``b`` (a bookie not in ``tags`` gets one, in ``"unknown"`` domains)."""
        c = self.bookies.index.get(b)
        if c is None:
            c = self.bookies.code(b)
            self._add_tags(b)
            self._arrays = None
        return c

    def arrays(self) -> tuple[np.ndarray, ...]:
        """``(rack code, zone code, region code, gone flag)`` per bookie code."""
        if self._arrays is None or len(self._arrays[0]) != len(self.bookies.names):
            self._arrays = (*(np.asarray(t, np.int64) for t in self._tag), np.asarray(self._gone_flag, bool))
        return self._arrays


@dataclass
class BatchLosses:
    """Every figure :func:`whatif.ledger_losses` gives for a batch of ledgers, as flat arrays (rows in no
    particular order; ``*_ledger`` is the ledger's index in the batch; names are codes of :class:`Tables`).

    * domains (``dom_*``): kind (:data:`EXISTING`, :data:`RACK`, ... :data:`RACK_PAIR`), name code
      (``dom_name``; for a rack pair the lower-named rack, ``dom_name2`` the other, else -1), outcome,
      bytes lost for good, bytes to heal; every domain of every ledger, :data:`model.NONE` outcomes
      included (``existing`` only when not NONE, as there);
    * sources (``src_*``): for domains of kind existing, rack, zone, region: (kind, name, bookie code,
      bytes of healed entries it holds a copy of, split evenly over their surviving copies, and
      ``src_sole``: bytes of healed entries whose only surviving copy it holds);
    * singles (``one_*``): losing one live member: (bookie, outcome, lost bytes, heal bytes), NONE left out;
    * pairs (``two_*``): :func:`whatif.pair_corrections`' deltas (a < b by id; data-loss ledgers, lost
      bytes, below-AQ ledgers), zero deltas left out.
    """

    dom_ledger: np.ndarray
    dom_kind: np.ndarray
    dom_name: np.ndarray
    dom_name2: np.ndarray
    dom_outcome: np.ndarray
    dom_lost: np.ndarray
    dom_heal: np.ndarray
    src_ledger: np.ndarray
    src_kind: np.ndarray
    src_name: np.ndarray
    src_bookie: np.ndarray
    src_bytes: np.ndarray
    src_sole: np.ndarray
    one_ledger: np.ndarray
    one_bookie: np.ndarray
    one_outcome: np.ndarray
    one_lost: np.ndarray
    one_heal: np.ndarray
    two_ledger: np.ndarray
    two_a: np.ndarray
    two_b: np.ndarray
    two_dl: np.ndarray
    two_lost: np.ndarray
    two_below: np.ndarray


_INT = ("dom_ledger", "dom_kind", "dom_name", "dom_name2", "dom_outcome", "src_ledger", "src_kind", "src_name",
        "src_bookie", "one_ledger", "one_bookie", "one_outcome", "two_ledger", "two_a", "two_b", "two_dl", "two_below")


class _Out:
    """Column pieces collected per shape, concatenated once."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {f: [] for f in BatchLosses.__dataclass_fields__}

    def add(self, **cols) -> None:
        for k, v in cols.items():
            self.cols[k].append(v)

    def done(self) -> BatchLosses:
        out = {}
        for k, parts in self.cols.items():
            dt = np.int64 if k in _INT else np.float64
            out[k] = np.concatenate([np.asarray(p, dt) for p in parts]) if parts else np.empty(0, dt)
        return BatchLosses(**out)


def batch_losses(ledgers: Sequence[LedgerView], tables: Tables,
                 marked: Mapping[int, frozenset[str]] | None = None, min_shape: int = MIN_SHAPE) -> BatchLosses:
    """:func:`whatif.ledger_losses` of every ledger of ``ledgers`` (see :class:`BatchLosses`). Copies
    already lost: the bookies ``tables`` was given as gone, and ``marked[i]`` (the replicas of ledger
    ``i``'s under-replication markers)."""
    import autorecovery.reports.whatif as whatif

    marked = marked or {}
    shapes: dict[tuple, tuple[list[int], list[list[int]], list[list[int]], list[float]]] = {}
    code = tables.bookie
    for i, lv in enumerate(ledgers):
        pos: dict[str, int] = {}
        pat = tuple([tuple([pos.setdefault(b, len(pos)) for b in seg.ensemble]) for seg in lv.segments])
        key = (lv.ensemble_size, lv.write_quorum, lv.ack_quorum, pat)
        g = shapes.get(key)
        if g is None:
            g = shapes[key] = ([], [], [], [])
        g[0].append(i)
        g[1].append([code(b) for b in pos])
        g[2].append([x for seg in lv.segments for x in (seg.first, seg.last)])
        g[3].append(lv.bytes_per_entry)
    out = _Out()
    slow: list[int] = []
    for (E, WQ, AQ, pat), (idx, mem, ends, bpe) in shapes.items():
        if not any(pat):
            continue  # no bookie: no domain, no loss
        if len(idx) < min_shape:
            slow.extend(idx)
            continue
        _shape(out, tables, E, WQ, AQ, pat, np.asarray(idx, np.int64), np.asarray(mem, np.int64),
               np.asarray(ends, np.int64), np.asarray(bpe, np.float64), marked)
    gone = tables._gone
    for i in slow:
        lv = ledgers[i]
        _from_losses(out, tables, i, whatif.ledger_losses(lv, tables.tags, gone | marked.get(i, frozenset())))
    return out.done()


def _from_losses(out: _Out, tables: Tables, i: int, got) -> None:
    """The per-ledger function's answer for ledger ``i`` as rows of :class:`BatchLosses`."""
    domains, singles, pairs = got
    kinds = {"existing": EXISTING, "rack": RACK, "zone": ZONE, "region": REGION, "rack_pair": RACK_PAIR}
    for kind, name, d in domains:
        k = kinds[kind]
        if k == RACK_PAIR:
            a, b = name.split("|", 1)
            n1, n2 = tables.kinds[0].code(a), tables.kinds[0].code(b)
        else:
            n1, n2 = (tables.kinds[k - 1].code(name) if k != EXISTING else -1), -1
        out.add(dom_ledger=[i], dom_kind=[k], dom_name=[n1], dom_name2=[n2], dom_outcome=[d[0]], dom_lost=[d[1]],
                dom_heal=[d[2]])
        sole = d[4] or {}
        for bk, nbytes in (d[3] or {}).items():
            out.add(src_ledger=[i], src_kind=[k], src_name=[n1], src_bookie=[tables.bookie(bk)], src_bytes=[nbytes],
                    src_sole=[sole.get(bk, 0.0)])
    for b, d in singles:
        out.add(one_ledger=[i], one_bookie=[tables.bookie(b)], one_outcome=[d[0]], one_lost=[d[1]], one_heal=[d[2]])
    for a, b, delta in pairs:
        out.add(two_ledger=[i], two_a=[tables.bookie(a)], two_b=[tables.bookie(b)], two_dl=[delta[0]],
                two_lost=[delta[1]], two_below=[delta[2]])


def _shape(out: _Out, tables: Tables, E: int, WQ: int, AQ: int, pat: tuple[tuple[int, ...], ...], idx: np.ndarray,
           mem: np.ndarray, ends: np.ndarray, bpe: np.ndarray, marked: Mapping[int, frozenset[str]]) -> None:
    """The ledgers ``idx`` of one shape: ``mem[:, p]`` the bookie code at position ``p``, ``ends`` each
    segment's (first, last) entry ids, ``bpe`` bytes per entry."""
    n, m = mem.shape
    rack_of, zone_of, region_of, gone_of = tables.arrays()
    tag = (rack_of[mem], zone_of[mem], region_of[mem])
    dmg = gone_of[mem]
    if marked:
        for row, i in enumerate(idx.tolist()):
            mk = marked.get(i)
            if mk:
                for p in range(m):
                    if tables.bookies.names[mem[row, p]] in mk:
                        dmg[row, p] = True
    live = ~dmg
    # groups: per segment and residue, (entries, write-set positions), in the per-ledger function's order
    groups: list[tuple[np.ndarray, tuple[int, ...]]] = []
    for j, ens in enumerate(pat):
        first, last = ends[:, 2 * j], ends[:, 2 * j + 1]
        for s in range(E):
            start = first + np.mod(s - first, E)
            cnt = np.where(start > last, 0, np.floor_divide(last - start, E) + 1)
            groups.append((cnt, tuple(ens[x] for x in write_set(s, E, WQ))))
    pre = [sum((dmg[:, p].astype(np.int64) for p in ws), np.zeros(n, np.int64)) for _cnt, ws in groups]
    # positions holding a copy of an entry not lost already (model.storing): the domains and bookies counted
    held = np.zeros((n, m), bool)
    for cnt, ws in groups:
        for p in ws:
            held[:, p] |= cnt > 0
    held &= live
    zero_f = np.zeros(n)

    def evaluate(dead: np.ndarray, sources: bool):
        """``dead``: (n, m) bool, live positions lost. Returns outcome, lost, heal, and with ``sources``
        (bytes (n, m), touched (n, m))."""
        outcome = np.zeros(n, np.int64)
        lost = zero_f
        heal = zero_f
        src = np.zeros((n, m)) if sources else None
        sole = np.zeros((n, m)) if sources else None
        touched = np.zeros((n, m), bool) if sources else None
        for (cnt, ws), pr in zip(groups, pre, strict=True):
            d = pr + sum(dead[:, p].astype(np.int64) for p in ws)
            hit = (d > 0) & (cnt > 0)
            if not hit.any():
                continue
            left = WQ - d
            loss = hit & (left <= 0)
            heals = hit & (left > 0)
            outcome = np.maximum(outcome, np.where(loss, LOSS, np.where(heals, np.where(left < AQ, BELOW_AQ, COPY),
                                                                             NONE)))
            lost = lost + np.where(loss, cnt * bpe, 0.0)
            heal = heal + np.where(heals, (cnt * d) * bpe, 0.0)
            if sources and heals.any():
                assert src is not None and sole is not None and touched is not None
                share = (cnt * bpe) / np.where(heals, left, 1)
                for p in ws:
                    ok = heals & ~dead[:, p] & live[:, p]
                    src[:, p] = src[:, p] + np.where(ok, share, 0.0)
                    sole[:, p] = sole[:, p] + np.where(ok & (left == 1), share, 0.0)
                    touched[:, p] |= ok
        return outcome, lost, heal, (src, sole), touched

    def emit_domain(kind: int, valid: np.ndarray, n1: np.ndarray, n2: np.ndarray | None, res, sources: bool) -> None:
        outcome, lost, heal, srcs, touched = res
        rows = np.flatnonzero(valid)
        if not len(rows):
            return
        out.add(dom_ledger=idx[rows], dom_kind=np.full(len(rows), kind), dom_name=n1[rows],
                dom_name2=n2[rows] if n2 is not None else np.full(len(rows), -1), dom_outcome=outcome[rows],
                dom_lost=lost[rows], dom_heal=heal[rows])
        if sources:
            r, p = np.nonzero(touched & valid[:, None])
            if len(r):
                out.add(src_ledger=idx[r], src_kind=np.full(len(r), kind), src_name=n1[r], src_bookie=mem[r, p],
                        src_bytes=srcs[0][r, p], src_sole=srcs[1][r, p])

    no_one = np.zeros((n, m), bool)
    # the damage with nothing more lost: only when not NONE (the per-ledger function's "existing")
    if dmg.any():
        res = evaluate(no_one, True)
        emit_domain(EXISTING, dmg.any(axis=1) & (res[0] != NONE), np.full(n, -1), None, res, True)
    # racks, zones, regions: one domain per distinct name of the ledger, at the first position holding it
    firsts = []
    for k in range(3):
        t = tag[k]
        first_k = held.copy()
        for p in range(1, m):
            first_k[:, p] &= ((t[:, :p] != t[:, p:p + 1]) | ~held[:, :p]).all(axis=1)
        firsts.append(first_k)
        for p in range(m):
            if not first_k[:, p].any():
                continue
            dead = live & (t == t[:, p:p + 1])
            emit_domain(RACK + k, first_k[:, p], t[:, p], None, evaluate(dead, True), True)
    # pairs of racks: two positions each first of its rack (so two different racks), names in name order
    racks, rank = tag[0], tables.kinds[0].ranks()
    for p in range(m):
        for q in range(p + 1, m):
            valid = firsts[0][:, p] & firsts[0][:, q]
            if not valid.any():
                continue
            dead = live & ((racks == racks[:, p:p + 1]) | (racks == racks[:, q:q + 1]))
            a, b = racks[:, p], racks[:, q]
            swap = rank[a] > rank[b]
            emit_domain(RACK_PAIR, valid, np.where(swap, b, a), np.where(swap, a, b), evaluate(dead, False), False)
    # single bookies and pairs of bookies (live members; a < b by id)
    ones = []
    for p in range(m):
        dead = no_one.copy()
        dead[:, p] = held[:, p]
        o, lost, heal, _s, _t = evaluate(dead, False)
        ones.append((o, lost))
        rows = np.flatnonzero(held[:, p] & (o != NONE))
        if len(rows):
            out.add(one_ledger=idx[rows], one_bookie=mem[rows, p], one_outcome=o[rows], one_lost=lost[rows],
                    one_heal=heal[rows])
    brank = tables.bookies.ranks()
    for p in range(m):
        for q in range(p + 1, m):
            valid = held[:, p] & held[:, q]
            if not valid.any():
                continue
            dead = no_one.copy()
            dead[:, p] = valid
            dead[:, q] = valid
            o, lost, _h, _s, _t = evaluate(dead, False)
            swap = brank[mem[:, p]] > brank[mem[:, q]]
            (op, lp), (oq, lq) = ones[p], ones[q]
            oa, la, ob, lb = np.where(swap, oq, op), np.where(swap, lq, lp), np.where(swap, op, oq), np.where(swap, lp, lq)
            dl = (o == LOSS).astype(np.int64) - (oa == LOSS) - (ob == LOSS)
            dlost = lost - la - lb
            below = (o == BELOW_AQ).astype(np.int64) - (oa == BELOW_AQ) - (ob == BELOW_AQ)
            rows = np.flatnonzero(valid & ((dl != 0) | (dlost != 0.0) | (below != 0)))
            if len(rows):
                a, b = mem[rows, p], mem[rows, q]
                sw = swap[rows]
                out.add(two_ledger=idx[rows], two_a=np.where(sw, b, a), two_b=np.where(sw, a, b), two_dl=dl[rows],
                        two_lost=dlost[rows], two_below=below[rows])


def per_ledger(b: BatchLosses, tables: Tables, n: int) -> list[tuple[list, list, list]]:
    """:class:`BatchLosses` back in :func:`whatif.ledger_losses`' shape, one ``(domains, singles, pairs)``
    per ledger, in its order (for tests and checks; the report sums the arrays)."""
    res: list[tuple[list, list, list]] = [([], [], []) for _ in range(n)]
    bk, racks = tables.bookies.names, tables.kinds[0].names
    srcs: dict[tuple[int, int, int], dict[str, float]] = {}
    soles: dict[tuple[int, int, int], dict[str, float]] = {}
    for i, k, nm, bkc, x, y in zip(b.src_ledger.tolist(), b.src_kind.tolist(), b.src_name.tolist(),
                                   b.src_bookie.tolist(), b.src_bytes.tolist(), b.src_sole.tolist(), strict=True):
        srcs.setdefault((i, k, nm), {})[bk[bkc]] = x
        soles.setdefault((i, k, nm), {})
        if y:
            soles[(i, k, nm)][bk[bkc]] = y
    order = {EXISTING: 0, RACK: 1, ZONE: 2, REGION: 3, RACK_PAIR: 4}
    doms: list[list] = [[] for _ in range(n)]
    for i, k, n1, n2, o, lo, he in zip(b.dom_ledger.tolist(), b.dom_kind.tolist(), b.dom_name.tolist(),
                                       b.dom_name2.tolist(), b.dom_outcome.tolist(), b.dom_lost.tolist(),
                                       b.dom_heal.tolist(), strict=True):
        if k == RACK_PAIR:
            key: tuple[str, ...] = (racks[n1], racks[n2])
            d: tuple[Any, Any, Any, dict[str, float] | None, dict[str, float] | None] = (o, lo, he, None, None)
        else:
            key = ("" if k == EXISTING else tables.kinds[k - 1].names[n1],)
            d = (o, lo, he, srcs.get((i, k, n1), {}), soles.get((i, k, n1), {}))
        doms[i].append((order[k], key, KIND_NAMES[k], d))
    for i, ds in enumerate(doms):
        res[i][0].extend((kind, "|".join(key), d) for _o, key, kind, d in sorted(ds, key=lambda x: (x[0], x[1])))
    for i, bc, o, lo, he in zip(b.one_ledger.tolist(), b.one_bookie.tolist(), b.one_outcome.tolist(),
                                b.one_lost.tolist(), b.one_heal.tolist(), strict=True):
        res[i][1].append((bk[bc], (o, lo, he, None, None)))
    for i, a, c, dl, lo, be in zip(b.two_ledger.tolist(), b.two_a.tolist(), b.two_b.tolist(), b.two_dl.tolist(),
                                   b.two_lost.tolist(), b.two_below.tolist(), strict=True):
        res[i][2].append((bk[a], bk[c], (dl, lo, be)))
    for _d, singles, pairs in res:
        singles.sort(key=lambda x: x[0])
        pairs.sort(key=lambda x: (x[0], x[1]))
    return res
