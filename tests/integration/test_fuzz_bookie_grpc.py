"""Issue 15 "bad input": hypothesis fuzzing of every gRPC handler of the reference bookie.

A real in-process :class:`BookieServer` (real ZooKeeper, real gRPC, real storage) runs on its own event
loop thread; the tests talk to it over raw gRPC stubs and send what our client never sends: negative and
extreme ledger/entry ids (±2^63), short, oversized and foreign bodies, wrong master keys, inverted and
huge ranges, absurd striping, unknown ledgers, many concurrent streams.

Every answer must be a protocol status of bookie.proto (a non-EOK one with a message) — never a gRPC
error other than the transport's own size limit, never a hang (every call has a deadline) — and after
each example the bookie must still take a normal add and read it back.
Time-bounded for CI: ``deadline=None``, ``max_examples`` 50 (``FUZZ_EXAMPLES_GRPC`` raises it).
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from autorecovery.bookie.server import BookieConfig, BookieServer
from autorecovery.ledger.digest import pack_entry
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc
from autorecovery.testing.bookie_proc import format_test_cluster

pytestmark = [
    pytest.mark.integration,
    # the bookie's own threads (ZooKeeper client, gRPC) use the random module while hypothesis draws
    # in the test thread; hypothesis then suspects the strategies
    pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies"),
]

N = int(os.environ.get("FUZZ_EXAMPLES_GRPC", "50"))
FUZZ = settings(max_examples=N, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])

MAX_ENTRY = 64 * 1024
MK = b"master-key"
STATUSES = set(pb.StatusCode.values())
#: the timeout of every call: a hang fails the test instead of blocking it
CALL_S = 10.0

I64_EDGES = [0, 1, -1, -2, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63), -(2**63) + 1, 2**63 - 2]
i64 = st.one_of(st.sampled_from(I64_EDGES), st.integers(-(2**63), 2**63 - 1), st.integers(-3, 50))
i32 = st.one_of(st.sampled_from([0, 1, -1, 2, 3, 2**31 - 1, -(2**31)]), st.integers(-(2**31), 2**31 - 1),
                st.integers(-2, 6))
#: fuzzed requests go to ledger ids far from the canary's, but still collide among themselves
CANARY_LEDGER = 7_000_000


class _BookieThread:
    """A BookieServer on its own event loop thread (hypothesis drives sync tests)."""

    def __init__(self, zk_connect: str, data_dir) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-bookie", daemon=True)
        self.thread.start()
        self.zk_connect = zk_connect
        self.data_dir = data_dir
        self.server: BookieServer | None = None

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> "_BookieThread":
        async def go():
            cluster = await format_test_cluster(self.zk_connect)
            srv = BookieServer(BookieConfig(zk=cluster, data_dir=self.data_dir, port=0, max_entry_size=MAX_ENTRY,
                                            stream_idle_timeout_s=5.0))
            await srv.start()
            return srv
        self.server = self.run(go())
        return self

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.run(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture(scope="module")
def bookie(zk_server, tmp_path_factory):
    b = _BookieThread(zk_server.connect_string, tmp_path_factory.mktemp("fuzz-bookie")).start()
    yield b
    b.stop()


def _stub_of(b: _BookieThread):
    return grpc.insecure_channel(
        f"127.0.0.1:{b.server.port}",
        options=[("grpc.max_send_message_length", 4 * MAX_ENTRY), ("grpc.max_receive_message_length", 64 << 20)])


@pytest.fixture(scope="module")
def stub(bookie):
    channel = _stub_of(bookie)
    yield pb_grpc.BookieStub(channel)
    channel.close()


@pytest.fixture
def fresh_stub(zk_server, tmp_path):
    """A stub of a bookie of its own, for the fixed-extremes tests (the fuzzed one may have fenced
    or keyed any ledger id)."""
    b = _BookieThread(zk_server.connect_string, tmp_path / "bookie").start()
    channel = _stub_of(b)
    yield pb_grpc.BookieStub(channel)
    channel.close()
    b.stop()


_canary_next = [0]


def assert_still_serving(stub) -> None:
    """A normal add then read of a fresh entry of the canary ledger succeeds."""
    eid = _canary_next[0]
    _canary_next[0] += 1
    body = pack_entry(CANARY_LEDGER, eid, eid - 1, 0, b"canary")
    r = stub.AddEntry(pb.AddRequest(ledger_id=CANARY_LEDGER, entry_id=eid, master_key=MK, body=body), timeout=CALL_S)
    assert r.status == pb.EOK, r
    got = stub.ReadEntry(pb.ReadRequest(ledger_id=CANARY_LEDGER, entry_id=eid), timeout=CALL_S)
    assert got.status == pb.EOK and got.body == body, got


def assert_answer(resp) -> None:
    """A protocol status, and a message whenever it is not EOK."""
    assert resp.status in STATUSES, resp
    if currently_in_test_context() and threading.current_thread() is threading.main_thread():
        event(pb.StatusCode.Name(resp.status))  # --hypothesis-show-statistics: which answers were reached
    # the disk is healthy: EIO here would be an unexpected exception caught by a handler's catch-all
    assert resp.status != pb.EIO, f"EIO (an unexpected error inside the bookie): {resp.message}"
    if resp.status != pb.EOK and resp.status != pb.ENOENTRY and hasattr(resp, "message"):
        # ENOLEDGER/ENOENTRY on reads are normal answers; every other failure says why
        if resp.status != pb.ENOLEDGER:
            assert resp.message, f"status {pb.StatusCode.Name(resp.status)} without a message: {resp}"


def call(fn, req):
    """Unary call: the answer, or the transport's own refusal of an oversized message."""
    try:
        resp = fn(req, timeout=CALL_S)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.code()}: {exc.details()}"
        return None
    assert_answer(resp)
    return resp


