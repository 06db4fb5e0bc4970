"""The Spark jobs behind ``autorecovery report`` (EDGE: PySpark).

Every O(ledgers) step runs in Spark: the snapshot's ``ledgers`` and ``segments`` tables are joined into
one row per ledger (segments as a sorted list), and ``mapInPandas`` runs the project's pure code on each
partition — ``reports/model.py`` for bytes and failure domains, the placement package's policies
(``is_ensemble_adhering``, BP-54 ``replace_to_adhere``) for placement — so a report and the daemon can
never disagree. Partitions pre-aggregate what they emit (per bookie, per domain and outcome), and only
those small aggregates, or tables sized by bookies and racks, reach the driver. Per-ledger verdicts are
written by Spark to Parquet, never collected. Starting Spark and reading the snapshot:
:mod:`autorecovery.reports.spark_io`.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd

from autorecovery.ledger.pulsar_names import pulsar_names
from autorecovery.ledger.striping import write_set
from autorecovery.reports import model

DAY_MS = 86_400_000


# -- executor side ------------------------------------------------------------------------------------
class Prepared:
    """A batch whose ledger views are built once and shared by every report (:func:`fused_partition`)."""

    __slots__ = ("views", "adherence")

    def __init__(self, pdf: pd.DataFrame) -> None:
        self.views = list(_views(pdf))
        #: ``(policy token, ensemble, WQ, AQ)`` → adherence: the placement what-if and the BP-54 plan ask
        #: the same policy about the same segments (:func:`_adhering`)
        self.adherence: dict[tuple, int] = {}


def _memo_of(pdf: pd.DataFrame | Prepared) -> dict[tuple, int]:
    return pdf.adherence if isinstance(pdf, Prepared) else {}


def _token(placement: Mapping[str, str] | None, locations: Mapping[str, str], members: tuple[list[str], list[str]]) -> str:
    """Names a policy by what builds it (config, locations, membership), so that two parts building the same
    policy share its answers (:class:`Prepared`)."""
    import hashlib
    import json

    text = json.dumps([sorted((placement or {}).items()), sorted(locations.items()), sorted(members[0]),
                       sorted(members[1])])
    return hashlib.sha256(text.encode()).hexdigest()


#: Policies whose ``is_ensemble_adhering`` is a function of the members' labels (``_label_of``: a rack,
#: ``(region, rack)``, ``(zone, upgrade domain)``), WQ and AQ only: ``TopologyAwarePolicy`` computes it as
#: ``_adherence_of_labels([_label_of(b) for b in ensemble], WQ, AQ)`` and these three add nothing that
#: changes during a report's pass (the region-aware one syncs feature switches, fixed here).
_LABELLED = frozenset({"RackawarePolicy", "RegionawarePolicy", "ZoneawarePolicy"})
#: label tuples remembered per policy token at most; past it that token's answers are dropped
_LABEL_MEMO_MAX = 500_000


class _Labels:
    """One policy token's memo for the life of the Python worker: the same token builds the same policy
    over the same membership, so its answers carry over from batch to batch. ``codes``: bookie → label
    (:func:`_label_code`); ``answers``: (labels, WQ, AQ) → adherence; ``pattern``: rack-aware (labels
    renumbered, :func:`_rack_pattern`); ``labelled``: the policy is one of :data:`_LABELLED` (else the
    per-batch ensemble memo alone)."""

    __slots__ = ("codes", "answers", "pattern", "labelled", "racks")

    def __init__(self, policy) -> None:
        name = type(policy).__name__
        self.labelled = name in _LABELLED and type(policy).__module__.startswith("autorecovery.placement.")
        self.pattern = self.labelled and name == "RackawarePolicy"
        self.codes: dict[str, Any] = {}
        self.answers: dict[tuple, int] = {}
        # rack → its code, kept with ``codes`` (not on the policy object: a policy rebuilt for the same
        # token would number its racks afresh while ``codes`` keeps the old numbers)
        self.racks: dict[Any, int] = {}


_LABEL_MEMOS: dict[str, _Labels] = {}


def _labelled(policy) -> bool:
    return _Labels(policy).labelled


def _label_code(policy, bookie: str, pattern: bool, racks: dict[Any, int]) -> Any:
    """The label ``bookie`` contributes to ``policy``'s adherence; with ``pattern`` (rack-aware) an int: -1
    no rack (unknown, read-only, departed), -2 the default rack, else the rack's own code (:func:`_rack_pattern`)."""
    lab = policy._label_of(bookie)
    if not pattern:
        return lab
    if lab is None:
        return -1
    if lab == policy.default_rack:
        return -2
    return racks.setdefault(lab, len(racks))


