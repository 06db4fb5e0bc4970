"""Entry packing and CRC32C digests (PURE).

An entry on the wire and on the bookie's disk is packed as (all big-endian)::

    int64 ledgerId | int64 entryId | int64 lastAddConfirmed | int64 length | uint32 crc32c | payload

``length`` is the ledger's cumulative payload length up to and including this entry (as upstream's
``DigestManager``). The CRC32C covers the 32-byte header (ledger id, entry id, LAC, length) and the
payload, so an entry that is corrupted, truncated or stored under the wrong ledger or entry id is
detected when it is read (upstream CRC32CDigestManager, digest type CRC32C).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import google_crc32c

from autorecovery.errors import DigestMismatchError

HEADER = struct.Struct(">qqqqI")
HEADER_SIZE = HEADER.size  # 36 bytes


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded entry. ``length`` is the cumulative ledger length in bytes after this entry."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: bytes


def _crc(header32: bytes, payload: bytes) -> int:
    c = google_crc32c.Checksum(header32)
    c.update(payload)
    return int.from_bytes(c.digest(), "big")


def pack_entry(ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
    """Pack an entry with its CRC32C digest; returns ``HEADER_SIZE + len(payload)`` bytes."""
    header32 = struct.pack(">qqqq", ledger_id, entry_id, lac, length)
    return header32 + struct.pack(">I", _crc(header32, payload)) + payload


def peek_ids(body: bytes) -> tuple[int, int, int]:
    """Return ``(ledger_id, entry_id, lac)`` from a packed entry's header without checking the digest.

    Raises:
        ValueError: when ``body`` is shorter than the header.
    """
    if len(body) < HEADER_SIZE:
        raise ValueError(f"entry body of {len(body)} bytes is shorter than the {HEADER_SIZE}-byte header")
    ledger_id, entry_id, lac, _length, _crc_value = HEADER.unpack_from(body)
    return ledger_id, entry_id, lac


def unpack_entry(body: bytes, expect_ledger: int, expect_entry: int, source: str = "?") -> Entry:
    """Verify and decode a packed entry.

    Raises:
        DigestMismatchError: naming ledger, entry and ``source`` (a bookie id) when the body is too
            short, carries other ids, or its CRC32C does not match.
    """
    if len(body) < HEADER_SIZE:
        raise DigestMismatchError(
            f"ledger {expect_ledger} entry {expect_entry} from {source}: body of {len(body)} bytes is truncated"
        )
    ledger_id, entry_id, lac, length, crc = HEADER.unpack_from(body)
    payload = body[HEADER_SIZE:]
    if ledger_id != expect_ledger or entry_id != expect_entry:
        raise DigestMismatchError(
            f"ledger {expect_ledger} entry {expect_entry} from {source}: body is for ledger {ledger_id} entry {entry_id}"
        )
    if _crc(body[:32], payload) != crc:
        raise DigestMismatchError(
            f"ledger {expect_ledger} entry {expect_entry} from {source}: CRC32C digest mismatch"
        )
    return Entry(ledger_id, entry_id, lac, length, bytes(payload))
