"""Receive slots and request parsing around every gRPC method of the reference bookie (EDGE, issue 25).

gRPC reads a whole request message into memory before a handler sees it; the admission limits of
``bookie.admission`` then only ever saw what had already been received (120 concurrent 5 MiB unary adds
took a bookie to 1.2 GB and were all admitted one after the other). Here every method is registered as a
*client-streaming* handler (the wire is the same: a unary call is a stream of one message), so the
bookie decides when a message is read:

* each read first takes a receive slot (:meth:`Admission.try_receive`): a unary request without a free
  slot is answered ``ETOOMANYREQUESTS`` and its message is never read; a stream waits up to
  ``stream_wait_s`` for a slot (HTTP/2 flow control holds the sender), then ends ``ETOOMANYREQUESTS``;
* a unary call gives its slot back once its message is parsed (an ``AddEntry`` is then admitted or
  refused by ``Admission.try_add`` before anything else runs; any other message is at most
  :data:`MAX_SMALL_REQUEST_BYTES`); a stream gives it back at its next read (by then the message's
  entries were admitted, refused, or are waiting for admission: at most one message per stream);
* messages arrive as bytes and are parsed here: a message that does not parse, a "unary" call with no
  message, a small-request method's message over :data:`MAX_SMALL_REQUEST_BYTES`, an ``AddBatch`` of
  more than :data:`MAX_BATCH_ENTRIES` entries, or a request that fails :mod:`bookie.request_fields` is
  answered ``EBADREQ`` with a reason naming the method and the field, never a gRPC error.

The refusal message of each method is built from its descriptor (:func:`refusal`), so a method added to
bookie.proto is gated and refused the same way without code here.

Source: ours (issue 25), after upstream's ``maxAddsInProgressLimit`` / ``maxReadsInProgressLimit``, with
which a bookie stops reading its channels at the bound (see ``bookie.admission``); gRPC gives no such
switch per connection, so here each message waits for a receive slot before it is read.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from autorecovery.bookie.admission import Admission
from autorecovery.bookie.status import BookieStatusError
from autorecovery.bookie.request_fields import problem
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.rpc.convert import status_code

#: Largest request message of a method that carries no entry bodies (everything but the adds), bytes.
MAX_SMALL_REQUEST_BYTES = 64 * 1024
#: Most entries in one ``AddBatch`` message (the client sends at most 512 by default).
MAX_BATCH_ENTRIES = 65_536
#: Methods whose request messages carry entry bodies (size bounded by the receive limit only).
ADD_METHODS = frozenset({"AddEntry", "AddEntries", "AddEntryBatches", "AddStream"})

_SERVICE = pb.DESCRIPTOR.services_by_name["Bookie"]
#: The key byte of ``AddBatch.entries`` (field 1, wire type 2) on the wire.
_ENTRY_KEY = b"\x0a"


def refusal(method: str, status: str, message: str) -> Any:
    """The answer of ``method`` that refuses a call with ``status`` (a status name) and ``message``:
    its response message with ``status``, ``message``, ``failed_entry_id``/``lac`` -1 and ``done`` set
    where it has such fields; for ``ReadEntryBatches`` a list holding one such ``ReadResponse`` (the
    servicer's batch shape, see ``rpc.wire``)."""
    out = _SERVICE.methods_by_name[method].output_type
    if out.name == "ReadBatch":
        return [_refusal_message(pb.ReadResponse.DESCRIPTOR, status, message)]
    return _refusal_message(out, status, message)


def _refusal_message(desc: Any, status: str, message: str) -> Message:
    """A message of type ``desc`` (a protobuf descriptor of bookie.proto) carrying the refusal."""
    cls = getattr(pb, desc.name)
    fields = desc.fields_by_name
    kw: dict[str, Any] = {"status": status_code(status)}
    if "message" in fields:
        kw["message"] = message
    for name in ("failed_entry_id", "lac"):
        if name in fields:
            kw[name] = -1
    if "done" in fields:
        kw["done"] = True
    return cls(**kw)


def _count_top_fields(data: bytes, limit: int) -> int:
    """How many top-level fields ``data`` (a serialized message) holds, counting at most ``limit + 1``
    (so a hostile batch of millions of empty entries is refused before it is parsed into objects).
    Malformed data returns what was counted so far (the parser then says what is wrong).
    About 0.4 µs per field on the 2-core test VM (a 512-entry batch: 0.2 ms, its parse 0.03 ms; a hostile
    6 MiB batch of empty entries is refused after 65,537 fields, 14 ms)."""
    i, n, end = 0, 0, len(data)
    while i < end and n <= limit:
        key = data[i]
        i += 1
        if key & 0x80:  # a multi-byte key: no field of ours has one; let the parser judge
            return n
        wire = key & 7
        if wire == 2 or wire == 0:
            v = shift = 0
            while i < end:
                b = data[i]
                i += 1
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            if wire == 2:
                i += v
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            return n
        n += 1
    return n


class _Refused(Exception):
    """A request refused before its handler ran: ``status`` (name) and ``detail``."""

    def __init__(self, status: str, detail: str) -> None:
        """``status``: a status name (``EBADREQ``, ``ETOOMANYREQUESTS``); ``detail``: the one-line reason."""
        super().__init__(detail)
        self.status, self.detail = status, detail


def _parse(method: str, cls: Any, raw: bytes, bookie_id: str) -> Message:
    """``raw`` as a ``cls`` message, checked; raises :class:`_Refused` (EBADREQ) naming what is wrong."""
    try:
        return _parse_checked(method, cls, raw)
    except _Refused as exc:
        raise _Refused(exc.status, f"bookie {bookie_id}: {exc.detail}") from None


def _parse_checked(method: str, cls: Any, raw: bytes) -> Message:
    """:func:`_parse` without the bookie id in the reason: size, entry count, parse, field checks."""
    if method not in ADD_METHODS and len(raw) > MAX_SMALL_REQUEST_BYTES:
        raise _Refused("EBADREQ", f"{method}: request of {len(raw)} bytes, more than {MAX_SMALL_REQUEST_BYTES}")
    # every entry of an AddBatch starts with the key byte 0x0a (field 1, length-delimited), so a message
    # with at most MAX_BATCH_ENTRIES such bytes (any real batch: bytes.count runs at memory speed) holds
    # at most that many entries; only the others are walked field by field (about 0.4 us per field)
    if (cls is pb.AddBatch and raw.count(_ENTRY_KEY) > MAX_BATCH_ENTRIES
            and _count_top_fields(raw, MAX_BATCH_ENTRIES) > MAX_BATCH_ENTRIES):
        raise _Refused("EBADREQ", f"{method}: AddBatch with more than {MAX_BATCH_ENTRIES} entries")
    try:
        msg = cls.FromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise _Refused("EBADREQ", f"{method}: request is not a valid {cls.__name__}: {exc}") from None
    bad = problem(msg)
    if bad is not None:
        raise _Refused("EBADREQ", f"{method}: {bad}")
    return msg


class Gate:
    """Wraps the servicer's method handlers (:meth:`wrap`, for ``rpc.wire.add_bookie_servicer``).

    Args:
        admission: the bookie's :class:`Admission` (its receive slots).
        bookie_id: ``host:port``, in refusal messages.
    """

    def __init__(self, admission: Admission, bookie_id: str) -> None:
        self.admission = admission
        self.bookie_id = bookie_id

    def _busy(self) -> _Refused:
        """The ``ETOOMANYREQUESTS`` refusal when no receive slot is free (names the bookie and its limit)."""
        return _Refused("ETOOMANYREQUESTS", f"bookie {self.bookie_id}: {self.admission.describe_receiving()}")

    async def _one(self, method: str, cls: Any, requests: AsyncIterator[bytes]) -> Message:
        """The single message of a unary-request call, read under a receive slot given back once it is
        parsed (its handler admits it at once, synchronously, or it is a small request).

        Raises:
            _Refused: ``ETOOMANYREQUESTS`` (no free slot: the message is never read) or ``EBADREQ`` (no
                message, too large, unparsable, a bad field), naming the bookie and the method.
        """
        if not self.admission.try_receive():
            raise self._busy()
        try:
            raw = await anext(requests.__aiter__(), None)
            if raw is None:
                raise _Refused("EBADREQ", f"bookie {self.bookie_id}: {method}: the call carried no request message")
            return _parse(method, cls, raw, self.bookie_id)
        finally:
            self.admission.release_receive()

    async def _stream(self, method: str, cls: Any, requests: AsyncIterator[bytes]) -> AsyncIterator[Message]:
        """The messages of a request stream, each read under a receive slot held until the next read.
        A refusal (busy, unparsable, invalid) is raised as :class:`BookieStatusError` from the read."""
        it: AsyncIterator[bytes] | None = None  # made at the first read (a refused stream never reads)
        held = False
        try:
            while True:
                if held:
                    self.admission.release_receive()
                    held = False
                if not await self.admission.wait_receive():
                    busy = self._busy()
                    raise BookieStatusError(busy.status, busy.detail)
                held = True
                if it is None:
                    it = requests.__aiter__()
                try:
                    raw = await anext(it)
                except StopAsyncIteration:
                    return
                try:
                    yield _parse(method, cls, raw, self.bookie_id)
                except _Refused as exc:
                    raise BookieStatusError(exc.status, exc.detail) from None
        finally:
            if held:
                self.admission.release_receive()

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` re-registered as client-streaming over raw bytes, gated and parsed as the module
        docstring says; the servicer's behaviour itself is unchanged.

        Args:
            method: the method's name in bookie.proto (``AddEntry``, ``ReadEntryBatches``, ...).
            handler: the generated code's handler of that method (its response serializer is kept).

        Returns:
            a ``stream_unary`` handler for a unary-response method, else a ``stream_stream`` one; a
            refused call gets its method's :func:`refusal` answer, never a gRPC error status.

        Raises:
            KeyError: ``method`` is not a method of bookie.proto's ``Bookie`` service.
        """
        cls = getattr(pb, _SERVICE.methods_by_name[method].input_type.name)
        ser = handler.response_serializer
        if handler.unary_unary is not None:
            beh: Callable = handler.unary_unary

            async def unary_unary(requests, context):
                try:
                    req = await self._one(method, cls, requests)
                except _Refused as exc:
                    return refusal(method, exc.status, exc.detail)
                return await beh(req, context)

            return grpc.stream_unary_rpc_method_handler(unary_unary, response_serializer=ser)
        if handler.unary_stream is not None:
            sbeh: Callable = handler.unary_stream

            async def unary_stream(requests, context):
                try:
                    req = await self._one(method, cls, requests)
                except _Refused as exc:
                    yield refusal(method, exc.status, exc.detail)
                    return
                async with contextlib.aclosing(sbeh(req, context)) as answers:
                    async for resp in answers:
                        yield resp

            return grpc.stream_stream_rpc_method_handler(unary_stream, response_serializer=ser)
        if handler.stream_unary is not None:
            cbeh: Callable = handler.stream_unary

            async def stream_unary(requests, context):
                gen = self._stream(method, cls, requests)
                try:
                    return await cbeh(gen, context)
                finally:
                    await gen.aclose()

            return grpc.stream_unary_rpc_method_handler(stream_unary, response_serializer=ser)
        bbeh: Callable = handler.stream_stream

        async def stream_stream(requests, context):
            gen = self._stream(method, cls, requests)
            try:
                async with contextlib.aclosing(bbeh(gen, context)) as answers:
                    async for resp in answers:
                        yield resp
            finally:
                await gen.aclose()

        return grpc.stream_stream_rpc_method_handler(stream_stream, response_serializer=ser)
