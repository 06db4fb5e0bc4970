"""Pure formatting helpers behind the shell and HTTP upstream formats (issue 10): LedgerMetadata's
``toString``, its Jackson JSON, the bookie address line and ``server_config`` masking."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from autorecovery.admin import ops
from autorecovery.cli import formatting as fmt
from autorecovery.cli.shell_inspect import jackson_pretty
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment


def _md(**kw) -> LedgerMetadata:
    base = dict(ensemble_size=3, write_quorum=2, ack_quorum=2,
                segments=(Segment(0, ("a:1", "b:2", "c:3")), Segment(10, ("a:1", "d:4", "c:3"))),
                digest_type=DigestType.CRC32C, password=b"", ctime=5)
    base.update(kw)
    return LedgerMetadata(**base)


def test_tostring_closed_ledger_as_upstream():
    md = _md(state=LedgerState.CLOSED, last_entry_id=19, length=2000, digest_type=DigestType.HMAC,
             password=b"secret", custom_metadata={"z": b"\x00\xff", "a": b"x"})
    assert fmt.format_metadata(md, with_password=True) == (
        "LedgerMetadata{formatVersion=3, ensembleSize=3, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED, "
        "length=2000, lastEntryId=19, digestType=MAC, password=base64:c2VjcmV0, "
        "ensembles={0=[a:1, b:2, c:3], 10=[a:1, d:4, c:3]}, customMetadata={a=base64:eA==, z=base64:AP8=}}")


def test_password_is_omitted_unless_asked_as_upstream_tosafestring():
    """Issue 25: upstream's toSafeString word, in the shell text, the HTTP JSON and the object's repr."""
    md = _md(state=LedgerState.CLOSED, last_entry_id=19, length=2000, digest_type=DigestType.HMAC,
             password=b"secret")
    text = fmt.format_metadata(md)
    assert "password=OMITTED, " in text and "c2VjcmV0" not in text and "secret" not in text
    assert ops.metadata_upstream_json(1, md)["password"] == "OMITTED"
    assert ops.metadata_upstream_json(1, md, with_password=True)["password"] == "c2VjcmV0"
    assert "secret" not in repr(md) and "secret" not in str(md) and "password" not in repr(md)


def test_tostring_open_ledger_has_no_length_nor_last_entry():
    text = fmt.format_metadata(_md(state=LedgerState.IN_RECOVERY))
    assert "state=IN_RECOVERY, digestType=CRC32C, password=OMITTED, " in text
    assert "length=" not in text and "lastEntryId=" not in text and "ctime" not in text


def test_upstream_json_shape():
    doc = ops.metadata_upstream_json(7, _md(state=LedgerState.OPEN, digest_type=DigestType.DUMMY,
                                           custom_metadata={"k": b"v"}))
    assert doc["allEnsembles"] == {"0": [{"id": "a:1"}, {"id": "b:2"}, {"id": "c:3"}],
                                   "10": [{"id": "a:1"}, {"id": "d:4"}, {"id": "c:3"}]}
    assert doc["lastEntryId"] == -1 and doc["length"] == 0 and doc["closed"] is False and doc["state"] == "OPEN"
    assert doc["digestType"] == "DUMMY" and doc["password"] == "OMITTED" and doc["customMetadata"] == {"k": "dg=="}
    assert doc["ledgerId"] == 7 and doc["ctime"] == 5 and doc["metadataFormatVersion"] == 3 and doc["ctoken"] == 0


def test_bookie_line_and_unresolvable_id():
    assert fmt.bookie_line("10.0.0.1:3181", ("10.0.0.1", 3181, "bk1.example")) == \
        "BookieID:10.0.0.1:3181, IP:10.0.0.1, Port:3181, Hostname:bk1.example"
    assert ops._resolve_address("not-a-host-port") == ("UNKNOWN", 0, "UNKNOWN")
    ip, port, _name = ops._resolve_address("127.0.0.1:3181")
    assert (ip, port) == ("127.0.0.1", 3181)


def test_server_config_masks_secrets_only():
    s = SimpleNamespace(properties={"zkServers": "zk:2181", "zkPassword": "hunter2", "tlsKeyStorePasswordPath": "/p",
                                    "clientAuthToken": "t0k", "lostBookieRecoveryDelay": "0"})
    assert ops.server_config(s) == {"clientAuthToken": "******", "lostBookieRecoveryDelay": "0",
                                    "tlsKeyStorePasswordPath": "/p", "zkPassword": "******", "zkServers": "zk:2181"}
    assert ops.server_config(None) == {}


def test_jackson_pretty_matches_jacksons_default_printer():
    text = jackson_pretty({"auditorElected": True, "auditorId": "h:1", "totalBookiesCount": 3})
    assert text == '{\n  "auditorElected" : true,\n  "auditorId" : "h:1",\n  "totalBookiesCount" : 3\n}'
    assert json.loads(text)["auditorId"] == "h:1"


def test_bookie_addresses_bounded_when_the_resolver_hangs(monkeypatch):
    import asyncio
    import threading
    import time

    release = threading.Event()

    def stuck(bookie_id):
        release.wait(30)
        return ("never", 0, "never")

    monkeypatch.setattr(ops, "_resolve_address", stuck)
    t0 = time.monotonic()
    try:
        got = asyncio.run(ops.bookie_addresses(["10.1.2.3:3181", "bk.example:3181", "odd"], timeout_s=0.3))
    finally:
        release.set()
    assert time.monotonic() - t0 < 5, "asyncio.run waited for the stuck lookups"
    assert got == {"10.1.2.3:3181": ("10.1.2.3", 3181, "10.1.2.3"), "bk.example:3181": ("UNKNOWN", 3181, "bk.example"),
                   "odd": ("UNKNOWN", 0, "UNKNOWN")}


@pytest.mark.parametrize("text", [
    'replica: "127.0.0.1:3181"\nctime: 1764230000000\n',
    'replica: "a:1"\nreplica: "b:2"\n',
    '',
    'ctime: -1',
    '  replica :  "a:1"  \n\n ctime:5 \n',
    'replica: "a\\"b:1"\n',                  # an escape: the full parser
    "replica: 'a:1'\n",                      # other quotes
    '# comment\nreplica: "a:1"\n',
    'replica: "a:1" ctime: 3\n',             # two fields on a line
    'ctime: 0x10\n',
    'ctime: 1\nctime: 2\n',                  # a second ctime: refused
    'ctime: 9223372036854775808\n',          # out of int64: refused
    'replica: "a:1"\r\nctime: 3\r\n',
    'bogus: 1\n',
])
def test_marker_fast_path_reads_what_the_text_format_parser_reads(text):
    """The plain-line fast path of ``decode_marker`` gives the text-format parser's message, or the same
    refusal (CompatibilityError naming the path)."""
    from google.protobuf import text_format

    from autorecovery.errors import CompatibilityError
    from autorecovery.proto import bookkeeper_formats_pb2 as fpb
    from autorecovery.zk.ur.formats import decode_marker

    want = fpb.UnderreplicatedLedgerFormat()
    try:
        text_format.Parse(text, want)
    except text_format.ParseError:
        with pytest.raises(CompatibilityError, match="/m/x"):
            decode_marker(text.encode(), "/m/x")
        return
    got = decode_marker(text.encode(), "/m/x")
    assert got == want and got.HasField("ctime") == want.HasField("ctime")


def test_metadata_without_a_stored_password_prints_neither_digest_type_nor_password_as_upstream():
    from autorecovery.cli.formatting import format_metadata
    from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment

    md = LedgerMetadata(2, 2, 2, (Segment(0, ("a:1", "b:2")),), state=LedgerState.CLOSED, last_entry_id=4,
                        length=50, format_version=1, store_ctime=False, has_password=False)
    assert format_metadata(md, with_password=True) == (
        "LedgerMetadata{formatVersion=1, ensembleSize=2, writeQuorumSize=2, ackQuorumSize=2, state=CLOSED, "
        "length=50, lastEntryId=4, ensembles={0=[a:1, b:2]}, customMetadata={}}")
