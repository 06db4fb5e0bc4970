"""What-ifs on single bookies: the loss of any k bookies, decommissioning one (PURE).

Per ledger, as :mod:`autorecovery.reports.model`; the Spark jobs sum the rows. Losses are ranked by
:func:`severity`: ledgers that lose data, then bytes lost for good, then ledgers below AQ.

* k = 1 and k = 2 are exact: every bookie is evaluated on every ledger it holds, and every pair of
  bookies on every ledger holding both (:func:`pair_corrections`); a pair that shares no ledger loses
  what its two bookies lose apart, so :func:`worst_pairs` adds, per bookie, its best such partners.
* k = 3 is a bounded search: the ``candidates`` worst pairs are each extended by every bookie, with the
  exact figures of the triple (inclusion-exclusion: triple = pair + single + the correction of the
  ledgers that hold the third bookie and a pair member, :func:`triple_corrections`). It finds the worst
  triple that contains one of the worst pairs; a worse triple made of three individually mild pairs
  is possible in principle, so k = 3 is a lower bound of the worst case (said so in the summary).

Units: bytes (floats: a ledger's ``length`` spread evenly over its entries, :attr:`LedgerView.bytes_per_entry`),
ledgers as counts (0/1 per ledger, summed; deltas may be negative). Striping is upstream's
``RoundRobinDistributionSchedule`` (:func:`autorecovery.ledger.striping.write_set`); "damaged" bookies
are copies already lost (gone bookies, the replicas of a ledger's under-replication markers), as
:func:`autorecovery.reports.model.domain_loss`. Errors: the functions take metadata as read; a write
quorum < 1 raises :func:`write_set`'s ``ValueError`` (naming E and WQ), nothing else is raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autorecovery.ledger.striping import write_set
from autorecovery.reports.model import (
    BELOW_AQ, COPY, KINDS, LOSS, NONE, UNKNOWN, DomainLoss, LedgerView, residue_counts, storing,
)


def members(ledger: LedgerView, damaged: frozenset[str] = frozenset()) -> list[str]:
    """The ledger's bookies that store an entry of it, sorted, except ``damaged`` (its copies there are
    lost already: losing that bookie changes nothing for this ledger; :func:`model.storing`).

    The figures of a set S of bookies are summed over the ledgers of which a member of S stores a copy
    not lost already, each with S and its damage lost (``domain_loss(ledger, S, damaged)``)."""
    return sorted(storing(ledger, damaged))


def severity(data_loss_ledgers: float, lost_bytes: float, below_aq_ledgers: float) -> tuple[float, float, float]:
    """The ranking key of a loss, bigger is worse: ``(ledgers losing data, bytes lost, ledgers below AQ)``
    compared lexicographically (a ledger losing data outranks any number of bytes)."""
    return (data_loss_ledgers, lost_bytes, below_aq_ledgers)


def metrics(d: DomainLoss) -> tuple[int, float, int, float]:
    """``(ledgers losing data (0/1), bytes lost for good, ledgers below AQ (0/1), bytes to heal)`` of one
    ledger's loss (a ledger losing data is not also counted below AQ: its outcome is the worst)."""
    return (1 if d.outcome == LOSS else 0, d.lost_bytes, 1 if d.outcome == BELOW_AQ else 0, d.heal_bytes)


Groups = list[tuple[int, tuple[str, ...], int]]


def _groups(ledger: LedgerView, damaged: frozenset[str]) -> Groups:
    """Per segment and residue ``s`` (entries ``e ≡ s mod E``) with entries: ``(entries, the write set's
    bookie ids (WQ of them, write order), copies in it already lost)``; empty residues are left out."""
    E, WQ = ledger.ensemble_size, ledger.write_quorum
    out: Groups = []
    for seg in ledger.segments:
        ens = seg.ensemble
        for s, cnt in enumerate(residue_counts(seg.first, seg.last, E)):
            if cnt:
                ws = tuple(ens[j] for j in write_set(s, E, WQ))
                out.append((cnt, ws, sum(1 for b in ws if b in damaged)))
    return out


