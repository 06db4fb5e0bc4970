"""Ledger metadata serialisation, upstream format versions 3, 2 and 1 (PURE).

Source: upstream ``LedgerMetadataSerDe``. A metadata znode holds::

    b"BookieMetadataFormatVersion\t<v>\n" + body

- v3 (new ledgers, 4.9+): body = varint32 length + binary ``LedgerMetadataFormat``, with ``cToken``.
- v2 (4.2+): body = protobuf text format of ``LedgerMetadataFormat``, never ``cToken``.
- v1 (4.0/4.1): body = lines ``<WQ>``, ``<E>``, ``<length>``, one ``<first entry>\t<bookie>...`` line
  per segment, then ``<last entry id>\tCLOSED`` when closed (``-102\tCLOSED`` while in recovery).

A rewrite keeps the version the znode was read in (upstream ``LedgerMetadataBuilder.from`` keeps
``metadataFormatVersion``; ``serialize`` switches on it), and ``ctime`` is written only when the
ledger stores one (upstream ``storingCreationTime``): an old ledger is never upgraded behind its
owner's back and never gains an invented ctime. As upstream, ``lastEntryId`` and ``length`` are
always written (``-1``/``0`` while open).

Byte-exact rewrites: custom metadata entries are written in the order they were read (duplicate keys
included, which the protobuf format allows), and v2 text is printed with protobuf-java's escapes
(:mod:`autorecovery.ledger.textformat`), so a rewrite changes only what it means to change. Upstream's
own reader differs in two places (``parseVersion3Config`` collects the entries with
``Collectors.toMap``): it refuses a ledger whose custom metadata repeats a key, and its rewrite writes
the entries in Java ``HashMap`` order; a ledger created by a Java client with a ``HashMap`` is already
in that order.
"""

from __future__ import annotations

import io
import re

from google.protobuf import proto, text_format
from google.protobuf.message import DecodeError

from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger import textformat
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.proto import bookkeeper_formats_pb2 as pb

HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
CURRENT_VERSION = 3
#: Versions this module reads and writes (upstream LOWEST_COMPAT .. MAXIMUM_METADATA_FORMAT_VERSION).
SUPPORTED_VERSIONS = (1, 2, 3)
_V1_CLOSED_TAG = "CLOSED"
_V1_IN_RECOVERY_ENTRY_ID = -102


def to_proto(md: LedgerMetadata, *, include_ctoken: bool = True) -> pb.LedgerMetadataFormat:
    """Build the upstream LedgerMetadataFormat message for ``md`` (upstream
    ``LedgerMetadataSerDe.buildLedgerMetadataFormat``: ``cToken`` only for v3, ``ctime`` only when
    ``md.store_ctime``)."""
    m = pb.LedgerMetadataFormat()
    m.quorumSize = md.write_quorum
    m.ackQuorumSize = md.ack_quorum
    m.ensembleSize = md.ensemble_size
    m.length = md.length
    m.lastEntryId = md.last_entry_id
    m.state = int(md.state)  # type: ignore[assignment]  # protobuf enums are ints at run time
    if md.store_ctime:
        m.ctime = md.ctime
    if md.has_password:  # metadata read without them (pre-4.2 v2) is written back without them
        m.digestType = int(md.digest_type)  # type: ignore[assignment]  # (the stub wants the enum type)
        m.password = md.password
    for k, v in md.custom_entries():
        m.customMetadata.add(key=k, value=v)
    for seg in md.segments:
        s = m.segment.add()
        s.ensembleMember.extend(seg.ensemble)
        s.firstEntryId = seg.first_entry_id
    if include_ctoken:
        m.cToken = md.ctoken
    return m


#: upstream ``BookieId.validateBookieId`` (Java ``String.matches``, so a full match; ``:-_`` is a range)
_UPSTREAM_BOOKIE_ID = re.compile(r"[a-zA-Z0-9:-_.\-]+")


