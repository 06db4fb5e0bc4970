"""The stock-bookie transport against a hostile or broken peer on a real socket: a frame that claims
2 GiB, bytes that are not a v3 Response, answers to requests nobody sent, silence, a connection cut
mid-frame, and a peer that wants authentication. Each ends in one error naming the bookie; none grows
memory or hangs the client, and the next request connects again."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable

import pytest

from autorecovery.errors import BookieError, BookieRefusedError, BookieUnavailableError, LedgerFencedError
from autorecovery.proto import bookkeeper_protocol_pb2 as up
from autorecovery.rpc.upstream_client import UpstreamBookieClient

pytestmark = pytest.mark.integration

Handler = Callable[[up.Request, asyncio.StreamWriter], Awaitable[None]]
V2Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


def frame(msg) -> bytes:
    data = msg.SerializeToString() if not isinstance(msg, bytes) else msg
    return struct.pack(">I", len(data)) + data


def info_answer(req: up.Request) -> up.Response:
    return up.Response(header=req.header, status=up.EOK,
                       getBookieInfoResponse=up.GetBookieInfoResponse(status=up.EOK, totalDiskCapacity=10,
                                                                      freeDiskSpace=5))


async def serve(handler: Handler, v2_conn: V2Handler | None = None):
    """A peer on 127.0.0.1 that answers the connection probe (GET_BOOKIE_INFO) and hands every other
    request to ``handler``; like a stock bookie it picks the encoding per connection from the first
    request, and hands a v2 connection (a packet header, version 2 in its first byte) to ``v2_conn``
    with the first request's bytes."""
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (n,) = struct.unpack(">I", await reader.readexactly(4))
            data = await reader.readexactly(n)
            if v2_conn is not None and data[0] == 2:
                await v2_conn(reader, writer, data)
                return
            while True:
                req = up.Request()
                req.ParseFromString(data)
                if req.header.operation == up.GET_BOOKIE_INFO:
                    writer.write(frame(info_answer(req)))
                else:
                    await handler(req, writer)
                await writer.drain()
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                data = await reader.readexactly(n)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def read_answer(req: up.Request, entry_id: int = 0) -> up.Response:
    body = struct.pack(">qqqq", req.readRequest.ledgerId, entry_id, -1, 0) + b"\0\0\0\0payload"
    return up.Response(header=req.header, status=up.EOK, readResponse=up.ReadResponse(
        status=up.EOK, ledgerId=req.readRequest.ledgerId, entryId=entry_id, body=body))


@pytest.mark.parametrize("bad, word", [
    (struct.pack(">I", 2**31 - 1), "over the"),          # a 2 GiB claim: never allocated
    (frame(b"\xff\xff\xff\xff not protobuf"), "does not parse"),
])
async def test_a_malformed_answer_closes_the_connection_with_one_error(bad, word):
    async def handler(req, writer):
        writer.write(bad)

    server, bookie = await serve(handler)
    client = UpstreamBookieClient(timeout_s=5)
    try:
        with pytest.raises(BookieError) as ei:
            await client.read_entry(bookie, 1, 0)
        assert ei.value.status == "EIO" and word in str(ei.value) and bookie in str(ei.value)
        assert (await client.get_bookie_info(bookie)).free_disk_space == 5  # a new connection serves
    finally:
        await client.close()
        server.close()


async def test_answers_nobody_asked_for_are_dropped_and_the_real_one_is_matched():
    async def handler(req, writer):
        stray = up.Response(header=up.BKPacketHeader(version=up.VERSION_THREE, operation=up.READ_ENTRY,
                                                     txnId=req.header.txnId + 1000), status=up.EOK)
        writer.write(frame(stray) + frame(read_answer(req, 0)))

    server, bookie = await serve(handler)
    client = UpstreamBookieClient(timeout_s=5)
    try:
        got = await client.read_entry(bookie, 7, 0)
        assert got.entry_id == 0 and got.body.endswith(b"payload")
    finally:
        await client.close()
        server.close()


