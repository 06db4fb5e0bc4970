"""Add floods against a real bookie process, with its peak RSS sampled (test and bench helper, issue 25).

:func:`flood` sends ``count`` concurrent adds of ``size`` bytes each to one bookie over raw gRPC
(``connections`` separate HTTP/2 connections, the adds spread round-robin over them), counts the
answers by status, and reads back every entry that was answered ``EOK``: an add that got ``EOK`` must
be durable, whatever the flood did to its neighbours. :class:`RssSampler` watches the bookie
process' resident set size from a thread while the flood runs.

Used by ``bench/flood.py`` and ``tests/integration/test_bookie_flood.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
import psutil

from autorecovery.ledger.digest import HEADER_SIZE, pack_entry
from autorecovery.proto import bookie_pb2 as pb
from autorecovery.proto import bookie_pb2_grpc as pb_grpc

MK = b"flood"


class RssSampler:
    """Peak resident set size of process ``pid`` (bytes), sampled every ``period_s`` from a thread.

    ``with RssSampler(pid) as s: ...`` then ``s.peak``; ``s.samples`` counts the samples taken.
    """

    def __init__(self, pid: int, period_s: float = 0.005) -> None:
        self.proc = psutil.Process(pid)
        self.period_s = period_s
        self.peak = self.proc.memory_info().rss
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self.proc.memory_info().rss
            except psutil.Error:
                return
            self.peak = max(self.peak, rss)
            self.samples += 1
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def channel(target: str, max_message_bytes: int) -> grpc.aio.Channel:
    """A channel with a connection of its own (a local subchannel pool: channels to one target with the
    same options otherwise share one HTTP/2 connection)."""
    return grpc.aio.insecure_channel(target, options=[
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ])


@dataclass
class FloodResult:
    """Answers of one flood, by status name (``RESOURCE_EXHAUSTED`` etc. for gRPC-level refusals),
    the entry ids answered ``EOK``, and how many of those read back identical (``read_back``)."""

    statuses: Counter = field(default_factory=Counter)
    ok_ids: list[int] = field(default_factory=list)
    read_back: int = 0
    lost: list[int] = field(default_factory=list)
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return self.statuses["EOK"]

    @property
    def busy(self) -> int:
        return self.statuses["ETOOMANYREQUESTS"]


async def flood(target: str, ledger_id: int, count: int, size: int, *, connections: int = 1,
                stream: bool = False, timeout_s: float = 120.0) -> FloodResult:
    """``count`` concurrent adds of ``size``-byte entry bodies to ledger ``ledger_id`` on bookie ``target``
    (``host:port``), then a read of every add answered ``EOK``.

    ``stream=False``: one unary ``AddEntry`` per entry. ``stream=True``: one ``AddEntries`` stream per
    entry (a stream's first message is held until admission has room: the flow-control path).
    """
    payloads: dict[int, bytes] = {}
    plen = max(size - HEADER_SIZE, 0)

    def body(e: int) -> bytes:
        payload = payloads.setdefault(e % 251, bytes([e % 251]) * plen)
        return pack_entry(ledger_id, e, -1, plen, payload)

    msg_max = size + 2 * 1024 * 1024
    chans = [channel(target, msg_max) for _ in range(connections)]
    stubs = [pb_grpc.BookieStub(c) for c in chans]
    res = FloodResult()

    async def one(e: int) -> None:
        stub = stubs[e % connections]
        req = pb.AddRequest(ledger_id=ledger_id, entry_id=e, master_key=MK, body=body(e))
        try:
            if stream:
                r = await stub.AddEntries(iter([req]), timeout=timeout_s)
                ok = r.status == pb.EOK and r.entries_written == 1
                status = r.status
            else:
                r = await stub.AddEntry(req, timeout=timeout_s)
                ok, status = r.status == pb.EOK, r.status
        except grpc.aio.AioRpcError as exc:
            res.statuses[exc.code().name] += 1
            res.errors.setdefault(exc.code().name, exc.details() or "")
            return
        res.statuses[pb.StatusCode.Name(status)] += 1
        if ok:
            res.ok_ids.append(e)

    t0 = time.monotonic()
    try:
        await asyncio.gather(*(one(e) for e in range(count)))
        res.seconds = time.monotonic() - t0
        for e in sorted(res.ok_ids):
            got = await stubs[0].ReadEntry(pb.ReadRequest(ledger_id=ledger_id, entry_id=e), timeout=timeout_s)
            if got.status == pb.EOK and got.body == body(e):
                res.read_back += 1
            else:
                res.lost.append(e)
    finally:
        for c in chans:
            await c.close()
    return res
