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
GOLDEN_V3 = (
    b"BookieMetadataFormatVersion\t3\n"
    b"\x20"                      # body length: 32 bytes
    b"\x08\x02"                  # 1 quorumSize = 2
    b"\x10\x02"                  # 2 ensembleSize = 2
    b"\x18\x00"                  # 3 length = 0
    b"\x28\x01"                  # 5 state = OPEN (no lastEntryId while open)
    b"\x32\x0c"                  # 6 segment, 12 bytes:
    b"\x0a\x03a:1"               #   ensembleMember "a:1"
    b"\x0a\x03b:1"               #   ensembleMember "b:1"
    b"\x10\x00"                  #   firstEntryId 0
    b"\x38\x03"                  # 7 digestType = CRC32C
    b"\x42\x02pw"                # 8 password "pw"
    b"\x48\x02"                  # 9 ackQuorumSize = 2
    b"\x50\x05"                  # 10 ctime = 5
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


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", b"BookieMetadataFormatVersion\t9\n", b"BookieMetadataFormatVersion\t3\n\x7f\x08",
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