def _loss(ledger: LedgerView, groups: Groups, dead: frozenset[str] | set[str]) -> DomainLoss:
    """:func:`domain_loss` from precomputed :func:`_groups` (``dead`` holds no damaged bookie): the same
    outcome and bytes, no sources."""
    WQ, AQ, bpe = ledger.write_quorum, ledger.ack_quorum, ledger.bytes_per_entry
    outcome = NONE
    lost = heal = 0.0
    for cnt, ws, pre in groups:
        d = pre
        for b in ws:
            if b in dead:
                d += 1
        if d == 0:
            continue
        left = WQ - d
        if left <= 0:
            outcome = LOSS
            lost += cnt * bpe
        else:
            if outcome < LOSS:
                outcome = max(outcome, BELOW_AQ if left < AQ else COPY)
            heal += cnt * d * bpe
    return DomainLoss(outcome, lost, heal)


def single_losses(ledger: LedgerView, damaged: frozenset[str] = frozenset()) -> list[tuple[str, DomainLoss]]:
    """Losing each one member of ``ledger`` (on top of ``damaged``): ``[(bookie id, DomainLoss)]`` in
    sorted id order (no ``sources``); members whose loss changes nothing are left out."""
    out = []
    groups = _groups(ledger, damaged)
    for b in members(ledger, damaged):
        d = _loss(ledger, groups, {b})
        if d.outcome != NONE:
            out.append((b, d))
    return out


def bookie_sets(ledger: LedgerView, damaged: frozenset[str] = frozenset()
                ) -> tuple[list[tuple[str, DomainLoss]], list[tuple[str, str, tuple[int, float, int]]]]:
    """:func:`single_losses` and :func:`pair_corrections` in one go (the write sets built once):
    ``(singles, pairs)`` with the shapes of those two functions."""
    ms = members(ledger, damaged)
    groups = _groups(ledger, damaged)
    singles = [(b, _loss(ledger, groups, {b})) for b in ms]
    one = {b: metrics(d) for b, d in singles}
    pairs = []
    for i, a in enumerate(ms):
        for b in ms[i + 1:]:
            ab = metrics(_loss(ledger, groups, {a, b}))
            delta = (ab[0] - one[a][0] - one[b][0], ab[1] - one[a][1] - one[b][1], ab[2] - one[a][2] - one[b][2])
            if delta != (0, 0.0, 0):
                pairs.append((a, b, delta))
    return [(b, d) for b, d in singles if d.outcome != NONE], pairs


def pair_corrections(ledger: LedgerView, damaged: frozenset[str] = frozenset()
                     ) -> list[tuple[str, str, tuple[int, float, int]]]:
    """For each pair of members ``a < b`` of ``ledger``: ``(a, b, delta)`` with ``delta = m({a,b}) − m({a})
    − m({b})`` over (data-loss ledgers, lost bytes, below-AQ ledgers); summed over every ledger,
    pair(a, b) = single(a) + single(b) + Σ delta (a ledger holding only one of them loses what that
    one's loss does). Zero deltas are left out, so a pair sharing no ledger has no row."""
    ms = members(ledger, damaged)
    groups = _groups(ledger, damaged)
    one = {b: metrics(_loss(ledger, groups, {b})) for b in ms}
    out = []
    for i, a in enumerate(ms):
        for b in ms[i + 1:]:
            ab = metrics(_loss(ledger, groups, {a, b}))
            delta = (ab[0] - one[a][0] - one[b][0], ab[1] - one[a][1] - one[b][1], ab[2] - one[a][2] - one[b][2])
            if delta != (0, 0.0, 0):
                out.append((a, b, delta))
    return out


#: One loss of one ledger, as :func:`ledger_losses` gives it: (outcome, bytes lost for good, bytes to
#: heal, per surviving bookie the bytes of healed entries it holds a copy of (each entry's bytes split
#: evenly over its surviving copies), per surviving bookie the bytes only it holds a copy of; the last
#: two None when not asked for).
Loss = tuple[int, float, float, "dict[str, float] | None", "dict[str, float] | None"]


