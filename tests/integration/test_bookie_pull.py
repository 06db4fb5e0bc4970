"""Bookie-to-bookie copy (feature PULL_ENTRIES, issue 13) over real gRPC: a target bookie reads a range
from a source bookie itself, verifies every entry's digest, stores it as a RECOVERY_ADD and reports the
entry ids as they become durable.

* Only a bookie with a peer client reports the feature; one without refuses the call (EBADREQ).
* The striping filter is honoured, so the target stores exactly the ids of its ensemble index.
* What the source cannot serve is reported per entry (ENOENTRY; DIGEST for a corrupt copy) and never
  stored; the copy is checked with the ledger's digest type (``digest_type``: CRC32C when unset,
  CRC32, DUMMY; HMAC is refused, a bookie has no password); a source that cannot be reached, or fails mid-range, is reported as ``source_status`` after
  exactly what was stored; the target's own refusal (read-only, master key) ends the call with its
  status.
"""

from __future__ import annotations

import grpc
import pytest

from autorecovery.bookie.disk import DiskProbe
from autorecovery.bookie.service import BookieService, add_service
from autorecovery.bookie.grpc_server import build_grpc_server
from autorecovery.bookie.storage import BookieStorage
from autorecovery.errors import BookieError, ZooKeeperError
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.ledger.digest import digest_for, pack_entry
from autorecovery.ledger.metadata import DigestType
from autorecovery.ledger.striping import index_stores
from autorecovery.rpc.transport import BookieClient
from autorecovery.testing.zk_server import free_port

pytestmark = pytest.mark.integration

MK = b"master-key"
LID = 7


def entry(eid: int, size: int = 3000) -> bytes:
    return pack_entry(LID, eid, eid - 1, (eid + 1) * size, bytes([eid % 251]) * size)


@pytest.fixture
async def bookies(tmp_path):
    """``start(name, pulls=True, readonly=False, peer_check=None, max_entry_size=5 MiB)`` → a running
    BookieService (peer client when ``pulls``)."""
    running = []

    async def start(name: str, pulls: bool = True, readonly: bool = False, peer_check=None,
                    max_entry_size: int = 5 * 1024 * 1024) -> BookieService:
        storage = BookieStorage(tmp_path / name, name=name)
        storage.open()
        server, port = build_grpc_server("127.0.0.1", 0, 5 * 1024 * 1024)
        peers = BookieClient(timeout_s=5.0) if pulls else None
        service = BookieService(storage, f"127.0.0.1:{port}", disk=DiskProbe(tmp_path / name), peers=peers,
                                is_readonly=lambda: readonly, peer_check=peer_check, max_entry_size=max_entry_size)
        add_service(server, service)
        await server.start()
        running.append((server, storage, peers))
        return service

    yield start
    for server, storage, peers in running:
        await server.stop(None)
        if peers is not None:
            await peers.close()
        await storage.close()


async def pull_all(client: BookieClient, target: str, source: str, first: int, last: int, **kw):
    """Every report of one pull: (stored ids in report order, bytes, failures, last report)."""
    stored, nbytes, failed, last_rep = [], 0, {}, None
    async for rep in client.pull_entries(target, source, LID, MK, first, last, **kw):
        stored.extend(rep.stored)
        nbytes += rep.bytes_stored
        failed.update(rep.failed)
        last_rep = rep
    return stored, nbytes, failed, last_rep


async def test_only_a_bookie_with_peers_pulls(bookies, client):
    with_peers = await bookies("a")
    without = await bookies("b", pulls=False)
    assert await client.pulls(with_peers.bookie_id)
    assert not await client.pulls(without.bookie_id)
    with pytest.raises(BookieError) as exc:
        await pull_all(client, without.bookie_id, with_peers.bookie_id, 0, 0)
    assert exc.value.status == "EBADREQ" and "does not pull" in str(exc.value)
    with pytest.raises(BookieError) as exc:  # a bookie never pulls from itself
        await pull_all(client, with_peers.bookie_id, with_peers.bookie_id, 0, 0)
    assert exc.value.status == "EBADREQ"
    for first, last, kw in ((5, 4, {}), (-1, 3, {}), (0, 3, {"ensemble_size": 3, "write_quorum": 0})):
        with pytest.raises(BookieError) as exc:  # malformed ranges and striping are refused up front
            await pull_all(client, with_peers.bookie_id, without.bookie_id, first, last, **kw)
        assert exc.value.status == "EBADREQ" and "bad pull" in str(exc.value)


