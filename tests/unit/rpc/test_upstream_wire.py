"""Pure pieces of the stock-bookie transport: upstream's entry-availability encoding, the transport
choice from a registration, and the v3 protocol's field numbers (BookkeeperProtocol.proto, 4.17)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autorecovery.proto import bookkeeper_protocol_pb2 as up
from autorecovery.rpc.availability import HEADER_SIZE, ranges_from_availability
from autorecovery.rpc.convert import speaks_a_known_protocol
from autorecovery.rpc.transport import GRPC, UPSTREAM, choose_transport
from autorecovery.rpc.upstream_connection import bookie_address, status_name


def encode(groups: list[tuple[int, int, int, int]]) -> bytes:
    """Upstream AvailabilityOfEntriesOfLedger.serializeStateOfEntriesOfLedger's layout."""
    head = struct.pack(">ii", 0, len(groups)).ljust(HEADER_SIZE, b"\0")
    return head + b"".join(struct.pack(">qqii", *g) for g in groups)


def brute(groups: list[tuple[int, int, int, int]]) -> list[int]:
    out = []
    for first, last, size, period in groups:
        s = first
        while True:
            out.extend(range(s, s + size))
            if period == 0 or s >= last:
                break
            s += period
    return out


def test_contiguous_and_striped_groups():
    # entries 0..9 stored, then a striped run (E3/WQ2: 2 of every 3) from 12
    data = encode([(0, 0, 10, 0), (12, 18, 2, 3)])
    assert ranges_from_availability(data) == [(0, 9), (12, 13), (15, 16), (18, 19)]
    assert ranges_from_availability(b"") == []


@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 4), st.integers(0, 6)), max_size=5))
def test_ranges_cover_exactly_the_encoded_entries(spec):
    groups, start = [], 0
    for size, gap, n in spec:
        period = size + gap + 1
        groups.append((start, start + n * period, size, period if n else 0))
        start += n * period + size + 1 + gap
    got = [e for a, b in ranges_from_availability(encode(groups)) for e in range(a, b + 1)]
    assert got == brute(groups)


@pytest.mark.parametrize("data, word", [
    (b"\0" * 10, "shorter"),
    (struct.pack(">ii", 1, 0).ljust(HEADER_SIZE, b"\0"), "version"),
    (struct.pack(">ii", 0, 3).ljust(HEADER_SIZE, b"\0"), "claims 3"),
    (encode([(5, 1, 2, 3)]), "inconsistent"),
    (encode([(0, 2**62, 1, 2)]), "more than"),
])
def test_bad_availability_is_one_clear_error(data, word):
    with pytest.raises(ValueError, match=word):
        ranges_from_availability(data)


def test_transport_choice_follows_the_registration():
    assert choose_transport(("grpc",)) == GRPC
    assert choose_transport(None) == GRPC  # not registered / nobody to ask: our own bookies
    assert choose_transport(("bookie-rpc", "http")) == UPSTREAM
    assert choose_transport(()) == UPSTREAM  # stock bookies before 4.12 advertise nothing
    assert speaks_a_known_protocol(()) and speaks_a_known_protocol(("bookie-rpc",))
    assert not speaks_a_known_protocol(("thrift-rpc",))


def test_bookie_address_and_status_names():
    assert bookie_address("127.0.0.2:3181") == ("127.0.0.2", 3181)
    assert bookie_address("[::1]:3181") == ("::1", 3181)
    for bad in ("bookie", "host:", "host:x", "host:70000"):
        with pytest.raises(Exception, match="host:port"):
            bookie_address(bad)
    assert status_name(504) == "EFENCED" and status_name(507) == "EUNKNOWNLEDGERSTATE" and status_name(999) == "E999"


def test_v3_protocol_keeps_upstream_numbers():
    req = up.Request.DESCRIPTOR.fields_by_name
    assert {n: req[n].number for n in ("header", "readRequest", "addRequest", "authRequest", "readLacRequest",
                                        "getBookieInfoRequest", "getListOfEntriesOfLedgerRequest")} == {
        "header": 1, "readRequest": 100, "addRequest": 101, "authRequest": 102, "readLacRequest": 104,
        "getBookieInfoRequest": 105, "getListOfEntriesOfLedgerRequest": 108}
    assert up.ReadRequest.DESCRIPTOR.fields_by_name["flag"].number == 100
    assert up.AddRequest.DESCRIPTOR.fields_by_name["body"].number == 4
    assert (up.READ_ENTRY, up.ADD_ENTRY, up.READ_LAC, up.GET_BOOKIE_INFO, up.GET_LIST_OF_ENTRIES_OF_LEDGER) == (
        1, 2, 7, 8, 11)
    assert (up.ReadRequest.FENCE_LEDGER, up.AddRequest.RECOVERY_ADD) == (1, 1)
    # a header encodes as upstream's: version 3, op, txnId
    h = up.BKPacketHeader(version=up.VERSION_THREE, operation=up.READ_ENTRY, txnId=7).SerializeToString()
    assert h == bytes([0x08, 3, 0x10, 1, 0x18, 7])


async def test_a_bookie_keeps_its_last_seen_transport_once_unregistered():
    from autorecovery.rpc.transport import BookieClient

    registry: dict[str, tuple[str, ...]] = {"127.0.0.2:3181": ("bookie-rpc",), "127.0.0.10:3181": ("grpc",)}

    async def resolve(b: str):
        return registry.get(b)

    c = BookieClient(resolve=resolve)
    try:
        assert await c.transport_name("127.0.0.2:3181") == UPSTREAM
        assert await c.transport_name("127.0.0.10:3181") == GRPC
        assert await c.transport_name("127.0.0.9:3181") == GRPC  # never registered
        del registry["127.0.0.2:3181"]  # killed: its registration expired
        c._chosen.clear()  # as after a call failed with UNAVAILABLE
        assert await c.transport_name("127.0.0.2:3181") == UPSTREAM
        await c.forget("127.0.0.2:3181")
        assert await c.transport_name("127.0.0.2:3181") == GRPC
    finally:
        await c.close()


def test_both_transports_satisfy_the_one_interface():
    import inspect

    from autorecovery.rpc.bookie_client import GrpcBookieClient
    from autorecovery.rpc.transport import BookieTransport
    from autorecovery.rpc.upstream_client import UpstreamBookieClient

    names = [n for n in dir(BookieTransport) if not n.startswith("_") and callable(getattr(BookieTransport, n))]
    assert len(names) >= 14
    for impl in (GrpcBookieClient, UpstreamBookieClient):
        for n in names:
            want = list(inspect.signature(getattr(BookieTransport, n)).parameters)
            got = list(inspect.signature(getattr(impl, n)).parameters)
            assert got[:len(want)] == want, (impl.__name__, n, got, want)