def loss_metrics(d: Loss) -> tuple[int, float, int, float]:
    """:func:`metrics` of a :data:`Loss`."""
    return (1 if d[0] == LOSS else 0, d[1], 1 if d[0] == BELOW_AQ else 0, d[2])


def ledger_losses(ledger: LedgerView, tags: Mapping[str, tuple[str, str, str]],
                  damaged: frozenset[str] = frozenset()
                  ) -> tuple[list[tuple[str, str, Loss]], list[tuple[str, Loss]], list[tuple[str, str, tuple[int, float, int]]]]:
    """Everything the risk pass asks of one ledger, each distinct set of lost members evaluated once.

    Returns ``(domains, singles, pairs)``:

    * ``domains``: :func:`model.ledger_risk` ``(ledger, tags, pairs=True, damaged=damaged,
      existing=True)`` in the same order (``existing``, then each rack, zone, region by name, then rack
      pairs), each loss a :data:`Loss` (sources for every kind but ``rack_pair``, as there);
    * ``singles`` and ``pairs``: :func:`bookie_sets` ``(ledger, damaged)``, singles as :data:`Loss`.

    Same figures, bit for bit (same groups, same order of float sums; tested against both): a rack
    holding one member of the ledger loses what that bookie loses, a zone often what a rack does, so
    about half the evaluations of calling both are memo hits. ``tags[bookie] = (rack, zone, region)``;
    a bookie missing from it is in ``"unknown"`` everywhere. Pure; raises nothing for valid metadata
    (E, WQ >= 1: :func:`write_set`'s ValueError otherwise)."""
    E, WQ, AQ = ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum
    bpe = ledger.bytes_per_entry
    seen: dict[str, tuple[str, str, str]] = {}
    groups: Groups = []
    for seg in ledger.segments:
        ens = seg.ensemble
        for b in ens:
            if b not in seen:
                seen[b] = tags.get(b, UNKNOWN)
        for s, cnt in enumerate(residue_counts(seg.first, seg.last, E)):
            if cnt:
                ws = tuple(ens[j] for j in write_set(s, E, WQ))
                groups.append((cnt, ws, sum(1 for b in ws if b in damaged)))
    memo: dict[frozenset[str], Loss] = {}

    def evaluate(dead: frozenset[str], with_sources: bool) -> Loss:
        hit = memo.get(dead)
        if hit is not None and (hit[3] is not None or not with_sources):
            return hit
        outcome = NONE
        lost = heal = 0.0
        sources: dict[str, float] | None = {} if with_sources else None
        sole: dict[str, float] | None = {} if with_sources else None
        for cnt, ws, pre in groups:
            d = pre
            for b in ws:
                if b in dead:
                    d += 1
            if d == 0:
                continue
            left = WQ - d
            if left <= 0:
                outcome = LOSS
                lost += cnt * bpe
            else:
                if outcome < LOSS:
                    outcome = max(outcome, BELOW_AQ if left < AQ else COPY)
                heal += cnt * d * bpe
                if sources is not None and sole is not None:
                    share = cnt * bpe / left
                    for b in ws:
                        if b not in dead and b not in damaged:
                            sources[b] = sources.get(b, 0.0) + share
                            if left == 1 and share > 0:
                                sole[b] = sole.get(b, 0.0) + share
        res: Loss = (outcome, lost, heal, sources, sole)
        memo[dead] = res
        return res

    keep = storing(ledger, damaged)
    live = {b: t for b, t in seen.items() if b in keep}
    domains: list[tuple[str, str, Loss]] = []
    if damaged:
        d = evaluate(frozenset(), True)
        if d[0] != NONE:
            domains.append(("existing", "", d))
    for k, kind in enumerate(KINDS):
        for name in sorted({t[k] for t in live.values()}):
            domains.append((kind, name, evaluate(frozenset(b for b, t in live.items() if t[k] == name), True)))
    racks = sorted({t[0] for t in live.values()})
    for i in range(len(racks)):
        for j in range(i + 1, len(racks)):
            ra, rb = racks[i], racks[j]
            d = evaluate(frozenset(b for b, t in live.items() if t[0] == ra or t[0] == rb), False)
            domains.append(("rack_pair", f"{ra}|{rb}", (d[0], d[1], d[2], None, None)))
    ms = sorted(live)
    one = {b: evaluate(frozenset((b,)), False) for b in ms}
    m1 = {b: loss_metrics(d) for b, d in one.items()}
    pairs = []
    for i, a in enumerate(ms):
        ma = m1[a]
        for b in ms[i + 1:]:
            ab = loss_metrics(evaluate(frozenset((a, b)), False))
            mb = m1[b]
            delta = (ab[0] - ma[0] - mb[0], ab[1] - ma[1] - mb[1], ab[2] - ma[2] - mb[2])
            if delta != (0, 0.0, 0):
                pairs.append((a, b, delta))
    return domains, [(b, d) for b, d in one.items() if d[0] != NONE], pairs


