"""Issue 15 "bad input": hypothesis fuzzing of every gRPC handler of the reference bookie.

A real in-process :class:`BookieServer` (real ZooKeeper, real gRPC, real storage) runs on its own event
loop thread; the tests talk to it over raw gRPC stubs and send what our client never sends: negative and
extreme ledger/entry ids (±2^63), short, oversized and foreign bodies, wrong master keys, inverted and
huge ranges, absurd striping, unknown ledgers, many concurrent streams.

Every answer must be a protocol status of bookie.proto (a non-EOK one with a message) — never a gRPC
error other than the transport's own size limit, never a hang (every call has a deadline) — and after
each example the bookie must still take a normal add and read it back.
Time-bounded for CI: ``deadline=None``, ``max_examples`` 50 (``FUZZ_EXAMPLES_GRPC`` raises it).

Issue 25 adds ``test_fuzz_method_from_descriptor``: every method of the service descriptor (a new one
included, without editing this file) against a bookie *process*, with requests generated from the
message descriptors, raw bytes that do not parse, and zero or two messages on unary calls; seeded
(``FUZZ_SEED``, default 25), ``FUZZ_EXAMPLES_GRPC_METHOD`` examples per method (default 25); the whole
file runs in about 20 s on the 2-core test VM.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.protobuf import message
from hypothesis import HealthCheck, event, given, seed, settings
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
#: answers a range read test reads before it cancels the call (a valid range may hold up to the bookie's
#: max_range_entries ids, one answer each: bounded by the range, and not worth reading to its end)
READ_AT_MOST = 20_000
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

    def start(self) -> _BookieThread:
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
    # ENOLEDGER/ENOENTRY on reads are normal answers; every other failure says why
    if resp.status not in (pb.EOK, pb.ENOENTRY, pb.ENOLEDGER) and hasattr(resp, "message"):
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
    ids = max(1, last - first + 1)  # a refused range is one answer
    n = 0
    answers = stub.ReadEntries(req, timeout=CALL_S)
    for n, resp in enumerate(answers, 1):
        assert_answer(resp)
        assert n <= ids, f"unbounded range answer: {n} answers for {ids} ids"
        if n == READ_AT_MOST:  # a valid range of up to max_range_entries ids: the rest is not read
            answers.cancel()
            break
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


# -- every method of the service descriptor, against a bookie process (issue 25) -----------------------
#
# Requests are generated from the message descriptors (one strategy per field type, sharpened by field
# name where the bookie gives a field meaning: ids, keys, bodies, bookie ids, flags), so a method or a
# field added to bookie.proto is fuzzed without editing this file. Besides well-formed messages, each
# method also gets raw bytes that do not parse, and zero or two messages on a "unary" call. The bookie
# is a real process; every answer must be a documented status (never a gRPC error but the transport's
# own size limit), and after each example the process is alive and serves a normal add and read.

SERVICE = pb.DESCRIPTOR.services_by_name["Bookie"]
METHODS = sorted(SERVICE.methods_by_name)
PER_METHOD = int(os.environ.get("FUZZ_EXAMPLES_GRPC_METHOD", "25"))
SEED = int(os.environ.get("FUZZ_SEED", "25"))
#: answers read from one streaming call at most (a valid range may have 1,000,000 ids)
MAX_STREAM_ANSWERS = 2000
PROC_MAX_ENTRY = 64 * 1024

_u32 = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 8, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
_u64 = st.one_of(st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
_ids = st.one_of(st.integers(0, 5), st.integers(0, 5), i64)
_keys = st.one_of(st.just(MK), st.just(MK), st.just(b""), st.binary(max_size=24), st.just(b"k" * 1025))
_bits = st.one_of(st.sampled_from([0, 1]), st.sampled_from([0, 1]), st.sampled_from([0, 1, 2, 3, 2**31]), _u32)
_bookie_ids = st.one_of(
    st.sampled_from(["", "127.0.0.1:1", "a/b:1", "x" * 300, "[::1]:0", "127.0.0.1:99999", "host\x00:1",
                     "bk\n1:3181", "\x7f:1", "b:3181", "127.0.0.1:3181"]),
    st.text(max_size=40))
_strings = st.one_of(st.text(max_size=40), st.sampled_from(["\x00", "\x01\x02", "x" * 5000]))


def _scalar(f) -> st.SearchStrategy:
    """A strategy for one value of scalar field ``f`` (by name where it means something, else by type)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    name = f.name
    if name == "master_key":
        return _keys
    if name == "source_bookie_id" or name.endswith("bookie_id"):
        return _bookie_ids
    if f.type == F.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in f.enum_type.values]), st.integers(-(2**31), 2**31 - 1))
    if f.type in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64):
        return _ids if name.endswith("_id") else i64
    if f.type in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return i32
    if f.type in (F.TYPE_UINT32, F.TYPE_FIXED32, F.TYPE_UINT64) and name in ("flags", "requested"):
        return _bits
    if f.type in (F.TYPE_UINT32, F.TYPE_FIXED32):
        return _u32
    if f.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return _u64
    if f.type == F.TYPE_BOOL:
        return st.booleans()
    if f.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, width=32 if f.type == F.TYPE_FLOAT else 64)
    if f.type == F.TYPE_STRING:
        return _strings
    if f.type == F.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\0" * (PROC_MAX_ENTRY + 1)]))
    raise AssertionError(f"no strategy for field {f.full_name} of type {f.type}")


