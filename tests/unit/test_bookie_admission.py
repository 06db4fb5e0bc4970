"""Bookie back-pressure bookkeeping (issue 15): counts, byte budget, waiting streams (no servers)."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.bookie.admission import Admission, AdmissionLimits


def test_count_and_byte_limits_reject_and_release() -> None:
    a = Admission(AdmissionLimits(max_adds=2, max_add_bytes=100, max_reads=1))
    assert a.try_add(60) and not a.try_add(60)  # bytes: 120 > 100 with one in progress
    assert a.try_add(40) and not a.try_add(1)  # count: 2 in progress
    assert a.rejected_adds == 2 and (a.adds, a.add_bytes) == (2, 100)
    a.release_add(60)
    a.release_add(40)
    assert (a.adds, a.add_bytes) == (0, 0)
    # an entry bigger than the whole budget still goes through alone: never refused forever
    assert a.try_add(1000)
    a.release_add(1000)
    assert a.try_read() and not a.try_read() and a.rejected_reads == 1
    a.release_read()
    assert a.try_read()
    assert "maxAddsInProgressLimit=2" in a.describe_adds() and "maxReadsInProgressLimit=1" in a.describe_reads()


def test_zero_means_unlimited() -> None:
    a = Admission(AdmissionLimits(max_adds=0, max_add_bytes=0, max_reads=0))
    assert all(a.try_add(10**9) for _ in range(1000)) and all(a.try_read() for _ in range(1000))


def test_bad_limits_name_the_field() -> None:
    with pytest.raises(ValueError, match="max_adds"):
        AdmissionLimits(max_adds=-1)


async def test_a_stream_waits_for_room_then_gives_up() -> None:
    a = Admission(AdmissionLimits(max_adds=1, max_add_bytes=0, max_reads=0, stream_wait_s=5.0))
    assert a.try_add(10)
    waiter = asyncio.ensure_future(a.wait_add(10))
    done, _ = await asyncio.wait({waiter}, timeout=0.2)  # it stays blocked while the budget is full
    assert not done
    a.release_add(10)
    assert await asyncio.wait_for(waiter, 5.0) is True and a.adds == 1
    quick = Admission(AdmissionLimits(max_adds=1, stream_wait_s=0.05))
    assert quick.try_add(1)
    assert await quick.wait_add(1) is False and quick.rejected_adds == 1


def test_a_group_of_adds_counts_as_its_entries() -> None:
    a = Admission(AdmissionLimits(max_adds=10, max_add_bytes=1000, max_reads=0))
    assert a.try_add(300, count=6) and (a.adds, a.add_bytes) == (6, 300)
    assert not a.try_add(100, count=5)  # 11 entries > 10
    assert a.try_add(100, count=4) and a.adds == 10
    a.release_add(300, count=6)
    a.release_add(100, count=4)
    assert (a.adds, a.add_bytes) == (0, 0)
    # a group larger than the whole limit goes through alone: never refused forever
    assert a.try_add(50, count=25)
    assert not a.try_add(1)
    a.release_add(50, count=25)


async def test_receive_slots_refuse_unary_and_make_streams_wait() -> None:
    """Issue 25: request messages are read only under a slot; a unary call without one is refused at
    once, a stream waits for one (then gives up)."""
    a = Admission(AdmissionLimits(max_receiving=1, stream_wait_s=5.0))
    assert a.try_receive() and not a.try_receive() and a.rejected_receives == 1
    waiter = asyncio.ensure_future(a.wait_receive())
    done, _ = await asyncio.wait({waiter}, timeout=0.2)
    assert not done  # blocked while the only slot is held
    a.release_receive()
    assert await asyncio.wait_for(waiter, 5.0) is True and a.receiving == 1
    quick = Admission(AdmissionLimits(max_receiving=1, stream_wait_s=0.05))
    assert quick.try_receive()
    assert await quick.wait_receive() is False and quick.rejected_receives == 1
    assert "limit max receiving=1" in quick.describe_receiving()
    with pytest.raises(ValueError, match="max_receiving"):
        AdmissionLimits(max_receiving=-1)


def test_memory_bound_is_the_documented_formula() -> None:
    from autorecovery.bookie.admission import ALLOCATOR_SLACK_BYTES, BODY_COPIES, memory_bound

    mib = 1024 * 1024
    lim = AdmissionLimits(max_add_bytes=32 * mib, max_receiving=4)
    assert memory_bound(50 * mib, 6 * mib, lim) == 50 * mib + BODY_COPIES * (4 * 6 + 32 + 6) * mib + ALLOCATOR_SLACK_BYTES
    assert memory_bound(0, 6 * mib, AdmissionLimits(max_receiving=0)) is None  # unlimited: no bound


async def test_streams_leave_a_quarter_of_the_slots_to_unary_calls() -> None:
    """Open add streams hold their slots while idle: they never take the last quarter, so reads and
    other unary calls are still served while many add streams are open."""
    a = Admission(AdmissionLimits(max_receiving=8, stream_wait_s=0.05))
    for _ in range(6):
        assert await a.wait_receive()
    assert await a.wait_receive() is False  # a 7th stream waits, then is refused
    assert a.try_receive() and a.try_receive()  # unary calls get the last two
    assert not a.try_receive() and a.receiving == 8