def _check_segments(segments: list[tuple[int, list]]) -> None:
    """Upstream's parse (``LedgerMetadataBuilder.newEnsembleEntry`` of ``BookieId.parse``'d members)
    refuses an ensemble member that is not a valid bookie id (or is ``readonly``) and segments whose
    first entry ids do not strictly increase.

    Raises:
        ValueError: naming the member or the segment.
    """
    prev = None
    for first, members in segments:
        if prev is not None and first <= prev:
            raise ValueError(f"segment at entry {first} does not start after the segment at entry {prev}")
        prev = first
        for member in members:
            if not _UPSTREAM_BOOKIE_ID.fullmatch(member) or member.lower() == "readonly":
                raise ValueError(f"ensemble member {member[:100]!r} of segment {first} is not a valid bookie id")


def _duplicates(m: pb.LedgerMetadataFormat) -> tuple[tuple[str, bytes], ...]:
    """The custom metadata entries as read when a key repeats (the dict keeps one value per key), else
    ``()``: a rewrite then writes every entry back as read."""
    keys = [e.key for e in m.customMetadata]
    if len(set(keys)) == len(keys):
        return ()
    return tuple((e.key, e.value) for e in m.customMetadata)


def from_proto(m: pb.LedgerMetadataFormat, format_version: int) -> LedgerMetadata:
    """Build :class:`LedgerMetadata` from the upstream message.

    Raises:
        ValueError: when the message violates metadata invariants (quorums, segment sizes, strictly
            increasing segment starts, upstream-valid bookie ids) or a bookie id or custom metadata key
            is not UTF-8 text.
    """
    for s in m.segment:
        for member in s.ensembleMember:
            # proto2 string fields with invalid UTF-8 come back as bytes: never let a bytes bookie id through
            if not isinstance(member, str):
                raise ValueError(f"ensemble member {member!r} of segment {s.firstEntryId} is not UTF-8 text")
    _check_segments([(s.firstEntryId, list(s.ensembleMember)) for s in m.segment])
    for e in m.customMetadata:
        # same for a custom metadata key: a bytes key used to break every later rewrite of the ledger
        if not isinstance(e.key, str):
            raise ValueError(f"custom metadata key {e.key[:100]!r} is not UTF-8 text")
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
        has_password=m.HasField("password"),  # upstream reads the digest type only with a password
        ctime=m.ctime if m.HasField("ctime") else 0,
        custom_metadata={e.key: e.value for e in m.customMetadata},
        custom_duplicates=_duplicates(m),
        ctoken=m.cToken if m.HasField("cToken") else 0,
        format_version=format_version,
        store_ctime=m.HasField("ctime"),
    )


def serialize(md: LedgerMetadata) -> bytes:
    """Encode ``md`` in the format version it was read in (``md.format_version``; 3 for new ledgers).

    Raises:
        ValueError: ``md.format_version`` is not 1, 2 or 3, or a v1 ledger carries what v1 cannot hold
            (a password, custom metadata, an ack quorum below the write quorum): writing it would lose
            data, so nothing is written.
    """
    if md.format_version == 3:
        return serialize_v3(md)
    if md.format_version == 2:
        return serialize_v2(md)
    if md.format_version == 1:
        return serialize_v1(md)
    raise ValueError(f"invalid metadata format version {md.format_version}")


def serialize_v3(md: LedgerMetadata) -> bytes:
    """Format version 3: header line, varint32 length, binary protobuf (with ``cToken``)."""
    out = io.BytesIO()
    out.write(HEADER_PREFIX + b"3\n")
    proto.serialize_length_prefixed(to_proto(md), out)
    return out.getvalue()


def serialize_v2(md: LedgerMetadata) -> bytes:
    """Format version 2: header line, protobuf text format (no ``cToken``, as upstream), printed the way
    upstream 4.17's ``TextFormat.printer()`` prints it (:func:`textformat.print_message`)."""
    return HEADER_PREFIX + b"2\n" + textformat.print_message(to_proto(md, include_ctoken=False)).encode("ascii")


