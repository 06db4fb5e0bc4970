"""Batched framing (feature BATCHED_ENTRIES) and long-lived add streams (ADD_STREAM) of the bookie
protocol (issue 13), over real gRPC.

* The reference bookie reports the feature and serves ``AddEntryBatches`` / ``ReadEntryBatches`` with the
  same semantics as the one-entry-per-message RPCs (order, first failure, ENOENTRY gaps, striping).
* The client negotiates: with a bookie that does not report the feature (a server implementing only the
  older RPCs, as a bookie of an earlier release does) it uses ``AddEntries`` / ``ReadEntries``; when a
  bookie it remembered as batched turns out not to be (replaced by an older release), a range read falls
  back transparently and an add fails once as ``EIO`` without losing track of what was written.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from autorecovery.bookie.disk import DiskProbe
from autorecovery.bookie.service import BookieService, add_service
from autorecovery.bookie.grpc_server import build_grpc_server
from autorecovery.bookie.storage import BookieStorage
from autorecovery.client.batcher import AddBatcher
from autorecovery.errors import BookieError, LedgerFencedError
from autorecovery.ledger.digest import pack_entry
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc
from autorecovery.rpc.bookie_client import GrpcBookieClient
from autorecovery.aio import wait_for

pytestmark = pytest.mark.integration

MK = b"master-key"


def entry(lid: int, eid: int, size: int = 1000) -> bytes:
    return pack_entry(lid, eid, eid - 1, (eid + 1) * size, bytes([eid % 251]) * size)


class OldBookieService(BookieService):
    """A bookie of a release without batched framing: no ``features`` bit, batched RPCs unimplemented
    (grpc's generated base class answers UNIMPLEMENTED). Counts the per-entry calls it serves."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.calls = {"AddEntries": 0, "ReadEntries": 0}

    async def GetBookieInfo(self, request, context):
        resp = await super().GetBookieInfo(request, context)
        resp.ClearField("features")
        return resp

    AddEntryBatches = pb_grpc.BookieServicer.AddEntryBatches
    ReadEntryBatches = pb_grpc.BookieServicer.ReadEntryBatches
    AddStream = pb_grpc.BookieServicer.AddStream

    async def AddEntries(self, request_iterator, context):
        self.calls["AddEntries"] += 1
        return await super().AddEntries(request_iterator, context)

    async def ReadEntries(self, request, context):
        self.calls["ReadEntries"] += 1
        async for resp in super().ReadEntries(request, context):
            yield resp


@pytest.fixture
async def serve(tmp_path):
    """Start a bookie gRPC service of class ``cls`` on 127.0.0.1 (no ZooKeeper needed for the wire)."""
    running = []

    async def start(cls=BookieService, name: str = "b"):
        storage = BookieStorage(tmp_path / name, name=name)
        storage.open()
        server, port = build_grpc_server("127.0.0.1", 0, 5 * 1024 * 1024)
        service = cls(storage, f"127.0.0.1:{port}", disk=DiskProbe(tmp_path / name))
        add_service(server, service)
        await server.start()
        running.append((server, storage))
        return service

    yield start
    for server, storage in running:
        await server.stop(None)
        await storage.close()


async def test_bookie_reports_the_feature_and_batches_read_answers_within_the_byte_limit(serve, client) -> None:
    svc = await serve()
    b = svc.bookie_id
    assert await client.features(b) & pb.BATCHED_ENTRIES
    # entries 0..29 except 7 and 8 (a gap), 1000-byte payloads
    await client.add_entries(b, 5, MK, [(e, entry(5, e)) for e in range(30) if e not in (7, 8)], recovery=False)
    async with grpc.aio.insecure_channel(b) as ch:
        stub = pb_grpc.BookieStub(ch)
        req = pb.ReadRangeRequest(ledger_id=5, first_entry_id=0, last_entry_id=29, max_batch_bytes=3200)
        batches = [m async for m in stub.ReadEntryBatches(req)]
        singles = [m async for m in stub.ReadEntries(req)]
        # a striped range (E3/WQ2, index 1) through both framings
        striped = pb.ReadRangeRequest(ledger_id=5, first_entry_id=0, last_entry_id=29, ensemble_size=3,
                                      write_quorum=2, bookie_index=1)
        s_batches = [m async for m in stub.ReadEntryBatches(striped)]
        s_singles = [m async for m in stub.ReadEntries(striped)]
    flat = [r for m in batches for r in m.entries]
    assert flat == singles
    assert [r.entry_id for r in flat] == list(range(30))
    assert [r.status for r in flat if r.entry_id in (7, 8)] == [pb.ENOENTRY, pb.ENOENTRY]
    assert len(batches) > 1
    assert all(sum(len(r.body) for r in m.entries) <= 3200 for m in batches)
    assert [r for m in s_batches for r in m.entries] == s_singles
    assert [r.entry_id for r in s_singles] == [e for e in range(30) if (1 - e) % 3 < 2]


async def test_a_read_batch_limit_smaller_than_an_entry_still_moves_the_entry(serve, client) -> None:
    b = (await serve()).bookie_id
    await client.add_entries(b, 6, MK, [(e, entry(6, e, size=5000)) for e in range(3)], recovery=False)
    async with grpc.aio.insecure_channel(b) as ch:
        req = pb.ReadRangeRequest(ledger_id=6, first_entry_id=0, last_entry_id=2, max_batch_bytes=100)
        batches = [m async for m in pb_grpc.BookieStub(ch).ReadEntryBatches(req)]
    assert [[r.entry_id for r in m.entries] for m in batches] == [[0], [1], [2]]


async def test_add_entry_batches_applies_in_order_and_stops_at_the_first_failure(serve, client) -> None:
    b = (await serve()).bookie_id
    bad = entry(8, 99)  # a body for entry 99 sent as entry 3: EBADREQ
    reqs = [[(0, entry(8, 0)), (1, entry(8, 1))], [(2, entry(8, 2)), (3, bad), (4, entry(8, 4))]]

    def batch(items):
        return pb.AddBatch(entries=[pb.AddRequest(ledger_id=8, entry_id=e, master_key=MK, body=body)
                                    for e, body in items])

    async with grpc.aio.insecure_channel(b) as ch:
        call = pb_grpc.BookieStub(ch).AddEntryBatches()
        for items in reqs:
            await call.write(batch(items))
        await call.done_writing()
        resp = await call
    assert (resp.status, resp.entries_written, resp.failed_entry_id) == (pb.EBADREQ, 3, 3)
    assert resp.bytes_written == sum(len(entry(8, e)) for e in range(3))
    assert [r.entry_id async for r in client.read_entries(b, 8, 0, 4) if not isinstance(r, BookieError)] == [0, 1, 2]


async def test_client_cuts_batches_within_its_limits(serve) -> None:
    b = (await serve()).bookie_id
    c = GrpcBookieClient(timeout_s=5.0, batch_bytes=2500, batch_entries=4)
    try:
        cut = list(c.cut([(e, entry(1, e)) for e in range(11)]))
        assert [[e for e, _ in part] for part in cut] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10]]
        assert await c.add_entries(b, 1, MK, [(e, entry(1, e)) for e in range(11)], recovery=False) == (
            11, sum(len(entry(1, e)) for e in range(11)))
        got = [r.entry_id async for r in c.read_entries(b, 1, 0, 10)]
        assert got == list(range(11))
    finally:
        await c.close()