async def test_silence_times_out_and_a_cut_connection_fails_every_request_in_flight():
    cut = asyncio.Event()

    async def handler(req, writer):
        if req.readRequest.entryId == 1:  # half a frame, then the connection goes
            writer.write(struct.pack(">I", 100) + b"partial")
            await writer.drain()
            writer.transport.abort()
            cut.set()
        # entry 0: never answered

    server, bookie = await serve(handler)
    client = UpstreamBookieClient(timeout_s=1)
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(BookieUnavailableError, match="no answer in 1s"):
            await client.read_entry(bookie, 1, 0)
        assert loop.time() - t0 < 3
        silent = asyncio.ensure_future(client.read_entry(bookie, 1, 0))
        with pytest.raises(BookieUnavailableError, match="connection lost"):
            await client.read_entry(bookie, 1, 1)
        with pytest.raises(BookieUnavailableError, match="connection lost"):
            await silent  # in flight on the same connection: failed with it, not left to time out
        assert cut.is_set()
    finally:
        await client.close()
        server.close()


async def test_a_peer_that_wants_authentication_is_refused_before_any_data_is_sent():
    seen: list[int] = []

    async def on_conn(reader, writer):
        try:
            while True:
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                req = up.Request()
                req.ParseFromString(await reader.readexactly(n))
                seen.append(req.header.operation)
                writer.write(frame(up.Response(header=req.header, status=up.EUA)))  # upstream AuthHandler
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    bookie = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = UpstreamBookieClient(timeout_s=5)
    try:
        with pytest.raises(BookieRefusedError, match="requires authentication"):
            await client.add_entry(bookie, 1, 0, b"k" * 20, b"\0" * 40, recovery=True)
        assert seen == [up.GET_BOOKIE_INFO]  # the probe only: the add never left
    finally:
        await client.close()
        server.close()


# -- adds in upstream's v2 encoding (autorecovery.rpc.upstream_v2) ----------------------------------
MK = bytes(range(20))


def packed(ledger_id: int, entry_id: int, payload: bytes = b"payload") -> bytes:
    return struct.pack(">qqqq", ledger_id, entry_id, entry_id - 1, len(payload)) + b"\0\0\0\0" + payload


async def serve_v2(v2_conn: V2Handler, v3_adds: list[int]):
    """:func:`serve` whose v3 side acknowledges ADD_ENTRY, recording each add's entry id in ``v3_adds``."""
    async def v3(req: up.Request, writer: asyncio.StreamWriter) -> None:
        if req.header.operation == up.ADD_ENTRY:
            v3_adds.append(req.addRequest.entryId)
            writer.write(frame(up.Response(header=req.header, status=up.EOK, addResponse=up.AddResponse(
                status=up.EOK, ledgerId=req.addRequest.ledgerId, entryId=req.addRequest.entryId))))

    return await serve(v3, v2_conn)


def v2_answer(packet: bytes, code: int = 0) -> bytes:
    header = struct.unpack_from(">i", packet)[0]
    ledger_id, entry_id = struct.unpack_from(">qq", packet, 4 + 20)
    return struct.pack(">Iiiqq", 24, header & ~0xFFFF, code, ledger_id, entry_id)


