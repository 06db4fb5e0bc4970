"""Entry packing, entry digests and master keys, byte for byte upstream's (PURE).

Source: upstream ``proto/checksum/DigestManager`` and its subclasses (BookKeeper 4.17). An entry on the
wire and on a bookie's disk is packed as (all big-endian)::

    int64 ledgerId | int64 entryId | int64 lastAddConfirmed | int64 length | digest | payload

The first 32 bytes are upstream's ``METADATA_LENGTH``; ``length`` is the ledger's cumulative payload
length up to and including this entry. The digest covers those 32 bytes and then the payload, so an
entry that is corrupted, truncated or stored under the wrong ledger or entry id is detected when it is
read. Its size and algorithm depend on the ledger's digest type (``LedgerMetadata.digest_type``):

=========  =====  ====================================================================================
type       bytes  digest
=========  =====  ====================================================================================
CRC32C     4      CRC32C (Castagnoli) as an int32 (``CRC32CDigestManager``)
CRC32      8      ``java.util.zip.CRC32`` (zlib's CRC-32) as an int64 (``CRC32DigestManager``)
HMAC       20     HmacSHA1 keyed with SHA-1("mac" + password) (``MacDigestManager``; API name MAC)
DUMMY      0      none: only the ids are checked (``DummyDigestManager``)
=========  =====  ====================================================================================

A LAC body (WriteLac / ReadLac) is ``int64 ledgerId | int64 lac | digest`` with the digest over those
16 bytes. The master key sent with adds and fencing reads is :func:`master_key` of the password
(upstream ``DigestManager.generateMasterKey``), never the password itself.

Use :func:`digest_for` (cached per digest type and password, so an HMAC key is derived once per
ledger) or :func:`ledger_digest`; :func:`pack_entry` / :func:`unpack_entry` keep the CRC32C default
for callers without metadata, and :func:`peek_ids` reads the ids of a body of any digest type.
``tests/unit/ledger/test_digest_upstream.py`` checks every type against vectors that upstream's own
Java code produced.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
import zlib
from dataclasses import dataclass

import google_crc32c

from autorecovery.errors import DigestMismatchError
from autorecovery.ledger.metadata import DigestType

__all__ = ["METADATA_LENGTH", "LAC_METADATA_LENGTH", "HEADER_SIZE", "Entry", "EntryDigest", "digest_for",
           "ledger_digest", "master_key", "pack_entry", "unpack_entry", "peek_ids"]

#: upstream ``DigestManager.METADATA_LENGTH``: ledger id, entry id, LAC, length
METADATA_LENGTH = 32
#: upstream ``DigestManager.LAC_METADATA_LENGTH``: ledger id, LAC
LAC_METADATA_LENGTH = 16
_META = struct.Struct(">qqqq")
_IDS = struct.Struct(">qqq")
_LAC = struct.Struct(">qq")
_CRC32C_HEAD = struct.Struct(">qqqqI")
#: Header + digest of a CRC32C entry (36 bytes): what :func:`pack_entry` writes before the payload.
#: The smallest body of any digest type is :data:`METADATA_LENGTH` (a DUMMY entry with no payload).
HEADER_SIZE = METADATA_LENGTH + 4


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded entry. ``length`` is the cumulative ledger length in bytes after this entry."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: bytes


class EntryDigest:
    """Packs and verifies the entries (and LAC bodies) of ledgers of one digest type and password.

    Get one with :func:`digest_for` / :func:`ledger_digest`. Attributes: ``digest_type``
    (:class:`DigestType`), ``name`` (its name, for messages), ``mac_length`` (digest bytes, upstream
    ``macCodeLength``), ``header_size`` (``METADATA_LENGTH + mac_length``: bytes before the payload).
    """

    __slots__ = ("digest_type", "name", "mac_length", "header_size")

    def __init__(self, digest_type: DigestType, mac_length: int) -> None:
        self.digest_type = digest_type
        self.name = digest_type.name
        self.mac_length = mac_length
        self.header_size = METADATA_LENGTH + mac_length

    def __repr__(self) -> str:
        return f"EntryDigest({self.name})"

    # the one thing a digest type defines: its value over ``head`` (32 or 16 bytes) then ``payload``
    def _compute(self, head, payload) -> bytes:
        raise NotImplementedError

    def _matches(self, want: bytes, got) -> bool:
        return want == got

    def pack(self, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
        """The packed entry: ``header_size + len(payload)`` bytes (upstream
        ``computeDigestAndPackageForSending``, concatenated)."""
        head = _META.pack(ledger_id, entry_id, lac, length)
        return b"".join((head, self._compute(head, payload), payload))

    def verify(self, body: bytes, expect_ledger: int, expect_entry: int, source: str = "?") -> None:
        """Check a packed entry (upstream ``verifyDigest``); copies no payload except for CRC32C,
        whose library wants ``bytes``.

        Raises:
            DigestMismatchError: one line naming ledger, entry, ``source`` (a bookie id) and the digest
                type, when the body is shorter than this type's header, carries other ids, or its
                digest does not match.
        """
        self._check(body, expect_ledger, expect_entry, source, False)

    def unpack(self, body: bytes, expect_ledger: int, expect_entry: int, source: str = "?") -> Entry:
        """Verify (:meth:`verify`) and decode a packed entry (upstream ``verifyDigestAndReturnData``).

        Raises:
            DigestMismatchError: see :meth:`verify`.
        """
        payload = self._check(body, expect_ledger, expect_entry, source, True)
        ledger_id, entry_id, lac, length = _META.unpack_from(body)
        return Entry(ledger_id, entry_id, lac, length, payload)

    def _check(self, body: bytes, expect_ledger: int, expect_entry: int, source: str, copy: bool):
        """:meth:`verify`; returns the payload (``bytes`` when ``copy``, else possibly a view)."""
        n = len(body)
        hs = self.header_size
        if n < hs:
            raise DigestMismatchError(
                f"ledger {expect_ledger} entry {expect_entry} from {source}: body of {n} bytes is truncated "
                f"(shorter than the {hs}-byte {self.name} entry header)")
        ledger_id, entry_id, _lac = _IDS.unpack_from(body)
        if ledger_id != expect_ledger or entry_id != expect_entry:
            raise DigestMismatchError(
                f"ledger {expect_ledger} entry {expect_entry} from {source}: body is for ledger {ledger_id} "
                f"entry {entry_id} ({self.name} digest)")
        mv = memoryview(body)
        payload = bytes(mv[hs:]) if copy else mv[hs:]
        if hs > METADATA_LENGTH and not self._matches(self._compute(mv[:METADATA_LENGTH], payload),
                                                      mv[METADATA_LENGTH:hs]):
            raise DigestMismatchError(
                f"ledger {expect_ledger} entry {expect_entry} from {source}: {self.name} digest mismatch")
        return payload

    def pack_lac(self, ledger_id: int, lac: int) -> bytes:
        """A LAC body (upstream ``computeDigestAndPackageForSendingLac``): ledger id, LAC, digest."""
        head = _LAC.pack(ledger_id, lac)
        return head + self._compute(head, b"")

    def unpack_lac(self, body: bytes, expect_ledger: int, source: str = "?") -> int:
        """Verify a LAC body and return its LAC (upstream ``verifyDigestAndReturnLac``).

        Raises:
            DigestMismatchError: naming the ledger, ``source`` and the digest type.
        """
        n = len(body)
        need = LAC_METADATA_LENGTH + self.mac_length
        if n < need:
            raise DigestMismatchError(
                f"ledger {expect_ledger} LAC from {source}: body of {n} bytes is truncated "
                f"(shorter than the {need}-byte {self.name} LAC body)")
        ledger_id, lac = _LAC.unpack_from(body)
        if ledger_id != expect_ledger:
            raise DigestMismatchError(
                f"ledger {expect_ledger} LAC from {source}: body is for ledger {ledger_id} ({self.name} digest)")
        if self.mac_length:
            mv = memoryview(body)
            if not self._matches(self._compute(mv[:LAC_METADATA_LENGTH], b""), mv[LAC_METADATA_LENGTH:need]):
                raise DigestMismatchError(f"ledger {expect_ledger} LAC from {source}: {self.name} digest mismatch")
        return lac


class _Crc32c(EntryDigest):
    __slots__ = ()

    def _compute(self, head, payload) -> bytes:
        # google_crc32c takes bytes only (not memoryviews)
        crc = google_crc32c.value(head if isinstance(head, bytes) else bytes(head))
        return google_crc32c.extend(crc, payload if isinstance(payload, bytes) else bytes(payload)).to_bytes(4, "big")

    def _check(self, body: bytes, expect_ledger: int, expect_entry: int, source: str, copy: bool):
        # the common type, checked per entry copied: slices of bytes and an int compare, no views
        if len(body) < 36 or not isinstance(body, bytes):
            return super()._check(body, expect_ledger, expect_entry, source, copy)
        ledger_id, entry_id, _lac, _length, crc = _CRC32C_HEAD.unpack_from(body)
        if ledger_id != expect_ledger or entry_id != expect_entry:
            return super()._check(body, expect_ledger, expect_entry, source, copy)  # raises, naming both
        payload = body[36:]
        if google_crc32c.extend(google_crc32c.value(body[:METADATA_LENGTH]), payload) != crc:
            raise DigestMismatchError(
                f"ledger {expect_ledger} entry {expect_entry} from {source}: {self.name} digest mismatch")
        return payload


class _Crc32(EntryDigest):
    __slots__ = ()

    def _compute(self, head, payload) -> bytes:
        # java.util.zip.CRC32.getValue() (0..2^32-1) written with writeLong
        return zlib.crc32(payload, zlib.crc32(head)).to_bytes(8, "big")


class _Hmac(EntryDigest):
    __slots__ = ("_base",)

    def __init__(self, password: bytes) -> None:
        super().__init__(DigestType.HMAC, 20)
        # keyed once per ledger; each entry copies the keyed state (MacDigestManager's thread-local Mac)
        self._base = hmac.new(hashlib.sha1(b"mac" + password).digest(), digestmod=hashlib.sha1)

    def _compute(self, head, payload) -> bytes:
        h = self._base.copy()
        h.update(head)
        h.update(payload)
        return h.digest()

    def _matches(self, want: bytes, got) -> bool:
        return hmac.compare_digest(want, bytes(got))


class _Dummy(EntryDigest):
    __slots__ = ()

    def _compute(self, head, payload) -> bytes:
        return b""


@functools.lru_cache(maxsize=4096)
def _digest(digest_type: DigestType, password: bytes) -> EntryDigest:
    if digest_type == DigestType.HMAC:
        return _Hmac(password)
    if digest_type == DigestType.CRC32C:
        return _Crc32c(DigestType.CRC32C, 4)
    if digest_type == DigestType.CRC32:
        return _Crc32(DigestType.CRC32, 8)
    if digest_type == DigestType.DUMMY:
        return _Dummy(DigestType.DUMMY, 0)
    raise ValueError(f"unknown digest type {digest_type!r}")


def digest_for(digest_type: DigestType | int, password: bytes = b"") -> EntryDigest:
    """The :class:`EntryDigest` of ``digest_type`` (upstream ``DigestManager.instantiate``); only HMAC
    uses ``password``. Cached: calling it per entry costs a dictionary look-up.

    Raises:
        ValueError: an unknown digest type number.
    """
    try:
        dt = DigestType(int(digest_type))
    except ValueError:
        raise ValueError(f"unknown digest type {digest_type!r}") from None
    return _digest(dt, bytes(password) if dt == DigestType.HMAC else b"")


def ledger_digest(md) -> EntryDigest:
    """The digest of a ledger, from its metadata's ``digest_type`` and ``password``."""
    return digest_for(md.digest_type, md.password)