async def test_client_uses_one_entry_per_message_with_a_bookie_without_the_feature(serve, client) -> None:
    old = await serve(OldBookieService)
    b = old.bookie_id
    assert await client.features(b) == 0
    assert await client.add_entries(b, 3, MK, [(e, entry(3, e)) for e in range(10)], recovery=False) == (
        10, sum(len(entry(3, e)) for e in range(10)))
    assert [r.entry_id async for r in client.read_entries(b, 3, 0, 9)] == list(range(10))
    assert old.calls == {"AddEntries": 1, "ReadEntries": 1}


async def test_read_entry_batches_yields_a_list_per_message_and_the_same_items_as_read_entries(serve) -> None:
    new, old = await serve(), await serve(OldBookieService, name="old")
    small = GrpcBookieClient(timeout_s=5.0, batch_bytes=3200)
    try:
        for b in (new.bookie_id, old.bookie_id):
            await small.add_entries(b, 4, MK, [(e, entry(4, e)) for e in range(20) if e != 3], recovery=False)
        batches = [batch async for batch in small.read_entry_batches(new.bookie_id, 4, 0, 19)]
        assert len(batches) > 1 and all(sum(len(r.body) for r in b if not isinstance(r, BookieError)) <= 3200
                                        for b in batches)
        flat = [r for b in batches for r in b]
        items = [r async for r in small.read_entries(new.bookie_id, 4, 0, 19)]
        assert [(type(r), r.entry_id) for r in flat] == [(type(r), r.entry_id) for r in items]
        assert [r.entry_id for r in flat if isinstance(r, BookieError)] == [3]
        # the old framing: one entry per message, so one per list
        assert all(len(b) == 1 for b in [b async for b in small.read_entry_batches(old.bookie_id, 4, 0, 19)])
    finally:
        await small.close()


