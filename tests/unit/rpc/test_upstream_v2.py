"""Pure pieces of upstream's v2 add encoding (BookieProtocol / BookieProtoEncoding, 4.17): the packet
header, the request layout, the error codes, and that a v2 request can never be taken for a v3 one."""

from __future__ import annotations

import struct

import pytest
from google.protobuf.message import DecodeError

from autorecovery.errors import BookieError, LedgerFencedError
from autorecovery.ledger.digest import master_key
from autorecovery.proto import bookkeeper_protocol_pb2 as up
from autorecovery.rpc.upstream_v2 import (
    ADD_ANSWER,
    MASTER_KEY_LENGTH,
    STATUS_NAMES,
    add_frame,
    packet_header,
    status_error,
)


def test_packet_header_is_upstreams_to_int():
    # PacketHeader.toInt(2, ADDENTRY, FLAG_RECOVERY_ADD) == 0x02010002; flags keep 16 bits, op 8
    assert packet_header(1, 0x0002) == 0x02010002
    assert packet_header(1, 0) == 0x02010000
    assert packet_header(2, 0x0001) == 0x02020001


def test_add_request_layout():
    mk = master_key(b"secret")
    body = struct.pack(">qqqq", 7, 3, 2, 5) + b"digest--" + b"hello"
    frame = b"".join(add_frame(mk, body, recovery=True))
    size, header = struct.unpack_from(">Ii", frame)
    assert size == len(frame) - 4 == 4 + MASTER_KEY_LENGTH + len(body)
    assert header == 0x02010002
    assert frame[8:28] == mk
    assert frame[28:] == body
    assert struct.unpack_from(">i", b"".join(add_frame(mk, body, recovery=False)), 4)[0] == 0x02010000


def test_a_master_key_of_another_length_is_refused():
    with pytest.raises(ValueError, match="20-byte master key, got 16 bytes"):
        add_frame(b"k" * 16, b"\0" * 40, recovery=True)


def test_a_v2_request_never_parses_as_a_v3_request():
    # the bookie turns a connection to v2 when its first request does not parse as a v3 Request
    # (RequestDecoder); the packet header's first byte, 2, is protobuf field 0: never valid
    frame = b"".join(add_frame(master_key(b""), struct.pack(">qq", 1, 0) + b"\0" * 30, recovery=True))
    with pytest.raises(DecodeError):
        up.Request().ParseFromString(frame[4:])


def test_error_codes_are_named_as_the_v3_transport_names_them():
    for code, name in STATUS_NAMES.items():
        if code:
            assert up.StatusCode.Value(name) > 0, name  # the same names exist in v3's StatusCode
    fenced = status_error("b:1", 104, "add ledger 1 entry 0")
    assert isinstance(fenced, LedgerFencedError) and fenced.status == "EFENCED"
    other = status_error("b:1", 105, "add ledger 1 entry 0")
    assert type(other) is BookieError and other.status == "EREADONLY" and "b:1" in str(other)
    assert status_error("b:1", 999, "x").status == "E999"


def test_add_answer_is_24_bytes():
    assert ADD_ANSWER.size == 24  # ResponseEnDeCoderPreV3.RESPONSE_HEADERS_SIZE
