"""Small copies take no cluster-wide stream slots (issue 29: two ZooKeeper ``multi`` and their listing
reads cost more than copying a small ledger); larger or unsized copies do, and the per-process caps
bound both."""

from __future__ import annotations

import asyncio
import time

import pytest

from autorecovery.ledger.digest import CRC32C
from autorecovery.plan.targets import FragmentPlan, StreamSpec
from autorecovery.plan.throttle import StreamCaps, TokenBucket
from autorecovery.roles.copier import SLOTLESS_COPY_BYTES, FragmentCopier
from autorecovery.rpc.results import ReadResult

LEDGER, N, SIZE = 7, 4, 100


class _Bookies:
    batch_bytes = 64 * 1024

    def __init__(self) -> None:
        self.written = 0

    async def transport_name(self, bookie: str) -> str:
        return "upstream"

    async def pulls(self, target: str, source: str) -> bool:
        return False

    async def read_entry_batches(self, source, ledger_id, first, last, **kw):
        for e in range(first, last + 1):  # one entry per batch: the copier must not depend on batch sizes
            yield [ReadResult(e, CRC32C.pack(ledger_id, e, -1, 0, b"x" * SIZE), -1)]

    async def add_entry_batches(self, target, ledger_id, master_key, batches, *, recovery=True):
        n = nbytes = 0
        async for batch in batches:
            for _eid, body in batch:
                n += 1
                nbytes += len(body)
        self.written += n
        return n, nbytes


class _Slots:
    """Records the cluster-wide slot takes (a stand-in for ClusterStreamSlots)."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, tuple[str, ...]]] = []
        self.released = 0

    async def acquire(self, source, targets):
        self.taken.append((source, tuple(targets)))
        return [f"{source}/src-0"]

    async def release(self, held):
        self.released += 1


async def _copy(estimated: int | None) -> tuple[_Slots, _Bookies, StreamCaps]:
    slots, bookies = _Slots(), _Bookies()
    caps = StreamCaps(1, 1)
    copier = FragmentCopier(bookies, byte_bucket=TokenBucket(0, now=time.monotonic), caps=caps,
                            caps_changed=asyncio.Condition(), pull=False, cluster_slots=slots)
    spec = StreamSpec(source="b1", source_index=0, first=0, last=N - 1, arc_end=0, arc_len=1, ensemble_size=1,
                      targets=("b2",), alternates=(), entries=N)
    plan = FragmentPlan(streams=(spec,), unsourced=(), replacements={0: "b2"}, entries_to_write=N)
    res = await copier.copy(ledger_id=LEDGER, master_key=b"k", ensemble=("b1",), write_quorum=1, plan=plan,
                            registered=lambda: {"b1", "b2"}, estimated_bytes=estimated)
    assert res.complete
    return slots, bookies, caps


@pytest.mark.parametrize("estimated", [0, N * SIZE, SLOTLESS_COPY_BYTES])
async def test_a_small_copy_takes_no_cluster_slot(estimated: int) -> None:
    slots, bookies, caps = await _copy(estimated)
    assert slots.taken == [] and slots.released == 0
    assert bookies.written == N
    assert caps.sources == {} or not any(caps.sources.values())  # the per-process slot was given back


@pytest.mark.parametrize("estimated", [None, SLOTLESS_COPY_BYTES + 1, -1])
async def test_a_large_or_unsized_copy_takes_the_cluster_slots(estimated: int | None) -> None:
    slots, bookies, _ = await _copy(estimated)
    assert slots.taken == [("b1", ("b2",))] and slots.released == 1
    assert bookies.written == N