async def test_a_bookie_replaced_by_an_older_release_is_renegotiated(serve, client) -> None:
    old = await serve(OldBookieService)
    b = old.bookie_id
    await client.add_entries(b, 4, MK, [(e, entry(4, e)) for e in range(5)], recovery=False)
    client.grpc.channels.known_features[b] = pb.BATCHED_ENTRIES  # what a newer bookie at this address had reported
    # a range read falls back before anything was returned: nothing repeated, nothing lost
    assert [r.entry_id async for r in client.read_entries(b, 4, 0, 4)] == list(range(5))
    client.grpc.channels.known_features[b] = pb.BATCHED_ENTRIES
    # an add cannot be replayed (its entries were consumed): it fails once, naming the bookie ...
    with pytest.raises(BookieError) as ei:
        await client.add_entries(b, 4, MK, [(5, entry(4, 5))], recovery=False)
    assert ei.value.status == "EIO" and b in str(ei.value)
    assert b not in client.grpc.channels.known_features  # ... and the next call asks the bookie again
    assert await client.add_entries(b, 4, MK, [(5, entry(4, 5))], recovery=False) == (1, len(entry(4, 5)))
    assert await client.features(b) == 0


# -- AddStream (feature ADD_STREAM): one long-lived stream, acknowledged as entries become durable -----
async def test_add_stream_acknowledges_each_batch_before_the_next_is_sent_and_ends_at_the_first_failure(
        serve, client) -> None:
    b = (await serve()).bookie_id
    assert await client.features(b) & pb.ADD_STREAM

    def batch(items):
        return pb.AddBatch(entries=[pb.AddRequest(ledger_id=11, entry_id=e, master_key=MK, body=body)
                                    for e, body in items])

    async with grpc.aio.insecure_channel(b) as ch:
        call = pb_grpc.BookieStub(ch).AddStream()
        await call.write(batch([(0, entry(11, 0)), (1, entry(11, 1))]))
        acked = 0
        while acked < 2:  # acknowledged while the stream is still open: nothing else was sent
            ack = await asyncio.wait_for(call.read(), 10)
            assert ack.status == pb.EOK
            acked = ack.entries_written
        assert acked == 2 and ack.bytes_written == len(entry(11, 0)) + len(entry(11, 1))
        await call.write(batch([(2, entry(11, 2)), (3, entry(11, 99)), (4, entry(11, 4))]))
        acks = []
        while (m := await asyncio.wait_for(call.read(), 10)) is not grpc.aio.EOF:
            acks.append(m)
    last = acks[-1]
    assert (last.status, last.entries_written, last.failed_entry_id) == (pb.EBADREQ, 3, 3)
    assert all(a.status == pb.EOK for a in acks[:-1])
    got = [r.entry_id async for r in client.read_entries(b, 11, 0, 4) if not isinstance(r, BookieError)]
    assert got == [0, 1, 2]


async def test_client_add_stream_resolves_adds_and_fails_pending_ones_with_the_bookies_status(serve, client) -> None:
    b = (await serve()).bookie_id
    st = await client.open_add_stream(b, 12, MK)
    with pytest.raises(ValueError, match="1 futures for 2 entries"):  # nothing is sent
        await st.send([(0, entry(12, 0)), (1, entry(12, 1))], [asyncio.get_running_loop().create_future()])
    assert st.pending == 0
    futs = await st.send([(e, entry(12, e)) for e in range(5)])
    futs += await st.send([(e, entry(12, e)) for e in range(5, 8)])
    await asyncio.wait_for(asyncio.gather(*futs), 10)
    assert st.usable and st.pending == 0
    # the ledger is fenced meanwhile (a recovery took it over): the next adds fail EFENCED, the stream ends
    await client.read_entry(b, 12, 0, fence=True, master_key=MK)
    futs = await st.send([(8, entry(12, 8)), (9, entry(12, 9))])
    for f in futs:
        with pytest.raises(LedgerFencedError):
            await asyncio.wait_for(f, 10)
    assert not st.usable
    with pytest.raises(LedgerFencedError):
        await st.send([(10, entry(12, 10))])
    await st.close()