# -- body strategies ------------------------------------------------------------------------------------

@st.composite
def bodies(draw, lid: int, eid: int) -> bytes:
    kind = draw(st.sampled_from(["valid", "foreign", "short", "random", "big", "flip", "empty"]))
    if kind == "empty":
        return b""
    if kind == "short":
        return draw(st.binary(max_size=40))
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "big":
        return b"\0" * draw(st.sampled_from([MAX_ENTRY - 1, MAX_ENTRY, MAX_ENTRY + 1, 2 * MAX_ENTRY]))
    if kind == "foreign":
        lid, eid = draw(i64.filter(lambda v: v >= 0)), draw(i64.filter(lambda v: v >= 0))
    body = bytearray(pack_entry(lid & (2**63 - 1), eid & (2**63 - 1), draw(i64), 0, draw(st.binary(max_size=64))))
    if kind == "flip" and body:
        i = draw(st.integers(0, len(body) - 1))
        body[i] ^= 1 << draw(st.integers(0, 7))
    return bytes(body)


@st.composite
def add_requests(draw) -> pb.AddRequest:
    lid = draw(st.one_of(i64, st.integers(1, 5)))
    eid = draw(st.one_of(i64, st.integers(0, 5)))
    return pb.AddRequest(ledger_id=lid, entry_id=eid,
                         master_key=draw(st.one_of(st.just(MK), st.binary(max_size=20), st.just(b"x" * 5000))),
                         body=draw(bodies(lid, eid)), flags=draw(st.sampled_from([0, 1, 2, 3, 2**32 - 1])))


# -- tests ----------------------------------------------------------------------------------------------

@FUZZ
@given(add_requests())
def test_fuzz_add_entry(stub, req):
    call(stub.AddEntry, req)
    assert_still_serving(stub)


@FUZZ
@given(st.lists(add_requests(), max_size=6))
def test_fuzz_add_entries_stream(stub, reqs):
    resp = _add_stream(stub, reqs)
    assert resp is None or 0 <= resp.entries_written <= len(reqs)
    assert_still_serving(stub)


@FUZZ
@given(i64, st.one_of(i64, st.integers(-1, 5)), st.sampled_from([0, 1, 2, 3, 2**32 - 1]),
       st.one_of(st.just(MK), st.binary(max_size=20)))