def worst_pairs(singles: Mapping[str, tuple[float, float, float]],
                corrections: Mapping[tuple[str, str], tuple[float, float, float]],
                top: int = 3, bookies: Iterable[str] = ()) -> list[tuple[tuple[str, str], tuple[float, float, float]]]:
    """The ``top`` worst pairs, exactly. A pair with a correction loses single(a) + single(b) +
    correction; any other pair loses single(a) + single(b), and since the ranking is lexicographic (so
    adding the same figures keeps an order), the worst uncorrected pairs with ``a`` are its first
    ``top`` uncorrected partners in the order of singles: O(bookies × top + corrections).
    ``singles[b]`` and the values are (data-loss ledgers, lost bytes, below-AQ ledgers); a bookie of
    ``bookies`` missing from ``singles`` loses nothing alone. Returns ``[((a, b) with a < b, figures)]``,
    worst first by :func:`severity` (ties: the larger ids first), at most ``top``."""
    zero = (0.0, 0.0, 0.0)
    cand = dict(corrections)
    order = sorted(set(singles) | set(bookies), key=lambda b: (severity(*singles.get(b, zero)), b), reverse=True)
    for i, a in enumerate(order):
        found = 0
        for b in order[i + 1:]:
            key = (min(a, b), max(a, b))
            if key in corrections:
                continue
            cand[key] = zero
            found += 1
            if found >= top:
                break
    out = {}
    for (a, b), d in cand.items():
        sa, sb = singles.get(a, zero), singles.get(b, zero)
        out[(a, b)] = (sa[0] + sb[0] + d[0], sa[1] + sb[1] + d[1], sa[2] + sb[2] + d[2])
    return sorted(out.items(), key=lambda kv: (severity(*kv[1]), kv[0]), reverse=True)[:top]


def triple_corrections(ledger: LedgerView, candidates: Iterable[tuple[str, str]],
                       damaged: frozenset[str] = frozenset()) -> list[tuple[str, str, str, tuple[int, float, int]]]:
    """For each candidate pair ``(a, b)`` touching ``ledger`` and each other member ``c``: ``(a, b, c,
    delta)`` with ``delta = m({a,b,c}) − m({a,b}) − m({c})`` over (data-loss ledgers, lost bytes,
    below-AQ ledgers), so that summed over every ledger, triple(a, b, c) = pair(a, b) + single(c) +
    Σ delta (a ledger without ``c`` adds the pair's figures; one with ``c`` and neither pair member adds
    ``c``'s). Zero deltas are left out; a ledger holding neither member of any candidate gives ``[]``
    (most ledgers: the pass costs one membership test per candidate). Deltas are (ledgers, bytes,
    ledgers), as :func:`pair_corrections`."""
    ms = members(ledger, damaged)
    mset = set(ms)
    out = []
    groups: Groups | None = None
    for a, b in candidates:
        if a not in mset and b not in mset:
            continue
        if groups is None:
            groups = _groups(ledger, damaged)
        pair = {a, b} - damaged
        ab = metrics(_loss(ledger, groups, pair))
        for c in ms:
            if c in (a, b):
                continue
            abc = metrics(_loss(ledger, groups, pair | {c}))
            cc = metrics(_loss(ledger, groups, {c}))
            delta = (abc[0] - ab[0] - cc[0], abc[1] - ab[1] - cc[1], abc[2] - ab[2] - cc[2])
            if delta != (0, 0.0, 0):
                out.append((a, b, c, delta))
    return out


