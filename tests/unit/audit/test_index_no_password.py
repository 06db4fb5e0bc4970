"""The auditor's index keeps whether a ledger's metadata stores a password (format v1 does not): the
checker verifies such a ledger's entries with digestType/passwd, so the index view must say so."""

from __future__ import annotations

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.ledger import formats
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment


def _md(**kw) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, (Segment(0, ("a:1", "b:1", "c:1")),), state=LedgerState.CLOSED,
                          last_entry_id=9, length=90, **kw)


def test_a_v1_ledger_reads_back_from_the_index_without_a_password_and_a_v3_one_with_its_digest():
    idx = BookieLedgerIndex()
    idx.put_znode(1, formats.serialize_v1(_md(format_version=1)))
    idx.put_znode(2, formats.serialize(_md(digest_type=DigestType.CRC32C, password=b"pw")))
    idx.put(3, _md(format_version=1, has_password=False))
    v1, v3, put = idx.get(1), idx.get(2), idx.get(3)
    assert v1 is not None and not v1.has_password
    assert put is not None and not put.has_password
    assert v3 is not None and v3.has_password and v3.digest_type == DigestType.CRC32C
