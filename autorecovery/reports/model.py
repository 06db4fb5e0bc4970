"""What a metadata snapshot says about bytes, failure domains and placement, one ledger at a time (PURE).

The Spark jobs (``reports/jobs.py``) run these functions inside executors, and the single-process
baseline of ``bench/reports.py`` runs the same functions over the whole snapshot, so every number in a
report comes from here. No I/O, no Spark, no pandas.

Conventions (upstream round-robin striping, ``ledger/striping.py``): entry ``e`` of a segment with
ensemble size E and write quorum WQ is stored on ensemble indexes ``(e + k) mod E`` for ``k < WQ``. A
ledger's bytes are spread evenly over its entries (``length / (lastEntryId + 1)``: metadata records the
total length, not per-entry sizes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autorecovery.ledger.striping import count_on_index, count_with_residue, write_set

#: Outcome of losing a failure domain, worst first. A ledger takes its worst segment's outcome.
LOSS, BELOW_AQ, COPY, NONE = 3, 2, 1, 0
OUTCOME_NAMES = {LOSS: "data_loss", BELOW_AQ: "below_ack_quorum", COPY: "copy_lost", NONE: "unaffected"}


@dataclass(frozen=True)
class SegmentView:
    """One segment: entries ``first..last`` (inclusive; ``last < first`` when empty) on ``ensemble``."""

    first: int
    last: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True)
class LedgerView:
    """The fields of a ledger the reports need. ``length``: bytes; ``last_entry_id``: -1 when empty."""

    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    last_entry_id: int
    length: int
    closed: bool
    segments: tuple[SegmentView, ...]

    @property
    def bytes_per_entry(self) -> float:
        """Average entry size in bytes (0.0 for an empty ledger)."""
        n = self.last_entry_id + 1
        return self.length / n if n > 0 else 0.0


def segments_of(first_ids: Sequence[int], ensembles: Sequence[Sequence[str]], last_entry_id: int) -> tuple[SegmentView, ...]:
    """Segments from the metadata's (first entry id, ensemble) list: each ends where the next starts; the last
    ends at ``last_entry_id``. ``first_ids`` must be ascending (as metadata stores them)."""
    out = []
    for i, (first, ens) in enumerate(zip(first_ids, ensembles, strict=True)):
        last = first_ids[i + 1] - 1 if i + 1 < len(first_ids) else last_entry_id
        out.append(SegmentView(int(first), int(last), tuple(ens)))
    return tuple(out)


def residue_counts(first: int, last: int, ensemble_size: int) -> list[int]:
    """``counts[s]`` = number of entries ``e`` in ``first..last`` with ``e mod E == s`` (zeros when empty)."""
    if last < first:
        return [0] * ensemble_size
    return [count_with_residue(first, last, s, ensemble_size) for s in range(ensemble_size)]


def entries_on_index(first: int, last: int, ensemble_size: int, write_quorum: int, index: int) -> int:
    """How many entries of ``first..last`` ensemble index ``index`` stores (round robin; the rule is
    :func:`autorecovery.ledger.striping.count_on_index`)."""
    return count_on_index(first, last, index, ensemble_size, write_quorum)


def bytes_per_bookie(ledger: LedgerView) -> dict[str, float]:
    """Bytes each bookie stores for ``ledger`` (a bookie twice in one ensemble cannot happen; repeated
    across segments, its shares add up)."""
    bpe = ledger.bytes_per_entry
    out: dict[str, float] = {}
    for seg in ledger.segments:
        for idx, bookie in enumerate(seg.ensemble):
            n = entries_on_index(seg.first, seg.last, ledger.ensemble_size, ledger.write_quorum, idx)
            if n:
                out[bookie] = out.get(bookie, 0.0) + n * bpe
    return out


def with_lac(ledger: LedgerView, lac: int | None, length: int | None = None) -> LedgerView:
    """An open or in-recovery ledger as far as its bookies confirmed: the last segment ends at ``lac``
    (the highest last-add-confirmed the last segment's bookies answered at export) and ``length`` is the
    cumulative length recorded in entry ``lac``'s header (bytes; None → the metadata's length, 0 while
    open). ``lac`` None (not read, or an old snapshot) → the ledger as the metadata says (last segment
    empty). A closed ledger is returned unchanged."""
    if ledger.closed or lac is None or lac < 0 or not ledger.segments:
        return ledger
    last_seg = ledger.segments[-1]
    lac = max(lac, last_seg.first - 1)
    segs = (*ledger.segments[:-1], SegmentView(last_seg.first, lac, last_seg.ensemble))
    return LedgerView(ledger.ledger_id, ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum, lac,
                      ledger.length if length is None or length < 0 else int(length), ledger.closed, segs)


@dataclass(frozen=True)
class DomainLoss:
    """What losing a set of bookies does to one ledger.

    Attributes:
        outcome: :data:`LOSS` (some entry loses every copy), :data:`BELOW_AQ` (some entry keeps fewer
            than AQ copies), :data:`COPY` (copies lost, every entry keeps at least AQ), :data:`NONE`.
        lost_bytes: bytes of entries with no copy left (cannot be healed).
        heal_bytes: bytes of lost copies of entries that keep a copy (what re-replication must copy).
    """

    outcome: int
    lost_bytes: float
    heal_bytes: float
    #: per surviving bookie, the bytes of healed entries it holds a copy of, each entry's bytes split
    #: evenly over its surviving copies (the sum is what healing reads, each entry once; the keys are
    #: the bookies it can read from: :class:`SourceReads`)
    sources: Mapping[str, float] = field(default_factory=dict, compare=False)
    #: per surviving bookie, the bytes of healed entries whose only surviving copy it holds
    sole: Mapping[str, float] = field(default_factory=dict, compare=False)


def domain_loss(ledger: LedgerView, dead: set[str] | frozenset[str],
                damaged: set[str] | frozenset[str] = frozenset()) -> DomainLoss:
    """The effect on ``ledger`` of losing every bookie in ``dead`` (the reports' risk question), on top of
    copies already lost: ``damaged`` are bookies whose copies of this ledger are gone already (bookies
    known only by their cookie, the replicas of its under-replication marker)."""
    E, WQ, AQ = ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum
    bpe = ledger.bytes_per_entry
    outcome = NONE
    lost = heal = 0.0
    sources: dict[str, float] = {}
    sole: dict[str, float] = {}
    for seg in ledger.segments:
        dead_idx = {i for i, b in enumerate(seg.ensemble) if b in dead or b in damaged}
        if not dead_idx:
            continue
        counts = residue_counts(seg.first, seg.last, E)
        for s, cnt in enumerate(counts):
            if cnt == 0:
                continue
            ws = write_set(s, E, WQ)
            copies_dead = sum(1 for j in ws if j in dead_idx)
            if copies_dead == 0:
                continue
            left = WQ - copies_dead
            if left == 0:
                outcome = max(outcome, LOSS)
                lost += cnt * bpe
            else:
                outcome = max(outcome, BELOW_AQ if left < AQ else COPY)
                heal += cnt * copies_dead * bpe
                for j in ws:
                    if j not in dead_idx:
                        b = seg.ensemble[j]
                        sources[b] = sources.get(b, 0.0) + cnt * bpe / left
                        if left == 1 and cnt * bpe > 0:
                            sole[b] = sole.get(b, 0.0) + cnt * bpe
    return DomainLoss(outcome, lost, heal, sources, sole)


def storing(ledger: LedgerView, damaged: set[str] | frozenset[str] = frozenset()) -> frozenset[str]:
    """The ledger's bookies that store at least one of its entries and whose copies are not lost already
    (``damaged``). A member only of an empty segment (an open ledger's last one, before any entry)
    stores nothing. The reports' rule: a failure domain or a set of bookies counts a ledger only if it
    holds such a copy of it; losing it changes nothing for the others (their existing damage is
    ``risk.existing_damage``)."""
    out: set[str] = set()
    E, WQ = ledger.ensemble_size, ledger.write_quorum
    for seg in ledger.segments:
        for idx, b in enumerate(seg.ensemble):
            if b not in out and b not in damaged and entries_on_index(seg.first, seg.last, E, WQ, idx):
                out.add(b)
    return frozenset(out)


def ledger_domains(ledger: LedgerView, location: Mapping[str, Mapping[str, str]], kinds: Iterable[str],
                   pairs_of: str | None = "rack") -> list[tuple[str, str]]:
    """The failure domains that touch ``ledger``: ``(kind, name)`` for each kind (``rack``, ``zone``,
    ``region``) the location of a bookie storing an entry names (:func:`storing`), plus
    ``("rack_pair", "a|b")`` for every pair of racks that both hold one (sorted names).
    ``location[bookie][kind]`` gives the domain names; a bookie missing from it is in domain
    ``"unknown"``."""
    out: set[tuple[str, str]] = set()
    kinds = tuple(kinds)
    racks: set[str] = set()
    keep = storing(ledger)
    for seg in ledger.segments:
        for b in seg.ensemble:
            if b not in keep:
                continue
            loc = location.get(b, {})
            for kind in kinds:
                out.add((kind, loc.get(kind, "unknown")))
            if pairs_of:
                racks.add(loc.get(pairs_of, "unknown"))
    if pairs_of:
        rs = sorted(racks)
        for i in range(len(rs)):
            for j in range(i + 1, len(rs)):
                out.add(("rack_pair", f"{rs[i]}|{rs[j]}"))
    return sorted(out)


def members_in(ledger: LedgerView, location: Mapping[str, Mapping[str, str]], kind: str, name: str) -> frozenset[str]:
    """The ledger's bookies that are in domain ``(kind, name)``; ``rack_pair`` names ``"a|b"``."""
    if kind == "rack_pair":
        a, b = name.split("|", 1)
        wanted = {a, b}
        return frozenset(m for seg in ledger.segments for m in seg.ensemble
                         if location.get(m, {}).get("rack", "unknown") in wanted)
    return frozenset(m for seg in ledger.segments for m in seg.ensemble
                     if location.get(m, {}).get(kind, "unknown") == name)


UNKNOWN = ("unknown", "unknown", "unknown")
KINDS = ("rack", "zone", "region")


def ledger_risk(ledger: LedgerView, tags: Mapping[str, tuple[str, str, str]],
                pairs: bool = True, damaged: set[str] | frozenset[str] = frozenset(),
                existing: bool = False) -> list[tuple[str, str, DomainLoss]]:
    """:func:`domain_loss` for every failure domain that touches ``ledger``, in one pass: each rack, zone
    and region holding a copy of an entry not lost already (:func:`storing`; ``tags[bookie] = (rack,
    zone, region)``; missing → ``"unknown"``), and with ``pairs`` every pair of racks that both hold
    one (``("rack_pair", "a|b")``, sorted names).
    ``damaged``: bookies whose copies of this ledger are already lost (see :func:`domain_loss`); with
    ``existing`` also ``("existing", "", loss)``: the damage with no domain lost (omitted when none).

    Same answers as calling :func:`domain_loss` per domain (tested), about 3x faster: the write sets of
    each residue are built once per ledger instead of once per domain. Rack pairs carry no ``sources``.
    """
    E, WQ, AQ = ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum
    bpe = ledger.bytes_per_entry
    groups: list[tuple[int, tuple[tuple[str, tuple[str, str, str], bool], ...]]] = []
    seen: dict[str, tuple[str, str, str]] = {}
    for seg in ledger.segments:
        for b in seg.ensemble:
            if b not in seen:
                seen[b] = tags.get(b, UNKNOWN)
        counts = residue_counts(seg.first, seg.last, E)
        ens = seg.ensemble
        for s, cnt in enumerate(counts):
            if cnt:
                groups.append((cnt, tuple((ens[j], seen[ens[j]], ens[j] in damaged) for j in write_set(s, E, WQ))))

    def evaluate(k: int, names: tuple[str, ...], with_sources: bool = True) -> DomainLoss:
        outcome = NONE
        lost = heal = 0.0
        sources: dict[str, float] = {}
        sole: dict[str, float] = {}
        for cnt, ws in groups:
            dead = 0
            for _b, t, gone in ws:
                if gone or t[k] in names:
                    dead += 1
            if dead == 0:
                continue
            left = WQ - dead
            if left == 0:
                outcome = LOSS
                lost += cnt * bpe
            else:
                if outcome < LOSS:
                    outcome = max(outcome, BELOW_AQ if left < AQ else COPY)
                heal += cnt * dead * bpe
                if with_sources:
                    share = cnt * bpe / left
                    for b, t, gone in ws:
                        if not gone and t[k] not in names:
                            sources[b] = sources.get(b, 0.0) + share
                            if left == 1 and share > 0:
                                sole[b] = sole.get(b, 0.0) + share
        return DomainLoss(outcome, lost, heal, sources, sole)

    out: list[tuple[str, str, DomainLoss]] = []
    if existing and damaged:
        d = evaluate(0, ())
        if d.outcome != NONE:
            out.append(("existing", "", d))
    keep = storing(ledger, damaged)
    held = [t for b, t in seen.items() if b in keep]
    for k, kind in enumerate(KINDS):
        for name in sorted({t[k] for t in held}):
            out.append((kind, name, evaluate(k, (name,))))
    if pairs:
        racks = sorted({t[0] for t in held})
        for i in range(len(racks)):
            for j in range(i + 1, len(racks)):
                out.append(("rack_pair", f"{racks[i]}|{racks[j]}", evaluate(0, (racks[i], racks[j]), False)))
    return out


def days_until_full(free_bytes: float, growth_bytes_per_day: float) -> float | None:
    """Days until ``free_bytes`` is used up at ``growth_bytes_per_day``; None when not growing."""
    if growth_bytes_per_day <= 0:
        return None
    return max(0.0, free_bytes) / growth_bytes_per_day


def copy_time_s(nbytes: float, workers: int, rate_bytes_per_s: float) -> float | None:
    """Seconds to copy ``nbytes`` with ``workers`` workers at ``rate_bytes_per_s`` each (upstream's
    ``replicationRateByBytes`` is per worker); None when the rate is unknown (<= 0)."""
    if rate_bytes_per_s <= 0 or workers <= 0:
        return None
    return nbytes / (rate_bytes_per_s * workers)


@dataclass(frozen=True)
class HealModel:
    """How fast the daemons that survive a loss can copy (the worker's scheduling, ``roles/worker.py``
    and ``plan/throttle.py``).

    Attributes:
        daemons: daemons left after the loss (each runs ``replicationWorkerConcurrentLedgers`` slots,
            one copy stream per slot).
        daemon_rate: bytes/s one daemon writes: ``min(concurrent ledgers × stream_rate,
            replicationRateByBytes)`` (the byte bucket is per daemon, charged bytes × targets).
        stream_rate: bytes/s one copy stream moves (measured: ``bench/heal.py``'s per-daemon rate over
            its concurrent ledgers, or ``--assumed-rate-mbps`` likewise).
        max_streams_per_source: ``replicationMaxStreamsPerSourceBookie`` (cluster-wide); <= 0 unlimited.
        max_streams_per_target: ``replicationMaxStreamsPerTargetBookie`` (cluster-wide); <= 0 unlimited.
        targets: writable bookies left that can take new copies (placement spreads them; modelled evenly).
    """

    daemons: int
    daemon_rate: float
    stream_rate: float
    max_streams_per_source: int
    max_streams_per_target: int
    targets: int


@dataclass(frozen=True)
class HealTime:
    """``seconds`` (None: nothing can heal — no daemon, no target or no rate) and the bound that set it:
    ``daemons``, ``source <bookie id>``, ``targets`` or ``target <bookie id>``; ``bounds`` gives each
    bound's seconds."""

    seconds: float | None
    limited_by: str
    bounds: Mapping[str, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class SourceReads:
    """What a heal (or a copy plan) must read, for the source bound of :func:`heal_time`.

    Attributes:
        total: bytes read, each copied entry once (from any one of its readable copies).
        sources: distinct bookies holding a readable copy of some of those entries.
        sole_bookie / sole_bytes: the bookie with the most bytes that no other bookie can serve (entries
            whose only readable copy it holds) and those bytes; ``""`` / 0.0 when every entry has two
            readable copies or more.
    """

    total: float
    sources: int
    sole_bookie: str = ""
    sole_bytes: float = 0.0

    @classmethod
    def from_bookies(cls, shares: Mapping[str, float], sole: Mapping[str, float]) -> SourceReads:
        """From per-bookie sums: ``shares[b]`` = bytes of the entries it can serve, each entry's bytes
        split over its readable copies (any split: only their sum and the bookies count), ``sole[b]`` =
        bytes only ``b`` can serve. Bookies with no positive share are not sources."""
        live = {b: v for b, v in shares.items() if v > 0}
        top = max(((v, b) for b, v in sole.items() if v > 0), default=(0.0, ""))
        return cls(float(sum(live.values())), len(live), top[1], float(top[0]))

    @classmethod
    def sole_only(cls, per_bookie: Mapping[str, float]) -> SourceReads:
        """Every byte readable from one bookie only (``per_bookie[b]`` bytes from ``b``: a plan that names
        each read's source)."""
        return cls.from_bookies(per_bookie, per_bookie)


def heal_time(heal_bytes: float, reads: SourceReads | None, m: HealModel,
              target_loads: Mapping[str, float] | None = None) -> HealTime:
    """A lower bound of the time the surviving daemons need to write ``heal_bytes`` (new copies)
    reading ``reads``, under every limit the worker obeys (``roles/worker.py``, ``plan/throttle.py``)::

        c = max_streams_per_source × stream_rate      (what one bookie can serve, bytes/s)
        t = max( H / (daemons × daemon_rate),
                 R / (sources × c),                    every readable copy busy all along
                 sole_b / c,                           bytes only bookie b holds a copy of
                 H / (targets × max_streams_per_target × stream_rate) )

    Each term holds for any schedule, so their max does (ledger granularity, re-checks and ZooKeeper
    turns add to it). It is not the time of a balanced split of each entry over its copies: splitting
    evenly is not a bound (a copy shared with an idle bookie need not be read from a busy one). A cap
    <= 0 drops its term. ``target_loads`` (bytes written to each target, when a plan names them)
    replaces the even spread over ``targets`` by ``max_b T_b / (max_streams_per_target ×
    stream_rate)``. ``limited_by``: ``daemons``, ``sources`` (every readable copy), ``source <bookie
    id>``, ``targets`` or ``target <bookie id>``.
    """
    if heal_bytes <= 0:
        return HealTime(0.0, "nothing to heal")
    if m.daemons <= 0 or m.daemon_rate <= 0 or m.stream_rate <= 0:
        return HealTime(None, "no surviving daemon" if m.daemons <= 0 else "no copy rate")
    if m.targets <= 0:
        return HealTime(None, "no surviving writable bookie to copy to")
    bounds = {"daemons": heal_bytes / (m.daemons * m.daemon_rate)}
    if m.max_streams_per_source > 0 and reads is not None and reads.sources > 0:
        cap = m.max_streams_per_source * m.stream_rate
        bounds["sources"] = reads.total / (reads.sources * cap)
        if reads.sole_bytes > 0:
            bounds[f"source {reads.sole_bookie}"] = reads.sole_bytes / cap
    if m.max_streams_per_target > 0 and target_loads:
        b, t = max(target_loads.items(), key=lambda kv: (kv[1], kv[0]))
        bounds[f"target {b}"] = t / (m.max_streams_per_target * m.stream_rate)
    elif m.max_streams_per_target > 0:
        bounds["targets"] = heal_bytes / (m.targets * m.max_streams_per_target * m.stream_rate)
    limit = max(bounds, key=lambda k: bounds[k])
    return HealTime(bounds[limit], limit, bounds)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Distribution of ``values`` (one per bookie): count, min, p50, p90, max, mean, stddev (population)
    and max/mean (None when the mean is 0). Percentiles are nearest-rank. Empty → count 0, the rest None."""
    n = len(values)
    if n == 0:
        return {"count": 0, "min": None, "p50": None, "p90": None, "max": None, "mean": None, "stddev": None,
                "max_over_mean": None}
    v = sorted(float(x) for x in values)
    mean = sum(v) / n

    def pct(p: float) -> float:
        k = max(1, math.ceil(p * n - 1e-9))  # nearest rank: ceil(p*n), at least 1
        return v[min(n, k) - 1]

    std = (sum((x - mean) ** 2 for x in v) / n) ** 0.5
    return {"count": n, "min": v[0], "p50": pct(0.5), "p90": pct(0.9), "max": v[-1], "mean": mean, "stddev": std,
            "max_over_mean": v[-1] / mean if mean else None}