@functools.lru_cache(maxsize=4096)
def master_key(password: bytes) -> bytes:
    """The 20-byte master key sent with adds and fencing reads: SHA-1("ledger" + password) (upstream
    ``DigestManager.generateMasterKey``; for an empty password that is ``EMPTY_LEDGER_KEY``, the same
    value)."""
    return hashlib.sha1(b"ledger" + bytes(password)).digest()


CRC32C = digest_for(DigestType.CRC32C)


def pack_entry(ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
    """Pack an entry with a CRC32C digest; returns ``HEADER_SIZE + len(payload)`` bytes."""
    return CRC32C.pack(ledger_id, entry_id, lac, length, payload)


def peek_ids(body: bytes) -> tuple[int, int, int]:
    """Return ``(ledger_id, entry_id, lac)`` from a packed entry of any digest type, without checking
    its digest.

    Raises:
        ValueError: when ``body`` is shorter than the 32-byte header (:data:`METADATA_LENGTH`).
    """
    if len(body) < METADATA_LENGTH:
        raise ValueError(f"entry body of {len(body)} bytes is shorter than the {METADATA_LENGTH}-byte header")
    return _IDS.unpack_from(body)


def unpack_entry(body: bytes, expect_ledger: int, expect_entry: int, source: str = "?") -> Entry:
    """Verify and decode a CRC32C entry (:meth:`EntryDigest.unpack`).

    Raises:
        DigestMismatchError: naming ledger, entry and ``source`` (a bookie id) when the body is too
            short, carries other ids, or its CRC32C does not match.
    """
    return CRC32C.unpack(body, expect_ledger, expect_entry, source)