def worst_triples(pairs: Mapping[tuple[str, str], tuple[float, float, float]],
                  singles: Mapping[str, tuple[float, float, float]],
                  corrections: Mapping[tuple[str, str, str], tuple[float, float, float]],
                  bookies: Iterable[str], top: int = 3) -> list[tuple[tuple[str, str, str], tuple[float, float, float]]]:
    """The ``top`` worst triples made of a candidate pair (the keys of ``pairs``, each given as its
    (data-loss ledgers, lost bytes, below-AQ ledgers)) and any third bookie of ``bookies``, using
    :func:`triple_corrections` summed over every ledger (``corrections[(a, b, c)]``, the pair first as
    given). Returns ``[((x, y, z) sorted ids, (data-loss ledgers, lost bytes, below-AQ ledgers))]``, worst
    first by :func:`severity`, each triple once; ``[]`` when ``pairs`` is empty. ``singles[c]`` missing
    counts as no loss."""
    bookies = list(bookies)
    best: dict[tuple[str, str, str], tuple[float, float, float]] = {}
    zero = (0.0, 0.0, 0.0)
    for (a, b), p in pairs.items():
        for c in bookies:
            if c in (a, b):
                continue
            s = singles.get(c, zero)
            d = corrections.get((a, b, c), zero)
            key = tuple(sorted((a, b, c)))
            best[key] = (p[0] + s[0] + d[0], p[1] + s[1] + d[1], p[2] + s[2] + d[2])  # type: ignore[index]
    return sorted(best.items(), key=lambda kv: (severity(*kv[1]), kv[0]), reverse=True)[:top]


def decommission_shares(ledger: LedgerView, bookie: str
                        ) -> list[tuple[int, int, float, dict[str, float], dict[str, float]]]:
    """What decommissioning ``bookie`` makes the workers copy for ``ledger``: per segment holding it,
    ``(segment index, ensemble index, bytes it stores there, {other member: bytes read from it},
    {member: bytes only it holds another copy of})`` (each entry it stores is read once from one of its
    other copies, spread evenly in the first map; WQ = 1 entries have no other copy and are read from
    ``bookie`` itself while it still runs; :class:`model.SourceReads` takes both maps). ``[]`` when the ledger does not
    use ``bookie``. The model of upstream's ``decommissionbookie`` (``BookKeeperAdmin.decommissionBookie``:
    trigger an audit, wait until the workers have re-replicated every fragment of the bookie to one
    placement picks; the target is chosen by the caller, :func:`reports.jobs.decommission_partition`)."""
    E, WQ = ledger.ensemble_size, ledger.write_quorum
    bpe = ledger.bytes_per_entry
    out = []
    for si, seg in enumerate(ledger.segments):
        if bookie not in seg.ensemble:
            continue
        idx = seg.ensemble.index(bookie)
        stored = 0.0
        sources: dict[str, float] = {}
        sole: dict[str, float] = {}
        for s, cnt in enumerate(residue_counts(seg.first, seg.last, E)):
            ws = write_set(s, E, WQ)
            if not cnt or idx not in ws:
                continue
            stored += cnt * bpe
            others = [seg.ensemble[j] for j in ws if j != idx] or [bookie]
            for o in others:
                sources[o] = sources.get(o, 0.0) + cnt * bpe / len(others)
            if len(others) == 1 and cnt * bpe > 0:
                sole[others[0]] = sole.get(others[0], 0.0) + cnt * bpe
        out.append((si, idx, stored, sources, sole))
    return out