def _rack_pattern(codes: list[int]) -> tuple[int, ...]:
    """Rack codes renumbered by first appearance (-1 and -2 kept): the rack-aware verdict counts the
    distinct racks of each write set and asks whether the default rack is among them
    (``RackawarePolicy._judge_raw``), so two ensembles with one pattern have one verdict."""
    seen: dict[int, int] = {}
    return tuple([c if c < 0 else seen.setdefault(c, len(seen)) for c in codes])


def _adhering(policy, token: str, memo: dict[tuple, int], ensemble: tuple[str, ...], wq: int, aq: int) -> int:
    """``policy.is_ensemble_adhering`` (0 FAIL, 1 soft, 2 strict), once per (policy, ensemble, WQ, AQ) in
    ``memo`` (a batch's); for the topology-aware policies (:data:`_LABELLED`) also once per (policy, the
    members' labels, WQ, AQ) for the life of the worker: ensembles whose members sit in the same racks
    (rack-aware: in the same pattern of racks) get the answer of the first one asked — the same, as
    ``TopologyAwarePolicy.is_ensemble_adhering`` is a function of the labels (tested against the policy)."""
    key = (token, ensemble, wq, aq)
    v = memo.get(key)
    if v is not None:
        return v
    m = _LABEL_MEMOS.get(token)
    if m is None:
        m = _LABEL_MEMOS[token] = _Labels(policy)
    if not m.labelled:
        v = memo[key] = int(policy.is_ensemble_adhering(list(ensemble), wq, aq))
        return v
    codes = m.codes
    try:
        lab = [codes[b] for b in ensemble]
    except KeyError:
        for b in ensemble:
            if b not in codes:
                codes[b] = _label_code(policy, b, m.pattern, m.racks)
        lab = [codes[b] for b in ensemble]
    lkey = (_rack_pattern(lab) if m.pattern else tuple(lab), wq, aq)
    v = m.answers.get(lkey)
    if v is None:
        if len(m.answers) >= _LABEL_MEMO_MAX:
            m.answers.clear()
        v = m.answers[lkey] = int(policy.is_ensemble_adhering(list(ensemble), wq, aq))
    memo[key] = v
    return v


def _views(pdf: pd.DataFrame | Prepared) -> Iterator[tuple[model.LedgerView, Any]]:
    if isinstance(pdf, Prepared):
        yield from pdf.views
        return
    for row in pdf.itertuples(index=False):
        segs = tuple(model.SegmentView(int(s["first_entry_id"]), int(s["last_entry_id"]), tuple(s["ensemble"]))
                     for s in row.segs)
        lv = model.LedgerView(int(row.ledger_id), int(row.ensemble_size), int(row.write_quorum),
                              int(row.ack_quorum), int(row.last_entry_id), int(row.length),
                              row.state == "CLOSED", segs)
        if not lv.closed:
            lv = model.with_lac(lv, _int_or_none(getattr(row, "lac", None)), _int_or_none(getattr(row, "lac_length", None)))
        yield lv, row


def _int_or_none(v: Any) -> int | None:
    """A nullable Parquet integer as pandas gives it (None, NaN or pd.NA when null)."""
    if v is None or v is pd.NA:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else int(f)


def damaged_of(row: Any, gone: frozenset[str]) -> frozenset[str]:
    """Bookies whose copies of the row's ledger are already lost: ``gone`` (known only by a cookie) and
    the replicas its under-replication markers name."""
    marked = getattr(row, "marked", None)
    if marked is None or (isinstance(marked, float) and marked != marked):
        return gone
    return gone | frozenset(str(b) for b in marked)


