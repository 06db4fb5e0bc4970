"""The adaptive throttle's decisions (autorecovery.plan.adaptive_rate), on hand-computed sequences."""

from __future__ import annotations

import pytest

from autorecovery.plan.adaptive_rate import FLOOR, IDLE, RECOVERING, SLOW, AdaptiveRates, AdaptiveSettings

MIB = 1024 * 1024
S = AdaptiveSettings(budget_factor=2.0, floor_bytes_per_s=1 * MIB, increase_bytes_per_s=2 * MIB, decrease=0.5,
                     interval_s=1.0, baseline_drift=0.0, patience=1)


def interval(r: AdaptiveRates, t0: float, latency_s: float, nbytes: int, bookie: str = "b1:3181") -> float | None:
    """Ten samples of ``latency_s`` carrying ``nbytes`` in all over [t0, t0 + 1), then the decision at t0 + 1."""
    for i in range(10):
        r.observe(bookie, latency_s, nbytes // 10 + (nbytes % 10 if i == 0 else 0), t0 + i * 0.1)
    return r.limit(bookie, t0 + 1.0)


def test_idle_bookie_is_never_limited_and_its_baseline_is_the_lowest_median():
    r = AdaptiveRates(S)
    assert r.limit("b1:3181", 0.0) is None  # nothing measured: no limit
    assert interval(r, 0.0, 0.004, 40 * MIB) is None
    assert interval(r, 1.0, 0.003, 40 * MIB) is None
    assert interval(r, 2.0, 0.005, 40 * MIB) is None  # 5 ms <= 2 x 3 ms
    snap = r.snapshot()["b1:3181"]
    assert snap["reason"] == IDLE and snap["baseline_ms"] == 3.0 and snap["latency_ms"] == 5.0


def test_slow_bookie_halves_from_the_rate_it_moved_then_halves_the_limit_down_to_the_floor():
    r = AdaptiveRates(S)
    interval(r, 0.0, 0.002, 40 * MIB)  # baseline 2 ms, budget 4 ms
    # over budget: the interval moved 40 MiB in 1 s (the first sample at t=1.0, the decision at 2.0)
    assert interval(r, 1.0, 0.010, 40 * MIB) == 20 * MIB
    assert r.snapshot()["b1:3181"]["reason"] == SLOW
    # the copy now moves less than its limit: the cut is from what it moved (8 MiB/s -> 4 MiB/s)
    assert interval(r, 2.0, 0.010, 8 * MIB) == 4 * MIB
    assert interval(r, 3.0, 0.010, 4 * MIB) == 2 * MIB
    assert interval(r, 4.0, 0.010, 2 * MIB) == 1 * MIB  # the floor
    assert interval(r, 5.0, 0.010, 1 * MIB) == 1 * MIB  # never below it
    assert r.snapshot()["b1:3181"]["reason"] == FLOOR
    assert "over the budget 4.0 ms" in str(r.snapshot()["b1:3181"]["detail"])


def test_recovery_is_additive_and_the_limit_is_lifted_above_the_peak_rate():
    r = AdaptiveRates(S)
    interval(r, 0.0, 0.002, 6 * MIB)  # peak 6 MiB/s
    assert interval(r, 1.0, 0.010, 4 * MIB) == 2 * MIB  # slow: 4 MiB/s moved -> 2 MiB/s
    assert interval(r, 2.0, 0.002, 2 * MIB) == 4 * MIB  # within budget: +2 MiB/s
    assert r.snapshot()["b1:3181"]["reason"] == RECOVERING
    assert interval(r, 3.0, 0.002, 4 * MIB) == 6 * MIB  # 6 <= peak 6: still limited
    assert interval(r, 4.0, 0.002, 6 * MIB) is None  # 8 > peak 6 MiB/s: lifted
    assert r.snapshot()["b1:3181"]["reason"] == IDLE


def test_an_interval_without_samples_changes_nothing_and_bookies_are_independent():
    r = AdaptiveRates(S)
    interval(r, 0.0, 0.002, 10 * MIB)
    assert interval(r, 1.0, 0.010, 10 * MIB) == 5 * MIB
    assert r.limit("b1:3181", 100.0) == 5 * MIB  # silence: no evidence, no change
    assert interval(r, 0.0, 0.010, 10 * MIB, bookie="b2:3181") is None  # its own first interval: its baseline
    assert r.snapshot()["b2:3181"]["baseline_ms"] == 10.0


def test_the_baseline_drifts_up_so_an_old_quiet_minimum_does_not_hold_for_ever():
    r = AdaptiveRates(AdaptiveSettings(budget_factor=2.0, interval_s=1.0, baseline_drift=0.5))
    interval(r, 0.0, 0.002, MIB)
    interval(r, 1.0, 0.0035, MIB)  # min(2 x 1.5, 3.5) = 3 ms
    assert r.snapshot()["b1:3181"]["baseline_ms"] == 3.0
    interval(r, 2.0, 0.0050, MIB)  # min(4.5, 5) = 4.5 ms
    assert r.snapshot()["b1:3181"]["baseline_ms"] == 4.5


def test_disabled_never_limits():
    r = AdaptiveRates(AdaptiveSettings(enabled=False))
    assert interval(r, 0.0, 0.002, MIB) is None and interval(r, 1.0, 1.0, MIB) is None
    assert r.snapshot() == {}


@pytest.mark.parametrize("kw, word", [({"budget_factor": 1.0}, "budget_factor"),
                                      ({"floor_bytes_per_s": 0}, "floor_bytes_per_s"),
                                      ({"decrease": 1.0}, "decrease")])
def test_bad_settings_name_the_offending_field(kw, word):
    with pytest.raises(ValueError, match=word):
        AdaptiveSettings(**kw)


def test_bytes_without_a_latency_count_towards_the_rate_but_decide_nothing():
    r = AdaptiveRates(S)
    interval(r, 0.0, 0.002, MIB)
    r.observe("b1:3181", -1.0, 30 * MIB, 1.0)  # answers found waiting: bytes only
    assert r.limit("b1:3181", 2.0) is None and r.bookies["b1:3181"].decisions == 1  # no sample: no decision
    r.observe("b1:3181", 0.010, 10 * MIB, 2.5)  # over budget; 40 MiB over the 2 s since t=1.0
    assert r.limit("b1:3181", 3.0) == 10 * MIB


def test_patience_cuts_only_after_that_many_slow_intervals_in_a_row():
    r = AdaptiveRates(AdaptiveSettings(budget_factor=2.0, floor_bytes_per_s=MIB, decrease=0.5, interval_s=1.0,
                                       baseline_drift=0.0, patience=2))
    interval(r, 0.0, 0.002, 8 * MIB)
    assert interval(r, 1.0, 0.010, 8 * MIB) is None  # one slow interval (a GC pause, an fsync): no cut
    assert interval(r, 2.0, 0.002, 8 * MIB) is None  # and the count starts again
    assert interval(r, 3.0, 0.010, 8 * MIB) is None
    assert interval(r, 4.0, 0.010, 8 * MIB) == 4 * MIB  # the second in a row: cut


def test_the_signal_is_a_quantile_weighted_by_entries():
    from autorecovery.plan.adaptive_rate import weighted_quantile

    assert weighted_quantile([(0.001, 90), (0.4, 10)], 0.9) == 0.001
    assert weighted_quantile([(0.001, 89), (0.4, 11)], 0.9) == 0.4  # a frozen window: 11% of the entries late
    assert weighted_quantile([(0.003, 1), (0.001, 1), (0.002, 1)], 0.5) == 0.002
    r = AdaptiveRates(AdaptiveSettings(budget_factor=2.0, interval_s=1.0, patience=1, quantile=0.9,
                                       floor_bytes_per_s=MIB // 4))
    r.observe("b", 0.001, MIB, 0.0, entries=100)
    assert r.limit("b", 1.0) is None
    r.observe("b", 0.001, MIB, 1.0, entries=80)
    r.observe("b", 0.400, MIB, 1.5, entries=20)  # one late group carrying a fifth of the entries
    assert r.limit("b", 2.0) == MIB and r.snapshot()["b"]["reason"] == SLOW  # half the 2 MiB/s it moved


def test_the_progress_document_lists_each_bookies_limit_and_why():
    from autorecovery.plan.progress import Progress

    r = AdaptiveRates(S)
    interval(r, 0.0, 0.002, 40 * MIB)
    interval(r, 1.0, 0.010, 40 * MIB)
    p = Progress(ledgers_remaining=1, ledgers_in_progress=1, ledgers_done=0, bytes_remaining=1, bytes_copied=0,
                 rate_bytes_per_s=0.0, eta_s=None, rate_limits=r.snapshot())
    got = p.as_dict()["worker"]["rate_limits"]["b1:3181"]
    assert got["limit_bytes_per_s"] == 20 * MIB and got["reason"] == SLOW and got["baseline_ms"] == 2.0
    assert "over the budget 4.0 ms" in got["detail"]
