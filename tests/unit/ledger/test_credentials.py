"""Which digest type and password open a ledger for recovery (ledger/credentials.py, upstream's
administrative LedgerOpenOp), how format v1 / pre-4.2 v2 metadata records that it stores none, and that
passwd (a secret) is read but never shown."""

from __future__ import annotations

import pytest

from autorecovery.config.load import load_settings
from autorecovery.errors import ConfigError
from autorecovery.ledger import formats
from autorecovery.ledger.credentials import (
    DEFAULT_CREDENTIALS,
    RecoveryCredentials,
    digest_failure_reason,
    parse_digest_type,
    recovery_credentials,
    recovery_digest,
    recovery_master_key,
)
from autorecovery.ledger.digest import master_key
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment

ENS = ("a:1", "b:1", "c:1")


def _md(**kw) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, (Segment(0, ENS),), state=LedgerState.CLOSED, last_entry_id=9, length=90, **kw)


def test_metadata_with_a_password_uses_its_own_whatever_is_configured():
    md = _md(digest_type=DigestType.HMAC, password=b"own")
    cfg = RecoveryCredentials(DigestType.CRC32C, b"configured")
    assert recovery_credentials(md, cfg) == (DigestType.HMAC, b"own")
    assert recovery_master_key(md, cfg) == master_key(b"own")


def test_metadata_without_a_password_uses_the_configured_ones():
    md = _md(digest_type=DigestType.CRC32, password=b"", has_password=False)
    cfg = RecoveryCredentials(DigestType.CRC32C, b"configured")
    assert recovery_credentials(md, cfg) == (DigestType.CRC32C, b"configured")
    assert recovery_digest(md, cfg).digest_type == DigestType.CRC32C
    assert recovery_master_key(md, cfg) == master_key(b"configured")
    assert DEFAULT_CREDENTIALS == RecoveryCredentials(DigestType.CRC32, b"")  # upstream's defaults
    assert recovery_credentials(md) == (DigestType.CRC32, b"")


def test_v1_metadata_stores_no_password_and_a_pre_4_2_v2_one_is_written_back_without_one():
    v1 = formats.deserialize(formats.serialize_v1(_md(format_version=1)))
    assert not v1.has_password and v1.format_version == 1
    v2_old = b"BookieMetadataFormatVersion\t2\nquorumSize: 2\nensembleSize: 3\nlength: 90\nlastEntryId: 9\n" \
             b"state: CLOSED\nsegment {\n  ensembleMember: \"a:1\"\n  ensembleMember: \"b:1\"\n" \
             b"  ensembleMember: \"c:1\"\n  firstEntryId: 0\n}\n"
    md = formats.deserialize(v2_old)
    assert not md.has_password
    assert b"password" not in formats.serialize(md) and b"digestType" not in formats.serialize(md)
    with_pw = formats.deserialize(formats.serialize_v2(_md(format_version=2, password=b"")))
    assert with_pw.has_password  # an empty password that is stored is still a stored password (upstream)


@pytest.mark.parametrize(("name", "dt"), [("CRC32", DigestType.CRC32), ("crc32c", DigestType.CRC32C),
                                          ("MAC", DigestType.HMAC), ("HMAC", DigestType.HMAC),
                                          ("DUMMY", DigestType.DUMMY)])
def test_digest_names_as_upstream_spells_them(name, dt):
    assert parse_digest_type(name) == dt


def test_bad_digest_type_is_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"bad value for digestType: 'SHA1'"):
        load_settings(None, env={}, overrides={"zkServers": "zk1:2181", "digestType": "SHA1"})


def test_keys_and_their_aliases_reach_both_roles_and_the_password_is_never_shown():
    s = load_settings(None, env={}, overrides={"zkServers": "zk1:2181", "bookieRecoveryDigestType": "CRC32C",
                                               "bookieRecoveryPasswd": "s3cret-pw"})
    assert s.worker.recovery == RecoveryCredentials(DigestType.CRC32C, b"s3cret-pw")
    assert s.auditor.recovery == s.worker.recovery
    shown = "\n".join(s.effective_lines()) + repr(s.worker) + repr(s.auditor) + str(dict(s.properties))
    shown += str(s.worker.loggable()) + repr(s.worker.recovery)
    assert "s3cret-pw" not in shown
    assert "passwd=******" in "\n".join(s.effective_lines())
    from autorecovery.admin.ops import server_config  # the HTTP server_config / shell's view

    assert server_config(s)["passwd"] == "******" and server_config(s)["digestType"] == "CRC32C"
    assert "digestType=CRC32C" in "\n".join(s.effective_lines())


def test_the_digest_failure_reason_names_the_keys_only_for_ledgers_without_a_password():
    v1 = _md(format_version=1, has_password=False)
    cfg = RecoveryCredentials(DigestType.CRC32, b"pw")
    line = digest_failure_reason(v1, cfg, 10, {"DIGEST", "NOT_REGISTERED"})
    assert line.startswith("10 entries fail the digest check on every replica: the ledger's metadata stores "
                           "no password (format v1), so they were verified with digestType=CRC32")
    assert "pw" not in line.replace("password", "").replace("passwd", "")
    assert digest_failure_reason(_md(), cfg, 10, {"DIGEST"}) == ""  # its own credentials: the data is bad
    assert digest_failure_reason(v1, cfg, 10, {"ENOENTRY"}) == ""