@st.composite
def messages(draw, desc, depth: int = 0):
    """A message of descriptor ``desc`` with any subset of its fields set (a ``body`` field is often a
    well-formed entry of the message's own ledger and entry ids)."""
    cls = getattr(pb, desc.name)
    kw = {}
    for f in desc.fields:
        if not draw(st.integers(0, 3)):  # a field is set 3 times in 4
            continue
        if f.message_type is not None:
            if depth >= 2:
                continue
            sub = messages(f.message_type, depth + 1)
            kw[f.name] = draw(st.lists(sub, max_size=4)) if f.is_repeated else draw(sub)
        elif f.name == "body" and not f.is_repeated:
            continue  # below, once the ids are known
        else:
            kw[f.name] = draw(st.lists(_scalar(f), max_size=4)) if f.is_repeated else draw(_scalar(f))
    if "body" in desc.fields_by_name and draw(st.integers(0, 5)):
        lid, eid = kw.get("ledger_id", 0), kw.get("entry_id", 0)
        lid, eid = lid & (2**63 - 1), eid & (2**63 - 1)
        valid = st.just(pack_entry(lid, eid, eid - 1, 0, b"fuzz"))
        kw["body"] = draw(st.one_of(valid, valid, bodies(lid, eid)))
    return cls(**kw)


def _requests(method):
    """What a client may send on ``method``: (kind, payload). kind "msgs": serialized messages (one for a
    unary call, though sometimes zero or two); "raw": bytes that may not parse."""
    one = messages(method.input_type)
    n = st.integers(0, 4) if method.client_streaming else st.sampled_from([1, 1, 1, 1, 0, 2])
    msgs = n.flatmap(lambda k: st.lists(one, min_size=k, max_size=k)).map(
        lambda ms: ("msgs", [m.SerializeToString() for m in ms]))
    raw = st.lists(st.one_of(st.binary(max_size=64), st.just(b"\xff" * 11), st.just(b"\x0a\xff\xff\xff\xff\x0f")),
                   min_size=1, max_size=2).map(lambda bs: ("raw", bs))
    return st.one_of(msgs, msgs, msgs, raw)


#: (method, status name) -> answers seen by the descriptor-driven fuzzing (printed with ``-s``)
SEEN: Counter = Counter()


