"""Ledger metadata serialisation, upstream format versions 3 and 2 (PURE).

Source: upstream ``LedgerMetadataSerDe``. A metadata znode holds::

    b"BookieMetadataFormatVersion\t<v>\n" + body

- v3 (what we write): body = varint32 length + binary ``LedgerMetadataFormat``.
- v2 (read only): body = protobuf text format of ``LedgerMetadataFormat``.
"""

from __future__ import annotations

from google.protobuf import text_format
from google.protobuf.internal import decoder, encoder
from google.protobuf.message import DecodeError

from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.proto import bookkeeper_formats_pb2 as pb

HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
CURRENT_VERSION = 3


def to_proto(md: LedgerMetadata) -> pb.LedgerMetadataFormat:
    """Build the upstream LedgerMetadataFormat message for ``md``."""
    m = pb.LedgerMetadataFormat()
    m.quorumSize = md.write_quorum
    m.ensembleSize = md.ensemble_size
    m.ackQuorumSize = md.ack_quorum
    m.length = md.length
    m.state = int(md.state)
    if md.state == LedgerState.CLOSED:
        m.lastEntryId = md.last_entry_id
    for seg in md.segments:
        s = m.segment.add()
        s.ensembleMember.extend(seg.ensemble)
        s.firstEntryId = seg.first_entry_id
    m.digestType = int(md.digest_type)
    m.password = md.password
    m.ctime = md.ctime
    for k in sorted(md.custom_metadata):
        e = m.customMetadata.add()
        e.key = k
        e.value = md.custom_metadata[k]
    if md.ctoken:
        m.cToken = md.ctoken
    return m


def from_proto(m: pb.LedgerMetadataFormat, format_version: int) -> LedgerMetadata:
    """Build :class:`LedgerMetadata` from the upstream message.

    Raises:
        ValueError: when the message violates metadata invariants (quorums, segment sizes).
    """
    for s in m.segment:
        for member in s.ensembleMember:
            # proto2 string fields with invalid UTF-8 come back as bytes: never let a bytes bookie id through
            if not isinstance(member, str):
                raise ValueError(f"ensemble member {member!r} of segment {s.firstEntryId} is not UTF-8 text")
    return LedgerMetadata(
        ensemble_size=m.ensembleSize,
        write_quorum=m.quorumSize,
        ack_quorum=m.ackQuorumSize if m.HasField("ackQuorumSize") else m.quorumSize,
        segments=tuple(Segment(s.firstEntryId, tuple(s.ensembleMember)) for s in m.segment),
        state=LedgerState(m.state),
        last_entry_id=m.lastEntryId if m.HasField("lastEntryId") else -1,
        length=m.length,
        digest_type=DigestType(m.digestType) if m.HasField("digestType") else DigestType.CRC32,
        password=m.password,
        ctime=m.ctime if m.HasField("ctime") else 0,
        custom_metadata={e.key: e.value for e in m.customMetadata},
        ctoken=m.cToken if m.HasField("cToken") else 0,
        format_version=format_version,
    )


def serialize(md: LedgerMetadata) -> bytes:
    """Encode ``md`` in format version 3: header line, varint32 length, binary protobuf."""
    body = to_proto(md).SerializeToString()
    return HEADER_PREFIX + b"3\n" + encoder._VarintBytes(len(body)) + body


def serialize_v2(md: LedgerMetadata) -> bytes:
    """Encode ``md`` in format version 2 (protobuf text); used only to test compatibility."""
    return HEADER_PREFIX + b"2\n" + text_format.MessageToString(to_proto(md)).encode()


def deserialize(data: bytes, path: str = "?") -> LedgerMetadata:
    """Decode a metadata znode's bytes (format version 3 or 2).

    Raises:
        MalformedMetadataError: naming ``path`` when the header, length, protobuf or invariants are bad.
    """
    try:
        if not data.startswith(HEADER_PREFIX):
            raise ValueError("missing 'BookieMetadataFormatVersion' header")
        nl = data.index(b"\n", len(HEADER_PREFIX))
        version = int(data[len(HEADER_PREFIX) : nl])
        body = data[nl + 1 :]
        m = pb.LedgerMetadataFormat()
        if version == 3:
            length, pos = decoder._DecodeVarint32(body, 0)
            if pos + length > len(body):
                raise ValueError(f"length prefix {length} exceeds the {len(body) - pos} bytes present")
            m.ParseFromString(body[pos : pos + length])
        elif version == 2:
            text_format.Parse(body.decode(), m)
        else:
            raise ValueError(f"unsupported metadata format version {version}")
        return from_proto(m, version)
    except (ValueError, DecodeError, IndexError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise MalformedMetadataError(f"malformed ledger metadata at {path}: {exc}") from exc
