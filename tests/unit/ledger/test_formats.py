"""Ledger ids, paths and metadata formats against upstream's layout (pure, no servers)."""

import pytest

from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger import formats
from autorecovery.ledger.ids import (
    ledger_id_from_path,
    ledger_id_from_ur_leaf,
    ledger_path,
    ur_marker_path,
)
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment

# Worked out by hand from upstream's LedgerMetadataSerDe (format version 3) and the
# LedgerMetadataFormat field numbers: header line, varint32 body length, then fields in order.
# buildLedgerMetadataFormat always sets lastEntryId (-1 while open, a 10-byte varint) and, for v3, cToken.
GOLDEN_V3 = (
    b"BookieMetadataFormatVersion\t3\n"
    b"\x2d"                      # body length: 45 bytes
    b"\x08\x02"                  # 1 quorumSize = 2
    b"\x10\x02"                  # 2 ensembleSize = 2
    b"\x18\x00"                  # 3 length = 0
    b"\x20" + b"\xff" * 9 + b"\x01"  # 4 lastEntryId = -1 (open)
    b"\x28\x01"                  # 5 state = OPEN
    b"\x32\x0c"                  # 6 segment, 12 bytes:
    b"\x0a\x03a:1"               #   ensembleMember "a:1"
    b"\x0a\x03b:1"               #   ensembleMember "b:1"
    b"\x10\x00"                  #   firstEntryId 0
    b"\x38\x03"                  # 7 digestType = CRC32C
    b"\x42\x02pw"                # 8 password "pw"
    b"\x48\x02"                  # 9 ackQuorumSize = 2
    b"\x50\x05"                  # 10 ctime = 5
    b"\x60\x00"                  # 12 cToken = 0
)


def golden_md() -> LedgerMetadata:
    return LedgerMetadata(2, 2, 2, (Segment(0, ("a:1", "b:1")),), password=b"pw", ctime=5)


def test_v3_encoding_matches_hand_computed_bytes():
    assert formats.serialize(golden_md()) == GOLDEN_V3


def test_v3_golden_bytes_decode_back():
    md = formats.deserialize(GOLDEN_V3, "/ledgers/00/0000/L0001")
    assert md == golden_md()
    assert md.state == LedgerState.OPEN and md.digest_type == DigestType.CRC32C


def test_closed_ledger_round_trip_with_segments_and_custom_metadata():
    md = LedgerMetadata(
        3, 2, 1,
        (Segment(0, ("a:1", "b:1", "c:1")), Segment(7, ("a:1", "d:1", "c:1"))),
        state=LedgerState.CLOSED, last_entry_id=41, length=12345, password=b"\x00\x01",
        ctime=1718000000000, custom_metadata={"app": b"pulsar", "k": b"\xff"},
    )
    data = formats.serialize(md)
    back = formats.deserialize(data)
    assert back == md
    assert back.last_entry_id == 41 and back.segments[1].first_entry_id == 7


def test_v2_text_format_is_readable():
    md = golden_md()
    v2 = formats.serialize_v2(md)
    assert v2.startswith(b"BookieMetadataFormatVersion\t2\n")
    assert b'ensembleMember: "a:1"' in v2
    back = formats.deserialize(v2)
    assert back.format_version == 2
    assert back.segments == md.segments and back.write_quorum == 2


def test_v2_ledger_rewritten_stays_v2_without_an_invented_ctime():
    """Issue 10: upstream keeps metadataFormatVersion on a rewrite; a v2 ledger with no ctime that the
    worker re-replicates must come back as v2 with no ctime (not v3 with ``ctime: 0``)."""
    from dataclasses import replace
    md = replace(golden_md(), store_ctime=False, ctime=0)
    v2 = formats.serialize_v2(md)
    assert b"ctime" not in v2 and b"cToken" not in v2
    back = formats.deserialize(v2)
    assert back.format_version == 2 and back.store_ctime is False
    moved = back.with_segment_replaced(0, {"a:1": "c:1"})
    again = formats.serialize(moved)
    assert again.startswith(b"BookieMetadataFormatVersion\t2\n")
    assert b"ctime" not in again and b'ensembleMember: "c:1"' in again
    # a v2 ledger that does carry a ctime keeps exactly that ctime
    with_ctime = formats.deserialize(formats.serialize_v2(replace(golden_md(), ctime=1234)))
    assert with_ctime.store_ctime and b"ctime: 1234" in formats.serialize(with_ctime)


def test_v3_without_ctime_is_rewritten_without_ctime():
    from dataclasses import replace
    md = formats.deserialize(formats.serialize(replace(golden_md(), store_ctime=False)))
    assert md.format_version == 3 and not md.store_ctime
    assert formats.to_proto(md).HasField("ctime") is False


