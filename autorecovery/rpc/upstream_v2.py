"""Upstream's pre-v3 ("v2") framing, for the adds a copy sends to a stock bookie (EDGE).

A stock bookie takes both of upstream's request encodings on its one port and picks one per connection:
the first request that does not parse as a v3 protobuf ``Request`` turns the connection to the v2
encoding for good (upstream ``BookieProtoEncoding.RequestDecoder``). A v2 add is a fixed header and the
entry as stored, with no protobuf around it: the bookie keeps the received buffer (upstream
``ParsedAddRequest``), where a v3 ``AddRequest`` is parsed into a message and its body copied. Measured
on a stock 4.17 bookie (27 Nov 2026, 4 KiB entries, adds alone): 3.4–5.9 ms of the bookie's CPU per
MiB added with v2, 7.6–11 ms with v3; in a whole heal between Java bookies (``bench/vs_upstream.py``,
reads and adds) the surviving bookies' CPU per MiB fell about 6% and the heal ran 6.5% faster. Those
bookies serve production traffic meanwhile, so :class:`~autorecovery.rpc.upstream_client.
UpstreamBookieClient` sends a copy's adds this way (ours: upstream's ``ReplicationWorker`` sends v3
unless its client sets ``useV2WireProtocol``). Everything else (reads, fencing, GET_BOOKIE_INFO, entry
lists) stays v3: a striped copy reads every third entry of a source, which v2's batched read cannot
serve in one request.

Upstream source: ``BookieProtocol`` (``PacketHeader``: version << 24 | op << 16 | flags;
``ADDENTRY`` = 1; ``FLAG_RECOVERY_ADD`` = 0x0002; ``MASTER_KEY_LENGTH`` = 20; the v2 error codes) and
``BookieProtoEncoding.RequestEnDeCoderPreV3`` / ``ResponseEnDeCoderPreV3``:

* request frame: int32 length, int32 packet header, the 20-byte master key, then the entry as the
  client packed it (it starts with the ledger id and the entry id, which the bookie reads from there);
* answer frame: int32 length (24), int32 packet header, int32 error code, int64 ledger id, int64 entry
  id. There is no transaction id: an answer is matched to its request by (ledger id, entry id).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque

from autorecovery.errors import BookieError, LedgerFencedError
from autorecovery.rpc.upstream_connection import FRAME, FramedConnection

#: the protocol version a v2 request carries (upstream ``CURRENT_PROTOCOL_VERSION``)
VERSION = 2
ADDENTRY = 1
FLAG_RECOVERY_ADD = 0x0002
MASTER_KEY_LENGTH = 20
#: a request's frame length and packet header
REQUEST_HEAD = struct.Struct(">Ii")
#: an add answer after its frame length: packet header, error code, ledger id, entry id
ADD_ANSWER = struct.Struct(">iiqq")
#: the ledger id and entry id a packed entry starts with
ENTRY_IDS = struct.Struct(">qq")
#: bytes asked of the socket per read (answers are 28 bytes each)
READ_CHUNK = 64 * 1024

#: upstream ``BookieProtocol`` error codes, by the status names the v3 transport uses
STATUS_NAMES = {0: "EOK", 1: "ENOLEDGER", 2: "ENOENTRY", 100: "EBADREQ", 101: "EIO", 102: "EUA",
                103: "EBADVERSION", 104: "EFENCED", 105: "EREADONLY", 106: "ETOOMANYREQUESTS",
                107: "EUNKNOWNLEDGERSTATE"}


def packet_header(op: int, flags: int) -> int:
    """Upstream ``PacketHeader.toInt`` for version 2: ``2 << 24 | op << 16 | flags`` (a signed int32)."""
    value = (VERSION << 24) | ((op & 0xFF) << 16) | (flags & 0xFFFF)
    return value - (1 << 32) if value >= 1 << 31 else value


def add_frame(master_key: bytes, body: bytes, recovery: bool) -> tuple[bytes, bytes, bytes]:
    """The three pieces of one v2 add request (header, master key, packed entry), to be joined.

    Raises:
        ValueError: the master key is not 20 bytes (v2 has no room for another length).
    """
    if len(master_key) != MASTER_KEY_LENGTH:
        raise ValueError(f"a v2 add needs a {MASTER_KEY_LENGTH}-byte master key, got {len(master_key)} bytes")
    head = REQUEST_HEAD.pack(4 + MASTER_KEY_LENGTH + len(body),
                             packet_header(ADDENTRY, FLAG_RECOVERY_ADD if recovery else 0))
    return head, master_key, body


def status_error(bookie_id: str, code: int, what: str) -> BookieError:
    """The error for a v2 error code: ``EFENCED`` → :class:`LedgerFencedError`, any other a
    :class:`BookieError` named as the v3 transport names it (an unknown code becomes ``E<n>``)."""
    name = STATUS_NAMES.get(code, f"E{code}")
    if name == "EFENCED":
        return LedgerFencedError(bookie_id, name, what)
    return BookieError(bookie_id, name, what)


class V2Connection(FramedConnection):
    """One TCP connection to a stock bookie in the v2 encoding, for adds: requests pipelined, answers
    matched by (ledger id, entry id), oldest first for a pair sent twice."""

    read_chunk = READ_CHUNK

    def __init__(self, bookie_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pending: dict[tuple[int, int], deque[asyncio.Future]] = {}
        self.answered = 0  # answers received: a connection that fails before its first is not speaking v2
        super().__init__(bookie_id, reader, writer)

    def send_add(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
                 recovery: bool) -> asyncio.Future:
        """Queue one add; the future resolves to the bookie's v2 error code (0: stored). The frames
        queued in one turn of the event loop leave in one write.

        Raises:
            BookieError: ``EBADREQ`` when ``body`` does not start with this ledger and entry id (the
                bookie takes them from there); the connection's error when it is closed.
            ValueError: see :func:`add_frame`.
        """
        self._check_alive()
        if len(body) < ENTRY_IDS.size or ENTRY_IDS.unpack_from(body) != (ledger_id, entry_id):
            raise BookieError(self.bookie_id, "EBADREQ", f"add ledger {ledger_id} entry {entry_id}: the packed "
                              "entry does not start with this ledger and entry id")
        pieces = add_frame(master_key, body, recovery)
        fut = asyncio.get_running_loop().create_future()
        self.pending.setdefault((ledger_id, entry_id), deque()).append(fut)
        self._queue(pieces)
        return fut

    def _settle(self, buf: bytearray) -> tuple[int, BookieError | None]:
        """Resolve the future of every whole answer at the start of ``buf``: ``(bytes used, error)``;
        the error (``EIO``) when an answer is not a 24-byte v2 add answer (memory stays bounded: such a
        frame closes the connection before its body is awaited)."""
        pos, end = 0, len(buf)
        while end - pos >= FRAME.size:
            (size,) = FRAME.unpack_from(buf, pos)
            if size != ADD_ANSWER.size:
                return pos, BookieError(self.bookie_id, "EIO", f"v2 answer frame of {size} bytes is not an add "
                                        f"answer ({ADD_ANSWER.size} bytes)")
            if end - pos - FRAME.size < size:
                break
            header, code, ledger_id, entry_id = ADD_ANSWER.unpack_from(buf, pos + FRAME.size)
            pos += FRAME.size + size
            if (header >> 16) & 0xFF != ADDENTRY:
                return pos, BookieError(self.bookie_id, "EIO", f"v2 answer with operation {(header >> 16) & 0xFF}, "
                                        "not an add")
            self.answered += 1
            waiting = self.pending.get((ledger_id, entry_id))
            if waiting:
                fut = waiting.popleft()
                if not waiting:
                    del self.pending[(ledger_id, entry_id)]
                if not fut.done():
                    fut.set_result(code)
        return pos, None

    def forget(self, ledger_id: int, entry_id: int, fut: asyncio.Future) -> None:
        """Drop a request nobody waits for any more (its late answer is then ignored)."""
        waiting = self.pending.get((ledger_id, entry_id))
        if waiting is not None:
            with contextlib.suppress(ValueError):
                waiting.remove(fut)
            if not waiting:
                del self.pending[(ledger_id, entry_id)]
        fut.cancel()

    def _take_pending(self) -> list[asyncio.Future]:
        pending, self.pending = self.pending, {}
        return [fut for waiting in pending.values() for fut in waiting]
