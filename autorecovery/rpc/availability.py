"""Decode upstream's ``AvailabilityOfEntriesOfLedger`` bytes into entry ranges (PURE).

A stock bookie answers GET_LIST_OF_ENTRIES_OF_LEDGER with this condensed form (upstream
``org.apache.bookkeeper.util.AvailabilityOfEntriesOfLedger``), all big-endian:

* a 64-byte header: int32 format version (0), int32 number of sequence groups, zero padding;
* per sequence group, 24 bytes: int64 ``firstSequenceStart``, int64 ``lastSequenceStart``,
  int32 ``sequenceSize``, int32 ``sequencePeriod``. The group holds the sequences (runs of
  ``sequenceSize`` consecutive entry ids) that start at ``firstSequenceStart``,
  ``firstSequenceStart + sequencePeriod``, ... up to ``lastSequenceStart`` (one sequence when the
  period is 0 or both starts are equal).

A striped ledger (E > WQ) is a single group with many sequences, so the number of ranges follows the
number of entries the bookie holds; a hostile or corrupt answer could claim 2^60 of them. The decoder
refuses an answer that would expand past ``max_ranges`` instead of growing without bound.
"""

from __future__ import annotations

import struct

HEADER_SIZE = 64
GROUP = struct.Struct(">qqii")
FORMAT_V0 = 0
#: Most ranges one answer may expand to (a bookie holding every other entry of a 20M-entry ledger).
MAX_RANGES = 10_000_000


def ranges_from_availability(data: bytes, max_ranges: int = MAX_RANGES) -> list[tuple[int, int]]:
    """Sorted, disjoint, inclusive ``(first, last)`` entry-id ranges of an availability answer, adjacent
    ranges merged. Empty data means no entries.

    Raises:
        ValueError: an unknown format version, a truncated or inconsistent group (negative size or
            period, last start before first), or more than ``max_ranges`` ranges; the message says which.
    """
    if not data:
        return []
    if len(data) < HEADER_SIZE:
        raise ValueError(f"entry availability of {len(data)} bytes is shorter than its {HEADER_SIZE}-byte header")
    version, groups = struct.unpack_from(">ii", data, 0)
    if version != FORMAT_V0:
        raise ValueError(f"entry availability format version {version} is not {FORMAT_V0}")
    if groups < 0 or HEADER_SIZE + groups * GROUP.size > len(data):
        raise ValueError(f"entry availability claims {groups} sequence groups in {len(data)} bytes")
    out: list[tuple[int, int]] = []
    for g in range(groups):
        first, last, size, period = GROUP.unpack_from(data, HEADER_SIZE + g * GROUP.size)
        if size <= 0 or period < 0 or last < first or first < 0:
            raise ValueError(f"entry availability group {g} is inconsistent: first={first} last={last} "
                             f"size={size} period={period}")
        if period == 0 or last == first:
            starts = 1
        else:
            if (last - first) % period:
                raise ValueError(f"entry availability group {g}: last start {last} is not first {first} "
                                 f"plus a multiple of the period {period}")
            starts = (last - first) // period + 1
        if len(out) + starts > max_ranges:
            raise ValueError(f"entry availability expands to more than {max_ranges} ranges")
        for k in range(starts):
            a = first + k * period
            b = a + size - 1
            if out and a < out[-1][0]:
                raise ValueError(f"entry availability group {g} is not in ascending order")
            if out and a <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
    return out