# upstream LedgerMetadataSerDe.serializeVersion1 for a closed E3/WQ2 ledger with two segments
GOLDEN_V1 = (b"BookieMetadataFormatVersion\t1\n2\n3\n999\n0\ta:1\tb:1\tc:1\n10\ta:1\td:1\tc:1\n41\tCLOSED")


def test_v1_is_read_as_upstream_and_rewritten_as_v1():
    md = formats.deserialize(GOLDEN_V1, "/ledgers/00/0000/L0007")
    assert md.format_version == 1 and md.state == LedgerState.CLOSED and md.last_entry_id == 41
    assert (md.ensemble_size, md.write_quorum, md.ack_quorum, md.length) == (3, 2, 2, 999)
    assert md.segments[1] == Segment(10, ("a:1", "d:1", "c:1")) and not md.store_ctime
    assert formats.serialize(md) == GOLDEN_V1
    moved = formats.deserialize(formats.serialize(md.with_segment_replaced(10, {"d:1": "e:1"})))
    assert moved.format_version == 1 and moved.segments[1].ensemble == ("a:1", "e:1", "c:1")
    recovering = formats.deserialize(b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\ta:1\tb:1\tc:1\n-102\tCLOSED")
    assert recovering.state == LedgerState.IN_RECOVERY and recovering.last_entry_id == -1
    open_v1 = formats.deserialize(b"BookieMetadataFormatVersion\t1\n2\n3\n0\n0\ta:1\tb:1\tc:1\n")
    assert open_v1.state == LedgerState.OPEN and formats.serialize(open_v1).endswith(b"c:1\n")


def test_v1_cannot_hold_a_password_so_nothing_is_written():
    from dataclasses import replace
    md = replace(formats.deserialize(GOLDEN_V1), password=b"pw")
    with pytest.raises(ValueError, match="format version 1 cannot hold"):
        formats.serialize(md)


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", b"BookieMetadataFormatVersion\t1\nx\n", b"BookieMetadataFormatVersion\t4\n", b"BookieMetadataFormatVersion\t9\n", b"BookieMetadataFormatVersion\t3\n\x7f\x08",
     b"BookieMetadataFormatVersion\t2\nnot protobuf text {"],
)
def test_malformed_metadata_names_the_path(data):
    with pytest.raises(MalformedMetadataError, match="/ledgers/00/0000/L0042"):
        formats.deserialize(data, "/ledgers/00/0000/L0042")


def test_bad_quorums_rejected():
    with pytest.raises(ValueError, match="E=2 WQ=3"):
        LedgerMetadata(2, 3, 2, (Segment(0, ("a:1", "b:1")),))


def test_ledger_paths_short_and_long_split():
    assert ledger_path("/ledgers", 1) == "/ledgers/00/0000/L0001"
    assert ledger_path("/ledgers", 2147483646) == "/ledgers/21/4748/L3646"
    # ids >= 2^31-1 use the 19-digit 3-4-4-4-4 split (upstream LongHierarchicalLedgerManager)
    assert ledger_path("/ledgers", 2147483647) == "/ledgers/000/0000/0021/4748/L3647"
    big = 0x7FFF_FFFF_FFFF_FFFF
    p = ledger_path("/x", big)
    assert p == "/x/922/3372/0368/5477/L5807"
    assert ledger_id_from_path("/x", p) == big
    assert ledger_id_from_path("/ledgers", "/ledgers/00/0000/L0001") == 1


def test_ur_marker_path_is_four_hex_levels():
    assert ur_marker_path("/ledgers/underreplication/ledgers", 1) == (
        "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    )
    lid = 0xCAFEBEEF0000FEED
    lid &= 0x7FFF_FFFF_FFFF_FFFF
    p = ur_marker_path("/r", lid)
    assert p.split("/")[2:6] == [f"{(lid >> 48) & 0xffff:04x}", "beef", "0000", "feed"]
    assert ledger_id_from_ur_leaf(p.rsplit("/", 1)[1]) == lid


def test_v2_text_escapes_bytes_as_upstreams_writer_does():
    """Upstream's text writer (protobuf-java TextFormat) escapes 0x08/0x0C as ``\\b``/``\\f`` where Python's text_format
    writes ``\\010``/``\\014``; a v2 ledger whose password held such a byte was not byte for byte upstream's
    (found by tests/compat with a random master key)."""
    from dataclasses import replace
    md = replace(golden_md(), password=b"\x08\x0c\n\x00'\"\\\xff", custom_metadata={"k": b"\t\r"})
    v2 = formats.serialize_v2(md)
    assert b'password: "\\b\\f\\n\\000\\\'\\"\\\\\\377"\n' in v2
    assert b'value: "\\t\\r"' in v2
    back = formats.deserialize(v2)
    assert back.password == md.password and back.custom_metadata == md.custom_metadata
