"""The replicator's CAS from the metadata version the pass read (issue 29: no re-read before the
write), on a real ZooKeeper: a stale version still loses the race, re-reads, and the guards run again."""

from __future__ import annotations

import pytest

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.plan.targets import FragmentPlan
from autorecovery.roles import replicator as rp
from autorecovery.roles.copy_result import CopyResult
from autorecovery.zk.bridge import ZkClient
from autorecovery.zk.ledgers import LedgerStore, init_cluster
from autorecovery.zk.paths import Paths

pytestmark = pytest.mark.integration
P = Paths("/ledgers")
OLD = ("a:1", "b:1", "c:1")


class _Copier:
    """Every copy complete (nothing read: this test is about the CAS); remembers the size estimates."""

    def __init__(self) -> None:
        self.estimates: list[int | None] = []

    async def copy(self, **kw) -> CopyResult:
        self.estimates.append(kw.get("estimated_bytes"))
        return CopyResult()


def _closed(segments) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, tuple(Segment(f, tuple(e)) for f, e in segments), state=LedgerState.CLOSED,
                          last_entry_id=99, length=400, password=b"pw")


@pytest.fixture
async def store(zk_connect):
    zk = await ZkClient(zk_connect, session_timeout_ms=4000).start()
    await init_cluster(zk, P)
    yield LedgerStore(zk, P)
    await zk.stop()


def _plan(repl: dict[int, str]) -> FragmentPlan:
    return FragmentPlan(streams=(), unsourced=(), replacements=repl)


async def test_cas_from_the_known_version_writes_without_a_read(store):
    v0 = await store.create(1, _closed([(0, OLD)]))
    md0, _ = await store.read(1)
    copier = _Copier()
    reads0 = store.zk.ops
    r = await rp.SegmentReplicator(store, copier).replicate(1, md0, 0, _plan({1: "x:1"}), registered=lambda: OLD,
                                                            version=v0)
    assert r.status == rp.SWAPPED and r.replaced == {"b:1": "x:1"}
    assert store.zk.ops - reads0 == 1  # the CAS alone
    md1, v1 = await store.read(1)
    assert r.version == v1 and md1.segments[0].ensemble == ("a:1", "x:1", "c:1")
    assert copier.estimates == [400]  # a closed ledger's length bounds the copy


async def test_a_stale_known_version_re_reads_and_keeps_the_other_change(store):
    v0 = await store.create(2, _closed([(0, OLD), (50, OLD)]))
    md0, _ = await store.read(2)
    # someone else swaps c:1 of the second segment after the pass read the metadata
    other = md0.with_segment_replaced(50, {"c:1": "y:1"})
    await store.write(2, other, v0)
    r = await rp.SegmentReplicator(store, _Copier()).replicate(2, md0, 0, _plan({1: "x:1"}), registered=lambda: OLD,
                                                               version=v0)
    assert r.status == rp.SWAPPED
    md2, v2 = await store.read(2)
    assert r.version == v2 == v0 + 2
    assert md2.segments[0].ensemble == ("a:1", "x:1", "c:1")
    assert md2.segments[1].ensemble == ("a:1", "b:1", "y:1")  # not overwritten by the stale copy


async def test_a_stale_known_version_sees_the_member_already_replaced(store):
    v0 = await store.create(3, _closed([(0, OLD)]))
    md0, _ = await store.read(3)
    await store.write(3, md0.with_segment_replaced(0, {"b:1": "z:1"}), v0)
    r = await rp.SegmentReplicator(store, _Copier()).replicate(3, md0, 0, _plan({1: "x:1"}), registered=lambda: OLD,
                                                               version=v0)
    assert r.status == rp.UNCHANGED
    md3, _ = await store.read(3)
    assert md3.segments[0].ensemble == ("a:1", "z:1", "c:1")
