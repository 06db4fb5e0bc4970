"""The full-jitter backoff schedule, with an injected random source and sleep (pure logic)."""

from __future__ import annotations

import asyncio

import pytest

from autorecovery.retry import Backoff


def test_ceilings_double_up_to_the_cap_and_reset() -> None:
    b = Backoff(0.1, 1.0, rng=lambda: 0.999999)
    got = [round(b.next_delay(), 4) for _ in range(7)]
    assert got == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    b.reset()
    assert round(b.next_delay(), 4) == 0.1


def test_delays_are_the_random_fraction_of_the_ceiling() -> None:
    draws = iter([0.0, 0.5, 0.25])
    b = Backoff(2.0, 30.0, rng=lambda: next(draws))
    assert [b.next_delay() for _ in range(3)] == [0.0, 2.0, 2.0]  # 0*2, .5*4, .25*8


def test_many_attempts_never_exceed_cap() -> None:
    b = Backoff(0.2, 10.0)
    assert all(0.0 <= b.next_delay() <= 10.0 for _ in range(200))


def test_sleep_waits_the_drawn_delay() -> None:
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)

    b = Backoff(1.0, 4.0, rng=lambda: 0.5, sleep=fake_sleep)
    assert asyncio.run(b.sleep()) == 0.5
    asyncio.run(b.sleep())
    assert slept == [0.5, 1.0]


@pytest.mark.parametrize("base,cap", [(0, 1), (2, 1), (-1, 5)])
def test_bad_bounds_are_refused(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match=f"base_s={base} cap_s={cap}"):
        Backoff(base, cap)