def serialize_v1(md: LedgerMetadata) -> bytes:
    """Format version 1 (upstream ``serializeVersion1``): WQ, E, length, one line per segment, then
    the CLOSED line when closed or in recovery.

    Raises:
        ValueError: the metadata holds a password, custom metadata or an AQ below WQ, which v1 cannot
            carry.
    """
    if md.password or md.custom_metadata or md.ack_quorum != md.write_quorum:
        raise ValueError("format version 1 cannot hold a password, custom metadata or AQ < WQ")
    text = "".join(f"{x}\n" for x in (md.write_quorum, md.ensemble_size, md.length))
    text += "".join("\t".join([str(seg.first_entry_id), *seg.ensemble]) + "\n" for seg in md.segments)
    if md.state == LedgerState.IN_RECOVERY:
        text += f"{_V1_IN_RECOVERY_ENTRY_ID}\t{_V1_CLOSED_TAG}"
    elif md.state == LedgerState.CLOSED:
        text += f"{md.last_entry_id}\t{_V1_CLOSED_TAG}"
    return HEADER_PREFIX + b"1\n" + text.encode()


def _parse_v1(body: bytes) -> LedgerMetadata:
    """Upstream ``parseVersion1Config``: AQ = WQ, no password (digest CRC32), no ctime."""
    lines = body.decode("utf-8").split("\n")
    wq, e, length = int(lines[0]), int(lines[1]), int(lines[2])
    segments: list[Segment] = []
    state, last = LedgerState.OPEN, -1
    for line in lines[3:]:
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            raise ValueError(f"bad v1 segment line {line!r}")
        if parts[1] == _V1_CLOSED_TAG:
            lid = int(parts[0])
            if lid == _V1_IN_RECOVERY_ENTRY_ID:
                state = LedgerState.IN_RECOVERY
            else:
                state, last = LedgerState.CLOSED, lid
            break
        segments.append(Segment(int(parts[0]), tuple(parts[1:])))
    _check_segments([(seg.first_entry_id, list(seg.ensemble)) for seg in segments])
    return LedgerMetadata(
        ensemble_size=e, write_quorum=wq, ack_quorum=wq, segments=tuple(segments), state=state,
        last_entry_id=last, length=length if state == LedgerState.CLOSED else 0,
        digest_type=DigestType.CRC32, password=b"", ctime=0, format_version=1, store_ctime=False,
        has_password=False)


def parse_v3_body(body: bytes) -> pb.LedgerMetadataFormat:
    """The protobuf of a format-version-3 body: a varint length, then that many bytes of binary protobuf
    (upstream ``LedgerMetadataSerDe``: ``writeDelimitedTo`` / ``mergeDelimitedFrom``); bytes after it are
    ignored, as upstream's. Uses protobuf's public length-prefixed reader (``google.protobuf.proto``);
    reads at most the bytes present, whatever the prefix claims.

    Raises:
        ValueError: an empty body, a malformed varint, or a prefix longer than the bytes present.
        google.protobuf.message.DecodeError: bad protobuf.
    """
    stream = io.BytesIO(body)
    m = proto.parse_length_prefixed(pb.LedgerMetadataFormat, stream)
    if m is None:
        raise ValueError("no length prefix: the format version 3 body is empty")
    return m


def deserialize(data: bytes, path: str = "?") -> LedgerMetadata:
    """Decode a metadata znode's bytes (format version 3, 2 or 1, as upstream ``parseConfig``).

    Raises:
        MalformedMetadataError: naming ``path`` when the header, version, length, protobuf or
            invariants are bad (a version other than 1..3 says so).
    """
    try:
        if not data.startswith(HEADER_PREFIX):
            raise ValueError("missing 'BookieMetadataFormatVersion' header")
        nl = data.index(b"\n", len(HEADER_PREFIX))
        version = int(data[len(HEADER_PREFIX) : nl])
        body = data[nl + 1 :]
        m = pb.LedgerMetadataFormat()
        if version == 3:
            m = parse_v3_body(body)
        elif version == 2:
            textformat.parse(body.decode(), m)
        elif version == 1:
            return _parse_v1(body)
        else:
            raise ValueError(f"metadata format version {version} is not supported (expected 1..{CURRENT_VERSION})")
        return from_proto(m, version)
    except (ValueError, DecodeError, IndexError, text_format.ParseError, UnicodeDecodeError) as exc:
        # bounded: a parse error quotes the offending text, which may be a whole 1 MB znode
        raise MalformedMetadataError(f"malformed ledger metadata at {path}: {str(exc)[:500]}") from exc