def test_fuzz_read_entry(stub, lid, eid, flags, key):
    call(stub.ReadEntry, pb.ReadRequest(ledger_id=lid, entry_id=eid, flags=flags, master_key=key))
    assert_still_serving(stub)


@FUZZ
@given(st.one_of(i64, st.just(CANARY_LEDGER)), i64, i64, i32, i32, i32)
def test_fuzz_read_entries(stub, lid, first, last, e, wq, idx):
    req = pb.ReadRangeRequest(ledger_id=lid, first_entry_id=first, last_entry_id=last, ensemble_size=e,
                              write_quorum=wq, bookie_index=idx)
    n = 0
    for resp in stub.ReadEntries(req, timeout=CALL_S):
        assert_answer(resp)
        n += 1
        assert n <= 20_000, "unbounded range answer"
    assert_still_serving(stub)


@FUZZ
@given(st.one_of(i64, st.just(CANARY_LEDGER)))
def test_fuzz_read_lac_and_list_entries(stub, lid):
    call(stub.ReadLac, pb.ReadLacRequest(ledger_id=lid))
    call(stub.GetListOfEntriesOfLedger, pb.GetListOfEntriesOfLedgerRequest(ledger_id=lid))
    call(stub.GetBookieInfo, pb.GetBookieInfoRequest(requested=lid & (2**64 - 1)))
    assert_still_serving(stub)


@FUZZ
@given(st.lists(st.one_of(add_requests(), st.tuples(i64, i64)), min_size=8, max_size=40))
def test_fuzz_many_concurrent_streams(stub, ops):
    """Streams and unary calls at once, from many client threads."""
    def one(op):
        if isinstance(op, pb.AddRequest):
            return _add_stream(stub, [op, op])
        lid, first = op
        for resp in stub.ReadEntries(pb.ReadRangeRequest(ledger_id=lid, first_entry_id=first,
                                                         last_entry_id=min(first + 3, 2**63 - 1)), timeout=CALL_S):
            assert_answer(resp)
        return None

    with ThreadPoolExecutor(max_workers=16) as ex:
        for f in [ex.submit(one, op) for op in ops]:
            f.result(CALL_S * 3)
    assert_still_serving(stub)


def _add_stream(stub, reqs):
    """One AddEntries stream of ``reqs``: its answer, or None when the transport refused a message."""
    try:
        resp = stub.AddEntries(iter(reqs), timeout=CALL_S)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.code()}: {exc.details()}"
        return None
    assert_answer(resp)
    return resp


# -- fixed extremes (reached every run, whatever hypothesis draws) --------------------------------------

def test_extreme_ids_round_trip(fresh_stub):
    stub = fresh_stub
    top = 2**63 - 1
    body = pack_entry(top, top, top - 1, 0, b"edge")
    r = call(stub.AddEntry, pb.AddRequest(ledger_id=top, entry_id=top, master_key=MK, body=body))
    assert r.status == pb.EOK, r
    got = call(stub.ReadEntry, pb.ReadRequest(ledger_id=top, entry_id=top))
    assert got.status == pb.EOK and got.body == body
    assert call(stub.ReadEntry, pb.ReadRequest(ledger_id=top, entry_id=-1)).entry_id == top
    statuses = [(x.status, x.entry_id) for x in stub.ReadEntries(
        pb.ReadRangeRequest(ledger_id=top, first_entry_id=top - 2, last_entry_id=top), timeout=CALL_S)]
    assert statuses == [(pb.ENOENTRY, top - 2), (pb.ENOENTRY, top - 1), (pb.EOK, top)]
    striped = [x.entry_id for x in stub.ReadEntries(pb.ReadRangeRequest(
        ledger_id=top, first_entry_id=top - 5, last_entry_id=top, ensemble_size=2**31 - 1, write_quorum=2**31 - 1,
        bookie_index=2**31 - 2), timeout=CALL_S)]
    assert all(top - 5 <= e <= top for e in striped)
    lst = call(stub.GetListOfEntriesOfLedger, pb.GetListOfEntriesOfLedgerRequest(ledger_id=top))
    assert [(x.first, x.last) for x in lst.ranges] == [(top, top)]
    assert call(stub.ReadLac, pb.ReadLacRequest(ledger_id=top)).lac == top - 1
    # wrong key, then a fence with the right key, then a normal add is refused
    assert call(stub.AddEntry, pb.AddRequest(ledger_id=top, entry_id=0, master_key=b"bad",
                                             body=pack_entry(top, 0, -1, 0, b"x"))).status == pb.EUA
    assert call(stub.ReadEntry, pb.ReadRequest(ledger_id=top, entry_id=top, flags=pb.FENCE_LEDGER,
                                               master_key=MK)).status == pb.EOK
    assert call(stub.AddEntry, pb.AddRequest(ledger_id=top, entry_id=0, master_key=MK,
                                             body=pack_entry(top, 0, -1, 0, b"x"))).status == pb.EFENCED
    assert_still_serving(stub)


