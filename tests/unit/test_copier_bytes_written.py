"""NUM_BYTES_WRITTEN counts what a target acknowledged, not what was queued to it (issue 28: the
dashboard's heal throughput summed failed copies; upstream counts on the add's callback)."""

from __future__ import annotations

import asyncio
import time

import pytest

from autorecovery.errors import BookieError
from autorecovery.ledger.digest import CRC32C
from autorecovery.metrics import OpStats
from autorecovery.plan.targets import FragmentPlan, StreamSpec
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles.copier import FragmentCopier
from autorecovery.roles.copy_result import TargetWriteError
from autorecovery.rpc.results import ReadResult

LEDGER, N, SIZE = 7, 40, 1000


class _Metrics:
    def __init__(self) -> None:
        for name in ("bytes_written", "bytes_read", "read_latency", "write_latency"):
            setattr(self, name, OpStats(name))

    def __getattr__(self, name):  # counters the copier touches and this test does not read
        class _Null:
            def inc(self, *a, **k) -> None: ...
            def record(self, *a, **k) -> None: ...
            def record_many(self, *a, **k) -> None: ...
        return _Null()


class _Bookies:
    """The source serves N entries; the target acknowledges ``ack`` of them, then fails."""

    batch_bytes = 64 * 1024

    def __init__(self, ack: int) -> None:
        self.ack = ack

    async def transport_name(self, bookie: str) -> str:
        return "upstream"  # not asked what it holds: entries are read

    async def pulls(self, target: str, source: str) -> bool:
        return False

    async def read_entry_batches(self, source, ledger_id, first, last, **kw):
        for e in range(first, last + 1):  # one entry per batch: the copier must not depend on batch sizes
            yield [ReadResult(e, CRC32C.pack(ledger_id, e, -1, 0, b"x" * SIZE), -1)]

    async def add_entry_batches(self, target, ledger_id, master_key, batches, *, recovery=True):
        n = nbytes = 0
        async for batch in batches:
            for _eid, body in batch:
                if n == self.ack:
                    err = BookieError(target, "EIO", "disk failed")
                    err.entries_written, err.bytes_written = n, nbytes  # type: ignore[attr-defined]
                    raise err
                n += 1
                nbytes += len(body)
        return n, nbytes


def _copy(bookies: _Bookies, metrics: _Metrics):
    copier = FragmentCopier(bookies, byte_bucket=TokenBucket(0, now=time.monotonic), caps=StreamCaps(0, 0), caps_changed=asyncio.Condition(),
                    metrics=metrics, pull=False)
    spec = StreamSpec(source="b1", source_index=0, first=0, last=N - 1, arc_end=0, arc_len=1, ensemble_size=1,
                      targets=("b2",), alternates=(), entries=N)
    plan = FragmentPlan(streams=(spec,), unsourced=(), replacements={0: "b2"}, entries_to_write=N)
    return copier.copy(ledger_id=LEDGER, master_key=b"k", ensemble=("b1",), write_quorum=1, plan=plan,
                       registered=lambda: {"b1", "b2"})


async def test_only_acknowledged_bytes_count_as_written() -> None:
    m = _Metrics()
    with pytest.raises(TargetWriteError):
        await _copy(_Bookies(ack=10), m)
    body = len(CRC32C.pack(LEDGER, 0, -1, 0, b"x" * SIZE))
    assert m.bytes_written.count(success=True) == 10
    assert m.bytes_written.total(success=True) == 10 * body
    assert m.bytes_written.count(success=False) >= 1  # what was queued and never acknowledged


async def test_a_full_copy_counts_every_entry_once() -> None:
    m = _Metrics()
    res = await _copy(_Bookies(ack=N), m)
    assert res.entries_written == N
    assert m.bytes_written.count(success=True) == N and m.bytes_written.count(success=False) == 0
