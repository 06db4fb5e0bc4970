"""One TCP connection to a stock bookie speaking upstream's v3 protocol (EDGE): length-prefixed frames,
requests pipelined by ``txnId``, and the status-code mapping.

Upstream source: ``BookieProtoEncoding`` (a big-endian int32 length, then one ``Request`` /
``Response``) and ``PerChannelBookieClient`` (answers matched by ``txnId``). Used by
:class:`~autorecovery.rpc.upstream_client.UpstreamBookieClient`.
"""

from __future__ import annotations

import asyncio
import struct
from typing import NoReturn

import structlog
from google.protobuf.message import DecodeError

from autorecovery.errors import BookieError, BookieUnavailableError, LedgerFencedError
from autorecovery.proto import bookkeeper_protocol_pb2 as up

log = structlog.get_logger("autorecovery.rpc.upstream_client")

#: The frame header: a big-endian int32 length.
FRAME = struct.Struct(">I")
#: bytes asked of the socket per read (a window of 64 answers of 4 KiB entries is about 270 KB)
READ_CHUNK = 256 * 1024


def status_name(code: int) -> str:
    """Name of an upstream ``StatusCode`` (``504`` → ``"EFENCED"``); unknown numbers become ``"E<n>"``."""
    try:
        return up.StatusCode.Name(code)
    except ValueError:
        return f"E{code}"


def _status_error(bookie_id: str, code: int, what: str) -> BookieError:
    name = status_name(code)
    if name == "EFENCED":
        return LedgerFencedError(bookie_id, name, what)
    return BookieError(bookie_id, name, what)


def _raise(err: BookieError) -> NoReturn:
    raise err


def bookie_address(bookie_id: str) -> tuple[str, int]:
    """``(host, port)`` of a ``host:port`` bookie id.

    Raises:
        BookieError: ``EBADREQ`` when the id has no numeric port.
    """
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BookieError(bookie_id, "EBADREQ", "bookie id is not host:port")
    return host.strip("[]"), int(port)


class FramedConnection:
    """One TCP connection to a stock bookie, whichever encoding: requests queued in one turn of the event
    loop leave in one write, and a reader task settles every whole answer each socket read brings.
    Subclasses give the answers' layout (:meth:`_settle`) and the futures still waiting
    (:meth:`_take_pending`)."""

    #: bytes asked of the socket per read
    read_chunk = READ_CHUNK

    def __init__(self, bookie_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.bookie_id = bookie_id
        self.reader = reader
        self.writer = writer
        self.error: BookieError | None = None
        self._out: list[bytes] = []  # frames queued in this turn of the event loop
        self.task = asyncio.ensure_future(self._read_loop())

    @property
    def alive(self) -> bool:
        return self.error is None and not self.task.done()

    def _check_alive(self) -> None:
        if not self.alive:
            raise self.error or BookieUnavailableError(self.bookie_id, "UNAVAILABLE", "connection closed")

    def _queue(self, pieces: tuple[bytes, ...]) -> None:
        if not self._out:
            asyncio.get_running_loop().call_soon(self.flush)
        self._out += pieces

    def flush(self) -> None:
        """Hand the queued frames to the socket in one write."""
        out, self._out = self._out, []
        if out and self.error is None:
            self.writer.write(b"".join(out))

    async def _read_loop(self) -> None:
        """Read what the socket holds and settle every whole frame in it: one wake-up for a window of
        answers, not two awaits per frame. The buffer holds at most one frame (its length checked by
        :meth:`_settle` before its body is awaited) plus one read."""
        err: BookieError
        buf = bytearray()
        try:
            while True:
                chunk = await self.reader.read(self.read_chunk)
                if not chunk:
                    raise asyncio.IncompleteReadError(b"", None)
                buf += chunk
                settled, problem = self._settle(buf)
                if problem is not None:
                    err = problem
                    break
                if settled:
                    del buf[:settled]
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            err = BookieUnavailableError(self.bookie_id, "UNAVAILABLE", f"connection lost: {exc.__class__.__name__}")
        except asyncio.CancelledError:
            err = BookieUnavailableError(self.bookie_id, "UNAVAILABLE", "connection closed")
            self.fail(err)
            raise
        if err.status == "EIO":
            log.warning("stock bookie sent a malformed answer; connection closed", bookie_id=self.bookie_id,
                        error=str(err))
        self.fail(err)

    def _settle(self, buf: bytearray) -> tuple[int, BookieError | None]:
        """Resolve the futures of the whole answers at the start of ``buf``: ``(bytes used, error)``."""
        raise NotImplementedError

    def _take_pending(self) -> list[asyncio.Future]:
        """Every future still waiting, forgotten here."""
        raise NotImplementedError

    def fail(self, err: BookieError) -> None:
        if self.error is None:
            self.error = err
        for fut in self._take_pending():
            if not fut.done():
                fut.set_exception(self.error)
                fut.exception()  # retrieved: a caller that gave up must not log "never retrieved"
        try:
            self.writer.close()
        except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
            log.debug("best-effort step failed", step="fail", error=repr(cleanup_exc))

    async def close(self) -> None:
        self.fail(BookieUnavailableError(self.bookie_id, "UNAVAILABLE", "connection closed"))
        self.task.cancel()
        try:
            await self.task
        except BaseException as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
            log.debug("best-effort step failed", step="close", error=repr(cleanup_exc))


class _Connection(FramedConnection):
    """One v3 connection: pending requests by txnId."""

    def __init__(self, bookie_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.pending: dict[int, asyncio.Future] = {}
        #: GET_LIST_OF_ENTRIES_OF_LEDGER went unanswered while the bookie answered other requests
        self.no_entry_lists = False
        super().__init__(bookie_id, reader, writer)

    def send(self, txn: int, data: bytes) -> asyncio.Future:
        """Queue one framed request; the future resolves to its ``Response``. The frames queued in one
        turn of the event loop leave in one write (a window of 64 reads is one system call, not 64:
        a send per request was the largest cost of a copy between stock bookies)."""
        self._check_alive()
        fut = asyncio.get_running_loop().create_future()
        self.pending[txn] = fut
        self._queue((FRAME.pack(len(data)), data))
        return fut

    def _take_pending(self) -> list[asyncio.Future]:
        pending, self.pending = self.pending, {}
        return list(pending.values())

    def _settle(self, buf: bytearray) -> tuple[int, BookieError | None]:
        """Resolve the future of every whole frame at the start of ``buf``: ``(bytes used, error)``,
        the error (``EIO``) when a frame is over the limit or does not parse."""
        pos, end = 0, len(buf)
        with memoryview(buf) as view:
            while end - pos >= FRAME.size:
                (size,) = FRAME.unpack_from(view, pos)
                if size > self.max_frame_bytes:
                    return pos, BookieError(self.bookie_id, "EIO", f"answer frame of {size} bytes is over the "
                                            f"{self.max_frame_bytes}-byte limit")
                if end - pos - FRAME.size < size:
                    break
                resp = up.Response()
                try:
                    resp.ParseFromString(view[pos + FRAME.size:pos + FRAME.size + size])
                except DecodeError as exc:
                    return pos, BookieError(self.bookie_id, "EIO", f"answer does not parse as a v3 Response: {exc}")
                pos += FRAME.size + size
                fut = self.pending.pop(resp.header.txnId, None)
                if fut is not None and not fut.done():
                    fut.set_result(resp)
        return pos, None