async def test_pull_stores_exactly_the_striped_ids_and_reports_them_durable(bookies, client):
    source = await bookies("src", pulls=False)
    target = await bookies("tgt")
    # 3,000 entries of 3,000 bytes: more than one 4 MiB report, more than one 1 MiB read batch
    await client.add_entries(source.bookie_id, LID, MK, [(e, entry(e)) for e in range(3000)])
    stored, nbytes, failed, last = await pull_all(client, target.bookie_id, source.bookie_id, 0, 2999,
                                                  ensemble_size=3, write_quorum=2, bookie_index=1)
    want = [e for e in range(3000) if index_stores(1, e, 3, 2)]
    assert stored == want and not failed and last.done and last.source_status == ""
    assert nbytes == sum(len(entry(e)) for e in want)
    on_target = [e for a, b in await client.get_list_of_entries(target.bookie_id, LID) for e in range(a, b + 1)]
    assert on_target == want  # nothing the filter excludes
    for e in (want[0], want[1], want[-1]):  # the very bytes, stored durably on the target
        r = await client.read_entry(target.bookie_id, LID, e)
        assert r.body == entry(e)


async def test_missing_and_corrupt_entries_are_reported_and_not_stored(bookies, client):
    source = await bookies("src", pulls=False)
    target = await bookies("tgt")
    bad = bytearray(entry(7))
    bad[-1] ^= 0xFF  # payload flipped: the CRC32C no longer matches
    entries = [(e, entry(e)) for e in range(10) if e != 5]
    entries[6] = (7, bytes(bad))
    await client.add_entries(source.bookie_id, LID, MK, entries)
    stored, _nbytes, failed, last = await pull_all(client, target.bookie_id, source.bookie_id, 0, 9)
    assert failed == {5: "ENOENTRY", 7: "DIGEST"}
    assert stored == [0, 1, 2, 3, 4, 6, 8, 9] and last.done
    for e in (5, 7):
        with pytest.raises(BookieError) as exc:
            await client.read_entry(target.bookie_id, LID, e)
        assert exc.value.status == "ENOENTRY"


async def test_corrupt_entries_inside_a_whole_message_are_refused_and_the_rest_stored_byte_for_byte(bookies, client):
    # every entry present: the source encodes each message straight from its stored bodies and the target
    # reads views of it (issue 29); a flipped payload byte and a flipped header byte (the length, under
    # the CRC too), mid-message, are DIGEST, the entries before and after them in the same message are
    # stored, the very bytes
    source = await bookies("src", pulls=False)
    target = await bookies("tgt")
    bad = bytearray(entry(4))
    bad[100] ^= 0x01
    entries = [(e, entry(e)) for e in range(12)]
    entries[4] = (4, bytes(bad))
    bad6 = bytearray(entry(6))
    bad6[30] ^= 0x01  # the header's cumulative length
    entries[6] = (6, bytes(bad6))
    await client.add_entries(source.bookie_id, LID, MK, entries)
    stored, nbytes, failed, last = await pull_all(client, target.bookie_id, source.bookie_id, 0, 11)
    assert failed == {4: "DIGEST", 6: "DIGEST"} and last.done
    good = [e for e in range(12) if e not in (4, 6)]
    assert stored == good and nbytes == sum(len(entry(e)) for e in good)
    for e in good:
        assert (await client.read_entry(target.bookie_id, LID, e)).body == entry(e)


async def test_unreachable_source_is_reported_as_the_source_status(bookies, client):
    target = await bookies("tgt")
    gone = f"127.0.0.1:{free_port()}"
    stored, _nbytes, failed, last = await pull_all(client, target.bookie_id, gone, 0, 9)
    assert stored == [] and failed == {} and last.done
    assert last.source_status == "UNAVAILABLE" and gone in last.source_message


async def test_target_refusal_ends_the_pull_with_its_status(bookies, client):
    source = await bookies("src", pulls=False)
    target = await bookies("tgt", readonly=True)
    await client.add_entries(source.bookie_id, LID, MK, [(e, entry(e)) for e in range(5)])
    with pytest.raises(BookieError) as exc:
        await pull_all(client, target.bookie_id, source.bookie_id, 0, 4)
    assert exc.value.status == "EREADONLY" and exc.value.entry_id == 0
    with pytest.raises(BookieError) as exc:
        await client.read_entry(target.bookie_id, LID, 0)
    assert exc.value.status == "ENOLEDGER"


