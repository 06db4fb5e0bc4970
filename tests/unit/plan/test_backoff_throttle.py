"""Backoff maths, failure memory, token buckets and per-bookie stream caps (pure, fake clock)."""

from __future__ import annotations

import pytest

from autorecovery.plan import entry_runs
from autorecovery.plan.backoff import FailureMemory, lock_release_delay_ms
from autorecovery.plan.entry_runs import Gap, Run
from autorecovery.plan.throttle import StreamCaps, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def test_upstream_default_delays():
    # lockReleaseOfFailedLedgerGracePeriod = 300000 ms: 9375 .. 150000 then the cap forever
    assert [lock_release_delay_ms(300000, n) for n in range(8)] == [
        9375, 18750, 37500, 75000, 150000, 300000, 300000, 300000]


def test_small_grace_matches_upstream_test():
    # testDeferLedgerLockReleaseForReplicationWorker: min(64, 2 * 2^i)
    assert [lock_release_delay_ms(64, i) for i in range(9)] == [min(64, 2 * 2**i) for i in range(9)]


def test_delay_edge_cases():
    assert lock_release_delay_ms(0, 3) == 0
    assert lock_release_delay_ms(10, 0) == 0  # base = 10 // 32
    assert lock_release_delay_ms(10, 7) == 10
    with pytest.raises(ValueError):
        lock_release_delay_ms(64, -1)


def test_failure_memory_counts_and_resets():
    m = FailureMemory(64)
    got = [m.next_release_delay_ms(7) for _ in range(7)]
    assert got == [2, 4, 8, 16, 32, 64, 64]
    assert m.failures(7) == 7
    assert m.delays_for(7) == got
    assert m.next_release_delay_ms(8) == 2  # per ledger
    m.replicated(7)
    assert m.failures(7) == 0
    assert m.next_release_delay_ms(7) == 2


def _gaps(*ids: int) -> list[Gap]:
    return [Gap(Run(e, e)) for e in ids]


def _ids(gaps) -> list[int]:
    return sorted(entry_runs.entry_ids(gaps))


def test_unreadable_entries_memory():
    m = FailureMemory(64)
    assert m.add_unreadable(1, _gaps(5, 3, 9)) == 3
    assert m.add_unreadable(1, _gaps(3, 4)) == 1
    assert _ids(m.unreadable(1)) == [3, 4, 5, 9]
    assert _ids(m.unreadable(1, 4, 5)) == [4, 5]
    m.readable_again(1, _gaps(4, 9))
    assert _ids(m.unreadable(1)) == [3, 5]
    m.replicated(1)
    assert m.unreadable(1) == []


def test_unreadable_memory_of_a_huge_run_is_one_run():
    """A run of 2**62 unreadable entries is remembered as one run, counted exactly (issue 25)."""
    m = FailureMemory(64)
    big = Gap(Run(0, 2**62, 1, 1, 3), {"a:1": "ENOENTRY"})
    assert m.add_unreadable(1, [big]) == big.count() == 2**62 // 3 + 1
    assert m.add_unreadable(1, [big]) == 0
    assert m.unreadable(1, 10, 20) == [Gap(Run(10, 19, 1, 1, 3), {"a:1": "ENOENTRY"})]


def test_failure_memory_is_bounded():
    m = FailureMemory(64, max_ledgers=3)
    for lid in range(5):
        m.add_unreadable(lid, _gaps(1))
        m.next_release_delay_ms(lid)
    assert m.unreadable(0) == [] and _ids(m.unreadable(4)) == [1]
    assert m.failures(1) == 0 and m.failures(4) == 1


def test_token_bucket_paces_bytes_within_rate():
    clock = FakeClock()
    b = TokenBucket(1000.0, clock)  # 1000 bytes/s
    sent = 0
    start = clock()
    for _ in range(100):
        wait = b.reserve(64)
        clock.advance(wait)
        sent += 64
    elapsed = clock() - start
    # 6400 bytes at 1000 B/s; the first reservation is free, so elapsed = 6336/1000
    assert elapsed == pytest.approx((sent - 64) / 1000.0)
    assert sent / elapsed <= 1000.0 * 1.02


def test_token_bucket_first_request_is_free_then_waits():
    clock = FakeClock()
    b = TokenBucket(100.0, clock)
    assert b.reserve(50) == 0.0
    assert b.reserve(10) == pytest.approx(0.5)
    clock.advance(0.5)
    assert b.try_acquire(1) is False  # 10 tokens booked for 0.5..0.6
    clock.advance(0.1)
    assert b.try_acquire(1) is True


def test_token_bucket_idle_credit_is_bounded_by_burst():
    clock = FakeClock()
    b = TokenBucket(100.0, clock, burst_s=1.0)
    clock.advance(100.0)  # a long idle period saves at most 1 s of credit
    assert b.reserve(100) == 0.0
    assert b.reserve(100) == 0.0
    assert b.reserve(100) == pytest.approx(1.0)


def test_token_bucket_unlimited_and_bad_input():
    clock = FakeClock()
    b = TokenBucket(-1, clock)
    assert b.unlimited and b.reserve(10**12) == 0.0 and b.try_acquire(5)
    with pytest.raises(ValueError):
        b.reserve(-1)
    with pytest.raises(ValueError):
        TokenBucket(1, clock, burst_s=-1)


def test_task_rate_limit_half_per_second():
    # zkReplicationTaskRateLimit = 0.5: one acquisition per 2 s
    clock = FakeClock()
    b = TokenBucket(0.5, clock)
    waits = [b.reserve(1) for _ in range(3)]
    assert waits == [0.0, pytest.approx(2.0), pytest.approx(4.0)]


def test_stream_caps_all_or_nothing():
    caps = StreamCaps(max_per_source=1, max_per_target=2)
    assert caps.try_start("s1", ["t1", "t2"])
    assert not caps.try_start("s1", ["t3"])  # source cap
    assert caps.try_start("s2", ["t1"])
    assert not caps.try_start("s3", ["t1", "t4"])  # t1 at its cap: nothing counted
    assert caps.targets["t4"] == 0 and caps.sources["s3"] == 0
    caps.finish("s1", ["t1", "t2"])
    assert caps.try_start("s3", ["t1", "t4"])
    assert caps.source_load("s3") == 1


def test_stream_caps_pick_least_loaded_source():
    caps = StreamCaps(max_per_source=2, max_per_target=0)
    caps.try_start("a", ["x"])
    caps.try_start("a", ["y"])
    caps.try_start("b", ["x"])
    assert caps.pick_source(["a", "b", "c"]) == "c"
    assert caps.pick_source(["a", "b"]) == "b"
    assert caps.pick_source(["a"]) is None
    unlimited = StreamCaps(0, 0)
    for _ in range(100):
        assert unlimited.try_start("a", ["b"])