async def test_v2_adds_are_answered_out_of_order_refused_by_code_and_a_bad_answer_closes_the_connection():
    seen: list[tuple[int, bytes, int]] = []  # (entry id, master key, flags) of each v2 add

    async def v2_conn(reader, writer, first):
        held, packet = [], first
        while True:
            held.append(packet)
            if len(held) == 3 or struct.unpack_from(">q", packet, 4 + 20 + 8)[0] >= 10:
                for p in reversed(held):  # answers are matched by (ledger, entry), not by order
                    e = struct.unpack_from(">q", p, 4 + 20 + 8)[0]
                    seen.append((e, p[4:24], struct.unpack_from(">i", p)[0] & 0xFFFF))
                    if e == 11:
                        writer.write(struct.pack(">I", 1 << 31))  # claims 2 GiB: never read
                    else:
                        writer.write(v2_answer(p, code=104 if e == 10 else 0))
                held = []
                await writer.drain()
            (n,) = struct.unpack(">I", await reader.readexactly(4))
            packet = await reader.readexactly(n)

    v3_adds: list[int] = []
    server, bookie = await serve_v2(v2_conn, v3_adds)
    client = UpstreamBookieClient(timeout_s=5)
    try:
        n, nbytes = await client.add_entries(bookie, 5, MK, [(e, packed(5, e)) for e in range(3)])
        assert (n, nbytes) == (3, 3 * len(packed(5, 0)))
        assert sorted(e for e, _, _ in seen) == [0, 1, 2] and all(mk == MK and f == 2 for _, mk, f in seen)
        assert v3_adds == []  # the adds went in v2
        with pytest.raises(LedgerFencedError) as ei:  # code 104 = EFENCED, on entry 10
            await client.add_entries(bookie, 5, MK, [(10, packed(5, 10))], recovery=False)
        assert ei.value.failed_entry_id == 10 and ei.value.entries_written == 0
        assert seen[-1][2] == 0  # no RECOVERY_ADD flag when recovery=False
        with pytest.raises(BookieError, match="not an add answer"):
            await client.add_entries(bookie, 5, MK, [(11, packed(5, 11))])
        n, _ = await client.add_entries(bookie, 5, MK, [(12, packed(5, 12))])  # connects again, still v2
        assert n == 1 and v3_adds == []
    finally:
        await client.close()
        server.close()


async def test_a_peer_that_drops_v2_before_answering_gets_its_adds_in_v3_from_then_on():
    async def v2_conn(reader, writer, first):
        writer.close()  # a bookie that does not take the v2 encoding

    v3_adds: list[int] = []
    server, bookie = await serve_v2(v2_conn, v3_adds)
    client = UpstreamBookieClient(timeout_s=5)
    try:
        with pytest.raises(BookieUnavailableError) as ei:
            await client.add_entries(bookie, 5, MK, [(0, packed(5, 0)), (1, packed(5, 1))])
        assert ei.value.failed_entry_id == -1 and ei.value.entries_written == 0
        assert await client.add_entries(bookie, 5, MK, [(0, packed(5, 0)), (1, packed(5, 1))]) == \
            (2, 2 * len(packed(5, 0)))
        assert v3_adds == [0, 1]
        # a master key v2 cannot carry (not 20 bytes) goes in v3 whatever the bookie takes
        assert (await client.add_entries(bookie, 5, b"short", [(2, packed(5, 2))]))[0] == 1
    finally:
        await client.close()
        server.close()


async def test_a_v2_add_whose_body_names_another_entry_is_refused_before_it_is_sent():
    got: list[bytes] = []

    async def v2_conn(reader, writer, first):
        got.append(first)
        writer.write(v2_answer(first))
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                got.append(await reader.readexactly(n))
                writer.write(v2_answer(got[-1]))
                await writer.drain()

    server, bookie = await serve_v2(v2_conn, [])
    client = UpstreamBookieClient(timeout_s=5)
    try:
        with pytest.raises(BookieError, match="does not start with this ledger and entry id") as ei:
            await client.add_entries(bookie, 5, MK, [(0, packed(5, 0)), (1, packed(6, 1))])
        assert ei.value.status == "EBADREQ" and ei.value.failed_entry_id == 1
        assert (await client.add_entries(bookie, 5, MK, [(2, packed(5, 2))]))[0] == 1  # the connection lives on
        sent = [struct.unpack_from(">q", p, 4 + 20 + 8)[0] for p in got]
        assert 2 in sent and 1 not in sent, sent  # entry 1 never left
    finally:
        await client.close()
        server.close()


