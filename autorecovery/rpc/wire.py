"""Encoding of the batch messages on the wire, and the stub and servicer registration that use it (EDGE).

``ReadBatch`` and ``AddBatch`` (``repeated <entry message> entries = 1``, feature ``BATCHED_ENTRIES``)
carry up to 1 MiB of entry bodies each. protobuf's upb backend (protobuf 6.x for Python) serializes such
a message about 12x slower than it serializes its entries one by one: measured on the 2-core test VM,
1.7 ms for a 1 MiB ``ReadBatch`` of 16 x 64 KiB entries against 0.14 ms for the same bytes written as
below, and building the batch from a list of entries (``ReadBatch(entries=[...])``, a deep copy) costs
0.75 ms more. A profile of a source bookie serving a pull put 44% of its CPU in ``memmove``, and the
serialization alone was about all of its CPU at 600 MB/s (issue 13).

:func:`encode_batch` writes the same bytes protobuf does: for each entry the field-1 tag, the entry's
length as a varint, and the entry serialized on its own (fast, upb copies a lone bytes field once). So
the wire format is unchanged and every other peer (and protobuf's own parser, which is fast) reads it as
before. The servicer side yields plain lists of entries for the batch streams; the stub side accepts
lists or batch messages.

**The copy path without messages** (issue 29): a bookie serving a range builds its ``ReadBatch`` bytes
straight from the stored bodies (:func:`encode_read_batch`: one copy of each body, the final join,
instead of four: ``ReadResponse(body=...)``, ``len(resp.body)``, ``SerializeToString`` and the join; a
profile of a source bookie put 38% of its CPU in them), and a bookie pulling a range decodes the
``ReadBatch`` bytes itself (:func:`decode_read_batch`): each body is a ``memoryview`` of the received
message, not a copy (protobuf's decode and every ``resp.body`` access copied it: 18% of a target
bookie's CPU). Both write and read exactly protobuf's wire format (tests/unit/test_wire_encoding.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc

_TAG_ENTRIES = b"\x0a"  # field 1, wire type 2 (length-delimited)
_SERVICE = "autorecovery.bookie.Bookie"


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_batch(batch: Any) -> bytes:
    """Wire bytes of a ``ReadBatch`` / ``AddBatch``: ``batch`` is the message, an iterable of its
    entries (``ReadResponse`` / ``AddRequest``) or the message's bytes already encoded (returned as they
    are: :func:`encode_read_batch`'s). Identical to ``SerializeToString()`` of the message (see the
    module docstring for why it is written by hand).

    Raises:
        AttributeError: an entry is not a protobuf message.
    """
    if isinstance(batch, bytes):
        return batch
    entries: Iterable[Any] = batch.entries if isinstance(batch, (pb.ReadBatch, pb.AddBatch)) else batch
    parts: list[bytes] = []
    for entry in entries:
        data = entry.SerializeToString()
        parts += (_TAG_ENTRIES, _varint(len(data)), data)
    return b"".join(parts)


_U64 = (1 << 64) - 1
#: the keys (field number << 3 | wire type) of ``ReadResponse``'s fields, as protobuf writes them
_K_LEDGER, _K_ENTRY, _K_BODY, _K_LAC = b"\x10", b"\x18", b"\x22", b"\x28"


def _int64(key: bytes, n: int) -> bytes:
    """An int64 field as protobuf writes it: nothing for 0 (proto3), a 10-byte varint when negative."""
    return key + _varint(n & _U64) if n else b""


def encode_read_batch(ledger_id: int, entries: Sequence[tuple[int, Any]], lac: int) -> bytes:
    """The wire bytes of a ``ReadBatch`` of ``EOK`` answers of ledger ``ledger_id``, one per ``(entry id,
    body)`` of ``entries`` (bodies: bytes or any buffer), each carrying ``lac``: exactly
    ``ReadBatch(entries=[ReadResponse(status=EOK, ledger_id=.., entry_id=.., body=.., lac=..)
    ...]).SerializeToString()``, with each body copied once (the join). For the ``ReadEntryBatches``
    stream of a bookie (see the module docstring)."""
    lid_f, lac_f = _int64(_K_LEDGER, ledger_id), _int64(_K_LAC, lac)
    fixed = len(lid_f) + len(lac_f)
    parts: list[Any] = []
    add = parts.extend
    for eid, body in entries:
        eid_f = _int64(_K_ENTRY, eid)
        blen = len(body)
        if blen:
            blen_v = _varint(blen)
            add((_TAG_ENTRIES, _varint(fixed + len(eid_f) + 1 + len(blen_v) + blen), lid_f, eid_f, _K_BODY, blen_v,
                 body, lac_f))
        else:
            add((_TAG_ENTRIES, _varint(fixed + len(eid_f)), lid_f, eid_f, lac_f))
    return b"".join(parts)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at ``buf[i]`` and the offset after it (IndexError when ``buf`` ends inside it)."""
    b = buf[i]
    if b < 0x80:
        return b, i + 1
    result, shift = b & 0x7F, 7
    i += 1
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _signed(n: int) -> int:
    """An int64 field's value from its varint, as protobuf reads it: the low 64 bits (an overlong varint
    carries more), two's complement."""
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >> 63 else n