#: ``(step, finish)`` of a folding part: ``step(batch)`` folds one batch, ``finish()`` yields the sums.
Fold = tuple[Callable[[Any], None], Callable[[], Iterator[pd.DataFrame]]]


def _aggregating(make: Callable[[], Fold]):
    """A mapInPandas function that folds every batch of its partition into one state and emits the sums
    once, at the end. ``make()`` gives fresh ``(step, finish)``: ``step(batch)`` folds one batch (a
    pandas frame or a :class:`Prepared`), ``finish()`` yields the rows. :func:`fused_partition` drives
    ``make`` itself so that such parts emit once per partition, not once per Arrow batch."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        step, finish = make()
        for pdf in batches:
            step(pdf)
        yield from finish()

    run.make = make  # type: ignore[attr-defined]
    return run


def capacity_partition(recent_since_ms: int):
    """mapInPandas function: bytes per bookie (all, and of ledgers created since ``recent_since_ms``) and
    ledgers per bookie: :func:`model.bytes_per_bookie` of every ledger, summed for a whole batch at once
    (:class:`capacityvec.BookieBytes`, the same float sums)."""

    from autorecovery.reports.capacityvec import BookieBytes

    def make() -> Fold:
        codes: dict[str, int] = {}
        acc = BookieBytes()

        def step(pdf: pd.DataFrame | Prepared) -> None:
            cols: tuple[list, ...] = ([], [], [], [], [], [], [])  # per segment: ledger, E, WQ, first, last, bpe, new
            mem: tuple[list, ...] = ([], [], [])  # per member: code, segment row, index
            distinct: list[int] = []
            code = codes.setdefault
            for i, (lv, row) in enumerate(pdf.views if isinstance(pdf, Prepared) else _views(pdf)):
                new = int(row.ctime) >= recent_since_ms
                bpe = lv.bytes_per_entry
                seen: set[int] = set()
                for seg in lv.segments:
                    k = len(cols[0])
                    for col, v in zip(cols, (i, lv.ensemble_size, lv.write_quorum, seg.first, seg.last, bpe, new), strict=True):
                        col.append(v)
                    for idx, b in enumerate(seg.ensemble):
                        c = code(b, len(codes))
                        mem[0].append(c)
                        mem[1].append(k)
                        mem[2].append(idx)
                        seen.add(c)
                distinct.extend(seen)
            seg_ledger, seg_e, seg_wq, seg_first, seg_last = (np.asarray(c, np.int64) for c in cols[:5])
            mem_code, mem_seg, mem_idx = (np.asarray(m, np.int64) for m in mem)
            acc.add(seg_ledger, seg_e, seg_wq, seg_first, seg_last, np.asarray(cols[5], np.float64),
                    np.asarray(cols[6], bool), mem_code, mem_seg, mem_idx, np.asarray(distinct, np.int64))

        def finish() -> Iterator[pd.DataFrame]:
            names = list(codes)
            got = np.flatnonzero(acc.seen[:len(names)])
            yield pd.DataFrame({"bookie_id": [names[c] for c in got.tolist()], "used_bytes": acc.used[got],
                                "recent_bytes": acc.recent[got], "ledgers": acc.ledgers[got].astype(np.float64)})

        return step, finish

    return _aggregating(make)


CAPACITY_SCHEMA = "bookie_id string, used_bytes double, recent_bytes double, ledgers double"


def _policy(placement: Mapping[str, str], locations: Mapping[str, str], members: tuple[list[str], list[str]]):
    """The configured policy over the snapshot's membership, as the daemon builds it: ``members`` is
    (writable, read-only) bookie ids; a bookie known only by its cookie is not in the topology."""
    from autorecovery.placement.config import PlacementConfig
    from autorecovery.placement.factory import policy_from_name
    from autorecovery.placement.resolvers import StaticResolver

    props = dict(placement)
    name = props.pop("ensemblePlacementPolicy", None)
    cfg = PlacementConfig.from_properties(props)
    policy = policy_from_name(name, cfg, StaticResolver(dict(locations)))
    policy.on_cluster_changed(set(members[0]), set(members[1]))
    return policy


#: token → the policy it names, built once per Python worker (a policy over 1k bookies costs tens of ms to
#: build, and the fused pass asked for three per Arrow batch); a few tokens at most
_POLICIES: dict[str, Any] = {}


def _policy_of(token: str, placement: Mapping[str, str], locations: Mapping[str, str],
               members: tuple[list[str], list[str]]):
    """:func:`_policy`, built once per ``token`` (:func:`_token` of the same arguments) and reused by the
    following batches, as one batch reuses it for all its ledgers: adherence asks change nothing, and a
    BP-54 repair seeds the policy's random picks itself before each segment (``repair_partition``)."""
    pol = _POLICIES.get(token)
    if pol is None:
        if len(_POLICIES) >= 8:
            _POLICIES.clear()
        pol = _POLICIES[token] = _policy(placement, locations, members)
    return pol


