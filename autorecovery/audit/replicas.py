"""Replicas check maths: which entries are missing where, and the ledger's bucket (PURE).

Upstream ``AuditorReplicasCheckTask`` (§4.5 of the reference): for every CLOSED, non-empty ledger,
each bookie's ``GET_LIST_OF_ENTRIES_OF_LEDGER`` answer is compared with the entries round-robin
striping puts on it, per segment. For each entry, ``m`` = the number of (bookie, segment) places
where it is missing; ``least = WQ − max m``; ``least == 0`` → NO_REPLICA, ``< AQ`` → LESS_THAN_AQ,
``< WQ`` → LESS_THAN_WQ. An entry present on a bookie that should not have it does not help. A bookie
that answered with an error (not NoSuchLedger) is "unavailable": logged, not counted as missing.

Ranges are compared as ranges, so a ledger with millions of entries costs O(gaps × E × WQ) time and
O(gaps) memory, not O(entries): a CLOSED ledger with ``lastEntryId`` = 2^31 whose bookies answer
nothing is classified without listing its missing entries (issue 15: the old per-entry list grew
without bound). Only a sample of missing entries is kept, for the log.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState
from autorecovery.ledger.striping import count_with_residue, entries_on_index, residues_in_range, write_set

Ranges = Sequence[tuple[int, int]]


class Bucket(enum.Enum):
    OK = "OK"
    LESS_THAN_WQ = "LESS_THAN_WQ"
    LESS_THAN_AQ = "LESS_THAN_AQ"
    NO_REPLICA = "NO_REPLICA"


#: Missing entries kept (lowest ids first) in :attr:`ReplicasVerdict.missing_counts`.
SAMPLE_SIZE = 20


@dataclass
class ReplicasVerdict:
    """Result for one ledger.

    Attributes:
        bucket: OK / LESS_THAN_WQ / LESS_THAN_AQ / NO_REPLICA.
        missing_counts: entry id → number of places it is missing, for at most :data:`SAMPLE_SIZE`
            entries (the lowest ids; a sample for the log, never the whole list).
        unavailable: bookies that did not answer.
        bookies_missing: bookies missing entries (the replicas to mark when the option is on).
        least_replicas: ``WQ − max m``, None when nothing is missing.
        missing_total: number of entries missing somewhere.
    """

    bucket: Bucket
    missing_counts: dict[int, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    bookies_missing: list[str] = field(default_factory=list)
    least_replicas: int | None = None
    missing_total: int = 0


def should_check(md: LedgerMetadata) -> bool:
    """Only CLOSED ledgers with at least one entry are checked."""
    return md.state == LedgerState.CLOSED and md.last_entry_id >= 0


def segment_bounds(md: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """Non-empty segments as ``(first, last, ensemble)``; last segment ends at lastEntryId."""
    out = []
    segs = md.segments
    for i, s in enumerate(segs):
        end = segs[i + 1].first_entry_id - 1 if i + 1 < len(segs) else md.last_entry_id
        if end >= s.first_entry_id:
            out.append((s.first_entry_id, end, s.ensemble))
    return out


def _gaps(first: int, last: int, have: Ranges) -> list[tuple[int, int]]:
    """Sub-ranges of ``[first, last]`` not covered by ``have`` (sorted or not)."""
    gaps = []
    cur = first
    for a, b in sorted(have):
        if b < cur:
            continue
        if a > last:
            break
        if a > cur:
            gaps.append((cur, min(a - 1, last)))
        cur = max(cur, b + 1)
        if cur > last:
            break
    if cur <= last:
        gaps.append((cur, last))
    return gaps


def missing_entries(first: int, last: int, index: int, ensemble_size: int, write_quorum: int,
                    have: Ranges) -> list[int]:
    """Entries of ``[first, last]`` that ensemble index ``index`` should store but ``have`` lacks."""
    out: list[int] = []
    for a, b in _gaps(first, last, have):
        out.extend(entries_on_index(a, b, index, ensemble_size, write_quorum))
    return out


def classify(md: LedgerMetadata, answers: Mapping[str, Ranges | Exception | None]) -> ReplicasVerdict:
    """Bucket of a ledger from each bookie's answer, in O(gaps) memory.

    Per segment, the gap boundaries of every ensemble index cut ``[first, last]`` into intervals on
    which the set ``G`` of indexes lacking their entries is constant; on an interval, entry ``e`` is
    missing in ``|write set(e) ∩ G|`` places, and the write set depends only on ``e mod E``. So each
    interval costs at most E residues × WQ, whatever its length.

    Args:
        answers: bookie id → entry ranges it holds, None for NoSuchLedger (holds nothing), or an
            exception for a bookie that could not answer. Bookies absent from the mapping are treated
            as unavailable.
    """
    unavailable: set[str] = set()
    missing_on: set[str] = set()
    sample: dict[int, int] = {}
    total = 0
    worst = 0
    E, WQ, AQ = md.ensemble_size, md.write_quorum, md.ack_quorum
    write_sets = [frozenset(write_set(r, E, WQ)) for r in range(E)]
    for first, last, ensemble in segment_bounds(md):
        events: dict[int, list[int]] = {}
        for idx, bookie in enumerate(ensemble):
            ans = answers.get(bookie, KeyError(bookie))
            if isinstance(ans, Exception):
                unavailable.add(bookie)
                continue
            for a, b in _gaps(first, last, ans or ()):
                events.setdefault(a, []).append(idx + 1)  # +idx+1: idx starts lacking at a
                events.setdefault(b + 1, []).append(-(idx + 1))
        if not events:
            continue
        points = sorted(events)
        lacking: dict[int, int] = {}
        for i, x in enumerate(points[:-1]):
            for ev in events[x]:
                k = abs(ev) - 1
                lacking[k] = lacking.get(k, 0) + (1 if ev > 0 else -1)
                if lacking[k] == 0:
                    del lacking[k]
            if not lacking:
                continue
            y = points[i + 1] - 1
            g = frozenset(lacking)
            for r in residues_in_range(x, y, E):
                hit = write_sets[r] & g
                if not hit:
                    continue
                worst = max(worst, len(hit))
                total += count_with_residue(x, y, r, E)
                missing_on.update(ensemble[k] for k in hit)
            if len(sample) < SAMPLE_SIZE:
                for e in range(x, min(y, x + SAMPLE_SIZE * E) + 1):
                    m = len(write_sets[e % E] & g)
                    if m:
                        sample[e] = sample.get(e, 0) + m
                        if len(sample) >= SAMPLE_SIZE:
                            break
    if not total:
        return ReplicasVerdict(Bucket.OK, {}, sorted(unavailable), [], None)
    least = WQ - worst
    if least <= 0:
        bucket = Bucket.NO_REPLICA
    elif least < AQ:
        bucket = Bucket.LESS_THAN_AQ
    else:
        bucket = Bucket.LESS_THAN_WQ
    return ReplicasVerdict(bucket, dict(sorted(sample.items())[:SAMPLE_SIZE]), sorted(unavailable),
                           sorted(missing_on), least, total)
