"""Which under-replicated ledger (and which fragment) a worker takes first (PURE).

Upstream picks a random marker: ``ZkLedgerUnderreplicationManager`` shuffles each level of the marker
hierarchy and locks the first free leaf it finds. Every ledger is equally likely, so a ledger that is
one failure away from losing data waits behind thousands of placement moves (upstream weakness 7: "no
priority between data-loss and placement tasks").

Ours ranks candidates by what is at stake, from data the worker already has: the marker's list of
missing replicas, the ledger metadata and the current bookie membership (writable ∪ read-only).

1. **Data loss with copies left**, fewest readable copies against the ack quorum first
   (``copies_left - AQ``, then ``copies_left``), then **newest ledger first** (see "Newer data first").
2. **Not yet known** ledgers (marker or metadata not read yet): a random walk, as upstream.
3. **Data loss with no copy left**: nothing can be copied until a bookie returns; tried after the rest
   so they never hold up recoverable work (HDFS-17569).
4. **Placement only** (BP-54 marks carry no missing replica and nothing is lost).

Ledgers in ``skip`` (surfaced as unrecoverable, see ``roles/worker.py``) are left out entirely; ledgers in
``later`` (recently blocked, e.g. no eligible target) go behind everything else of their class.

**Newer data first** (bookkeeper#3773, #4642): within one class and the same copies left, the ledger
created last (metadata ``ctime``, then the higher ledger id) is healed first. Old ledgers of a Pulsar
topic are the ones its retention deletes next; an hour spent copying a ledger that expires in the
next hour saves nothing, while the newest ledger holds the data readers still want. A ledger whose
metadata carries no ctime (format v1/v2 without ``storingCreationTime``) comes after those that do,
newest id first. Upstream has no order at all (random walk); our earlier order was oldest marker first.

**Spreading the daemons** (issue 29): with a per-worker ``salt``, ledgers of equal stake created in the
same :data:`AGE_WINDOW_MS` window are ordered by a stable hash of (salt, ledger id) instead
of by ledger id, so several daemons on one queue go for different ledgers first and rarely race for
one lock (each lost race costs a marker read and a failed ``multi``). Every daemon may still take any
marked ledger, as upstream's (whose random walk spreads them too, without any priority).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from autorecovery.ledger.metadata import LedgerMetadata
from autorecovery.ledger.striping import residues_in_range, write_set


#: Markers created within one window of this many ms count as equally old (kept for callers that bucket
#: marker ages; an auditor marks a lost bookie's ledgers within seconds).
TIE_WINDOW_MS = 10_000

#: Ledgers created within one window of this many ms (10 min, Pulsar's default
#: ``managedLedgerMinLedgerRolloverTimeMinutes``) count as equally new when a ``salt`` spreads the daemons.
AGE_WINDOW_MS = 600_000

_MASK64 = (1 << 64) - 1


def spread_key(salt: int, ledger_id: int) -> int:
    """A stable 64-bit hash of (``salt``, ``ledger_id``) (the splitmix64 finaliser): the per-worker
    tie-break among candidates of equal stake."""
    z = (ledger_id * 0x9E3779B97F4A7C15 + salt) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class WorkKind(enum.IntEnum):
    """Rank classes, lowest first."""

    DATA_LOSS = 0
    UNKNOWN = 1
    NO_COPY_LEFT = 2
    PLACEMENT = 3


@dataclass(frozen=True)
class LedgerPriority:
    """What is at stake for one under-replicated ledger.

    Attributes:
        ledger_id: the ledger.
        kind: rank class.
        copies_left: fewest copies of any stored entry on bookies that are neither lost nor listed as
            missing (``WQ`` when nothing is lost).
        ack_quorum: AQ of the ledger.
        ctime: marker creation time in ms since the epoch (-1 unknown).
        lost: bookies counted as lost.
        ledger_ctime: the ledger's creation time from its metadata, ms since the epoch (0 unknown):
            the newer ledger heals first within a class.
    """

    ledger_id: int
    kind: WorkKind
    copies_left: int
    ack_quorum: int
    ctime: int = -1
    lost: frozenset[str] = frozenset()
    ledger_ctime: int = 0

    @property
    def margin(self) -> int:
        """Readable copies above the ack quorum (negative: fewer copies than AQ)."""
        return self.copies_left - self.ack_quorum

    def sort_key(self) -> tuple:
        """(class, margin, copies left, newest ledger ctime first, highest ledger id first); an unknown
        ctime (0) sorts after every known one."""
        newest = -self.ledger_ctime if self.ledger_ctime > 0 else 1
        return (int(self.kind), self.margin, self.copies_left, newest, -self.ledger_id)

    def spread_sort_key(self, salt: int) -> tuple:
        """:meth:`sort_key` with the ledger's age counted in :data:`AGE_WINDOW_MS` windows and ties broken
        by :func:`spread_key` instead of the ledger id."""
        newest = -(self.ledger_ctime // AGE_WINDOW_MS) if self.ledger_ctime > 0 else 1
        return (int(self.kind), self.margin, self.copies_left, newest, spread_key(salt, self.ledger_id))


def min_copies_left(md: LedgerMetadata, lost: Collection[str]) -> int:
    """Fewest copies of any stored entry of ``md`` on bookies outside ``lost``.

    Every segment that stores at least one entry is looked at (for an open ledger the last segment
    counts as storing entries); within a segment every residue class that has entries.
    Returns ``WQ`` for an empty closed ledger.
    """
    e_size, wq = md.ensemble_size, md.write_quorum
    lost = set(lost)
    best = wq
    for idx, seg in enumerate(md.segments):
        first = seg.first_entry_id
        if idx + 1 < len(md.segments):
            last = md.segments[idx + 1].first_entry_id - 1
        elif md.is_closed:
            last = md.last_entry_id
        else:
            last = first + e_size - 1  # open: assume the writer may have stored any residue
        if last < first:
            continue
        for r in residues_in_range(first, last, e_size):
            alive = sum(1 for j in write_set(r, e_size, wq) if seg.ensemble[j] not in lost)
            best = min(best, alive)
    return best


def ledger_priority(
    ledger_id: int,
    md: LedgerMetadata,
    missing_replicas: Iterable[str],
    available: Collection[str],
    ctime: int = -1,
) -> LedgerPriority:
    """Rank one marked ledger.

    Args:
        md: its metadata. missing_replicas: the marker's replica list (empty for a BP-54 placement mark).
        available: writable ∪ read-only bookies now.
        ctime: the marker's ctime (ms), -1 if unknown.

    A bookie listed as missing counts as lost even if it is registered again (the auditor may have
    marked it for a corrupt copy); a bookie of the ledger that is not registered counts as lost too.
    """
    missing = frozenset(missing_replicas)
    lost = missing | frozenset(b for b in md.all_bookies() if b not in available)
    copies = min_copies_left(md, lost)
    if not missing and copies >= md.write_quorum:
        kind = WorkKind.PLACEMENT
    elif copies <= 0:
        kind = WorkKind.NO_COPY_LEFT
    else:
        kind = WorkKind.DATA_LOSS
    return LedgerPriority(ledger_id, kind, copies, md.ack_quorum, ctime, lost, max(0, md.ctime))


def order_candidates(
    ledger_ids: Iterable[int],
    known: Mapping[int, LedgerPriority],
    *,
    skip: Collection[int] = (),
    later: Collection[int] = (),
    rng: random.Random | None = None,
    salt: int | None = None,
    keys: dict[int, tuple[LedgerPriority, tuple]] | None = None,
) -> list[int]:
    """Order lockable ledger ids for acquisition (see module doc). Returns a new list without ``skip``.

    ``salt``: the worker's tie-break seed (any int; see "Spreading the daemons"); None orders ties by
    ledger ctime then ledger id, newest first. ``keys``: the caller's cache of each ledger's sort key with the
    priority object it was computed from (filled here, for the same ``salt`` every time; a worker
    ranks its whole queue again whenever a ledger is newly marked, and the keys of the ledgers whose
    priority did not change are not computed again)."""
    rng = rng or random.Random()
    skip_set, later_set = set(skip), set(later)
    keyed: list[tuple[int, int, tuple, int]] = []
    unknown: list[int] = []
    cache = keys if keys is not None else {}
    for lid in ledger_ids:
        if lid in skip_set:
            continue
        p = known.get(lid)
        if p is None:
            unknown.append(lid)
            continue
        hit = cache.get(lid)
        if hit is not None and hit[0] is p:
            key = hit[1]
        else:
            key = p.sort_key() if salt is None else p.spread_sort_key(salt)
            cache[lid] = (p, key)
        keyed.append((key[0], 1 if lid in later_set else 0, key, lid))
    rng.shuffle(unknown)  # upstream's random walk for ledgers we know nothing about yet
    for rank, lid in enumerate(unknown):
        keyed.append((int(WorkKind.UNKNOWN), 1 if lid in later_set else 0, (rank,), lid))
    keyed.sort()  # (kind, later, key, id): ids are unique, so no two entries compare equal
    return [t[3] for t in keyed]


def fragment_copies_left(
    ensemble: tuple[str, ...] | list[str],
    write_quorum: int,
    first: int,
    last: int,
    bad_indexes: Collection[int],
    readable: Collection[str],
) -> int:
    """Fewest readable copies of any entry in ``[first, last]`` whose write set has a bad index.

    Used to copy the most endangered fragment of a ledger first. Returns ``write_quorum`` when no
    entry of the range involves a bad index (or the range is empty).
    """
    e_size = len(ensemble)
    readable = set(readable)
    bad = set(bad_indexes)
    best = write_quorum
    if last < first:
        return best
    for r in residues_in_range(first, last, e_size):
        ws = write_set(r, e_size, write_quorum)
        if not bad.intersection(ws):
            continue
        best = min(best, sum(1 for j in ws if j not in bad and ensemble[j] in readable))
    return best