VERDICT = {0: "FAIL", 1: "MEETS_SOFT", 2: "MEETS_STRICT"}


def placement_partition(current: Mapping[str, str], what_if: Mapping[str, str] | None,
                        locations: Mapping[str, str], members: tuple[list[str], list[str]]):
    """mapInPandas function: per closed ledger, the worst segment verdict under the current placement
    config and under ``what_if`` (upstream ``isEnsembleAdheringToPlacementPolicy``)."""

    tokens = (_token(current, locations, members), _token(what_if, locations, members))

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        pol = _policy_of(tokens[0], current, locations, members)
        alt = _policy_of(tokens[1], what_if, locations, members) if what_if else None
        names: dict[Any, tuple[str, str, str]] = {}
        for pdf in batches:
            memo = _memo_of(pdf)
            out: dict[str, list] = {"ledger_id": [], "state": [], "current": [], "what_if": [], "tenant": [],
                                    "namespace": []}
            for lv, row in _views(pdf):
                ml = row.managed_ledger
                got = names.get(ml)
                if got is None:
                    got = names[ml] = pulsar_names({"pulsar/managed-ledger": ml or ""} if ml else None)
                tenant, ns, _topic = got
                out["ledger_id"].append(lv.ledger_id)
                out["state"].append(row.state)
                out["tenant"].append(tenant)
                out["namespace"].append(ns)
                if not lv.closed:
                    out["current"].append("OPEN_SKIPPED")
                    out["what_if"].append("OPEN_SKIPPED")
                    continue
                out["current"].append(_worst(pol, lv, tokens[0], memo))
                out["what_if"].append(_worst(alt, lv, tokens[1], memo) if alt else "")
            yield pd.DataFrame(out)

    return run


PLACEMENT_SCHEMA = "ledger_id long, state string, current string, what_if string, tenant string, namespace string"


def _worst(policy, lv: model.LedgerView, token: str, memo: dict[tuple, int]) -> str:
    worst = 2
    for seg in lv.segments:
        worst = min(worst, _adhering(policy, token, memo, seg.ensemble, lv.write_quorum, lv.ack_quorum))
    return VERDICT[worst]


