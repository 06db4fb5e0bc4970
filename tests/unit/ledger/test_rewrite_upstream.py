"""Rewrites of ledger metadata byte for byte what upstream 4.17 wrote (pure; issue 28 item 6).

The vectors in ``tests/data/upstream_metadata_vectors.json`` were printed by upstream's own Java code
(``tests/data/UpstreamMetadataVectors.java`` against bookkeeper-server 4.17.2 and protobuf-java 3.25.5):
``TextFormat.escapeBytes`` of every byte 0..255, and ``LedgerMetadataSerDe.serialize`` of a closed ledger
with two segments and custom metadata given in a non-sorted order (one value holding every byte
0..255), in format versions 2 and 3, plus upstream's own rewrite of each (member 0 of segment 0
replaced, the ReplicationWorker's change).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from autorecovery.ledger import formats
from autorecovery.ledger.metadata import LedgerMetadata, Segment
from autorecovery.proto import bookkeeper_formats_pb2 as pb

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "data" / "upstream_metadata_vectors.json").read_text())
OLD, NEW = "192.0.2.1:3181", "192.0.2.9:3181"
CUSTOM_ORDER = ["zeta", "every-byte", "alpha", "Métadonnée ☃", "beta"]


def test_escapes_match_protobuf_java_for_all_256_bytes():
    """``\\a``/``\\v`` for 0x07/0x0B (not ``\\007``/``\\013``), and every other byte as protobuf-java."""
    from autorecovery.ledger import textformat

    assert VECTORS["produced_by"].endswith("protobuf-java 3.25.5")
    got = [textformat.escape_bytes(bytes([b])) for b in range(256)]
    differ = [(b, got[b], VECTORS["escapes"][b]) for b in range(256) if got[b] != VECTORS["escapes"][b]]
    assert not differ
    # and what the v2 writer puts in a znode (password and custom metadata value)
    md = LedgerMetadata(2, 2, 2, (Segment(0, ("a:1", "b:1")),), password=bytes(range(256)),
                        custom_metadata={"k": bytes(range(256))}, format_version=2)
    quoted = ('"' + "".join(VECTORS["escapes"]) + '"').encode()
    assert formats.serialize(md).count(quoted) == 2


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_upstream_written_metadata_round_trips_byte_exact(version):
    """Read then written back unchanged: the custom metadata keeps upstream's (non-sorted) order and
    every byte 0..255 of a value comes back as upstream printed it."""
    data = bytes.fromhex(VECTORS["metadata"][version])
    md = formats.deserialize(data, "/ledgers/00/0000/L0059")
    assert list(md.custom_metadata) == CUSTOM_ORDER
    assert md.custom_metadata["every-byte"] == bytes(range(256))
    assert md.format_version == int(version[1])
    assert formats.serialize(md) == data


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_rewrite_changes_only_the_replaced_member(version):
    """The ReplicationWorker's change (segment 0's member replaced) is the only byte difference (the two
    bookie ids have the same length, so the v3 length prefixes do not move either)."""
    data = bytes.fromhex(VECTORS["metadata"][version])
    md = formats.deserialize(data, "/ledgers/00/0000/L0059")
    ours = formats.serialize(md.with_segment_replaced(0, {OLD: NEW}))
    assert ours == data.replace(OLD.encode(), NEW.encode(), 1)
    # Upstream's own rewrite writes the same entries, re-ordered into its HashMap's order (documented
    # difference, docs/operators.md): same bytes once the entries are compared as a set.
    theirs = formats.deserialize(bytes.fromhex(VECTORS["rewrite"][version]), "/x")
    assert theirs.custom_metadata == md.custom_metadata and list(theirs.custom_metadata) != CUSTOM_ORDER
    assert formats.serialize(replace(theirs, custom_metadata=dict(md.custom_metadata))) == ours


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _with_entries(version: int, entries: list[tuple[str, bytes]]) -> bytes:
    from autorecovery.ledger import textformat

    m = pb.LedgerMetadataFormat(quorumSize=2, ensembleSize=2, length=0, lastEntryId=-1, state=pb.LedgerMetadataFormat.OPEN,
                                digestType=pb.LedgerMetadataFormat.CRC32C, password=b"\x07pw\x0b", ackQuorumSize=2)
    seg = m.segment.add(firstEntryId=0)
    seg.ensembleMember.extend(["a:1", "b:1"])
    for k, v in entries:
        m.customMetadata.add(key=k, value=v)
    if version == 2:
        return formats.HEADER_PREFIX + b"2\n" + textformat.print_message(m).encode()
    m.cToken = 0
    body = m.SerializeToString()
    return formats.HEADER_PREFIX + b"3\n" + _varint(len(body)) + body


@pytest.mark.parametrize("version", [2, 3])
def test_non_sorted_duplicates_and_every_byte_round_trip(version):
    """Keys out of order and a repeated key (the format allows it) are written back as read, values
    with every byte 0..255 included; the dict view keeps the last value of a repeated key."""
    entries = [("z", bytes(range(256))), ("a", b"\x07\x0b"), ("z", b"second"), ("m", bytes(range(255, -1, -1)))]
    data = _with_entries(version, entries)
    md = formats.deserialize(data, "/ledgers/00/0000/L0001")
    assert md.custom_metadata == {"z": b"second", "a": b"\x07\x0b", "m": bytes(range(255, -1, -1))}
    assert formats.serialize(md) == data
    assert formats.serialize(md.with_new_segment(5, ("b:1", "c:1"))).count(b"second") == 1
    if version == 2:
        assert b'value: "\\a\\v"' in data and b'password: "\\apw\\v"' in data
    # a deliberate change of the custom metadata is written in the dict's order, without the duplicate
    changed = formats.deserialize(formats.serialize(replace(md, custom_metadata={"n": b"1", **md.custom_metadata})))
    assert list(changed.custom_metadata) == ["n", "z", "a", "m"] and not changed.custom_duplicates


def test_new_metadata_keeps_the_callers_order():
    """A ledger created with custom metadata is written in the order given (upstream's builder keeps the
    caller's map order), not sorted."""
    md = LedgerMetadata(2, 2, 2, (Segment(0, ("a:1", "b:1")),), custom_metadata={"b": b"2", "a": b"1"})
    assert [(e.key, e.value) for e in formats.to_proto(md).customMetadata] == [("b", b"2"), ("a", b"1")]