async def test_an_idle_add_stream_is_ended_by_the_bookie_without_failing_anything(tmp_path, client) -> None:
    storage = BookieStorage(tmp_path / "idle", name="idle")
    storage.open()
    server, port = build_grpc_server("127.0.0.1", 0, 5 * 1024 * 1024)
    add_service(server, BookieService(storage, f"127.0.0.1:{port}", disk=DiskProbe(tmp_path / "idle"),
                                      stream_idle_timeout_s=0.3))
    await server.start()
    try:
        b = f"127.0.0.1:{port}"
        st = await client.open_add_stream(b, 13, MK)
        await asyncio.wait_for(asyncio.gather(*await st.send([(0, entry(13, 0))])), 10)
        # idle past the bookie's timeout: the bookie ends the stream; the client notices without sending
        assert await wait_for(lambda: not st.usable, 10)
        assert st.pending == 0
        await st.close()
    finally:
        await server.stop(None)
        await storage.close()


async def test_batcher_uses_one_stream_per_bookie_and_ledger_and_closes_it_when_idle(serve, client) -> None:
    b = (await serve()).bookie_id
    batcher = AddBatcher(client, idle_close_s=0.4)
    try:
        await asyncio.gather(*(batcher.add(b, 14, e, MK, entry(14, e)) for e in range(50)))
        await asyncio.gather(*(batcher.add(b, 14, e, MK, entry(14, e)) for e in range(50, 80)))
        assert batcher.streams_opened == 1
        assert await wait_for(lambda: not batcher._streams, 10)  # closed after idle_close_s
        await batcher.add(b, 14, 80, MK, entry(14, 80))  # a new stream
        assert batcher.streams_opened == 2
        assert [r.entry_id async for r in client.read_entries(b, 14, 0, 80)] == list(range(81))
    finally:
        await batcher.close()


async def test_batcher_falls_back_to_calls_with_a_bookie_without_add_streams(serve, client) -> None:
    old = await serve(OldBookieService)
    batcher = AddBatcher(client)
    try:
        await asyncio.gather(*(batcher.add(old.bookie_id, 15, e, MK, entry(15, e)) for e in range(20)))
        assert batcher.streams_opened == 0 and old.calls["AddEntries"] >= 1
    finally:
        await batcher.close()


async def test_add_stream_stores_each_run_of_one_ledger_as_one_storage_operation(serve, client) -> None:
    """An AddStream message is split into runs of consecutive entries of one ledger, master key and
    flags (at most 256 entries each); each run is one storage operation, acknowledged as a whole."""
    service = await serve()
    b = service.bookie_id
    ops: list[tuple[int, list[int], bool]] = []
    submit = service.storage.submit_adds

    def counting(lid, master_key, entries, **kw):
        ops.append((lid, [e for e, _b in entries], kw.get("recovery", False)))
        return submit(lid, master_key, entries, **kw)

    service.storage.submit_adds = counting
    small = [pb.AddRequest(ledger_id=21, entry_id=e, master_key=MK, body=entry(21, e, 40)) for e in range(300)]
    mixed = ([pb.AddRequest(ledger_id=22, entry_id=e, master_key=MK, body=entry(22, e)) for e in range(3)]
             + [pb.AddRequest(ledger_id=23, entry_id=e, master_key=MK, body=entry(23, e)) for e in range(2)]
             + [pb.AddRequest(ledger_id=22, entry_id=3, master_key=MK, body=entry(22, 3), flags=pb.RECOVERY_ADD)])
    async with grpc.aio.insecure_channel(b) as ch:
        call = pb_grpc.BookieStub(ch).AddStream()
        await call.write(pb.AddBatch(entries=small))
        await call.write(pb.AddBatch(entries=mixed))
        acked = 0
        while acked < 306:
            ack = await asyncio.wait_for(call.read(), 10)
            assert ack.status == pb.EOK
            acked = ack.entries_written
        await call.done_writing()
        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF
    assert [(lid, len(eids), rec) for lid, eids, rec in ops] == [
        (21, 256, False), (21, 44, False), (22, 3, False), (23, 2, False), (22, 1, True)]
    assert [e for _l, eids, _r in ops[:2] for e in eids] == list(range(300))
    assert [r.entry_id async for r in client.read_entries(b, 21, 0, 299)] == list(range(300))
    assert [r.entry_id async for r in client.read_entries(b, 22, 0, 3)] == [0, 1, 2, 3]
    assert [r.entry_id async for r in client.read_entries(b, 23, 0, 1)] == [0, 1]