def repair_partition(target: Mapping[str, str], locations: Mapping[str, str], members: tuple[list[str], list[str]],
                     reads: bool = False):
    """mapInPandas function: the BP-54 repair plan under ``target`` — for each closed ledger with a FAIL
    segment, the minimum-swap ``replace_to_adhere`` result: one row per swap with the bytes the replaced
    member stored (what the worker copies from a readable replica to the new member; ``source`` is the
    member replaced, whose disk the bytes leave). Deterministic: the policy's random tie-breaks are
    seeded by ``(ledger id, segment's first entry)``, so a snapshot gives one plan whatever the batches.

    With ``reads`` (the fused pass), each batch also yields rows ``part`` = ``repair_read``: per bookie
    holding a readable copy of a swapped entry (writable or read-only: a read-only bookie serves reads;
    a bookie in neither list is gone and serves nothing), ``bytes`` = its even share of those entries
    and ``heal_bytes`` = the bytes of the entries whose only readable copy it holds
    (:class:`model.SourceReads`, the plan's copy time)."""

    token = _token(target, locations, members)
    readable = frozenset(members[0]) | frozenset(members[1])

    def read_shares(lv: model.LedgerView, seg: model.SegmentView, idx: int, acc: dict[str, list[float]]) -> None:
        E, WQ, bpe = lv.ensemble_size, lv.write_quorum, lv.bytes_per_entry
        for s, cnt in enumerate(model.residue_counts(seg.first, seg.last, E)):
            ws = write_set(s, E, WQ)
            if not cnt or idx not in ws:
                continue
            copies = [seg.ensemble[j] for j in ws if seg.ensemble[j] in readable]
            for b in copies:
                v = acc.setdefault(b, [0.0, 0.0])
                v[0] += cnt * bpe / len(copies)
                if len(copies) == 1:
                    v[1] += cnt * bpe

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        pol = _policy_of(token, target, locations, members)
        for pdf in batches:
            memo = _memo_of(pdf)
            acc: dict[str, list[float]] = {}
            out: dict[str, list] = {"ledger_id": [], "segment_first_entry_id": [], "source": [], "target": [],
                                    "bytes": [], "fixable": []}
            for lv, _row in _views(pdf):
                if not lv.closed:
                    continue
                bpe = lv.bytes_per_entry
                for seg in lv.segments:
                    if _adhering(pol, token, memo, seg.ensemble, lv.write_quorum, lv.ack_quorum) != 0:
                        continue
                    ens = list(seg.ensemble)
                    # the policy picks at random among equally good bookies; seeded by the segment, the plan
                    # is the same on every run and however Spark splits the ledgers into batches
                    pol.rng.seed(f"{lv.ledger_id}:{seg.first}")
                    res = pol.replace_to_adhere(lv.ensemble_size, lv.write_quorum, lv.ack_quorum, set(), ens)
                    fixed = int(res.adherence) != 0
                    for idx in (res.replaced if fixed else []):
                        n = model.entries_on_index(seg.first, seg.last, lv.ensemble_size, lv.write_quorum, idx)
                        out["ledger_id"].append(lv.ledger_id)
                        out["segment_first_entry_id"].append(seg.first)
                        out["source"].append(ens[idx])
                        out["target"].append(res.ensemble[idx])
                        out["bytes"].append(n * bpe)
                        out["fixable"].append(True)
                        if reads:
                            read_shares(lv, seg, idx, acc)
                    if not fixed:
                        out["ledger_id"].append(lv.ledger_id)
                        out["segment_first_entry_id"].append(seg.first)
                        out["source"].append("")
                        out["target"].append("")
                        out["bytes"].append(0.0)
                        out["fixable"].append(False)
            yield pd.DataFrame(out)
            if reads and acc:
                yield pd.DataFrame({"part": "repair_read", "bookie_id": list(acc),
                                    "bytes": [v[0] for v in acc.values()], "heal_bytes": [v[1] for v in acc.values()]})

    return run


REPAIR_SCHEMA = ("ledger_id long, segment_first_entry_id long, source string, target string, bytes double, "
                 "fixable boolean")


def risk_partition(location: Mapping[str, Mapping[str, str]], kinds: tuple[str, ...],
                   gone: frozenset[str] = frozenset(), bookie_sets: bool = True):
    """mapInPandas function: per failure domain and outcome, the ledgers, unrecoverable bytes and bytes to
    heal (``model.ledger_risk``, on top of the copies already lost: ``gone`` bookies and the replicas of
    each ledger's markers), pre-aggregated in the partition. Pairs of racks are emitted only for
    ledgers on both racks, with correction rows (negative) that let the driver add the single-rack
    totals of both racks: pair(a, b) = pair rows + single(a) + single(b).

    Rows carry ``part``: ``risk`` (the above; kind ``existing`` = the damage with nothing more lost),
    ``heal_src`` (kind, name, bookie_id; bytes: the bookie's even share of the healed entries it
    holds a copy of, heal_bytes: the bytes only it holds a copy of; to heal a rack, zone or region) and, with ``bookie_sets``, ``kloss``: kind ``bookie`` (name = bookie id; ledgers =
    data-loss ledgers, lost_bytes, bytes = below-AQ ledgers, heal_bytes, of :func:`whatif.single_losses`)
    and ``bookie_pair`` (name ``a|b``; the same figures of :func:`whatif.pair_corrections`' deltas).

    The per-ledger figures are :func:`whatif.ledger_losses`', computed for a whole batch at once
    (:func:`riskvec.batch_losses`, summed by :class:`riskpass.RiskFold`)."""
    from autorecovery.reports.riskpass import RiskFold

    tags = {b: (loc.get("rack", "unknown"), loc.get("zone", "unknown"), loc.get("region", "unknown"))
            for b, loc in location.items()}
    gone = frozenset(gone)

    def make() -> Fold:
        fold = RiskFold(tags, kinds, gone, bookie_sets)

        def step(pdf: pd.DataFrame | Prepared) -> None:
            fold.step(pdf.views if isinstance(pdf, Prepared) else list(_views(pdf)), gone)

        return step, fold.finish

    return _aggregating(make)


