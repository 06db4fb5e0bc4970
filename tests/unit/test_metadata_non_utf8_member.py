"""Issue 15 regression: a v3 metadata ensemble member that is not UTF-8 used to decode into a *bytes* bookie id."""

from __future__ import annotations

import pytest
from google.protobuf.internal import encoder

from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger import formats as F
from autorecovery.proto import bookkeeper_formats_pb2 as pb


def _v3(member: bytes) -> bytes:
    m = pb.LedgerMetadataFormat()
    m.ensembleSize, m.quorumSize, m.ackQuorumSize, m.state, m.lastEntryId, m.length = 1, 1, 1, 1, 0, 0
    seg = m.segment.add()
    seg.firstEntryId = 0
    seg.ensembleMember.append("AAAAAA:3181")
    body = m.SerializeToString().replace(b"AAAAAA", member)
    return F.HEADER_PREFIX + b"3\n" + encoder._VarintBytes(len(body)) + body


def test_non_utf8_ensemble_member_is_malformed_metadata_naming_the_znode():
    assert F.deserialize(_v3(b"bookie"), "/ledgers/00/0000/L0000").segments[0].ensemble == ("bookie:3181",)
    with pytest.raises(MalformedMetadataError, match=r"/ledgers/00/0000/L0000.*not UTF-8"):
        F.deserialize(_v3(b"\xff\xfeAAAA"), "/ledgers/00/0000/L0000")