async def test_an_entry_refused_mid_message_ends_the_pull_after_the_entries_before_it(bookies, client):
    source = await bookies("src", pulls=False)
    target = await bookies("tgt", max_entry_size=10_000)
    # one read message holds all ten; entry 5 is too big for the target
    await client.add_entries(source.bookie_id, LID, MK, [(e, entry(e, 20_000 if e == 5 else 3000)) for e in range(10)])
    with pytest.raises(BookieError) as exc:
        await pull_all(client, target.bookie_id, source.bookie_id, 0, 9)
    assert exc.value.status == "EBADREQ" and exc.value.entry_id == 5 and "max entry size" in str(exc.value)
    assert await client.get_list_of_entries(target.bookie_id, LID) == [(0, 4)]
    for e in (0, 4):
        assert (await client.read_entry(target.bookie_id, LID, e)).body == entry(e)


async def test_wrong_master_key_on_the_target_is_refused(bookies, client):
    source = await bookies("src", pulls=False)
    target = await bookies("tgt")
    await client.add_entries(source.bookie_id, LID, MK, [(e, entry(e)) for e in range(3)])
    await client.add_entries(target.bookie_id, LID, b"other-key", [(0, entry(0))])
    with pytest.raises(BookieError) as exc:
        await pull_all(client, target.bookie_id, source.bookie_id, 0, 2)
    assert exc.value.status == "EUA"
    assert [e for a, b in await client.get_list_of_entries(target.bookie_id, LID) for e in range(a, b + 1)] == [0]


async def test_a_source_that_is_not_a_registered_bookie_is_refused(bookies, client):
    source = await bookies("src", pulls=False)
    asked = []

    async def registered(bookie_id: str) -> bool:
        asked.append(bookie_id)
        return False

    target = await bookies("tgt", peer_check=registered)
    await client.add_entries(source.bookie_id, LID, MK, [(0, entry(0))])
    with pytest.raises(BookieError) as exc:
        await pull_all(client, target.bookie_id, source.bookie_id, 0, 0)
    assert exc.value.status == "EBADREQ" and "not a registered bookie" in str(exc.value)
    assert asked == [source.bookie_id]


async def test_a_source_that_cannot_be_checked_while_zookeeper_is_down_is_refused_eio(bookies, client):
    """The registration check failing (ZooKeeper unreachable) is answered EIO naming the source, not an
    unhandled ZooKeeperError that gRPC logs at ERROR (issue 26: 307 such lines in one campaign)."""
    source = await bookies("src", pulls=False)

    async def zookeeper_down(bookie_id: str) -> bool:
        raise ZooKeeperError("ZooKeeper operation on /ledgers/available failed: ConnectionLoss")

    target = await bookies("tgt", peer_check=zookeeper_down)
    await client.add_entries(source.bookie_id, LID, MK, [(0, entry(0))])
    with pytest.raises(BookieError) as exc:
        await pull_all(client, target.bookie_id, source.bookie_id, 0, 0)
    assert exc.value.status == "EIO" and source.bookie_id in str(exc.value) and "ConnectionLoss" in str(exc.value)


class _SourceDyingMidStream(BookieService):
    """A source whose range reads serve the first batch, then fail (a bookie that dies mid-copy)."""

    async def ReadEntryBatches(self, request, context):
        async for batch in super().ReadEntryBatches(request, context):
            yield batch
            await context.abort(grpc.StatusCode.UNAVAILABLE, "source went away")


async def test_a_source_failing_mid_range_keeps_what_was_stored_and_says_so(bookies, client, tmp_path):
    storage = BookieStorage(tmp_path / "dying", name="dying")
    storage.open()
    server, port = build_grpc_server("127.0.0.1", 0, 5 * 1024 * 1024)
    source = _SourceDyingMidStream(storage, f"127.0.0.1:{port}", disk=DiskProbe(tmp_path / "dying"))
    add_service(server, source)
    await server.start()
    try:
        target = await bookies("tgt")
        # 1,000 entries of 3,000 bytes: several 1 MiB read batches, so the source dies after the first
        await client.add_entries(source.bookie_id, LID, MK, [(e, entry(e)) for e in range(1000)])
        stored, _nbytes, failed, last = await pull_all(client, target.bookie_id, source.bookie_id, 0, 999)
        assert 0 < len(stored) < 1000 and stored == list(range(len(stored))) and not failed
        assert last.done and last.source_status == "UNAVAILABLE" and "source went away" in last.source_message
        on_target = [e for a, b in await client.get_list_of_entries(target.bookie_id, LID) for e in range(a, b + 1)]
        assert on_target == stored  # exactly what was reported durable, nothing half-written
    finally:
        await server.stop(None)
        await storage.close()