def triple_partition(candidates: list[tuple[str, str]], gone: frozenset[str] = frozenset()):
    """mapInPandas function: :func:`whatif.triple_corrections` of every ledger for the candidate pairs,
    summed per triple: rows ``name`` = ``a|b|c`` (the pair, then the third bookie), ``ledgers`` = data-loss
    ledger delta, ``lost_bytes``, ``heal_bytes`` = below-AQ ledger delta."""
    from autorecovery.reports import whatif

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        acc: dict[str, list[float]] = {}
        with _few_collections():
            _fold(batches, acc)
        if acc:  # an empty frame's object columns do not convert to the schema's doubles
            yield pd.DataFrame({"name": list(acc), "ledgers": [float(v[0]) for v in acc.values()],
                                "lost_bytes": [float(v[1]) for v in acc.values()],
                                "below": [float(v[2]) for v in acc.values()]})

    def _fold(batches: Iterator[pd.DataFrame], acc: dict[str, list[float]]) -> None:
        for pdf in batches:
            for lv, row in _views(pdf):
                for a, b, c, (dl, lb, bq) in whatif.triple_corrections(lv, candidates, damaged_of(row, gone)):
                    v = acc.setdefault(f"{a}|{b}|{c}", [0.0, 0.0, 0.0])
                    v[0] += dl
                    v[1] += lb
                    v[2] += bq

    return run


TRIPLE_SCHEMA = "name string, ledgers double, lost_bytes double, below double"


def decommission_partition(bookie: str, placement: Mapping[str, str], locations: Mapping[str, str],
                           members: tuple[list[str], list[str]]):
    """mapInPandas function: what decommissioning ``bookie`` moves. Per segment holding it, the
    configured policy's ``replace_bookie`` (excluding ``bookie``) names the new member; rows (``part``
    ``decom``): kind ``target`` (bookie_id, bytes, ledgers), ``source`` (bookie_id, bytes read),
    ``sole`` (bookie_id, bytes only it holds another copy of), ``verdict`` (current = the segment's verdict now, what_if = after the replacement, ledgers) and
    ``unplaceable`` (segments the policy finds no bookie for)."""
    from autorecovery.errors import AutoRecoveryError
    from autorecovery.reports import whatif

    def make() -> Fold:
        live = ([b for b in members[0] if b != bookie], [b for b in members[1] if b != bookie])
        pol = _policy(placement, locations, live)
        agg: dict[tuple[str, str, str, str], list[float]] = {}

        def add(key: tuple[str, str, str, str], nbytes: float, n: float = 1.0) -> None:
            v = agg.setdefault(key, [0.0, 0.0])
            v[0] += nbytes
            v[1] += n

        def step(pdf: pd.DataFrame | Prepared) -> None:
            for lv, _row in _views(pdf):
                for si, idx, stored, sources, sole in whatif.decommission_shares(lv, bookie):
                    ens = list(lv.segments[si].ensemble)
                    before = _verdict(pol, ens, lv)
                    try:
                        res = pol.replace_bookie(lv.ensemble_size, lv.write_quorum, lv.ack_quorum, ens, bookie,
                                                 exclude={bookie})
                    except AutoRecoveryError:
                        add(("unplaceable", "", before, ""), stored)
                        continue
                    new = list(res.ensemble)
                    add(("target", str(new[idx]), "", ""), stored)
                    for b, nbytes in sources.items():
                        add(("source", b, "", ""), nbytes, 0.0)
                    for b, nbytes in sole.items():
                        add(("sole", b, "", ""), nbytes, 0.0)
                    add(("verdict", "", before, _verdict(pol, new, lv)), stored)

        def finish() -> Iterator[pd.DataFrame]:
            yield pd.DataFrame({"part": "decom", "kind": [k[0] for k in agg], "bookie_id": [k[1] for k in agg],
                                "current": [k[2] for k in agg], "what_if": [k[3] for k in agg],
                                "bytes": [v[0] for v in agg.values()], "ledgers": [v[1] for v in agg.values()]})

        return step, finish

    return _aggregating(make)