def decode_read_batch(data: bytes) -> list[tuple[int, int, memoryview, int, str]]:
    """The answers of a ``ReadBatch`` from its wire bytes, in order, as ``(status, entry id, body, lac,
    message)``: what ``ReadBatch.FromString(data).entries`` holds (fields absent on the wire are 0 / empty;
    a field repeated takes its last value; unknown fields are skipped), except that each ``body`` is a
    ``memoryview`` of ``data`` rather than a copy (see the module docstring).

    Raises:
        google.protobuf.message.DecodeError: ``data`` is not a well-formed ``ReadBatch`` (naming the
            offset).
    """
    mv = memoryview(data)
    empty = mv[:0]
    out: list[tuple[int, int, memoryview, int, str]] = []
    n = len(data)
    i = 0
    try:
        while i < n:
            key, i = _read_varint(data, i)
            if key != 0x0A:  # not ``entries``: skip it
                i = _skip(data, i, key)
                continue
            ln, i = _read_varint(data, i)
            end = i + ln
            if end > n:
                raise ValueError("entry runs past the end of the message")
            status = eid = lac = 0
            body = empty
            message = ""
            while i < end:
                key, i = _read_varint(data, i)
                wt = key & 7
                if wt == 0:
                    v, i = _read_varint(data, i)
                    if key == 0x18:
                        eid = _signed(v)
                    elif key == 0x28:
                        lac = _signed(v)
                    elif key == 0x08:
                        status = _signed(v)
                elif wt == 2:
                    ln, i = _read_varint(data, i)
                    if i + ln > end:
                        raise ValueError("field runs past the end of its entry")
                    if key == 0x22:
                        body = mv[i:i + ln]
                    elif key == 0x32:
                        message = bytes(mv[i:i + ln]).decode("utf-8")
                    i += ln
                else:
                    i = _skip(data, i, key)
            if i != end:
                raise ValueError("entry's fields run past its length")
            out.append((status, eid, body, lac, message))
    except (IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise DecodeError(f"malformed ReadBatch of {n} bytes near offset {i}: {exc}") from None
    return out


def _skip(data: bytes, i: int, key: int) -> int:
    """The offset after the value of an unknown field with ``key`` at ``data[i]``."""
    wt = key & 7
    if wt == 0:
        return _read_varint(data, i)[1]
    if wt == 1:
        return i + 8
    if wt == 2:
        ln, i = _read_varint(data, i)
        return i + ln
    if wt == 5:
        return i + 4
    raise ValueError(f"field {key >> 3} has wire type {wt}, not one protobuf writes")


class BookieStub(pb_grpc.BookieStub):
    """The generated stub and one more method: ``ReadEntryBatchesRaw``, the ``ReadEntryBatches`` call
    whose answers are the messages' bytes (see :func:`bookie_stub`)."""

    ReadEntryBatchesRaw: grpc.aio.UnaryStreamMultiCallable


def bookie_stub(channel: grpc.aio.Channel) -> BookieStub:
    """The generated ``BookieStub`` with the two batch-sending methods (``AddEntryBatches``, ``AddStream``)
    encoding their requests with :func:`encode_batch`: requests may be ``AddBatch`` messages or lists of
    ``AddRequest``; and ``ReadEntryBatchesRaw``, ``ReadEntryBatches`` whose answers are the messages'
    bytes (for :func:`decode_read_batch`)."""
    stub = BookieStub(channel)
    stub.AddEntryBatches = channel.stream_unary(  # type: ignore[method-assign]
        f"/{_SERVICE}/AddEntryBatches", request_serializer=encode_batch,
        response_deserializer=pb.AddEntriesResponse.FromString)
    stub.AddStream = channel.stream_stream(  # type: ignore[method-assign]
        f"/{_SERVICE}/AddStream", request_serializer=encode_batch, response_deserializer=pb.AddAck.FromString)
    # ReadEntryBatches answered as the messages' bytes, for decode_read_batch (a bookie's PullEntries)
    stub.ReadEntryBatchesRaw = channel.unary_stream(
        f"/{_SERVICE}/ReadEntryBatches", request_serializer=pb.ReadRangeRequest.SerializeToString,
        response_deserializer=None)
    return stub


class _Registrar:
    """Stands in for the server while the generated ``add_BookieServicer_to_server`` registers its
    handlers, and registers them on the real server with ``ReadEntryBatches`` answers encoded by
    :func:`encode_batch` (the servicer yields lists of ``ReadResponse``)."""

    def __init__(self, server: grpc.aio.Server, wrap: Callable[[str, Any], Any] | None = None) -> None:
        self.server = server
        self.wrap = wrap

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass  # the same handlers arrive through add_registered_method_handlers, where they are swapped

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        handlers = dict(handlers)
        handlers["ReadEntryBatches"] = handlers["ReadEntryBatches"]._replace(response_serializer=encode_batch)
        if self.wrap is not None:
            handlers = {name: self.wrap(name, h) for name, h in handlers.items()}
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        self.server.add_registered_method_handlers(service, handlers)


def add_bookie_servicer(servicer: pb_grpc.BookieServicer, server: grpc.aio.Server,
                        wrap: Callable[[str, Any], Any] | None = None) -> None:
    """Register ``servicer`` on ``server`` as the generated code does, with :func:`encode_batch` for the
    ``ReadEntryBatches`` answers; ``wrap(method name, handler) -> handler``, when given, replaces every
    method's handler (the reference bookie's receive gate, ``bookie.request_gate``).

    Raises:
        KeyError: the generated code has no ``ReadEntryBatches`` (generated from another proto).
    """
    pb_grpc.add_BookieServicer_to_server(servicer, _Registrar(server, wrap))