async def test_v2_range_reads_are_matched_by_entry_bounded_and_fall_back_to_v3_on_a_peer_without_v2():
    """A copy's range read goes in v2: answers come out of order with strays nobody asked for (dropped),
    a missing entry is ENOENTRY in order; a read answer frame over max_frame_bytes closes the connection
    with EIO before its body is awaited; a peer that closes v2 before answering is read in v3."""
    async def v2_conn(reader, writer, first):
        packet = first
        while True:
            header = struct.unpack_from(">i", packet)[0]
            ledger_id, entry_id = struct.unpack_from(">qq", packet, 4)
            assert (header >> 16) & 0xFF == 2 and header & 0xFFFF == 0  # READENTRY, no fencing
            if entry_id == 9:  # claims 64 MiB: refused on its length
                writer.write(struct.pack(">Iiiqq", 64 * 1024 * 1024, header, 0, ledger_id, entry_id))
            else:
                stray = struct.pack(">Iiiqq", 24, header, 0, ledger_id, entry_id + 1000)
                code, body = (2, b"") if entry_id == 3 else (0, packed(ledger_id, entry_id))
                writer.write(stray + struct.pack(">Iiiqq", 24 + len(body), header, code, ledger_id, entry_id) + body)
            await writer.drain()
            (n,) = struct.unpack(">I", await reader.readexactly(4))
            packet = await reader.readexactly(n)

    server, bookie = await serve_v2(v2_conn, [])
    client = UpstreamBookieClient(timeout_s=5, max_frame_bytes=1024 * 1024)
    try:
        got = [r async for r in client.read_entries(bookie, 5, 0, 5)]
        assert [getattr(r, "entry_id", None) for r in got] == [0, 1, 2, 3, 4, 5]
        assert isinstance(got[3], BookieError) and got[3].status == "ENOENTRY"
        assert got[5].body == packed(5, 5) and got[5].lac == 4  # the LAC its header carries
        with pytest.raises(BookieError, match=r"not an add answer .*nor a read answer") as ei:
            [r async for r in client.read_entries(bookie, 5, 8, 10)]
        assert ei.value.status == "EIO" and bookie in str(ei.value)
        assert len([r async for r in client.read_entries(bookie, 5, 0, 1)]) == 2  # connects again, still v2
    finally:
        await client.close()
        server.close()

    async def no_v2(reader, writer, first):
        writer.close()

    async def v3(req, writer):
        writer.write(frame(read_answer(req, req.readRequest.entryId)))

    server, bookie = await serve(v3, no_v2)
    client = UpstreamBookieClient(timeout_s=5)
    try:
        got = [r async for r in client.read_entries(bookie, 7, 0, 2)]
        assert [r.entry_id for r in got] == [0, 1, 2] and bookie in client._v2_off  # read in v3 after all
    finally:
        await client.close()
        server.close()


async def test_the_same_entry_read_twice_at_once_is_answered_to_both_readers_oldest_first():
    """Two range reads of one entry in flight on one v2 connection (a copy and a check): the bookie's two
    answers go one to each reader, in the order they were asked; a reader that gives up is forgotten."""
    asked = asyncio.Event()
    packets: list[bytes] = []

    async def v2_conn(reader, writer, first):
        packets.append(first)
        while len(packets) < 2:
            (n,) = struct.unpack(">I", await reader.readexactly(4))
            packets.append(await reader.readexactly(n))
        asked.set()
        for i, p in enumerate(packets):
            header = struct.unpack_from(">i", p)[0]
            ledger_id, entry_id = struct.unpack_from(">qq", p, 4)
            body = packed(ledger_id, entry_id, payload=b"answer-%d" % i)
            writer.write(struct.pack(">Iiiqq", 24 + len(body), header, 0, ledger_id, entry_id) + body)
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readexactly(1)

    server, bookie = await serve_v2(v2_conn, [])
    client = UpstreamBookieClient(timeout_s=5)
    try:
        one = asyncio.ensure_future(client.read_entries(bookie, 3, 4, 4).__anext__())
        two = asyncio.ensure_future(client.read_entries(bookie, 3, 4, 4).__anext__())
        a, b = await asyncio.wait_for(asyncio.gather(one, two), 10)
        assert a.entry_id == b.entry_id == 4 and asked.is_set()
        assert (a.body, b.body) == (packed(3, 4, payload=b"answer-0"), packed(3, 4, payload=b"answer-1"))
        conn = client._v2[bookie]
        assert conn.pending == {} and conn.answered == 2  # both answers matched, nothing left waiting
    finally:
        await client.close()
        server.close()