def non_empty(fn):
    """A mapInPandas function that drops ``fn``'s empty frames (their object columns do not convert to
    the schema's types, a pyarrow error); the fused pass does this for its parts."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for out in fn(batches):
            if len(out):
                yield out

    return run


def _verdict(policy, ensemble: list[str], lv: model.LedgerView) -> str:
    return VERDICT[int(policy.is_ensemble_adhering(ensemble, lv.write_quorum, lv.ack_quorum))]


RISK_SCHEMA = ("kind string, name string, outcome int, namespace string, ledgers double, lost_bytes double, "
               "heal_bytes double")


#: One schema for every report's rows (``part`` says which): one pass over the ledgers feeds them all.
FUSED_SCHEMA = ("part string, bookie_id string, used_bytes double, recent_bytes double, ledger_id long, "
                "state string, current string, what_if string, tenant string, namespace string, "
                "segment_first_entry_id long, source string, target string, bytes double, fixable boolean, "
                "kind string, name string, outcome int, ledgers double, lost_bytes double, heal_bytes double")
_FUSED_COLUMNS = [c.split()[0] for c in FUSED_SCHEMA.split(", ")]
_PANDAS_TYPES = {"string": "object", "double": "float64", "long": "Int64", "int": "Int32", "boolean": "boolean"}
_FUSED_DTYPES = {c.split()[0]: _PANDAS_TYPES[c.split()[1]] for c in FUSED_SCHEMA.split(", ")}


@contextlib.contextmanager
def _few_collections(young: int = 100_000) -> Iterator[None]:
    """Python's cyclic GC with a young generation of ``young`` objects (default 700) while a pass runs:
    the views and rows of a batch are many short-lived objects, and collecting every 700 of them cost
    10-15% of the fused pass's CPU (``bench/reports_profile.py --parts``). Nothing is left uncollected:
    collections still run, less often; the thresholds are restored when the pass ends."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], young), max(old[1], 50), max(old[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*old)


def fused_partition(parts: Mapping[str, Any]):
    """mapInPandas function running several reports in one pass: ``parts`` maps ``capacity`` /
    ``placement`` / ``repair`` / ``risk`` to the function one of the ``*_partition`` factories above
    returned. Each Arrow batch is turned into ledger views once; every report's rows come out tagged
    with ``part``. Per-ledger parts (placement, repair) emit rows per batch; the folding parts
    (capacity, risk, decommission: :func:`_aggregating`) emit their sums once per partition, so the
    rows persisted and shuffled grow with partitions × bookies (pairs), not with ledgers."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        with _few_collections():
            yield from _run(batches)

    def _run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        def typed(name: str, out: pd.DataFrame) -> pd.DataFrame:
            if "part" not in out.columns:
                out = out.assign(part=name)
            return out.reindex(columns=_FUSED_COLUMNS).astype(_FUSED_DTYPES)

        folds = {name: fn.make() for name, fn in parts.items() if hasattr(fn, "make")}
        for pdf in batches:
            prepared = Prepared(pdf)
            for name, fn in parts.items():
                if name in folds:
                    folds[name][0](prepared)
                    continue
                for out in fn(iter([prepared])):
                    if len(out):
                        if name == "repair" and "part" not in out.columns:  # 1.0 on a ledger's first row per fixable: the roll-up counts ledgers
                            out = out.assign(ledgers=(~out.duplicated(["ledger_id", "fixable"])).astype("float64"))
                        yield typed(name, out)
        for name, (_step, finish) in folds.items():
            for out in finish():
                if len(out):
                    yield typed(name, out)

    return run
