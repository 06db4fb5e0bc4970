"""Issue 26: RSS and fd trends of a campaign's processes (pure logic): slope per hour, incarnations,
warm-up and the flat / growing / too short verdicts."""

from __future__ import annotations

import pytest

from autorecovery.testing.chaos.trend import MIN_SPAN_S, WARMUP_S, Trends, slope_per_hour

MIB = 2**20


def test_slope_is_per_hour_and_zero_without_two_times():
    assert slope_per_hour([(0.0, 10.0), (1800.0, 20.0), (3600.0, 30.0)]) == pytest.approx(20.0)
    assert slope_per_hour([(5.0, 1.0)]) == 0.0 and slope_per_hour([(5.0, 1.0), (5.0, 9.0)]) == 0.0


def feed(tr: Trends, name: str, pid: int, t0: float, span_s: float, rss_mib_h: float, fds_h: float = 0.0) -> None:
    for k in range(int(span_s // 5) + 1):
        t = t0 + 5 * k
        tr.add(name, pid, t, int((80 + rss_mib_h * (t - t0) / 3600) * MIB), 22 + int(fds_h * (t - t0) / 3600))


def test_a_long_flat_life_is_flat_and_a_growing_one_is_named():
    tr = Trends()
    feed(tr, "daemon-0", 100, 0.0, 1800, rss_mib_h=2.0)
    feed(tr, "daemon-1", 101, 0.0, 1800, rss_mib_h=40.0)
    feed(tr, "bookie-0", 102, 0.0, 1800, rss_mib_h=0.0, fds_h=30.0)
    s = tr.summaries()
    assert s["daemon-0"]["verdict"] == "flat" and s["daemon-0"]["rss_slope_mib_h"] == pytest.approx(2.0, abs=0.2)
    assert s["daemon-1"]["verdict"] == "growing" and s["bookie-0"]["verdict"] == "growing"
    assert s["daemon-0"]["span_s"] == pytest.approx(1800 - WARMUP_S)
    assert s["daemon-0"]["rss_end"] > s["daemon-0"]["rss_start"]


def test_the_slope_is_taken_over_the_longest_incarnation_after_its_warm_up():
    tr = Trends()
    # a start-up jump inside the warm-up is not growth
    tr.add("bookie-1", 7, 0.0, 20 * MIB, 10)
    feed(tr, "bookie-1", 7, 30.0, 1200, rss_mib_h=0.0)
    # a later, shorter incarnation restarts from scratch; killed twice
    feed(tr, "bookie-1", 8, 2000.0, 300, rss_mib_h=500.0)
    s = tr.summary("bookie-1")
    assert s["incarnations"] == 2 and s["verdict"] == "flat" and s["rss_slope_mib_h"] == pytest.approx(0.0)
    assert s["rss_peak"] > 80 * MIB  # peaks over every incarnation


def test_a_process_restarted_too_often_is_too_short_to_judge():
    tr = Trends()
    for pid in range(5):
        feed(tr, "daemon-2", pid, pid * 400.0, MIN_SPAN_S / 2, rss_mib_h=1000.0)
    assert tr.summary("daemon-2")["verdict"] == "too short"
    with pytest.raises(KeyError):
        tr.summary("daemon-9")
