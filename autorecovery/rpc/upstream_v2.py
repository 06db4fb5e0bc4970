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
* read request (``READENTRY`` = 2, no flags: never a fencing read, those stay v3): int32 length (20),
  int32 packet header, int64 ledger id, int64 entry id; its answer is the add answer's 24 bytes, then
  the entry as stored when the error code is 0.

**Reads too (issue 39).** A copy's range reads from a stock bookie go on the same v2 connection: the
answer is a fixed header and the stored entry, where a v3 answer is a protobuf ``Response`` whose
parse and ``body`` access copy the entry twice. Each read or add is one ``struct.pack`` and one dict
entry, and a caller's requests share one :class:`Sink` (one wake-up per socket read, not a future per
request). Measured with ``bench/copy_path.py`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections import deque

from autorecovery.errors import BookieError, LedgerFencedError
from autorecovery.rpc.upstream_connection import FRAME, FramedConnection

#: the protocol version a v2 request carries (upstream ``CURRENT_PROTOCOL_VERSION``)
VERSION = 2
ADDENTRY = 1
READENTRY = 2
FLAG_RECOVERY_ADD = 0x0002
MASTER_KEY_LENGTH = 20
#: a request's frame length and packet header
REQUEST_HEAD = struct.Struct(">Ii")
#: an add answer after its frame length: packet header, error code, ledger id, entry id
ADD_ANSWER = struct.Struct(">iiqq")
#: the ledger id and entry id a packed entry starts with
ENTRY_IDS = struct.Struct(">qq")
#: a whole read request: frame length (20), packet header, ledger id, entry id
READ_REQUEST = struct.Struct(">Iiqq")
#: the start of every answer frame: frame length, packet header, error code, ledger id, entry id
ANSWER_FRAME = struct.Struct(">Iiiqq")
#: bytes asked of the socket per read (an add answer is 28 bytes, a read answer 28 plus the entry)
READ_CHUNK = 256 * 1024
#: the largest v2 answer frame accepted by default: upstream's ``nettyMaxFrameSizeBytes`` (5 MiB) and room
DEFAULT_MAX_FRAME_BYTES = 5 * 1024 * 1024 + 64 * 1024

#: upstream ``BookieProtocol`` error codes, by the status names the v3 transport uses
STATUS_NAMES = {0: "EOK", 1: "ENOLEDGER", 2: "ENOENTRY", 100: "EBADREQ", 101: "EIO", 102: "EUA",
                103: "EBADVERSION", 104: "EFENCED", 105: "EREADONLY", 106: "ETOOMANYREQUESTS",
                107: "EUNKNOWNLEDGERSTATE"}


def packet_header(op: int, flags: int) -> int:
    """Upstream ``PacketHeader.toInt`` for version 2: ``2 << 24 | op << 16 | flags`` (a signed int32)."""
    value = (VERSION << 24) | ((op & 0xFF) << 16) | (flags & 0xFFFF)
    return value - (1 << 32) if value >= 1 << 31 else value


#: the packet headers of a (non-fencing) read and of an add, recovery or not
READ_HEADER = packet_header(READENTRY, 0)
ADD_HEADERS = {True: packet_header(ADDENTRY, FLAG_RECOVERY_ADD), False: packet_header(ADDENTRY, 0)}


def add_frame(master_key: bytes, body: bytes, recovery: bool) -> tuple[bytes, bytes, bytes]:
    """The three pieces of one v2 add request (header, master key, packed entry), to be joined.

    Raises:
        ValueError: the master key is not 20 bytes (v2 has no room for another length).
    """
    if len(master_key) != MASTER_KEY_LENGTH:
        raise ValueError(f"a v2 add needs a {MASTER_KEY_LENGTH}-byte master key, got {len(master_key)} bytes")
    head = REQUEST_HEAD.pack(4 + MASTER_KEY_LENGTH + len(body), ADD_HEADERS[bool(recovery)])
    return head, master_key, body


def status_error(bookie_id: str, code: int, what: str) -> BookieError:
    """The error for a v2 error code: ``EFENCED`` → :class:`LedgerFencedError`, any other a
    :class:`BookieError` named as the v3 transport names it (an unknown code becomes ``E<n>``)."""
    name = STATUS_NAMES.get(code, f"E{code}")
    if name == "EFENCED":
        return LedgerFencedError(bookie_id, name, what)
    return BookieError(bookie_id, name, what)


class Sink:
    """Where the answers to one caller's v2 requests land, without a future per request: ``answers``
    maps an entry id to ``(error code, body, arrival)`` (``body`` None for an add; ``arrival`` the
    ``time.monotonic()`` of the socket read that brought it), :meth:`wait` returns once
    something arrived (or the connection failed: ``error`` is then set). One caller per sink; the
    caller sends each entry id at most once until its answer is taken."""

    __slots__ = ("answers", "error", "_waiter")

    def __init__(self) -> None:
        self.answers: dict[int, tuple[int, bytes | None, float]] = {}
        self.error: BookieError | None = None
        self._waiter: asyncio.Future | None = None

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def deliver(self, entry_id: int, code: int, body: bytes | None, arrival: float) -> None:
        self.answers[entry_id] = (code, body, arrival)
        if self._waiter is not None:
            self._wake()

    def fail(self, err: BookieError) -> None:
        if self.error is None:
            self.error = err
        self._wake()

    async def wait(self) -> None:
        """Until the next answer (or failure) after this call; returns at once when already failed."""
        if self.error is not None:
            return
        self._waiter = fut = asyncio.get_running_loop().create_future()
        await fut


Waiter = asyncio.Future | Sink


class V2Connection(FramedConnection):
    """One TCP connection to a stock bookie in the v2 encoding, for a copy's adds and range reads:
    requests pipelined, answers matched by (operation, ledger id, entry id), oldest first for a key
    sent twice. Answer frames are bounded: an add answer is exactly 24 bytes, a read answer at most
    ``max_frame_bytes`` (checked on its length, before its body is awaited)."""

    read_chunk = READ_CHUNK

    def __init__(self, bookie_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        #: (operation, ledger id, entry id) -> its waiter, or a deque of them (oldest first) for a key sent
        #: more than once (rare: no deque per request)
        self.pending: dict[tuple[int, int, int], Waiter | deque[Waiter]] = {}
        self.answered = 0  # answers received: a connection that fails before its first is not speaking v2
        super().__init__(bookie_id, reader, writer)

    def _wait_on(self, key: tuple[int, int, int], waiter: Waiter) -> None:
        cur = self.pending.get(key)
        if cur is None:
            self.pending[key] = waiter
        elif isinstance(cur, deque):
            cur.append(waiter)
        else:
            self.pending[key] = deque((cur, waiter))

    def _unwait(self, key: tuple[int, int, int], waiter: Waiter) -> None:
        cur = self.pending.get(key)
        if cur is None:
            return
        if isinstance(cur, deque):
            with contextlib.suppress(ValueError):
                cur.remove(waiter)
            if not cur:
                del self.pending[key]
        elif cur is waiter:
            del self.pending[key]

    def send_add_into(self, sink: Sink, ledger_id: int, entry_id: int, master_key: bytes, body: bytes,
                      recovery: bool) -> None:
        """Queue one add whose answer lands in ``sink`` (see :meth:`send_add` for the checks and errors)."""
        self._check_alive()
        if len(body) < ENTRY_IDS.size or ENTRY_IDS.unpack_from(body) != (ledger_id, entry_id):
            raise BookieError(self.bookie_id, "EBADREQ", f"add ledger {ledger_id} entry {entry_id}: the packed "
                              "entry does not start with this ledger and entry id")
        pieces = add_frame(master_key, body, recovery)
        self._wait_on((ADDENTRY, ledger_id, entry_id), sink)
        self._queue(pieces)

    def send_read_into(self, sink: Sink, ledger_id: int, entry_id: int) -> None:
        """Queue one (non-fencing) read whose answer lands in ``sink``: ``(0, the stored entry)``, or
        ``(error code, None)``.

        Raises:
            BookieUnavailableError (or the connection's error): it is closed.
        """
        self._check_alive()
        self._wait_on((READENTRY, ledger_id, entry_id), sink)
        self._queue((READ_REQUEST.pack(20, READ_HEADER, ledger_id, entry_id),))

    def drop_sink(self, sink: Sink, op: int, ledger_id: int, entry_ids) -> None:
        """Forget ``sink``'s requests of ``entry_ids`` nobody waits for any more (late answers are ignored)."""
        for eid in entry_ids:
            self._unwait((op, ledger_id, eid), sink)

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
        self._wait_on((ADDENTRY, ledger_id, entry_id), fut)
        self._queue(pieces)
        return fut

    def _settle(self, buf: bytearray) -> tuple[int, BookieError | None]:
        """Resolve the waiter of every whole answer at the start of ``buf``: ``(bytes used, error)``;
        the error (``EIO``) when an answer is neither a 24-byte add answer nor a read answer within
        ``max_frame_bytes`` (memory stays bounded: such a frame closes the connection before its body
        is awaited)."""
        with memoryview(buf) as view:  # released before the caller trims ``buf``
            return self._settle_view(view, len(buf))

    def _settle_view(self, buf: memoryview, end: int) -> tuple[int, BookieError | None]:
        pos = 0
        pending = self.pending
        unpack = ANSWER_FRAME.unpack_from
        arrival = time.monotonic()
        while end - pos >= FRAME.size:
            whole_head = end - pos >= ANSWER_FRAME.size
            if whole_head:
                size, header, code, ledger_id, entry_id = unpack(buf, pos)
            else:
                (size,) = FRAME.unpack_from(buf, pos)
            if not ADD_ANSWER.size <= size <= self.max_frame_bytes:
                return pos, BookieError(self.bookie_id, "EIO", f"v2 answer frame of {size} bytes is not an add answer "
                                        f"({ADD_ANSWER.size} bytes) nor a read answer (at most {self.max_frame_bytes})")
            if not whole_head:
                break  # its header is still to come (at most 27 bytes held)
            op = (header >> 16) & 0xFF
            if op == ADDENTRY and size != ADD_ANSWER.size:
                return pos, BookieError(self.bookie_id, "EIO", f"v2 answer frame of {size} bytes is not an add "
                                        f"answer ({ADD_ANSWER.size} bytes)")
            if op != ADDENTRY and op != READENTRY:
                return pos, BookieError(self.bookie_id, "EIO", f"v2 answer with operation {op} is not an add "
                                        "answer nor a read answer")
            if end - pos - FRAME.size < size:
                break
            body = bytes(buf[pos + ANSWER_FRAME.size:pos + FRAME.size + size]) if op == READENTRY else None
            pos += FRAME.size + size
            self.answered += 1
            key = (op, ledger_id, entry_id)
            w = pending.pop(key, None)
            if w is None:
                continue  # nobody asked (or gave up): dropped
            if isinstance(w, deque):
                first = w.popleft()
                if w:
                    pending[key] = w
                w = first
            if isinstance(w, Sink):
                w.deliver(entry_id, code, body, arrival)
            elif not w.done():
                w.set_result(code)
        return pos, None

    def forget(self, ledger_id: int, entry_id: int, fut: asyncio.Future) -> None:
        """Drop an add nobody waits for any more (its late answer is then ignored)."""
        self._unwait((ADDENTRY, ledger_id, entry_id), fut)
        fut.cancel()

    def _take_pending(self) -> list[asyncio.Future]:
        """The futures still waiting; every sink still waiting is failed with the connection's error here."""
        pending, self.pending = self.pending, {}
        futs: list[asyncio.Future] = []
        for cur in pending.values():
            for w in (cur if isinstance(cur, deque) else (cur,)):
                if isinstance(w, Sink):
                    w.fail(self.error or BookieError(self.bookie_id, "UNAVAILABLE", "connection closed"))
                else:
                    futs.append(w)
        return futs
