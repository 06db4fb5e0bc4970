"""The record-per-ledger bookie → ledger index (PURE): the baseline of the compact index.

The auditor's index is :class:`autorecovery.audit.compact_index.CompactLedgerIndex` (exported as
``autorecovery.audit.index.BookieLedgerIndex``); this module keeps the record codec it shares (the packed
record, the fast znode decode) and the former dict-of-records index, which the equivalence test and
``bench/audit.py`` measure it against (about 290-390 B per ledger: one ``bytes`` object, a dict entry and
a set entry per bookie per ledger).

Upstream ``BookieLedgerIndexer`` rebuilds ``bookie → ledgers`` from *every* ledger's metadata on every
audit: O(ledgers) ZooKeeper reads per bookie loss (thousands of outstanding reads killed sessions,
#2802). Better than upstream: this index is built once when the auditor is elected and then updated
ledger by ledger from ZooKeeper watches (:class:`autorecovery.zk.ledger_tree.tree_watcher.LedgerTreeWatcher`), so the
ledgers of a lost bookie are known with **no metadata reads**; a slow full reconcile
(:meth:`RecordLedgerIndex.reconcile`) checks it against ZooKeeper.

Compact (issue 13, 1M ledgers / 1k bookies in one auditor): a ledger is one packed ``bytes`` record
of exactly what the auditor uses — state, digest type, E/WQ/AQ, last entry id, length, the segments'
first entry ids and ensembles as numbers of interned bookie ids, and a version (the znode's ``mzxid``)
— not a :class:`~autorecovery.ledger.metadata.LedgerMetadata` object graph (password, ctime and
custom metadata are not kept: the periodic check reads an HMAC ledger's password when it needs it). About 0.35 KB per 3-bookie ledger
including the bookie → ledgers sets, against ~1.6 KB before. :meth:`RecordLedgerIndex.get` rebuilds a
``LedgerMetadata`` of the kept fields on demand. :meth:`RecordLedgerIndex.put_znode` goes from a
metadata znode's bytes straight to a record for well-formed v3 metadata whose bookie ids are already
known valid (the common case), and through :func:`autorecovery.ledger.formats.deserialize` otherwise,
with the same verdict on malformed metadata.

Precise marking, also better than upstream (which marks every ledger whose ensembles list the lost
bookie): :func:`holds_entries` (the rule is :func:`autorecovery.ledger.striping.segment_holds_entries`)
says whether a bookie index of a segment stores any entry. A CLOSED ledger's segment whose entry range
puts nothing on that index (an empty segment, or fewer entries than E−WQ+1 with E > WQ) is not marked;
the last segment of a ledger that is not CLOSED always counts.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from autorecovery.ledger import formats
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.ledger.striping import first_last_on_index, segment_holds_entries

#: Whether ensemble index ``bookie_index`` of segment ``segment_index`` stores ≥1 entry (the last
#: segment of a ledger that is not CLOSED always counts); the rule is
#: :func:`autorecovery.ledger.striping.segment_holds_entries`.
holds_entries = segment_holds_entries


@dataclass
class ReconcileReport:
    """Differences found by a full reconcile (all already applied to the index)."""

    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)

    @property
    def mismatches(self) -> int:
        return len(self.added) + len(self.removed) + len(self.changed)


_MASK64 = (1 << 64) - 1


def mix_id(ledger_id: int) -> int:
    """A 64-bit mix of a ledger id (splitmix64's finaliser), so that sums of mixed ids differ when the
    sets of ids differ (with overwhelming probability), unlike sums of the ids themselves."""
    z = (ledger_id + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


@dataclass
class IdDigest:
    """Order-independent digest of a set of ledger ids: their count and the sum (mod 2^64) of
    :func:`mix_id` of each. Adding and removing an id are O(1), so the index keeps its digest current
    and a consistency check compares it with a digest streamed from a listing of the ledger tree
    without holding a second set of 1M ids (issue 9)."""

    count: int = 0
    total: int = 0

    def add(self, ledger_id: int) -> None:
        self.count += 1
        self.total = (self.total + mix_id(ledger_id)) & _MASK64

    def discard(self, ledger_id: int) -> None:
        self.count -= 1
        self.total = (self.total - mix_id(ledger_id)) & _MASK64

    @classmethod
    def of(cls, ids: Iterable[int]) -> IdDigest:
        d = cls()
        for lid in ids:
            d.add(lid)
        return d


# -- the packed record ------------------------------------------------------------------------------
# version (q: the znode's mzxid, 0 = unknown) | state, digest type (B) | E WQ AQ (I) | last entry id,
# length (q) | segment count (I) | per segment: first entry id (q) + E bookie numbers (I). Little-endian,
# no padding. Two records describe the same ledger exactly when their bytes after the version are equal.
_HEAD = struct.Struct("<qBBIIIqqI")
_VERSION = struct.Struct("<q")
_VLEN = _VERSION.size
_SEG_STRUCTS: dict[int, struct.Struct] = {}
_V3_PREFIX = formats.HEADER_PREFIX + b"3\n"
_STATES = {int(s): s for s in LedgerState}
_DIGESTS = {int(d): d for d in DigestType}
#: the digest byte of a ledger whose metadata stores no password (format v1): its entries are verified
#: with digestType/passwd (ledger.credentials), so the checker must know (DigestType numbers are 1..4)
_NO_PASSWORD = 0


def _seg_struct(e: int) -> struct.Struct:
    s = _SEG_STRUCTS.get(e)
    if s is None:
        s = _SEG_STRUCTS[e] = struct.Struct(f"<q{e}I")
    return s


def _pack(version: int, state: int, digest_type: int, e: int, wq: int, aq: int, last: int, length: int,
          segments: list[tuple[int, list[int]]]) -> bytes:
    ss = _seg_struct(e)
    parts = [_HEAD.pack(version, state, digest_type, e, wq, aq, last, length, len(segments))]
    for first, nums in segments:
        parts.append(ss.pack(first, *nums))
    return b"".join(parts)


def _body(rec: bytes) -> memoryview:
    return memoryview(rec)[_VLEN:]


class RecordLedgerIndex:
    """ledger id → packed record, and bookie → ids of ledgers whose ensembles list it.

    Bookie ids are interned to numbers (one ``str`` per bookie, kept for the life of the index).
    :attr:`digest` (:class:`IdDigest`) follows the indexed ids. Records carry a version (the znode's
    ``mzxid``; 0 = unknown): a put with an older non-zero version than the stored one is a stale read
    and is ignored.
    """

    def __init__(self) -> None:
        self._rec: dict[int, bytes] = {}
        self._names: list[str] = []
        self._num: dict[str, int] = {}
        #: bookie numbers whose id passed upstream's bookie id validation (the fast znode decode)
        self._valid: dict[str, int] = {}
        self._by_bookie: dict[int, set[int]] = {}
        self.updates = 0
        self.fast_decodes = 0
        self.slow_decodes = 0
        self.digest = IdDigest()

    # -- encoding ---------------------------------------------------------------------------
    def _number(self, bookie: str) -> int:
        n = self._num.get(bookie)
        if n is None:
            n = self._num[bookie] = len(self._names)
            self._names.append(sys.intern(bookie))
        return n

    def encode(self, md: LedgerMetadata, version: int = 0) -> bytes:
        """The packed record of ``md`` (interning its bookie ids)."""
        digest = int(md.digest_type) if md.has_password else _NO_PASSWORD
        return _pack(version, int(md.state), digest, md.ensemble_size, md.write_quorum, md.ack_quorum,
                     md.last_entry_id, md.length, [(s.first_entry_id, [self._number(b) for b in s.ensemble]) for s in md.segments])

    def _decode(self, rec: bytes) -> LedgerMetadata:
        _version, state, digest_type, e, wq, aq, last, length, nseg = _HEAD.unpack_from(rec, 0)
        ss = _seg_struct(e)
        names = self._names
        segs = []
        off = _HEAD.size
        for _ in range(nseg):
            first, *nums = ss.unpack_from(rec, off)
            off += ss.size
            segs.append(Segment(first, tuple(names[n] for n in nums)))
        if digest_type == _NO_PASSWORD:
            return LedgerMetadata(e, wq, aq, tuple(segs), state=_STATES[state], last_entry_id=last, length=length,
                                  digest_type=DigestType.CRC32, has_password=False)
        return LedgerMetadata(e, wq, aq, tuple(segs), state=_STATES[state], last_entry_id=last, length=length,
                              digest_type=_DIGESTS[digest_type])

    def _bookie_numbers(self, rec: bytes) -> set[int]:
        head = _HEAD.unpack_from(rec, 0)
        e, nseg = head[3], head[8]
        ss = _seg_struct(e)
        out: set[int] = set()
        off = _HEAD.size
        for _ in range(nseg):
            out.update(ss.unpack_from(rec, off)[1:])
            off += ss.size
        return out

    def record_from_znode(self, data: bytes, path: str = "?", version: int = 0) -> bytes:
        """The packed record of a metadata znode's bytes.

        Fast path: v3 metadata whose members are bookie ids already validated, straight from the
        protobuf message; anything else goes through :func:`autorecovery.ledger.formats.deserialize`,
        so the verdict on malformed metadata is always that function's.

        Raises:
            MalformedMetadataError: naming ``path`` (from :func:`~autorecovery.ledger.formats.deserialize`).
        """
        rec = self._fast(data, version)
        if rec is not None:
            self.fast_decodes += 1
            return rec
        md = formats.deserialize(data, path)
        self.slow_decodes += 1
        for s in md.segments:  # formats.deserialize validated every member: remember them as valid
            for b in s.ensemble:
                if b not in self._valid:
                    self._valid[b] = self._number(b)
        return self.encode(md, version)

    def _fast(self, data: bytes, version: int) -> bytes | None:
        """A record for ``data`` when it is certainly well formed, else None (the slow path decides).
        Mirrors the checks of ``formats.deserialize``/``from_proto``/``LedgerMetadata``; never stricter
        in outcome, because every doubt falls back to them."""
        if not data.startswith(_V3_PREFIX):
            return None
        body = data[len(_V3_PREFIX):]
        try:
            m = formats.parse_v3_body(body)
        except (DecodeError, IndexError, ValueError):
            return None
        e, wq = m.ensembleSize, m.quorumSize
        aq = m.ackQuorumSize if m.HasField("ackQuorumSize") else wq
        if not (e >= wq >= aq >= 1) or not m.segment or m.state not in _STATES:
            return None
        digest_type = m.digestType if m.HasField("digestType") else int(DigestType.CRC32)  # as formats.from_proto
        if digest_type not in _DIGESTS or not m.HasField("password"):
            return None  # (metadata without a password: the slow path marks it)
        for c in m.customMetadata:
            if not isinstance(c.key, str):
                return None
        valid = self._valid
        segs: list[tuple[int, list[int]]] = []
        prev = None
        for s in m.segment:
            first = s.firstEntryId
            if prev is not None and first <= prev:
                return None
            prev = first
            members = s.ensembleMember
            if len(members) != e:
                return None
            nums = []
            for b in members:
                n = valid.get(b)  # a bytes member (invalid UTF-8) is never a key
                if n is None:
                    return None
                nums.append(n)
            segs.append((first, nums))
        last = m.lastEntryId if m.HasField("lastEntryId") else -1
        return _pack(version, m.state, digest_type, e, wq, aq, last, m.length, segs)

    # -- mutation ---------------------------------------------------------------------------
    def put(self, ledger_id: int, md: LedgerMetadata, version: int = 0) -> bool:
        """Insert or replace a ledger; returns True when the index changed (False for an equal or a
        stale put: ``0 < version <`` the stored version)."""
        return self.put_record(ledger_id, self.encode(md, version))

    def put_znode(self, ledger_id: int, data: bytes, version: int = 0, path: str = "?") -> bool:
        """:meth:`put` from a metadata znode's bytes (see :meth:`record_from_znode`).

        Raises:
            MalformedMetadataError: naming ``path``; the index is unchanged.
        """
        return self.put_record(ledger_id, self.record_from_znode(data, path, version))

    def put_record(self, ledger_id: int, rec: bytes) -> bool:
        """:meth:`put` of a record from :meth:`encode` or :meth:`record_from_znode` of this index."""
        old = self._rec.get(ledger_id)
        if old is not None:
            version = _VERSION.unpack_from(rec, 0)[0]
            old_version = _VERSION.unpack_from(old, 0)[0]
            if 0 < version < old_version:
                return False
            if _body(old) == _body(rec):
                if version != old_version:
                    self._rec[ledger_id] = rec
                return False
            old_bookies = self._bookie_numbers(old)
        else:
            old_bookies = set()
        new_bookies = self._bookie_numbers(rec)
        for b in old_bookies - new_bookies:
            s = self._by_bookie.get(b)
            if s is not None:
                s.discard(ledger_id)
                if not s:
                    del self._by_bookie[b]
        for b in new_bookies - old_bookies:
            s = self._by_bookie.get(b)
            if s is None:
                s = self._by_bookie[b] = set()
            s.add(ledger_id)
        if old is None:
            self.digest.add(ledger_id)
        self._rec[ledger_id] = rec
        self.updates += 1
        return True

    def remove(self, ledger_id: int) -> bool:
        """Forget a deleted ledger; returns True when it was indexed."""
        old = self._rec.pop(ledger_id, None)
        if old is None:
            return False
        self.digest.discard(ledger_id)
        for b in self._bookie_numbers(old):
            s = self._by_bookie.get(b)
            if s is not None:
                s.discard(ledger_id)
                if not s:
                    del self._by_bookie[b]
        self.updates += 1
        return True

    def clear(self) -> None:
        self._rec.clear()
        self._by_bookie.clear()
        self.digest = IdDigest()

    # -- queries ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._rec)

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._rec

    def get(self, ledger_id: int) -> LedgerMetadata | None:
        """The kept fields of a ledger as :class:`LedgerMetadata` (password empty, ctime and custom
        metadata at their defaults), or None."""
        rec = self._rec.get(ledger_id)
        return None if rec is None else self._decode(rec)

    def version(self, ledger_id: int) -> int | None:
        """The stored version (znode ``mzxid``; 0 = unknown) of a ledger, or None when not indexed."""
        rec = self._rec.get(ledger_id)
        return None if rec is None else _VERSION.unpack_from(rec, 0)[0]

    def ledger_ids(self) -> list[int]:
        return sorted(self._rec)

    def items(self) -> Iterator[tuple[int, LedgerMetadata]]:
        """(ledger id, metadata) in ledger id order, decoded one at a time (a 1M-ledger index never
        becomes 1M objects at once). The ids are a snapshot taken at the first step; a ledger removed
        while iterating is skipped, one changed is seen as it is when reached."""
        for lid in sorted(self._rec):
            rec = self._rec.get(lid)
            if rec is not None:
                yield lid, self._decode(rec)

    def bookies(self) -> set[str]:
        """Every bookie that appears in some ensemble."""
        return {self._names[n] for n in self._by_bookie}

    def in_some_ensemble(self, bookie: str) -> bool:
        """True when some indexed ledger's ensemble lists ``bookie`` (O(1); the lostBookieRecoveryDelay
        shortcut counts only such lost bookies)."""
        n = self._num.get(bookie)
        return n is not None and n in self._by_bookie

    def ledgers_of(self, bookie: str) -> frozenset[int]:
        """Ids of ledgers whose ensembles list ``bookie`` (upstream's index, imprecise)."""
        n = self._num.get(bookie)
        return frozenset(self._by_bookie.get(n, ())) if n is not None else frozenset()

    def ledgers_to_mark(self, lost: Iterable[str]) -> dict[int, list[str]]:
        """ledger id → lost bookies that hold entries of it (precise marking; no metadata reads)."""
        out: dict[int, list[str]] = {}
        for b in sorted(set(lost)):
            n = self._num.get(b)
            if n is None:
                continue
            for lid in self._by_bookie.get(n, ()):
                if self._holds(self._rec[lid], n):
                    out.setdefault(lid, []).append(b)
        return out

    def _holds(self, rec: bytes, n: int) -> bool:
        """:func:`autorecovery.ledger.striping.bookie_holds_entries` on a packed record, for bookie
        number ``n`` (the rule is :func:`~autorecovery.ledger.striping.segment_holds_entries`: the last
        segment of a ledger that is not CLOSED always counts, otherwise the segment's entry range must
        put an entry on the index), without decoding the ledger."""
        _, state, _digest_type, e, wq, _aq, last_entry, _length, nseg = _HEAD.unpack_from(rec, 0)
        ss = _seg_struct(e)
        off = _HEAD.size
        segs = [ss.unpack_from(rec, off + i * ss.size) for i in range(nseg)]
        for si, seg in enumerate(segs):
            if n not in seg[1:]:
                continue
            if si == nseg - 1 and state != LedgerState.CLOSED:
                return True
            first = seg[0]
            last = segs[si + 1][0] - 1 if si + 1 < nseg else last_entry
            for bi, b in enumerate(seg[1:]):
                if b == n and first_last_on_index(first, last, bi, e, wq)[0] != -1:
                    return True
        return False

    def total_length(self, ledger_ids: Iterable[int]) -> int:
        """Sum of metadata ``length`` (bytes) of the given ledgers (UNDER_REPLICATED_LEDGERS_TOTAL_SIZE)."""
        total = 0
        for lid in ledger_ids:
            rec = self._rec.get(lid)
            if rec is not None:
                total += _HEAD.unpack_from(rec, 0)[7]
        return total

    def memory_bytes(self) -> int:
        """Bytes held by the index (records, the id → record dict, the bookie sets and their ids,
        the bookie names): ``sys.getsizeof`` summed, O(ledgers); for benchmarks and admin output."""
        size = sys.getsizeof(self._rec) + sys.getsizeof(self._by_bookie) + sys.getsizeof(self._names)
        size += sys.getsizeof(self._num) + sys.getsizeof(self._valid)
        for lid, rec in self._rec.items():
            size += sys.getsizeof(rec) + sys.getsizeof(lid)
        for s in self._by_bookie.values():
            size += sys.getsizeof(s)  # the ids are the dict's own int objects
        size += sum(sys.getsizeof(n) for n in self._names)
        return size

    # -- reconcile --------------------------------------------------------------------------
    def _as_record(self, md: LedgerMetadata | bytes) -> bytes:
        return md if isinstance(md, bytes) else self.encode(md)

    def diff(self, scan: Mapping[int, LedgerMetadata | bytes]) -> ReconcileReport:
        """Differences between the index and a full scan (``scan`` = ledger id → metadata, or → a record
        of this index from :meth:`record_from_znode`); versions are not compared."""
        rep = ReconcileReport()
        for lid, md in scan.items():
            have = self._rec.get(lid)
            if have is None:
                rep.added.append(lid)
            elif _body(have) != _body(self._as_record(md)):
                rep.changed.append(lid)
        rep.removed = [lid for lid in self._rec if lid not in scan]
        rep.added.sort()
        rep.changed.sort()
        rep.removed.sort()
        return rep

    def reconcile(self, scan: Mapping[int, LedgerMetadata | bytes]) -> ReconcileReport:
        """Make the index equal to ``scan`` and report what differed."""
        rep = self.diff(scan)
        for lid in rep.added + rep.changed:
            rec = self._as_record(scan[lid])
            # a reconcile is authoritative: version 0, so the put is never refused as stale
            self.put_record(lid, _VERSION.pack(0) + bytes(_body(rec)))
        for lid in rep.removed:
            self.remove(lid)
        return rep
