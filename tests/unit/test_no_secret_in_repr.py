"""Issue 25: objects that hold a ledger password or master key leave it out of ``repr`` (a logged or
printed object, or a traceback's locals, leaks no secret)."""

from __future__ import annotations

from autorecovery.bookie.group_commit import _Ledger, _Op
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, Segment


def test_metadata_and_bookie_storage_records_hide_the_secret():
    md = LedgerMetadata(ensemble_size=1, write_quorum=1, ack_quorum=1, segments=(Segment(0, ("a:1",)),),
                        digest_type=DigestType.HMAC, password=b"Sekrit-pw")
    assert "Sekrit" not in repr(md) and "password" not in repr(md) and md.password == b"Sekrit-pw"
    for obj in (_Ledger(b"Sekrit-mk", False, -1), _Op("fence", ledger_id=1, master_key=b"Sekrit-mk")):
        assert "Sekrit" not in repr(obj) and "master_key" not in repr(obj)