async def test_pulled_entries_are_checked_with_the_ledgers_digest_type(bookies, client):
    crc32, dummy = digest_for(DigestType.CRC32), digest_for(DigestType.DUMMY)
    source = await bookies("src", pulls=False)
    assert await client.features(source.bookie_id) & pb.PULL_DIGEST_TYPES == 0  # it does not pull at all
    # CRC32 (8-byte digest) entries, entry 3 corrupt
    t1 = await bookies("t-crc32")
    assert await client.features(t1.bookie_id) & pb.PULL_DIGEST_TYPES
    body = [crc32.pack(LID, e, e - 1, 10 * (e + 1), b"x" * 10) for e in range(6)]
    body[3] = body[3][:-1] + b"y"
    await client.add_entries(source.bookie_id, LID, MK, list(enumerate(body)))
    stored, _n, failed, last = await pull_all(client, t1.bookie_id, source.bookie_id, 0, 5,
                                              digest_type=int(DigestType.CRC32))
    assert stored == [0, 1, 2, 4, 5] and failed == {3: "DIGEST"} and last.done
    assert (await client.read_entry(t1.bookie_id, LID, 5)).body == body[5]
    # unset means CRC32C: every CRC32 entry fails (why the worker pulls other types only with the feature)
    t2 = await bookies("t-default")
    stored, _n, failed, _last = await pull_all(client, t2.bookie_id, source.bookie_id, 0, 2)
    assert stored == [] and failed == {0: "DIGEST", 1: "DIGEST", 2: "DIGEST"}
    # DUMMY: no digest at all, a 32-byte body for an empty payload; only the ids are checked
    lid2 = LID + 1
    await client.add_entries(source.bookie_id, lid2, MK, [(e, dummy.pack(lid2, e, e - 1, 0, b"")) for e in range(3)])
    stored = []
    async for rep in client.pull_entries(t1.bookie_id, source.bookie_id, lid2, MK, 0, 2,
                                         digest_type=int(DigestType.DUMMY)):
        stored.extend(rep.stored)
    assert stored == [0, 1, 2] and len((await client.read_entry(t1.bookie_id, lid2, 2)).body) == 32
    # HMAC cannot be verified without the password: refused up front; so is an unknown type
    for number, why in ((int(DigestType.HMAC), "HMAC"), (9, "unknown digest type 9")):
        with pytest.raises(BookieError) as exc:
            await pull_all(client, t2.bookie_id, source.bookie_id, 0, 5, digest_type=number)
        assert exc.value.status == "EBADREQ" and why in str(exc.value)
    with pytest.raises(BookieError) as exc:  # nothing was ever stored on t2
        await client.get_list_of_entries(t2.bookie_id, LID)
    assert exc.value.status == "ENOLEDGER"


async def test_heal_between_mtls_bookie_processes_goes_by_pull_entries(zk_server, tmp_path):
    """Issue 25: TLS bookies requiring client certificates (``autorecovery bookie --tls-* --tls-client-auth``
    processes) pull from each other, each presenting its own certificate to the source: a daemon heals a
    stopped bookie's ledger by PullEntries and the data reads back."""
    from autorecovery.testing.bookie_proc import BookieProcess
    from tls_certs import (bookie_tls_flags, client_tls, init_test_cluster, make_ca, mtls_daemon, read_back,
                           wait_healed, write_ledger)

    cluster = await init_test_cluster(zk_server.connect_string)
    ca = make_ca(tmp_path / "pki", "ours")
    b, c = ca.issue("bookie"), ca.issue("client")
    tls = client_tls(c.cert, c.key, ca.path)
    procs = [BookieProcess(["--zk", cluster, "--data-dir", str(tmp_path / f"b{i}"), "--port", "0",
                            "--log-format", "json", *bookie_tls_flags(b.cert, b.key, ca.path)], tmp_path / f"b{i}.log")
             for i in range(3)]
    d = None
    try:
        ids = [await p.await_ready() for p in procs]
        tls_client = BookieClient(timeout_s=5, tls=tls)
        try:
            assert all([await tls_client.pulls(i) for i in ids])  # a TLS bookie reports PULL_ENTRIES
        finally:
            await tls_client.close()
        lid, ensemble = await write_ledger(cluster, tls, quorums=(2, 2, 2), entries=30)
        victim = procs[ids.index(ensemble[0])]
        victim.stop()
        await victim.await_exit(30)
        d = mtls_daemon(cluster, c.cert, c.key, ca.path)
        await d.start()
        await wait_healed(cluster, lid, ensemble[0], 60)
        assert d.worker.copier.pulls > 0, "the copy went through the worker, not by PullEntries"
        assert await read_back(cluster, tls, lid, 30) == [b"entry-%d" % e for e in range(30)]
    finally:
        if d is not None:
            await d.stop()
        for p in procs:
            p.stop()
        for p in procs:
            await p.await_exit(30)
