"""The auditor's bookie → ledger index in columns: under 100 bytes per ledger at 10M ledgers (PURE).

Same answers as :class:`autorecovery.audit.record_index.RecordLedgerIndex` (the equivalence test compares
every query on random clusters), kept current by the same watches, but with no Python object per
ledger. Upstream keeps no index at all (``BookieLedgerIndexer`` re-reads every ledger's metadata on each
audit); the record index held about 290-390 B per ledger (a ``bytes`` object, a dict entry and a set
entry per ensemble member), about 4 GB at 10M ledgers. Here, for a ledger of one segment of E bookies:

* **ids**: a sorted ``array('q')`` of ledger ids and a parallel ``array('q')`` of offsets (16 B);
  ledgers put out of order wait in a small dict and are merged in (by array slices) once there are more
  than ``max(4096, ledgers / 16)`` of them; a removed ledger is a tombstone (offset -1) until the
  same merge drops it;
* **records**: one ``bytearray`` heap of ``version (q) | shape (H) | segment count (I) | last entry id
  (q) | length (q)`` then per segment ``first entry id (q) + E bookie numbers (I)`` (30 + 8 + 4E B).
  The shape (state, digest type, E, WQ, AQ) is interned: a cluster has a handful. A rewrite of the
  same size is in place; otherwise the old bytes are garbage, reclaimed when they pass half the heap;
* **bookie → ledgers**: per interned bookie a sorted ``array`` of ledger ids, ``'I'`` (4 B) until an id
  needs 64 bits, then ``'q'`` (4E B per ledger in all).

At E=3: 16 + 50 + 12 = 78 B per ledger, plus the arrays' growth slack (measured by ``bench/audit.py``;
docs/scaling.md). The price: a lookup is a bisection (O(log n), about a microsecond), and a merge or a
heap compaction briefly holds a second copy of the id columns (16 B per ledger) or of the heap.

Records passed in and out (:meth:`encode`, :meth:`record_from_znode`, :meth:`put_record`, :meth:`diff`)
are the record index's packed records; only the storage differs.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping

from autorecovery.audit.record_index import _HEAD, _VERSION, IdDigest, RecordLedgerIndex, ReconcileReport, _body
from autorecovery.ledger.metadata import LedgerMetadata

#: internal record head: version, shape number, segment count, last entry id, length (bytes)
_IHEAD = struct.Struct("<qHIqq")
_U32 = 0xFFFFFFFF


class CompactLedgerIndex(RecordLedgerIndex):
    """ledger id → record and bookie → ledger ids, in arrays (see the module docstring for the layout).

    Same interface and answers as :class:`~autorecovery.audit.record_index.RecordLedgerIndex`:
    interned bookie ids, :attr:`digest` following the indexed ids, versions (znode ``mzxid``; 0 =
    unknown) with a stale put ignored. ``items()`` and ``ledger_ids()`` first merge pending puts.

    Raises:
        ValueError: more than 65,535 distinct ledger shapes (state, digest, E, WQ, AQ), naming the one.
    """

    #: pending puts and tombstones merged in past ``max(merge_min, ledgers / 16)``
    merge_min = 4096
    #: heap garbage (bytes) reclaimed past ``max(garbage_min, heap / 2)``
    garbage_min = 1 << 20

    def __init__(self) -> None:
        super().__init__()
        self._ids = array("q")
        self._off = array("q")
        self._extra: dict[int, int] = {}
        self._dead = 0
        self._gen = 0
        self._heap = bytearray()
        self._garbage = 0
        self._count = 0
        self._post: dict[int, array] = {}
        self._shapes: list[tuple[int, int, int, int, int]] = []
        self._shape_num: dict[tuple[int, int, int, int, int], int] = {}
        self._seg_size: list[int] = []

    # -- record conversion --------------------------------------------------------------------
    def _shape(self, key: tuple[int, int, int, int, int]) -> int:
        n = self._shape_num.get(key)
        if n is None:
            if len(self._shapes) > 0xFFFF:
                raise ValueError(f"ledger index: too many ledger shapes (state, digest, E, WQ, AQ), at {key}")
            n = self._shape_num[key] = len(self._shapes)
            self._shapes.append(key)
            self._seg_size.append(8 + 4 * key[2])
        return n

    def _internal(self, rec: bytes) -> bytes:
        version, state, digest, e, wq, aq, last, length, nseg = _HEAD.unpack_from(rec, 0)
        shape = self._shape((state, digest, e, wq, aq))
        return _IHEAD.pack(version, shape, nseg, last, length) + rec[_HEAD.size:]

    def _size_at(self, off: int) -> int:
        _v, shape, nseg, _l, _n = _IHEAD.unpack_from(self._heap, off)
        return _IHEAD.size + nseg * self._seg_size[shape]

    def _external(self, off: int) -> bytes:
        heap = self._heap
        version, shape, nseg, last, length = _IHEAD.unpack_from(heap, off)
        state, digest, e, wq, aq = self._shapes[shape]
        start = off + _IHEAD.size
        return (_HEAD.pack(version, state, digest, e, wq, aq, last, length, nseg)
                + bytes(heap[start:start + nseg * self._seg_size[shape]]))

    # -- id → offset ------------------------------------------------------------------------------
    def _offset(self, lid: int) -> int | None:
        off = self._extra.get(lid)
        if off is not None:
            return off
        ids = self._ids
        i = bisect_left(ids, lid)
        if i < len(ids) and ids[i] == lid:
            o = self._off[i]
            return o if o >= 0 else None
        return None

    def _place(self, lid: int, off: int) -> None:
        if lid in self._extra:
            self._extra[lid] = off
            return
        ids = self._ids
        i = bisect_left(ids, lid)
        if i < len(ids) and ids[i] == lid:
            if self._off[i] < 0:
                self._dead -= 1
            self._off[i] = off
        elif i == len(ids):
            ids.append(lid)
            self._off.append(off)
        else:
            self._extra[lid] = off
            self._maybe_merge()

    def _unplace(self, lid: int) -> None:
        if self._extra.pop(lid, None) is not None:
            return
        i = bisect_left(self._ids, lid)
        self._off[i] = -1
        self._dead += 1
        self._maybe_merge()

    def _maybe_merge(self) -> None:
        if len(self._extra) + self._dead > max(self.merge_min, len(self._ids) >> 4):
            self._merge()

    def _merge(self) -> None:
        """Fold the pending puts into the sorted columns and drop the tombstones (array slices: O(k)
        Python steps for k pending changes, plus a copy of the columns)."""
        if not self._extra and not self._dead:
            return
        ids, offs = self._ids, self._off
        events: list[tuple[int, int, int, int]] = [(bisect_left(ids, lid), 0, lid, off)
                                                   for lid, off in self._extra.items()]
        if self._dead:
            events.extend((i, 1, 0, 0) for i, o in enumerate(offs) if o < 0)
        events.sort()
        new_ids, new_off = array("q"), array("q")
        prev = 0
        for pos, kind, lid, off in events:
            if pos > prev:
                new_ids.extend(ids[prev:pos])
                new_off.extend(offs[prev:pos])
            if kind == 0:
                new_ids.append(lid)
                new_off.append(off)
                prev = max(prev, pos)
            else:
                prev = pos + 1
        new_ids.extend(ids[prev:])
        new_off.extend(offs[prev:])
        self._ids, self._off = new_ids, new_off
        self._extra = {}
        self._dead = 0
        self._gen += 1

    # -- heap -------------------------------------------------------------------------------------
    def _compact_heap(self) -> None:
        heap, out = self._heap, bytearray()
        offs = self._off
        for i, o in enumerate(offs):
            if o >= 0:
                size = self._size_at(o)
                offs[i] = len(out)
                out += heap[o:o + size]
        for lid, o in list(self._extra.items()):
            size = self._size_at(o)
            self._extra[lid] = len(out)
            out += heap[o:o + size]
        self._heap, self._garbage = out, 0

    def _internal_bookies(self, off: int) -> set[int]:
        heap = self._heap
        _v, shape, nseg, _l, _n = _IHEAD.unpack_from(heap, off)
        e = self._shapes[shape][2]
        step = self._seg_size[shape]
        out: set[int] = set()
        base = off + _IHEAD.size + 8
        for s in range(nseg):
            out.update(struct.unpack_from(f"<{e}I", heap, base + s * step))
        return out

    # -- bookie → ledgers -------------------------------------------------------------------------
    def _post_add(self, n: int, lid: int) -> None:
        arr = self._post.get(n)
        if arr is None:
            arr = self._post[n] = array("I")
        if arr.typecode == "I" and not 0 <= lid <= _U32:
            arr = self._post[n] = array("q", arr)
        if not arr or lid > arr[-1]:
            arr.append(lid)
            return
        i = bisect_left(arr, lid)
        if i == len(arr) or arr[i] != lid:
            arr.insert(i, lid)

    def _post_discard(self, n: int, lid: int) -> None:
        arr = self._post.get(n)
        if arr is None:
            return
        if arr.typecode == "I" and not 0 <= lid <= _U32:
            return
        i = bisect_left(arr, lid)
        if i < len(arr) and arr[i] == lid:
            del arr[i]
            if not arr:
                del self._post[n]

    # -- mutation ---------------------------------------------------------------------------------
    def put_record(self, ledger_id: int, rec: bytes) -> bool:
        """:meth:`put` of a record from :meth:`encode` or :meth:`record_from_znode` of this index;
        True when the index changed (False for an equal or a stale put)."""
        old_off = self._offset(ledger_id)
        version = _VERSION.unpack_from(rec, 0)[0]
        if old_off is not None:
            old = self._external(old_off)
            old_version = _VERSION.unpack_from(old, 0)[0]
            if 0 < version < old_version:
                return False
            if _body(old) == _body(rec):
                if version != old_version:
                    _VERSION.pack_into(self._heap, old_off, version)
                return False
            old_bookies = self._internal_bookies(old_off)
        else:
            old_bookies = set()
        new_bookies = self._bookie_numbers(rec)
        for b in old_bookies - new_bookies:
            self._post_discard(b, ledger_id)
        for b in new_bookies - old_bookies:
            self._post_add(b, ledger_id)
        internal = self._internal(rec)
        heap = self._heap
        if old_off is not None and self._size_at(old_off) == len(internal):
            heap[old_off:old_off + len(internal)] = internal
        else:
            if old_off is not None:
                self._garbage += self._size_at(old_off)
            off = len(heap)
            heap += internal
            self._place(ledger_id, off)
        if old_off is None:
            self.digest.add(ledger_id)
            self._count += 1
        self.updates += 1
        self._maybe_compact_heap()
        return True

    def _maybe_compact_heap(self) -> None:
        if self._garbage > max(self.garbage_min, len(self._heap) >> 1):
            self._compact_heap()

    def remove(self, ledger_id: int) -> bool:
        """Forget a deleted ledger; returns True when it was indexed."""
        off = self._offset(ledger_id)
        if off is None:
            return False
        for b in self._internal_bookies(off):
            self._post_discard(b, ledger_id)
        self._garbage += self._size_at(off)
        self._unplace(ledger_id)
        self.digest.discard(ledger_id)
        self._count -= 1
        self.updates += 1
        self._maybe_compact_heap()
        return True

    def clear(self) -> None:
        self._ids, self._off, self._extra, self._dead = array("q"), array("q"), {}, 0
        self._heap, self._garbage, self._count = bytearray(), 0, 0
        self._post.clear()
        self._gen += 1
        self.digest = IdDigest()

    # -- queries ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count

    def __contains__(self, ledger_id: object) -> bool:
        return isinstance(ledger_id, int) and self._offset(ledger_id) is not None

    def get(self, ledger_id: int) -> LedgerMetadata | None:
        """The kept fields of a ledger as :class:`LedgerMetadata` (password empty, ctime and custom
        metadata at their defaults), or None."""
        off = self._offset(ledger_id)
        return None if off is None else self._decode(self._external(off))

    def version(self, ledger_id: int) -> int | None:
        """The stored version (znode ``mzxid``; 0 = unknown) of a ledger, or None when not indexed."""
        off = self._offset(ledger_id)
        return None if off is None else _VERSION.unpack_from(self._heap, off)[0]

    def ledger_ids(self) -> list[int]:
        """Every indexed ledger id, ascending (a list: 36 B per ledger while the caller holds it)."""
        self._merge()
        return self._ids.tolist()

    def items(self) -> Iterator[tuple[int, LedgerMetadata]]:
        """(ledger id, metadata) in ledger id order, decoded one at a time. The ids are a snapshot (an
        8 B per ledger array copy) taken at the first step; a ledger removed while iterating is
        skipped, one changed is seen as it is when reached."""
        self._merge()
        snap = array("q", self._ids)
        gen = self._gen
        for i, lid in enumerate(snap):
            if gen == self._gen:
                off: int | None = self._off[i]
                if off is not None and off < 0:
                    off = None
            else:
                off = self._offset(lid)
            if off is not None:
                yield lid, self._decode(self._external(off))

    def bookies(self) -> set[str]:
        """Every bookie that appears in some ensemble."""
        return {self._names[n] for n in self._post}

    def in_some_ensemble(self, bookie: str) -> bool:
        """True when some indexed ledger's ensemble lists ``bookie`` (O(1))."""
        n = self._num.get(bookie)
        return n is not None and n in self._post

    def ledgers_of(self, bookie: str) -> frozenset[int]:
        """Ids of ledgers whose ensembles list ``bookie`` (upstream's index, imprecise)."""
        n = self._num.get(bookie)
        return frozenset(self._post.get(n, ())) if n is not None else frozenset()

    def ledgers_to_mark(self, lost: Iterable[str]) -> dict[int, list[str]]:
        """ledger id → lost bookies that hold entries of it (precise marking; no metadata reads)."""
        out: dict[int, list[str]] = {}
        for b in sorted(set(lost)):
            n = self._num.get(b)
            if n is None:
                continue
            for lid in self._post.get(n, ()):
                off = self._offset(lid)
                if off is not None and self._holds(self._external(off), n):
                    out.setdefault(lid, []).append(b)
        return out

    def total_length(self, ledger_ids: Iterable[int]) -> int:
        """Sum of metadata ``length`` (bytes) of the given ledgers (UNDER_REPLICATED_LEDGERS_TOTAL_SIZE)."""
        total = 0
        for lid in ledger_ids:
            off = self._offset(lid)
            if off is not None:
                total += _IHEAD.unpack_from(self._heap, off)[4]
        return total

    def memory_bytes(self) -> int:
        """Bytes held by the index (columns, heap, pending dict, bookie arrays, names, shapes), from
        ``sys.getsizeof``: allocated sizes, growth slack included."""
        size = sum(sys.getsizeof(x) for x in (self._ids, self._off, self._heap, self._extra, self._post,
                                               self._names, self._num, self._valid, self._shapes, self._shape_num))
        size += sum(sys.getsizeof(a) for a in self._post.values())
        size += sum(sys.getsizeof(n) for n in self._names)
        size += len(self._extra) * 2 * 32  # the pending dict's int keys and values
        return size

    # -- reconcile --------------------------------------------------------------------------------
    def diff(self, scan: Mapping[int, LedgerMetadata | bytes]) -> ReconcileReport:
        """Differences between the index and a full scan (``scan`` = ledger id → metadata, or → a record
        of this index from :meth:`record_from_znode`); versions are not compared."""
        rep = ReconcileReport()
        for lid, md in scan.items():
            off = self._offset(lid)
            if off is None:
                rep.added.append(lid)
            elif _body(self._external(off)) != _body(self._as_record(md)):
                rep.changed.append(lid)
        self._merge()
        rep.removed = [lid for lid in self._ids if lid not in scan]
        rep.added.sort()
        rep.changed.sort()
        return rep