def _check_answer(method, resp) -> None:
    """A documented status (EIO never: the disk is healthy); a message with every failure that has a field for it."""
    entries = resp.entries if method.output_type.name == "ReadBatch" else [resp]
    for r in entries:
        assert r.status in STATUSES, f"{method.name}: undocumented status {r.status}: {r}"
        assert r.status != pb.EIO, f"{method.name}: EIO (an unexpected error inside the bookie): {r}"
        if r.status not in (pb.EOK, pb.ENOENTRY, pb.ENOLEDGER) and "message" in r.DESCRIPTOR.fields_by_name:
            assert r.message, f"{method.name}: {pb.StatusCode.Name(r.status)} without a message: {r}"
        SEEN[(method.name, pb.StatusCode.Name(r.status))] += 1
        if os.environ.get("FUZZ_DEBUG"):
            print(method.name, pb.StatusCode.Name(r.status), getattr(r, "message", "")[:150])


def call_raw(channel, method, payloads: list[bytes]) -> int:
    """Send ``payloads`` (serialized requests) on ``method`` as a stream (the wire form of every kind of
    call), check every answer; returns how many answers came. Only the transport's size refusal is an
    acceptable gRPC error."""
    out_cls = getattr(pb, method.output_type.name)
    path = f"/{SERVICE.full_name}/{method.name}"
    def ident(b):
        return b

    n = 0
    try:
        if method.server_streaming:
            call = channel.stream_stream(path, request_serializer=ident, response_deserializer=out_cls.FromString)(
                iter(payloads), timeout=CALL_S)
            try:
                for resp in call:
                    _check_answer(method, resp)
                    n += 1
                    if n >= MAX_STREAM_ANSWERS:
                        break
            finally:
                call.cancel()
        else:
            resp = channel.stream_unary(path, request_serializer=ident, response_deserializer=out_cls.FromString)(
                iter(payloads), timeout=CALL_S)
            _check_answer(method, resp)
            n = 1
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.CANCELLED and n >= MAX_STREAM_ANSWERS:
            return n  # we cancelled it
        assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"{method.name}: {exc.code()}: {exc.details()}"
    return n


@pytest.fixture(scope="module")
def bookie_proc(zk_server, tmp_path_factory):
    """A bookie process (small entries, short idle timeout) and a channel to it."""
    from autorecovery.testing.bookie_proc import BookieProcess

    d = tmp_path_factory.mktemp("fuzz-bookie-proc")
    cluster = asyncio.run(format_test_cluster(zk_server.connect_string))
    proc = BookieProcess(["--zk", cluster, "--port", "0", "--data-dir", str(d / "data"), "--max-entry-size",
                          str(PROC_MAX_ENTRY), "--stream-idle-timeout-ms", "5000", "--shutdown-grace-ms", "1000"],
                         d / "bookie.log")
    try:
        bid = proc.wait_ready()
        channel = grpc.insecure_channel(bid, options=[("grpc.max_send_message_length", 4 * PROC_MAX_ENTRY),
                                                      ("grpc.max_receive_message_length", 64 << 20)])
        yield proc, channel
        channel.close()
    finally:
        proc.stop()
    assert proc.proc.returncode == 0, proc.log_tail()


