"""The stock-bookie transport against a hostile or broken peer on a real socket: a frame that claims
2 GiB, bytes that are not a v3 Response, answers to requests nobody sent, silence, a connection cut
mid-frame, and a peer that wants authentication. Each ends in one error naming the bookie; none grows
memory or hangs the client, and the next request connects again."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from autorecovery.errors import BookieError, BookieRefusedError, BookieUnavailableError
from autorecovery.proto import bookkeeper_protocol_pb2 as up
from autorecovery.rpc.upstream_client import UpstreamBookieClient

pytestmark = pytest.mark.integration

Handler = Callable[[up.Request, asyncio.StreamWriter], Awaitable[None]]


def frame(msg) -> bytes:
    data = msg.SerializeToString() if not isinstance(msg, bytes) else msg
    return struct.pack(">I", len(data)) + data


def info_answer(req: up.Request) -> up.Response:
    return up.Response(header=req.header, status=up.EOK,
                       getBookieInfoResponse=up.GetBookieInfoResponse(status=up.EOK, totalDiskCapacity=10,
                                                                      freeDiskSpace=5))


async def serve(handler: Handler):
    """A peer on 127.0.0.1 that answers the connection probe (GET_BOOKIE_INFO) and hands every other
    request to ``handler``."""
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                req = up.Request()
                req.ParseFromString(await reader.readexactly(n))
                if req.header.operation == up.GET_BOOKIE_INFO:
                    writer.write(frame(info_answer(req)))
                else:
                    await handler(req, writer)
                await writer.drain()
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
