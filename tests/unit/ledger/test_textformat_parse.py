"""Text znodes and cookies with an invalid escape sequence are refused, as upstream's protobuf-java
``TextFormat`` refuses them (``InvalidEscapeSequenceException``); Python's codec alone only warns and keeps
the backslash. Valid escapes still parse."""

from __future__ import annotations

import warnings

import pytest
from google.protobuf import text_format

from autorecovery.bookie.cookie import Cookie
from autorecovery.errors import CookieError, MalformedMetadataError
from autorecovery.ledger import formats, textformat
from autorecovery.proto import bookkeeper_formats_pb2 as pb


def test_invalid_escape_is_a_parse_error_not_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning left over would fail here
        with pytest.raises(text_format.ParseError, match="invalid escape sequence"):
            textformat.parse('bookieId: "a\\ b"', pb.AuditorVoteFormat())


def test_valid_escapes_still_parse():
    m = textformat.parse('bookieId: "a\\tb\\001\\\\\\"\\x41"', pb.AuditorVoteFormat())
    assert m.bookieId == 'a\tb\x01\\"A'


def test_cookie_with_an_invalid_escape_names_its_source():
    with pytest.raises(CookieError, match=r"cookie /data/current/VERSION: cannot parse: invalid escape"):
        Cookie.parse('4\nbookieHost: "h:1"\njournalDir: "\\ x"\n', "/data/current/VERSION")


def test_v2_metadata_with_an_invalid_escape_is_malformed():
    data = formats.HEADER_PREFIX + b'2\nquorumSize: 2\nensembleSize: 3\nlength: 0\nstate: OPEN\n' \
        b'segment {\n  ensembleMember: "127.0.0.1:\\q1"\n  firstEntryId: 0\n}\n'
    with pytest.raises(MalformedMetadataError, match=r"at /ledgers/00/0000/L0001: .*invalid escape"):
        formats.deserialize(data, "/ledgers/00/0000/L0001")