@pytest.mark.parametrize("name", METHODS)
def test_fuzz_method_from_descriptor(bookie_proc, name):
    proc, channel = bookie_proc
    method = SERVICE.methods_by_name[name]
    stub = pb_grpc.BookieStub(channel)

    @settings(max_examples=PER_METHOD, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @seed(SEED)
    @given(_requests(method))
    def run(req):
        _kind, payloads = req
        call_raw(channel, method, payloads)
        assert proc.proc.poll() is None, f"the bookie exited: {proc.log_tail()}"
        assert_still_serving(stub)

    run()
    reached = {s: n for (m, s), n in SEEN.items() if m == name}
    print(f"{name}: {reached}")
    assert reached, f"{name}: no answer reached in {PER_METHOD} examples"


def test_bad_fields_are_ebadreq_naming_the_field(bookie_proc):
    """Issue 25, item by item: every one of these used to be an unhandled error, a gRPC error, or
    accepted; each is EBADREQ with the field named."""
    _proc, channel = bookie_proc
    stub = pb_grpc.BookieStub(channel)
    cases = [
        (stub.PullEntries, pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="bk\x00:3181", last_entry_id=1),
         "source_bookie_id"),
        (stub.PullEntries, pb.PullRequest(ledger_id=1, master_key=MK, source_bookie_id="x" * 5000, last_entry_id=1),
         "source_bookie_id"),
        (stub.PullEntries, pb.PullRequest(ledger_id=1, source_bookie_id="127.0.0.1:1", last_entry_id=1), "master_key"),
        (stub.AddEntry, pb.AddRequest(ledger_id=1, entry_id=0, master_key=b"", body=pack_entry(1, 0, -1, 0, b"")),
         "master_key"),
        (stub.AddEntry, pb.AddRequest(ledger_id=1, entry_id=0, master_key=b"k" * 2000,
                                      body=pack_entry(1, 0, -1, 0, b"")), "master_key"),
        (stub.AddEntry, pb.AddRequest(ledger_id=1, entry_id=0, master_key=MK, flags=6,
                                      body=pack_entry(1, 0, -1, 0, b"")), "flags"),
        (stub.ReadEntry, pb.ReadRequest(ledger_id=1, entry_id=-2), "entry_id"),
        (stub.ReadEntry, pb.ReadRequest(ledger_id=1, entry_id=0, flags=pb.FENCE_LEDGER), "master_key"),
        (stub.ReadEntry, pb.ReadRequest(ledger_id=1, entry_id=0, flags=8), "flags"),
        (stub.ReadLac, pb.ReadLacRequest(ledger_id=-1), "ledger_id"),
        (stub.GetListOfEntriesOfLedger, pb.GetListOfEntriesOfLedgerRequest(ledger_id=-(2**63)), "ledger_id"),
        (stub.GetBookieInfo, pb.GetBookieInfoRequest(requested=2**40), "requested"),
        (stub.ReadEntries, pb.ReadRangeRequest(ledger_id=1, max_batch_bytes=-1), "max_batch_bytes"),
    ]
    for fn, req, field_name in cases:
        got = fn(req, timeout=CALL_S)
        answers = [got] if isinstance(got, message.Message) else list(got)
        assert len(answers) == 1, answers
        a = answers[0]
        assert a.status == pb.EBADREQ and field_name in a.message, (req, a)
    # a message that does not parse, and a "unary" call without a message
    add = SERVICE.methods_by_name["AddEntry"]
    assert call_raw(channel, add, [b"\x0a\xff\xff\xff\xff\x0f"]) == 1
    raw = channel.stream_unary(f"/{SERVICE.full_name}/ReadLac", request_serializer=lambda b: b,
                               response_deserializer=pb.ReadLacResponse.FromString)
    none = raw(iter([]), timeout=CALL_S)
    assert none.status == pb.EBADREQ and "no request message" in none.message
    bad = raw(iter([b"\xff\xff"]), timeout=CALL_S)
    assert bad.status == pb.EBADREQ and "not a valid ReadLacRequest" in bad.message
    # 70,000 empty entries in 140 KB: refused before they are parsed into objects
    batches = channel.stream_unary(f"/{SERVICE.full_name}/AddEntryBatches", request_serializer=lambda b: b,
                                   response_deserializer=pb.AddEntriesResponse.FromString)
    many = batches(iter([b"\x0a\x00" * 70_000]), timeout=CALL_S)
    assert many.status == pb.EBADREQ and "more than 65536 entries" in many.message, many
    # a small-request method's message over 64 KiB
    big = raw(iter([pb.ReadLacRequest(ledger_id=1).SerializeToString() + b"\x12\x80\x80\x05" + b"x" * 81920]),
              timeout=CALL_S)
    assert big.status == pb.EBADREQ and "more than 65536" in big.message, big
    assert_still_serving(stub)
