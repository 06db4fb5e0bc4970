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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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
    for i, (first, ens) in enumerate(zip(first_ids, ensembles)):
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


def domain_loss(ledger: LedgerView, dead: set[str] | frozenset[str]) -> DomainLoss:
    """The effect on ``ledger`` of losing every bookie in ``dead`` (the reports' risk question)."""
    E, WQ, AQ = ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum
    bpe = ledger.bytes_per_entry
    outcome = NONE
    lost = heal = 0.0
    for seg in ledger.segments:
        dead_idx = {i for i, b in enumerate(seg.ensemble) if b in dead}
        if not dead_idx:
            continue
        counts = residue_counts(seg.first, seg.last, E)
        for s, cnt in enumerate(counts):
            if cnt == 0:
                continue
            copies_dead = sum(1 for j in write_set(s, E, WQ) if j in dead_idx)
            if copies_dead == 0:
                continue
            left = WQ - copies_dead
            if left == 0:
                outcome = max(outcome, LOSS)
                lost += cnt * bpe
            else:
                outcome = max(outcome, BELOW_AQ if left < AQ else COPY)
                heal += cnt * copies_dead * bpe
    return DomainLoss(outcome, lost, heal)


def ledger_domains(ledger: LedgerView, location: Mapping[str, Mapping[str, str]], kinds: Iterable[str],
                   pairs_of: str | None = "rack") -> list[tuple[str, str]]:
    """The failure domains that touch ``ledger``: ``(kind, name)`` for each kind (``rack``, ``zone``,
    ``region``) a member's location names, plus ``("rack_pair", "a|b")`` for every pair of racks that
    both hold a member (sorted names). ``location[bookie][kind]`` gives the domain names; a bookie
    missing from it is in domain ``"unknown"``."""
    out: set[tuple[str, str]] = set()
    kinds = tuple(kinds)
    racks: set[str] = set()
    for seg in ledger.segments:
        for b in seg.ensemble:
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
                pairs: bool = True) -> list[tuple[str, str, DomainLoss]]:
    """:func:`domain_loss` for every failure domain that touches ``ledger``, in one pass: each rack, zone
    and region holding a member (``tags[bookie] = (rack, zone, region)``; missing → ``"unknown"``), and
    with ``pairs`` every pair of racks that both hold a member (``("rack_pair", "a|b")``, sorted names).

    Same answers as calling :func:`domain_loss` per domain (tested), about 3x faster: the write sets of
    each residue are built once per ledger instead of once per domain.
    """
    E, WQ, AQ = ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum
    bpe = ledger.bytes_per_entry
    groups: list[tuple[int, tuple[tuple[str, str, str], ...]]] = []
    seen: dict[str, tuple[str, str, str]] = {}
    for seg in ledger.segments:
        for b in seg.ensemble:
            if b not in seen:
                seen[b] = tags.get(b, UNKNOWN)
        counts = residue_counts(seg.first, seg.last, E)
        ens = seg.ensemble
        for s, cnt in enumerate(counts):
            if cnt:
                groups.append((cnt, tuple(seen[ens[j]] for j in write_set(s, E, WQ))))

    def evaluate(k: int, names: tuple[str, ...]) -> DomainLoss:
        outcome = NONE
        lost = heal = 0.0
        for cnt, ws in groups:
            dead = 0
            for t in ws:
                if t[k] in names:
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
        return DomainLoss(outcome, lost, heal)

    out: list[tuple[str, str, DomainLoss]] = []
    for k, kind in enumerate(KINDS):
        for name in sorted({t[k] for t in seen.values()}):
            out.append((kind, name, evaluate(k, (name,))))
    if pairs:
        racks = sorted({t[0] for t in seen.values()})
        for i in range(len(racks)):
            for j in range(i + 1, len(racks)):
                out.append(("rack_pair", f"{racks[i]}|{racks[j]}", evaluate(0, (racks[i], racks[j]))))
    return out


def pulsar_names(custom: Mapping[str, bytes | str] | None) -> tuple[str, str, str]:
    """``(tenant, namespace, topic)`` from a Pulsar managed ledger's custom metadata, else empty strings.

    Pulsar stores ``pulsar/managed-ledger`` = ``<tenant>/<namespace>/<domain>/<topic>`` (e.g.
    ``public/default/persistent/orders``); namespace is returned as ``tenant/namespace`` and topic as
    ``<domain>://tenant/namespace/topic``.
    """
    if not custom:
        return "", "", ""
    raw = custom.get("pulsar/managed-ledger")
    if raw is None:
        return "", "", ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    parts = text.split("/")
    if len(parts) < 4:
        return (parts[0], "/".join(parts[:2]), "") if parts else ("", "", "")
    tenant, ns, domain, topic = parts[0], parts[1], parts[2], "/".join(parts[3:])
    return tenant, f"{tenant}/{ns}", f"{domain}://{tenant}/{ns}/{topic}"


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
