"""A bookie that stores nothing, run in its own process: the raw-gRPC baseline of the benchmarks.

``AddEntries`` / ``AddEntryBatches`` swallow the stream and answer EOK; ``ReadEntries`` /
``ReadEntryBatches`` stream bodies of ``--entry-size`` bytes packed as real entries (batches of at most
``max_batch_bytes``, as the reference bookie does); ``PullEntries`` reads the range from the source with
the batched framing, as a bookie's does (message bytes decoded by hand, bodies not copied), and reports every entry stored without storing it (the raw one-hop baseline of a
bookie-to-bookie copy); GetBookieInfo reports ``BATCHED_ENTRIES`` and ``PULL_ENTRIES``, so a client
uses the same framing with a null bookie as with a real one. Each server runs in a child process
(``spawn_null``) so that a baseline pays the same process boundary, kernel loopback and serialisation
as the bookies it is compared with (issue 13: a baseline server inside the client's own process is
not a fair baseline).

**Pre-built bodies** (issue 29): with ``--prebuild FIRST:COUNT:ENTRIES`` the server packs (header +
CRC32C) and serializes every entry of ledgers ``FIRST .. FIRST+COUNT-1``, ids ``0 .. ENTRIES-1``, before
it prints ``NULL_READY``, each already framed as a ``ReadBatch`` element; a ``ReadEntryBatches`` of
those ledgers then costs one ``bytes.join`` per message (about 1 MiB), nothing per entry, so the
baseline is the transport's ceiling, not the cost of building entries on the fly (which was about
70% of a 128 MiB window). Ranges outside the pre-built set are built on the fly as before.

    python bench/nullbookie.py PORT [--entry-size BYTES] [--prebuild FIRST:COUNT:ENTRIES]   # prints NULL_READY
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from autorecovery.bookie.service import FEATURES
from autorecovery.bookie.limits import MAX_READ_BATCH_BYTES, PULL_REPORT_BYTES
from autorecovery.ledger.digest import pack_entry
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pbg
from autorecovery.rpc.wire import _TAG_ENTRIES, _varint, add_bookie_servicer, encode_batch
from autorecovery.testing.zk_server import free_port

MAX_MSG = 16 << 20
READY = "NULL_READY"


class NullBookie(pbg.BookieServicer):
    """Swallows adds; serves reads with ``entry_size``-byte payloads packed as real entries."""

    def __init__(self, entry_size: int, prebuild: tuple[int, int, int] | None = None) -> None:
        self.blob = os.urandom(entry_size)
        self.entry_size = entry_size
        self.peers = None
        #: ledger id -> framed ``ReadBatch`` elements (tag, length, serialized ReadResponse) by entry id
        self.framed: dict[int, list[bytes]] = {}
        self.body_len = entry_size
        if prebuild is not None:
            first, count, entries = prebuild
            for lid in range(first, first + count):
                rows = []
                for resp in self._built(lid, 0, entries - 1):
                    self.body_len = len(resp.body)  # the same for every entry: the batch cut matches
                    data = resp.SerializeToString()
                    rows.append(_TAG_ENTRIES + _varint(len(data)) + data)
                self.framed[lid] = rows

    async def PullEntries(self, request, context):
        from autorecovery.rpc.bookie_client import GrpcBookieClient

        if self.peers is None:
            self.peers = GrpcBookieClient(timeout_s=30, max_message_bytes=MAX_MSG)
        ids, nbytes = [], 0
        # the bookie's own read of the source (views of each message received, as PullEntries reads)
        async for batch in self.peers.read_entry_batches(request.source_bookie_id, request.ledger_id,
                                                         request.first_entry_id, request.last_entry_id, views=True):
            for item in batch:
                ids.append(item.entry_id)
                nbytes += len(item.body)
            if nbytes >= PULL_REPORT_BYTES:
                yield pb.PullProgress(status=pb.EOK, stored_entry_ids=ids, bytes_stored=nbytes, failed_entry_id=-1)
                ids, nbytes = [], 0
        yield pb.PullProgress(status=pb.EOK, stored_entry_ids=ids, bytes_stored=nbytes, done=True, failed_entry_id=-1)

    async def AddEntries(self, request_iterator, context):
        n = b = 0
        async for req in request_iterator:
            n += 1
            b += len(req.body)
        return pb.AddEntriesResponse(status=pb.EOK, entries_written=n, bytes_written=b, failed_entry_id=-1)

    async def AddEntryBatches(self, request_iterator, context):
        n = b = 0
        async for batch in request_iterator:
            for req in batch.entries:
                n += 1
                b += len(req.body)
        return pb.AddEntriesResponse(status=pb.EOK, entries_written=n, bytes_written=b, failed_entry_id=-1)

    def _built(self, ledger_id: int, first: int, last: int):
        size = self.entry_size
        for e in range(first, last + 1):
            payload = e.to_bytes(8, "big") + self.blob[8:]
            body = pack_entry(ledger_id, e, e - 1, (e + 1) * size, payload)
            yield pb.ReadResponse(status=pb.EOK, ledger_id=ledger_id, entry_id=e, body=body, lac=e - 1)

    def _responses(self, request):
        return self._built(request.ledger_id, request.first_entry_id, request.last_entry_id)

    async def ReadEntries(self, request, context):
        for resp in self._responses(request):
            yield resp

    async def ReadEntryBatches(self, request, context):
        limit = request.max_batch_bytes or MAX_READ_BATCH_BYTES
        rows = self.framed.get(request.ledger_id)
        if rows is not None and request.last_entry_id < len(rows) and not request.ensemble_size:
            # pre-built: one join per message, the message's bytes exactly as encode_batch writes them
            parts, size = [], 0
            for row in rows[request.first_entry_id:request.last_entry_id + 1]:
                if parts and size + self.body_len > limit:
                    yield b"".join(parts)
                    parts, size = [], 0
                parts.append(row)
                size += self.body_len
            if parts:
                yield b"".join(parts)
            return
        batch, size = [], 0
        for resp in self._responses(request):
            if batch and size + len(resp.body) > limit:
                yield batch
                batch, size = [], 0
            batch.append(resp)
            size += len(resp.body)
        if batch:
            yield batch

    async def GetBookieInfo(self, request, context):
        return pb.GetBookieInfoResponse(status=pb.EOK, features=FEATURES | pb.PULL_ENTRIES)


def _passthrough(batch) -> bytes:
    """``ReadEntryBatches`` answers: pre-built message bytes as they are, lists through encode_batch."""
    return batch if isinstance(batch, bytes) else encode_batch(batch)


def _wrap(name: str, handler):
    return handler._replace(response_serializer=_passthrough) if name == "ReadEntryBatches" else handler


async def serve(port: int, entry_size: int, prebuild: tuple[int, int, int] | None = None) -> None:
    """Serve a :class:`NullBookie` on 127.0.0.1:``port`` until terminated; prints ``NULL_READY`` once
    the pre-built entries (if any) are ready."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MSG),
                                      ("grpc.max_send_message_length", MAX_MSG)])
    # the same batch encoding as a bookie; pre-built messages pass through as bytes
    add_bookie_servicer(NullBookie(entry_size, prebuild), server, wrap=_wrap)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(READY, flush=True)
    await server.wait_for_termination()


