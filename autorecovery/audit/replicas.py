"""Replicas check maths: which entries are missing where, and the ledger's bucket (PURE).

Upstream ``AuditorReplicasCheckTask`` (§4.5 of the reference): for every CLOSED, non-empty ledger,
each bookie's ``GET_LIST_OF_ENTRIES_OF_LEDGER`` answer is compared with the entries round-robin
striping puts on it, per segment. For each entry, ``m`` = the number of (bookie, segment) places
where it is missing; ``least = WQ − max m``; ``least == 0`` → NO_REPLICA, ``< AQ`` → LESS_THAN_AQ,
``< WQ`` → LESS_THAN_WQ. An entry present on a bookie that should not have it does not help. A bookie
that answered with an error (not NoSuchLedger) is "unavailable": logged, not counted as missing.

Ranges are compared as ranges, so a ledger with millions of entries costs O(gaps), not O(entries).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState

Ranges = Sequence[tuple[int, int]]


class Bucket(enum.Enum):
    OK = "OK"
    LESS_THAN_WQ = "LESS_THAN_WQ"
    LESS_THAN_AQ = "LESS_THAN_AQ"
    NO_REPLICA = "NO_REPLICA"


@dataclass
class ReplicasVerdict:
    """Result for one ledger: its bucket, per-entry missing counts, bookies that did not answer,
    and bookies missing entries (the replicas to mark when the option is on)."""

    bucket: Bucket
    missing_counts: dict[int, int] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)
    bookies_missing: list[str] = field(default_factory=list)
    least_replicas: int | None = None


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
    out = []
    for a, b in _gaps(first, last, have):
        if ensemble_size == write_quorum:
            out.extend(range(a, b + 1))
        else:
            out.extend(e for e in range(a, b + 1) if (index - e) % ensemble_size < write_quorum)
    return out


def classify(md: LedgerMetadata, answers: Mapping[str, Ranges | None | Exception]) -> ReplicasVerdict:
    """Bucket of a ledger from each bookie's answer.

    Args:
        answers: bookie id → entry ranges it holds, None for NoSuchLedger (holds nothing), or an
            exception for a bookie that could not answer. Bookies absent from the mapping are treated
            as unavailable.
    """
    counts: dict[int, int] = {}
    unavailable: set[str] = set()
    missing_on: set[str] = set()
    E, WQ, AQ = md.ensemble_size, md.write_quorum, md.ack_quorum
    for first, last, ensemble in segment_bounds(md):
        for idx, bookie in enumerate(ensemble):
            ans = answers.get(bookie, KeyError(bookie))
            if isinstance(ans, Exception):
                unavailable.add(bookie)
                continue
            have = ans or ()
            miss = missing_entries(first, last, idx, E, WQ, have)
            if miss:
                missing_on.add(bookie)
            for e in miss:
                counts[e] = counts.get(e, 0) + 1
    if not counts:
        return ReplicasVerdict(Bucket.OK, {}, sorted(unavailable), [], None)
    least = WQ - max(counts.values())
    if least <= 0:
        bucket = Bucket.NO_REPLICA
    elif least < AQ:
        bucket = Bucket.LESS_THAN_AQ
    else:
        bucket = Bucket.LESS_THAN_WQ
    return ReplicasVerdict(bucket, counts, sorted(unavailable), sorted(missing_on), least)
