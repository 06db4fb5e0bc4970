"""Ledger metadata: ensembles, segments and fragments (PURE).

Source: upstream ``LedgerMetadata`` / ``LedgerMetadataBuilder`` and ``LedgerFragment``. A ledger has
one or more *segments*; each segment is an ensemble (list of bookie ids, size E) that stores the
entries from its ``first_entry_id`` up to the next segment's first entry id minus one (the last segment
up to the last entry). Within a segment, entry ``e`` is stored on the WQ ensemble indexes
``(e + k) mod E`` for ``k < WQ`` (round robin; the rule itself is in :mod:`autorecovery.ledger.striping`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

__all__ = ["LedgerState", "DigestType", "Segment", "LedgerMetadata"]


class LedgerState(enum.IntEnum):
    """Ledger state with upstream's LedgerMetadataFormat.State numbers."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class DigestType(enum.IntEnum):
    """Digest type with upstream's LedgerMetadataFormat.DigestType numbers."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


@dataclass(frozen=True, slots=True)
class Segment:
    """One ensemble of a ledger and the first entry id it stores."""

    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True)
class LedgerMetadata:
    """Immutable ledger metadata, field for field with upstream LedgerMetadataFormat.

    Attributes:
        ensemble_size: E. write_quorum: WQ (upstream ``quorumSize``). ack_quorum: AQ.
        state: OPEN, IN_RECOVERY or CLOSED. last_entry_id: -1 while open or empty.
        length: bytes of payload (set on close). segments: ensembles by first entry id, ascending.
        digest_type, password: entry digest settings (``ledger.digest``); bookies get the master key
            derived from the password (``ledger.digest.master_key``), never the password itself. The
            password is left out of ``repr`` (issue 25: a logged or printed metadata object leaks no
            secret).
        ctime: creation time in ms since the epoch (0 when the znode carries none).
        custom_metadata: user key → bytes, in the order the znode lists them (a rewrite keeps it).
        custom_duplicates: the custom metadata entries as read, only when a key repeats (protobuf allows
            it; ``custom_metadata`` keeps the last value, as protobuf's map semantics); ``()`` otherwise.
            Written back as read while ``custom_metadata`` is unchanged (:meth:`custom_entries`).
        format_version: the metadata format the znode was read in (1, 2 or 3; 3 for new ledgers). A
            rewrite keeps it (upstream ``LedgerMetadataBuilder.from`` keeps ``metadataFormatVersion``):
            a v2 ledger re-replicated by the worker is written back as v2.
        store_ctime: whether ``ctime`` is written (upstream ``storingCreationTime``): true when the
            znode carried a ctime or the ledger was created with one; a rewrite never invents a ctime.
        has_password: whether the metadata stores a digest type and password (upstream
            ``LedgerMetadata.hasPassword()``): false for format v1 and for v2 written before 4.2 (no
            ``password`` field); such a ledger is opened for recovery with the ``digestType``/``passwd``
            keys (:mod:`autorecovery.ledger.credentials`), and a rewrite keeps both fields absent.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    segments: tuple[Segment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    digest_type: DigestType = DigestType.CRC32C
    password: bytes = field(default=b"", repr=False)  # a secret: never in repr, logs or tracebacks
    ctime: int = 0
    custom_metadata: dict[str, bytes] = field(default_factory=dict)
    custom_duplicates: tuple[tuple[str, bytes], ...] = field(default=(), repr=False, compare=False)
    ctoken: int = 0
    format_version: int = 3
    store_ctime: bool = True
    has_password: bool = field(default=True, repr=False)  # (its name alone would read as a secret in a repr)

    def __post_init__(self) -> None:
        if not (self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1):
            raise ValueError(
                f"bad quorum sizes E={self.ensemble_size} WQ={self.write_quorum} AQ={self.ack_quorum}:"
                " need E >= WQ >= AQ >= 1"
            )
        if not self.segments:
            raise ValueError("ledger metadata needs at least one segment (ensemble)")
        prev = -1
        for seg in self.segments:
            if len(seg.ensemble) != self.ensemble_size:
                raise ValueError(
                    f"segment at entry {seg.first_entry_id} has {len(seg.ensemble)} bookies, expected E={self.ensemble_size}"
                )
            if seg.first_entry_id < prev:
                raise ValueError(f"segments out of order at entry {seg.first_entry_id}")
            prev = seg.first_entry_id

    def custom_entries(self) -> list[tuple[str, bytes]]:
        """The custom metadata entries to write: as read (duplicates included) while ``custom_metadata``
        still says the same, else ``custom_metadata`` in its order."""
        if self.custom_duplicates and dict(self.custom_duplicates) == self.custom_metadata:
            return list(self.custom_duplicates)
        return list(self.custom_metadata.items())

    @property
    def is_closed(self) -> bool:
        return self.state == LedgerState.CLOSED

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.segments[-1].ensemble

    def all_bookies(self) -> set[str]:
        """Every bookie id in any segment."""
        return {b for seg in self.segments for b in seg.ensemble}

    def segment_end(self, index: int, last_entry_id: int | None = None) -> int:
        """Last entry id of segment ``index`` (inclusive); may be ``first - 1`` for an empty segment.

        For the last segment this is ``last_entry_id`` (defaults to the metadata's own).
        """
        if index + 1 < len(self.segments):
            return self.segments[index + 1].first_entry_id - 1
        return self.last_entry_id if last_entry_id is None else last_entry_id

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble that stores ``entry_id`` (the last segment whose first entry id ≤ entry_id)."""
        chosen = self.segments[0].ensemble
        for seg in self.segments:
            if seg.first_entry_id <= entry_id:
                chosen = seg.ensemble
            else:
                break
        return chosen

    def segment_index_at(self, entry_id: int) -> int:
        idx = 0
        for i, seg in enumerate(self.segments):
            if seg.first_entry_id <= entry_id:
                idx = i
        return idx

    def with_segment_replaced(self, first_entry_id: int, replacements: dict[str, str]) -> LedgerMetadata:
        """Return a copy where, in the segment keyed by ``first_entry_id``, each old bookie is
        replaced by its new one (upstream LedgerFragmentReplicator's ensemble update).

        Raises:
            KeyError: when no segment starts at ``first_entry_id``.
        """
        segs = list(self.segments)
        for i, seg in enumerate(segs):
            if seg.first_entry_id == first_entry_id:
                segs[i] = Segment(first_entry_id, tuple(replacements.get(b, b) for b in seg.ensemble))
                return replace(self, segments=tuple(segs))
        raise KeyError(f"no segment starts at entry {first_entry_id}")

    def with_new_segment(self, first_entry_id: int, ensemble: tuple[str, ...]) -> LedgerMetadata:
        """Return a copy with a new last segment starting at ``first_entry_id`` (ensemble change).

        A last segment that starts at the same entry id is replaced instead (it holds no entries yet).
        """
        segs = list(self.segments)
        if segs[-1].first_entry_id == first_entry_id:
            segs[-1] = Segment(first_entry_id, tuple(ensemble))
        else:
            if first_entry_id < segs[-1].first_entry_id:
                raise ValueError(f"new segment at {first_entry_id} before last segment {segs[-1].first_entry_id}")
            segs.append(Segment(first_entry_id, tuple(ensemble)))
        return replace(self, segments=tuple(segs))