def spawn_null(entry_size: int, prebuild: tuple[int, int, int] | None = None) -> tuple[subprocess.Popen, str]:
    """Start one null bookie in a child process; returns ``(process, bookie id "127.0.0.1:port")``.
    ``prebuild = (first ledger, ledgers, entries per ledger)`` pre-builds those entries' bodies (memory:
    their size) before the child reports ready.

    Raises:
        RuntimeError: the child did not print ``NULL_READY``.
    """
    port = free_port()
    extra = ["--prebuild", ":".join(map(str, prebuild))] if prebuild else []
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), str(port), "--entry-size",
                             str(entry_size), *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    if READY not in line:
        proc.kill()
        raise RuntimeError(f"null bookie on port {port} did not start: {line!r}")
    return proc, f"127.0.0.1:{port}"


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the child's process group, SIGKILL after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--entry-size", type=int, default=64 * 1024)
    ap.add_argument("--prebuild", metavar="FIRST:COUNT:ENTRIES",
                    help="pre-build the bodies of ledgers FIRST..FIRST+COUNT-1, entries 0..ENTRIES-1")
    a = ap.parse_args()
    pre = None
    if a.prebuild:
        try:
            first, count, entries = (int(x) for x in a.prebuild.split(":"))
        except ValueError:
            ap.error(f"--prebuild {a.prebuild!r}: expected FIRST:COUNT:ENTRIES (integers)")
        pre = (first, count, entries)
    asyncio.run(serve(a.port, a.entry_size, pre))