@pytest.mark.parametrize("lid", [-1, -(2**63), 123456789])
def test_negative_and_unknown_ledgers(stub, lid):
    assert call(stub.ReadLac, pb.ReadLacRequest(ledger_id=lid)).status in (pb.ENOLEDGER, pb.EBADREQ)
    assert call(stub.GetListOfEntriesOfLedger,
                pb.GetListOfEntriesOfLedgerRequest(ledger_id=lid)).status in (pb.ENOLEDGER, pb.EBADREQ)
    assert call(stub.ReadEntry, pb.ReadRequest(ledger_id=lid, entry_id=0, flags=pb.FENCE_LEDGER,
                                               master_key=MK)).status in (pb.EOK, pb.ENOENTRY, pb.EBADREQ)
    for first, last in ((0, -(2**63)), (2**63 - 1, 0), (0, 2**63 - 1), (-1, 5)):
        answers = list(stub.ReadEntries(pb.ReadRangeRequest(ledger_id=lid, first_entry_id=first, last_entry_id=last),
                                        timeout=CALL_S))
        for a in answers:
            assert_answer(a)
        assert len(answers) <= 1
    assert_still_serving(stub)


def test_hundreds_of_concurrent_streams(stub):
    """200 AddEntries and 200 ReadEntries streams in flight at once on one connection."""
    lid = CANARY_LEDGER + 2
    adds = []
    for i in range(200):
        reqs = [pb.AddRequest(ledger_id=lid, entry_id=i * 3 + k, master_key=MK,
                              body=pack_entry(lid, i * 3 + k, -1, 0, b"s")) for k in range(3)]
        adds.append(stub.AddEntries.future(iter(reqs), timeout=60))
    reads = [stub.ReadEntries(pb.ReadRangeRequest(ledger_id=lid, first_entry_id=i, last_entry_id=i + 50),
                              timeout=60) for i in range(200)]
    for f in adds:
        r = f.result()
        assert r.status == pb.EOK and r.entries_written == 3, r
    for stream in reads:
        for resp in stream:
            assert_answer(resp)
    lst = call(stub.GetListOfEntriesOfLedger, pb.GetListOfEntriesOfLedgerRequest(ledger_id=lid))
    assert [(x.first, x.last) for x in lst.ranges] == [(0, 599)]
    assert_still_serving(stub)


@FUZZ
@given(i64, i64, i64, i32, i32, i32,
       st.one_of(st.sampled_from(["", "127.0.0.1:1", "a/b:1", "x" * 300, "[::1]:0"]), st.text(max_size=30)),
       st.one_of(st.just(MK), st.binary(max_size=20)))
def test_fuzz_pull_entries(stub, lid, first, last, e, wq, idx, source, key):
    """PullEntries from anything but a registered bookie: refused with a message, never EIO, and the
    bookie keeps serving (it must not connect to an address a caller made up)."""
    req = pb.PullRequest(ledger_id=lid, master_key=key, source_bookie_id=source, first_entry_id=first,
                         last_entry_id=last, ensemble_size=e, write_quorum=wq, bookie_index=idx)
    answers = list(stub.PullEntries(req, timeout=CALL_S))
    assert len(answers) == 1 and answers[0].done and not answers[0].stored_entry_ids, answers
    assert answers[0].status == pb.EBADREQ and answers[0].message, answers[0]
    assert_still_serving(stub)
