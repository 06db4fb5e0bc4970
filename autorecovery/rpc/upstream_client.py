"""Upstream Apache BookKeeper's bookie protocol (v3) over TCP: the transport for stock bookies (EDGE).

A stock bookie (Apache BookKeeper 4.x, Pulsar's bookies) speaks ``BookkeeperProtocol.proto`` version 3
on its bookie port, framed as upstream ``BookieProtoEncoding``: a big-endian int32 length, then one
``Request`` / ``Response`` (see ``proto/autorecovery/proto/bookkeeper_protocol.proto``). This module is
that protocol's client, with the same methods and results as the gRPC client
(:class:`autorecovery.rpc.bookie_client.GrpcBookieClient`), so the roles run unchanged over either
(:class:`autorecovery.rpc.transport.BookieClient` picks one per bookie). One connection (framing,
pipelining, status codes) is :mod:`autorecovery.rpc.upstream_connection`.

* A copy's adds (:meth:`UpstreamBookieClient.add_entry_batches`) go in upstream's v2 encoding on a second
  connection, opened after the first one's probe (:mod:`autorecovery.rpc.upstream_v2`: the bookie
  stores a v2 add without parsing a protobuf); a bookie that closes that
  connection before answering gets them in v3 from then on, as does a master key that is not 20 bytes.
* One TCP connection per bookie, opened on first use. Requests are pipelined on it: each carries a
  fresh ``txnId`` and its answer is matched by that id (upstream ``PerChannelBookieClient``), so range
  reads and copies keep a window of requests in flight instead of one round trip per entry.
* Every request has a deadline (``timeout_s``); a request that times out is forgotten and its late
  answer dropped. A lost connection fails every request in flight with
  :class:`~autorecovery.errors.BookieUnavailableError`; the next request connects again.
* The first request on a connection is a GET_BOOKIE_INFO. A bookie that answers it with ``EUA`` and no
  body wants an authentication plugin (upstream ``AuthHandler`` answers every request so until the
  client authenticates): it is refused with :class:`~autorecovery.errors.BookieRefusedError` naming
  the bookie, logged once at ERROR. With TLS configured for bookies, a stock bookie is refused the same
  way: upstream's START_TLS upgrade is not implemented here, and ledger data is never sent in clear
  text when the operator asked for TLS.
* Upstream status codes map to the same status names as the gRPC transport (``ENOENTRY``,
  ``EFENCED`` → :class:`~autorecovery.errors.LedgerFencedError`, ``ETOOMANYREQUESTS``...); a frame over
  ``max_frame_bytes`` or one that does not parse closes the connection with ``EIO`` (memory stays
  bounded whatever a peer claims).

Upstream has no batched framing, add streams or bookie-to-bookie pulls: :meth:`features` is 0,
:meth:`pulls` False and :meth:`open_add_stream` None, so callers take their plain path.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import structlog

from autorecovery.errors import BookieError, BookieRefusedError, BookieUnavailableError
from autorecovery.ledger.striping import index_stores
from autorecovery.proto import bookkeeper_protocol_pb2 as up
from autorecovery.rpc.availability import ranges_from_availability
from autorecovery.rpc.results import BookieInfo, PullReport, ReadResult, flatten
from autorecovery.rpc.upstream_v2 import ADDENTRY, MASTER_KEY_LENGTH, READENTRY, Sink, V2Connection
from autorecovery.rpc.upstream_v2 import status_error as v2_status_error
from autorecovery.rpc.upstream_connection import FramedConnection, _Connection, _raise, _status_error, bookie_address

log = structlog.get_logger(__name__)

#: Upstream's default ``nettyMaxFrameSizeBytes`` (5 MiB): the largest frame a stock bookie takes.
UPSTREAM_MAX_FRAME_BYTES = 5 * 1024 * 1024
#: Requests kept in flight by a range read or a copy to one bookie, and the body bytes in flight.
DEFAULT_WINDOW = 64
WINDOW_BYTES = 8 * 1024 * 1024
#: Seconds between two ERROR lines about the same refused bookie.
REFUSAL_LOG_INTERVAL_S = 300.0

_V3 = up.VERSION_THREE
#: Status name of an operation a stock bookie does not serve (not an upstream status code).
UNSUPPORTED = "EUNSUPPORTED"
NO_ENTRY_LISTS = ("the bookie answers every request but GET_LIST_OF_ENTRIES_OF_LEDGER (upstream's DbLedgerStorage "
                  "does not implement it)")


class UpstreamBookieClient:
    """Talks to stock bookies in upstream's v3 protocol (adds in v2). Use from one event loop; ``await close()``.

    Args:
        timeout_s: deadline of each request (and of connecting), s.
        max_frame_bytes: largest answer frame accepted, bytes (an entry plus its framing must fit;
            upstream's bookies send at most their ``nettyMaxFrameSizeBytes``, 5 MiB by default).
        tls: True when TLS is configured for bookies: every stock bookie is then refused (START_TLS is
            not implemented here; see the module docstring).
        window: requests in flight per range read or copy.
    """

    def __init__(self, *, timeout_s: float = 10.0, max_frame_bytes: int = 8 * 1024 * 1024, tls: bool = False,
                 window: int = DEFAULT_WINDOW) -> None:
        self.timeout_s = timeout_s
        self.max_frame_bytes = max(max_frame_bytes, UPSTREAM_MAX_FRAME_BYTES + 64 * 1024)
        self.tls = tls
        self.window = max(1, window)
        self._conns: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._v2: dict[str, V2Connection] = {}
        self._v2_connecting: dict[str, asyncio.Lock] = {}
        self._v2_off: set[str] = set()  # bookies that closed a v2 connection before answering
        self._txn = itertools.count(1)
        self._refused_logged: dict[str, float] = {}
        self._closed = False
        #: called ``(bookie id, latency s, body bytes, entries)`` as a copy's v2 reads and adds are
        #: answered, once per group of requests sent together and answered by one socket read (latency:
        #: from the send to that read): the adaptive throttle's input
        self.latency_observers: list[Callable[[str, float, int, int], None]] = []

    # -- connections ----------------------------------------------------------------------------
    def _refuse(self, bookie_id: str, why: str) -> BookieRefusedError:
        now = time.monotonic()
        if now - self._refused_logged.get(bookie_id, -REFUSAL_LOG_INTERVAL_S) >= REFUSAL_LOG_INTERVAL_S:
            self._refused_logged[bookie_id] = now
            log.error("stock bookie refused: nothing is sent to it", bookie_id=bookie_id, reason=why)
        return BookieRefusedError(bookie_id, "EUA", why)

    async def _open(self, bookie_id: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to the bookie's address, within ``timeout_s``.

        Raises:
            BookieError: ``EBADREQ`` for an id that is not ``host:port``.
            BookieUnavailableError: the connect failed or timed out.
        """
        host, port = bookie_address(bookie_id)
        try:
            return await asyncio.wait_for(asyncio.open_connection(host, port), self.timeout_s)
        except (OSError, TimeoutError) as exc:
            raise BookieUnavailableError(bookie_id, "UNAVAILABLE",
                                         f"cannot connect: {exc.__class__.__name__}: {exc}") from None

    async def _connection(self, bookie_id: str) -> _Connection:
        if self._closed:
            raise RuntimeError("UpstreamBookieClient is closed")
        conn = self._conns.get(bookie_id)
        if conn is not None and conn.alive:
            return conn
        if self.tls:
            raise self._refuse(bookie_id, "TLS is configured for bookies (tlsProviderFactoryClass) but this bookie "
                                          "speaks upstream's protocol, whose START_TLS upgrade autorecovery does not "
                                          "implement; ledger data is not sent in clear text")
        lock = self._connecting.setdefault(bookie_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(bookie_id)
            if conn is not None and conn.alive:
                return conn
            conn = _Connection(bookie_id, *await self._open(bookie_id), self.max_frame_bytes)
            try:
                resp = await self._exchange(conn, up.GET_BOOKIE_INFO, "getBookieInfoRequest",
                                            up.GetBookieInfoRequest(requested=0), "probe upstream protocol")
            except BaseException:
                await conn.close()
                raise
            if resp.status == up.EUA and not resp.HasField("getBookieInfoResponse"):
                await conn.close()
                raise self._refuse(bookie_id, "the bookie requires authentication (an authPlugin / "
                                              "bookieAuthProviderFactoryClass is configured on it), which "
                                              "autorecovery cannot do")
            old = self._conns.get(bookie_id)
            self._conns[bookie_id] = conn
            if old is not None:
                await old.close()
            return conn

    def _encode(self, txn: int, op: up.OperationType, field: str, msg: Any) -> bytes:
        req = up.Request(header=up.BKPacketHeader(version=_V3, operation=op, txnId=txn))
        getattr(req, field).CopyFrom(msg)
        return req.SerializeToString()

    async def _exchange(self, conn: _Connection, op: up.OperationType, field: str, msg: Any, what: str) -> up.Response:
        txn = next(self._txn)
        fut = conn.send(txn, self._encode(txn, op, field, msg))
        return await self._answer(conn, txn, fut, what)

    async def _answer(self, conn: _Connection, txn: int, fut: asyncio.Future, what: str) -> up.Response:
        def forget() -> None:
            conn.pending.pop(txn, None)
            fut.cancel()

        return await self._settled(conn, fut, what, forget)

    async def _settled(self, conn: FramedConnection, fut: asyncio.Future, what: str,
                       forget: Callable[[], None]) -> Any:
        """The result of request ``fut`` on ``conn`` (either encoding): its queued frames are sent first,
        and the answer is awaited for at most ``timeout_s`` (an answer already in, most of a window, is
        returned without a deadline). ``forget`` drops a request given up on.

        Raises:
            BookieUnavailableError: no answer in ``timeout_s`` (the request is forgotten), or the
                connection was lost; whatever else the connection failed ``fut`` with.
        """
        if not fut.done():
            try:
                async with asyncio.timeout(self.timeout_s):
                    conn.flush()
                    await conn.writer.drain()
                    await asyncio.wait((fut,))  # done, whichever way: its result is read below
            except TimeoutError:
                forget()
                raise BookieUnavailableError(conn.bookie_id, "UNAVAILABLE",
                                             f"{what}: no answer in {self.timeout_s:g}s") from None
            except (ConnectionError, OSError) as exc:
                conn.fail(BookieUnavailableError(conn.bookie_id, "UNAVAILABLE", f"connection lost: {exc}"))
        return fut.result()

    async def _request(self, bookie_id: str, op: up.OperationType, field: str, msg: Any, what: str) -> up.Response:
        return await self._exchange(await self._connection(bookie_id), op, field, msg, what)

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        conns, self._conns = self._conns, {}
        for c in conns.values():
            await c.close()
        v2s, self._v2 = self._v2, {}
        for v in v2s.values():
            await v.close()

    def _v2_failed(self, conn: V2Connection) -> None:
        """A v2 connection was lost; one lost before its first answer means the bookie does not take the
        v2 encoding: its adds go in v3 from now on (logged once)."""
        if conn.answered == 0 and conn.bookie_id not in self._v2_off:
            self._v2_off.add(conn.bookie_id)
            log.info("stock bookie closed a v2 connection before answering; its adds go in v3 from now on",
                     bookie_id=conn.bookie_id, error=str(conn.error))

    async def forget(self, bookie_id: str) -> None:
        """Close the connections to one bookie."""
        conn = self._conns.pop(bookie_id, None)
        if conn is not None:
            await conn.close()
        v2 = self._v2.pop(bookie_id, None)
        if v2 is not None:
            await v2.close()

    # -- capabilities: none of ours ----------------------------------------------------------------
    async def features(self, bookie_id: str) -> int:
        """0: a stock bookie has none of our ``BookieFeature`` bits."""
        return 0

    async def pulls(self, bookie_id: str) -> bool:
        """False: stock bookies do not serve PullEntries."""
        return False

    async def open_add_stream(self, bookie_id: str, ledger_id: int, master_key: bytes, *,
                              recovery: bool = False) -> None:
        """None: stock bookies have no add streams (callers use :meth:`add_entries`)."""
        return None

    async def pull_entries(self, target: str, source: str, ledger_id: int, master_key: bytes, first: int,
                           last: int, *, ensemble_size: int = 0, write_quorum: int = 0, bookie_index: int = 0,
                           digest_type: int = 0) -> AsyncIterator[PullReport]:
        """Stock bookies do not pull: always raises.

        Raises:
            BookieError: ``EBADREQ``.
        """
        raise BookieError(target, "EBADREQ", "a stock bookie does not serve PullEntries")
        yield  # pragma: no cover - makes this an async generator like the gRPC one

    # -- reads ------------------------------------------------------------------------------------
    def _read_result(self, bookie_id: str, ledger_id: int, entry_id: int, r: up.ReadResponse) -> ReadResult:
        body = r.body
        eid, lac = entry_id, r.maxLAC if r.HasField("maxLAC") else -1
        if entry_id < 0 or lac < 0:  # the id and LAC the body's header carries (any digest type)
            if len(body) < 32:
                raise BookieError(bookie_id, "EIO", f"ledger {ledger_id} entry {entry_id}: body of {len(body)} "
                                  "bytes is shorter than the 32-byte entry header")
            _hl, he, hlac = struct.unpack_from(">qqq", body)
            if entry_id < 0:
                eid = he
            lac = max(lac, hlac)
        return ReadResult(eid, body, lac)

    async def read_entry(self, bookie_id: str, ledger_id: int, entry_id: int, *, fence: bool = False,
                         master_key: bytes = b"") -> ReadResult:
        """Read one entry (READ_ENTRY); ``entry_id=-1`` reads the last entry the bookie holds.
        ``fence=True`` sets ``FENCE_LEDGER`` with ``master_key`` (upstream's recovery read).

        Raises:
            BookieError: ``ENOLEDGER``, ``ENOENTRY``, ``EUA`` (fence with another master key), ``EIO``;
                BookieUnavailableError; BookieRefusedError.
        """
        req = up.ReadRequest(ledgerId=ledger_id, entryId=entry_id)
        if fence:
            req.flag = up.ReadRequest.FENCE_LEDGER
            req.masterKey = master_key
        what = f"read ledger {ledger_id} entry {entry_id}"
        resp = await self._request(bookie_id, up.READ_ENTRY, "readRequest", req, what)
        r = resp.readResponse
        status = r.status if resp.HasField("readResponse") else resp.status
        if status != up.EOK:
            raise _status_error(bookie_id, status or up.EIO, what)
        return self._read_result(bookie_id, ledger_id, entry_id, r)

    def read_entries(self, bookie_id: str, ledger_id: int, first: int, last: int, *, ensemble_size: int = 0,
                     write_quorum: int = 0, bookie_index: int = 0) -> AsyncIterator[ReadResult | BookieError]:
        """Entries ``first..last`` in order, as the gRPC client's range read yields them: a
        :class:`ReadResult` per entry, or a ``BookieError(status="ENOENTRY")`` (its ``entry_id`` set) for
        an entry the bookie lacks. With ``ensemble_size > 0`` only the ids ensemble index
        ``bookie_index`` stores are read. Up to ``window`` READ_ENTRY requests are in flight.

        Raises:
            BookieError: any other status (after yielding what came before); BookieUnavailableError.
        """
        return flatten(self.read_entry_batches(bookie_id, ledger_id, first, last, ensemble_size=ensemble_size,
                                               write_quorum=write_quorum, bookie_index=bookie_index))

    async def read_entry_batches(self, bookie_id: str, ledger_id: int, first: int, last: int, *,
                                 ensemble_size: int = 0, write_quorum: int = 0, bookie_index: int = 0,
                                 views: bool = False) -> AsyncGenerator[list[ReadResult | BookieError], None]:
        """:meth:`read_entries`, a list per group of answers that arrived together (``views`` is accepted
        for the gRPC client's signature: bodies here are always ``bytes``). The reads go in upstream's v2
        encoding when the bookie takes it (:meth:`_v2_read_batches`), else in v3."""
        v2 = await self._v2_connection(bookie_id)
        if v2 is not None:
            started = False
            try:
                async with contextlib.aclosing(self._v2_read_batches(v2, ledger_id, first, last, ensemble_size,
                                                                     write_quorum, bookie_index)) as batches:
                    async for got in batches:
                        started = True
                        yield got
                return
            except BookieUnavailableError:
                if started or v2.answered:
                    raise
                self._v2_failed(v2)  # closed before its first answer: not a v2 peer, read in v3 below
                if bookie_id not in self._v2_off:
                    raise
        conn = await self._connection(bookie_id)
        ids = (e for e in range(first, last + 1)
               if ensemble_size <= 0 or index_stores(bookie_index, e, ensemble_size, write_quorum))
        inflight: deque[tuple[int, int, asyncio.Future]] = deque()
        try:
            while True:
                while len(inflight) < self.window:
                    eid = next(ids, None)
                    if eid is None:
                        break
                    txn = next(self._txn)
                    inflight.append((eid, txn, conn.send(txn, self._encode(
                        txn, up.READ_ENTRY, "readRequest", up.ReadRequest(ledgerId=ledger_id, entryId=eid)))))
                if not inflight:
                    return
                out: list[ReadResult | BookieError] = []
                while inflight and (not out or inflight[0][2].done()):
                    eid, txn, fut = inflight.popleft()
                    resp = await self._answer(conn, txn, fut, f"read ledger {ledger_id} entry {eid}")
                    r = resp.readResponse
                    status = r.status if resp.HasField("readResponse") else resp.status
                    if status == up.EOK:
                        out.append(self._read_result(bookie_id, ledger_id, eid, r))
                    elif status == up.ENOENTRY:
                        missing = BookieError(bookie_id, "ENOENTRY", f"ledger {ledger_id} entry {eid}")
                        missing.entry_id = eid
                        out.append(missing)
                    else:
                        if out:
                            yield out
                        _raise(_status_error(bookie_id, status or up.EIO, f"read ledger {ledger_id} entry {eid}"))
                yield out
        finally:
            for _eid, txn, fut in inflight:
                conn.pending.pop(txn, None)
                fut.cancel()

    async def _sink_wait(self, conn: V2Connection, sink: Sink, ready: Callable[[], bool], what: str) -> None:
        """Send what ``conn`` has queued and wait, for at most ``timeout_s`` from now, until ``ready()``.

        Raises:
            BookieUnavailableError: no answer in ``timeout_s``, or the connection was lost (``sink.error``).
        """
        try:
            async with asyncio.timeout(self.timeout_s):
                if sink.error is None:
                    conn.flush()
                    await conn.writer.drain()
                while not ready():
                    if sink.error is not None:
                        raise sink.error
                    await sink.wait()
        except TimeoutError:
            raise BookieUnavailableError(conn.bookie_id, "UNAVAILABLE",
                                         f"{what}: no answer in {self.timeout_s:g}s") from None
        except (ConnectionError, OSError) as exc:
            failure = sink.error or conn.error
            if failure is not None:  # what closed it (a malformed answer...)
                raise failure from None
            err = BookieUnavailableError(conn.bookie_id, "UNAVAILABLE", f"connection lost: {exc}")
            conn.fail(err)
            raise err from None

    async def _v2_read_batches(self, conn: V2Connection, ledger_id: int, first: int, last: int, ensemble_size: int,
                               write_quorum: int, bookie_index: int) -> AsyncGenerator[list[ReadResult | BookieError]]:
        """The range read of :meth:`read_entry_batches` in the v2 encoding: up to ``window`` reads in flight,
        their answers gathered in one :class:`~autorecovery.rpc.upstream_v2.Sink`, each batch what has
        arrived in order. The LAC of each result is the one its entry's header carries (a v2 answer has
        no other)."""
        bookie_id = conn.bookie_id
        if ensemble_size > 0 and write_quorum < ensemble_size:
            ids: Iterator[int] = (e for e in range(first, last + 1)
                                  if index_stores(bookie_index, e, ensemble_size, write_quorum))
        else:
            ids = iter(range(first, last + 1))
        sink = Sink()
        answers = sink.answers
        order: deque[tuple[int, float]] = deque()  # (entry id, time sent) in flight, oldest first
        window = self.window
        head = struct.Struct(">q")
        observers = self.latency_observers
        monotonic = time.monotonic
        try:
            while True:
                if len(order) < window:
                    now = monotonic()
                    while len(order) < window:
                        eid = next(ids, None)
                        if eid is None:
                            break
                        conn.send_read_into(sink, ledger_id, eid)
                        order.append((eid, now))
                if not order:
                    return
                if order[0][0] not in answers:
                    await self._sink_wait(conn, sink, lambda: order[0][0] in answers,
                                          f"read ledger {ledger_id} entry {order[0][0]}")
                out: list[ReadResult | BookieError] = []
                groups = _Latencies()
                while order and order[0][0] in answers:
                    eid, sent = order.popleft()
                    code, body, arrival = answers.pop(eid)
                    if code == 0 and body is not None:
                        groups.add(arrival - sent, len(body))
                        out.append(ReadResult(eid, body, head.unpack_from(body, 16)[0] if len(body) >= 24 else -1))
                    elif code == 2:  # ENOENTRY
                        groups.add(arrival - sent, 0)
                        missing = BookieError(bookie_id, "ENOENTRY", f"ledger {ledger_id} entry {eid}")
                        missing.entry_id = eid
                        out.append(missing)
                    else:
                        if out:
                            yield out
                        _raise(v2_status_error(bookie_id, code or 101, f"read ledger {ledger_id} entry {eid}"))
                if observers:
                    groups.report(observers, bookie_id)
                yield out
        finally:
            conn.drop_sink(sink, READENTRY, ledger_id, [eid for eid, _t in order])

    async def read_lac(self, bookie_id: str, ledger_id: int) -> int:
        """The bookie's last-add-confirmed of the ledger (READ_LAC): the larger of an explicit LAC it
        stored and the LAC in the header of its last entry; -1 when it has neither (``ENOENTRY``).

        Raises:
            BookieError: ``ENOLEDGER``, ``EIO``; BookieUnavailableError.
        """
        what = f"read LAC of ledger {ledger_id}"
        resp = await self._request(bookie_id, up.READ_LAC, "readLacRequest", up.ReadLacRequest(ledgerId=ledger_id), what)
        r = resp.readLacResponse
        status = r.status if resp.HasField("readLacResponse") else resp.status
        if status == up.ENOENTRY:
            return -1
        if status != up.EOK:
            raise _status_error(bookie_id, status or up.EIO, what)
        lac = -1
        if len(r.lacBody) >= 16:  # ledgerId | lac | digest
            lac = struct.unpack_from(">q", r.lacBody, 8)[0]
        if len(r.lastEntryBody) >= 32:  # a packed entry: ledgerId | entryId | lac | length | digest | payload
            lac = max(lac, struct.unpack_from(">q", r.lastEntryBody, 16)[0])
        return lac

    async def get_bookie_info(self, bookie_id: str, requested: int = 3) -> BookieInfo:
        """Disk figures in bytes (GET_BOOKIE_INFO); ``requested`` as the gRPC client's.

        Raises:
            BookieError: ``EIO``; BookieUnavailableError.
        """
        resp = await self._request(bookie_id, up.GET_BOOKIE_INFO, "getBookieInfoRequest",
                                   up.GetBookieInfoRequest(requested=requested), "get bookie info")
        r = resp.getBookieInfoResponse
        status = r.status if resp.HasField("getBookieInfoResponse") else resp.status
        if status != up.EOK:
            raise _status_error(bookie_id, status or up.EIO, "get bookie info")
        return BookieInfo(r.totalDiskCapacity, r.freeDiskSpace)

    async def get_list_of_entries(self, bookie_id: str, ledger_id: int) -> list[tuple[int, int]]:
        """Entry ids of the ledger on the bookie as sorted, disjoint, inclusive ranges
        (GET_LIST_OF_ENTRIES_OF_LEDGER, decoded by :func:`ranges_from_availability`).

        Raises:
            BookieError: ``ENOLEDGER``, ``EIO`` (also for an answer that does not decode),
                ``EUNSUPPORTED`` (:data:`UNSUPPORTED`: the bookie never answers this request, while it
                answers others; upstream's DbLedgerStorage: known after one ``timeout_s``, then at once
                for the life of the connection); BookieUnavailableError.
        """
        what = f"list entries of ledger {ledger_id}"
        conn = await self._connection(bookie_id)
        if conn.no_entry_lists:
            raise BookieError(bookie_id, UNSUPPORTED, NO_ENTRY_LISTS)
        try:
            resp = await self._exchange(conn, up.GET_LIST_OF_ENTRIES_OF_LEDGER, "getListOfEntriesOfLedgerRequest",
                                        up.GetListOfEntriesOfLedgerRequest(ledgerId=ledger_id), what)
        except BookieUnavailableError:
            # Upstream's DbLedgerStorage (the default of the stock bk_server.conf) throws
            # UnsupportedOperationException here and the bookie never answers. If it answers something
            # else at once, that is what happened: say so once per connection and stop asking.
            if not conn.alive:
                raise
            if not conn.no_entry_lists:  # (else a concurrent request found out meanwhile)
                try:
                    await self._exchange(conn, up.GET_BOOKIE_INFO, "getBookieInfoRequest",
                                         up.GetBookieInfoRequest(requested=0), "probe after an unanswered entry list")
                except BookieError:
                    raise BookieUnavailableError(bookie_id, "UNAVAILABLE", f"{what}: no answer") from None
            if not conn.no_entry_lists:
                conn.no_entry_lists = True
                log.warning("stock bookie does not answer entry lists; the replicas check skips its copies",
                            bookie_id=bookie_id, reason=NO_ENTRY_LISTS)
            raise BookieError(bookie_id, UNSUPPORTED, NO_ENTRY_LISTS) from None
        r = resp.getListOfEntriesOfLedgerResponse
        status = r.status if resp.HasField("getListOfEntriesOfLedgerResponse") else resp.status
        if status != up.EOK:
            raise _status_error(bookie_id, status or up.EIO, what)
        try:
            return ranges_from_availability(r.availabilityOfEntriesOfLedger)
        except ValueError as exc:
            raise BookieError(bookie_id, "EIO", f"{what}: {exc}") from None

    # -- writes -----------------------------------------------------------------------------------
    def _add(self, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, recovery: bool) -> up.AddRequest:
        req = up.AddRequest(ledgerId=ledger_id, entryId=entry_id, masterKey=master_key, body=body)
        if recovery:
            req.flag = up.AddRequest.RECOVERY_ADD
        return req

    async def add_entry(self, bookie_id: str, ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *,
                        recovery: bool = False) -> None:
        """Store one packed entry (ADD_ENTRY; ``recovery`` sets ``RECOVERY_ADD``, accepted on a fenced
        ledger). Returns once the bookie acknowledged it (journalled).

        Raises:
            BookieError: ``EUA`` (other master key), ``EREADONLY``, ``EIO``, ``ETOOMANYREQUESTS``;
                LedgerFencedError; BookieUnavailableError.
        """
        what = f"add ledger {ledger_id} entry {entry_id}"
        resp = await self._request(bookie_id, up.ADD_ENTRY, "addRequest",
                                   self._add(ledger_id, entry_id, master_key, body, recovery), what)
        status = resp.addResponse.status if resp.HasField("addResponse") else resp.status
        if status != up.EOK:
            raise _status_error(bookie_id, status or up.EIO, what)

    async def add_entries(self, bookie_id: str, ledger_id: int, master_key: bytes,
                          entries: AsyncIterable[tuple[int, bytes]] | Iterable[tuple[int, bytes]], *,
                          recovery: bool = True) -> tuple[int, int]:
        """Store ``(entry_id, body)`` pairs; see :meth:`add_entry_batches`."""
        async def one_batch() -> AsyncIterator[list[tuple[int, bytes]]]:
            if isinstance(entries, AsyncIterable):
                async for item in entries:
                    yield [item]
            else:
                for item in entries:
                    yield [item]

        return await self.add_entry_batches(bookie_id, ledger_id, master_key, one_batch(), recovery=recovery)

    async def _v2_connection(self, bookie_id: str) -> V2Connection | None:
        """The v2 connection for adds to a stock bookie (:mod:`autorecovery.rpc.upstream_v2`), opened
        after the v3 one (whose probe refuses a bookie that wants authentication or TLS); None once the
        bookie closed a v2 connection before answering on it (its adds then go in v3)."""
        if bookie_id in self._v2_off:
            return None
        conn = self._v2.get(bookie_id)
        if conn is not None and conn.alive:
            return conn
        await self._connection(bookie_id)
        lock = self._v2_connecting.setdefault(bookie_id, asyncio.Lock())
        async with lock:
            conn = self._v2.get(bookie_id)
            if conn is not None and conn.alive:
                return conn
            old, self._v2[bookie_id] = self._v2.get(bookie_id), V2Connection(bookie_id, *await self._open(bookie_id),
                                                                              self.max_frame_bytes)
            if old is not None:
                await old.close()
            return self._v2[bookie_id]

    async def add_entry_batches(self, bookie_id: str, ledger_id: int, master_key: bytes,
                                batches: AsyncIterable[Sequence[tuple[int, bytes]]] | Iterable[Sequence[tuple[int, bytes]]],
                                *, recovery: bool = True) -> tuple[int, int]:
        """Store batches of ``(entry_id, body)`` pairs with pipelined adds (up to ``window`` entries and
        about 8 MiB of bodies in flight), in upstream's v2 encoding when the master key has its 20 bytes
        (:mod:`autorecovery.rpc.upstream_v2`: less of the stock bookie's CPU), else ADD_ENTRY in
        v3. Stops sending at the first refusal; what the gRPC client returns: ``(entries_written,
        bytes_written)``, counting the entries acknowledged in order before the first failure.

        Raises:
            BookieError / LedgerFencedError: an entry was refused; the exception carries
                ``failed_entry_id``, ``entries_written`` and ``bytes_written``.
            BookieUnavailableError: transport failure or timeout (``failed_entry_id`` -1).
            Exception: whatever iterating ``batches`` raised, unchanged.
        """
        v2 = await self._v2_connection(bookie_id) if len(master_key) == MASTER_KEY_LENGTH else None
        if v2 is not None:
            return await self._v2_add_batches(v2, ledger_id, master_key, batches, recovery)
        adds = _V3Adds(self, await self._connection(bookie_id), ledger_id, master_key, recovery)
        inflight: deque[tuple[int, int, object]] = deque()
        state = {"entries": 0, "bytes": 0, "inflight_bytes": 0}

        def failed(err: BookieError, eid: int) -> BookieError:
            err.failed_entry_id = eid
            err.entries_written = state["entries"]
            err.bytes_written = state["bytes"]
            return err

        async def settle_head() -> None:
            eid, size, handle = inflight.popleft()
            state["inflight_bytes"] -= size
            try:
                refused = await adds.outcome(eid, handle)
            except BookieUnavailableError as exc:
                raise failed(exc, -1) from None
            if refused is not None:
                raise failed(refused, eid)
            state["entries"] += 1
            state["bytes"] += size

        async def send(batch: Sequence[tuple[int, bytes]]) -> None:
            for eid, body in batch:
                while inflight and (len(inflight) >= self.window or state["inflight_bytes"] >= WINDOW_BYTES):
                    await settle_head()
                try:
                    handle = adds.send(eid, body)
                except BookieUnavailableError as exc:  # the connection was lost meanwhile
                    raise failed(exc, -1) from None
                except BookieError as exc:  # refused before sending (a body that names another entry)
                    raise failed(exc, eid) from None
                inflight.append((eid, len(body), handle))
                state["inflight_bytes"] += len(body)
            await adds.flush()

        try:
            if isinstance(batches, AsyncIterable):
                async for batch in batches:
                    await send(batch)
            else:
                for batch in batches:
                    await send(batch)
            while inflight:
                await settle_head()
        finally:
            for eid, _size, handle in inflight:
                adds.drop(eid, handle)
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="send", error=repr(cleanup_exc))
        return state["entries"], state["bytes"]


    async def _v2_add_batches(self, conn: V2Connection, ledger_id: int, master_key: bytes,
                              batches: AsyncIterable[Sequence[tuple[int, bytes]]] | Iterable[Sequence[tuple[int, bytes]]],
                              recovery: bool) -> tuple[int, int]:
        """:meth:`add_entry_batches` on the v2 connection: each batch's adds leave in one write, their
        answers land in one :class:`~autorecovery.rpc.upstream_v2.Sink` and are settled in order with no
        future or await per entry (a copy's per-entry cost, issue 39); the same window and errors."""
        sink = Sink()
        answers = sink.answers
        order: deque[tuple[int, int, float]] = deque()  # (entry id, body size, time sent) in flight, oldest first
        inflight: set[int] = set()
        observers = self.latency_observers
        monotonic = time.monotonic
        state = [0, 0, 0]  # entries acknowledged, their bytes, body bytes in flight
        window = self.window
        what = f"add ledger {ledger_id}"

        def failed(err: BookieError, eid: int) -> BookieError:
            err.failed_entry_id = eid
            err.entries_written = state[0]
            err.bytes_written = state[1]
            return err

        def settle() -> None:
            if not order or order[0][0] not in answers:
                return
            groups = _Latencies()
            try:
                while order and order[0][0] in answers:
                    eid, size, sent = order.popleft()
                    inflight.discard(eid)
                    state[2] -= size
                    code, _body, arrival = answers.pop(eid)
                    if code:
                        raise failed(v2_status_error(conn.bookie_id, code, f"{what} entry {eid}"), eid)
                    state[0] += 1
                    state[1] += size
                    groups.add(arrival - sent, size)
            finally:
                if observers:
                    groups.report(observers, conn.bookie_id)

        async def wait_head() -> None:
            try:
                await self._sink_wait(conn, sink, lambda: order[0][0] in answers, f"{what} entry {order[0][0]}")
            except BookieUnavailableError as exc:
                self._v2_failed(conn)
                raise failed(exc, -1) from None
            settle()

        def send(batch: Sequence[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
            """Queue what the window takes now; returns the rest of the batch."""
            now = monotonic()
            for i, (eid, body) in enumerate(batch):
                if order and (len(order) >= window or state[2] >= WINDOW_BYTES or eid in inflight):
                    return list(batch[i:])
                try:
                    conn.send_add_into(sink, ledger_id, eid, master_key, body, recovery)
                except BookieUnavailableError as exc:  # the connection was lost meanwhile
                    raise failed(exc, -1) from None
                except BookieError as exc:  # refused before sending (a body that names another entry)
                    raise failed(exc, eid) from None
                n = len(body)
                order.append((eid, n, now))
                inflight.add(eid)
                state[2] += n
            return []

        async def put(batch: Sequence[tuple[int, bytes]]) -> None:
            rest = send(batch)
            while rest:
                await wait_head()
                rest = send(rest)
            settle()

        try:
            if isinstance(batches, AsyncIterable):
                async for batch in batches:
                    await put(batch)
            else:
                for batch in batches:
                    await put(batch)
            while order:
                await wait_head()
        finally:
            conn.drop_sink(sink, ADDENTRY, ledger_id, [eid for eid, _n, _t in order])
            aclose = getattr(batches, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception as cleanup_exc:  # noqa: BLE001 - best-effort cleanup; logged
                    log.debug("best-effort step failed", step="put", error=repr(cleanup_exc))
        return state[0], state[1]


class _Latencies:
    """The latencies of requests settled together, grouped by value (requests sent in one write and
    answered in one socket read share one): ``(latency s, body bytes, entries)`` per group."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: list[list] = []

    def add(self, latency_s: float, nbytes: int) -> None:
        g = self.groups
        if g and g[-1][0] == latency_s:
            g[-1][1] += nbytes
            g[-1][2] += 1
        else:
            g.append([latency_s, nbytes, 1])

    def report(self, observers: list[Callable[[str, float, int, int], None]], bookie_id: str) -> None:
        for latency_s, nbytes, n in self.groups:
            for observe in observers:
                observe(bookie_id, latency_s, nbytes, n)


class _Adds:
    """One connection's way of sending adds, for :meth:`UpstreamBookieClient.add_entry_batches`:
    ``send`` queues one and returns its handle, ``outcome`` waits for its answer (None: stored; the
    refusal otherwise), ``drop`` forgets one nobody waits for."""

    def __init__(self, client: UpstreamBookieClient, conn: Any, ledger_id: int, master_key: bytes,
                 recovery: bool) -> None:
        self.client, self.conn, self.ledger_id = client, conn, ledger_id
        self.master_key, self.recovery = master_key, recovery

    def send(self, entry_id: int, body: bytes) -> object:
        raise NotImplementedError

    async def outcome(self, entry_id: int, handle: object) -> BookieError | None:
        raise NotImplementedError

    def drop(self, entry_id: int, handle: object) -> None:
        raise NotImplementedError

    async def flush(self) -> None:
        self.conn.flush()
        await self.conn.writer.drain()


class _V3Adds(_Adds):
    """ADD_ENTRY requests (v3) on the client's connection to the bookie."""

    def send(self, entry_id: int, body: bytes) -> object:
        txn = next(self.client._txn)
        req = self.client._add(self.ledger_id, entry_id, self.master_key, body, self.recovery)
        return txn, self.conn.send(txn, self.client._encode(txn, up.ADD_ENTRY, "addRequest", req))

    async def outcome(self, entry_id: int, handle: object) -> BookieError | None:
        txn, fut = cast("tuple[int, asyncio.Future]", handle)
        what = f"add ledger {self.ledger_id} entry {entry_id}"
        resp = await self.client._answer(self.conn, txn, fut, what)
        status = resp.addResponse.status if resp.HasField("addResponse") else resp.status
        return None if status == up.EOK else _status_error(self.conn.bookie_id, status or up.EIO, what)

    def drop(self, entry_id: int, handle: object) -> None:
        txn, fut = cast("tuple[int, asyncio.Future]", handle)
        self.conn.pending.pop(txn, None)
        fut.cancel()
