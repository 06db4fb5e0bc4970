"""The demo's progress line and step times (issue 28), pure parts: the line is summed from the daemons'
own progress documents relative to the step's start, and a step's seconds run from its own start."""

from __future__ import annotations

import time

from autorecovery.cli.demo import Table
from autorecovery.cli.demo_progress import HealSample, summarize


def doc(done: int, copied: int, left: int = 0, left_bytes: int = 0, rate: float = 0.0, eta=None, blocked: int = 0):
    return {"worker": {"ledgers_done": done, "bytes_copied": copied},
            "cluster": {"ledgers_remaining": left, "bytes_remaining": left_bytes, "rate_bytes_per_s": rate,
                        "eta_s": eta, "ledgers_blocked": blocked}}


def test_counters_are_summed_relative_to_the_step_start():
    baseline = {0: (5, 1_000_000), 1: (2, 500_000)}
    s = summarize({0: doc(9, 3_000_000, left=2, left_bytes=400_000, rate=2e6, eta=0.2),
                   1: doc(4, 1_500_000, left=1, left_bytes=100_000, rate=1.5e6, eta=0.1),
                   2: doc(1, 250_000)},  # started after the watch: counts from 0
                  baseline)
    assert (s.healed, s.copied_bytes) == (4 + 2 + 1, 2_000_000 + 1_000_000 + 250_000)
    assert (s.left, s.left_bytes, s.eta_s, s.rate_bytes_per_s, s.answered) == (2, 400_000, 0.2, 2e6, 3)
    assert s.line("re-replication") == ("    re-replication: 7 ledgers done, 3.25 MB copied; 2 left (0.40 MB), "
                                        "2.00 MB/s, ETA 0.2s")


def test_a_heal_done_between_samples_is_news_and_nothing_yet_is_not():
    done = summarize({0: doc(7, 2_000_000)}, {0: (0, 0)})
    assert done.has_news and done.line("x").startswith("    x: 7 ledgers done, 2.00 MB copied; 0 left")
    assert not HealSample().has_news
    assert summarize({0: doc(3, 10, blocked=1, left=1)}, {0: (3, 10)}).line("x").endswith(", 1 blocked")


def test_a_step_is_timed_from_its_own_start():
    t = Table()
    t.add("previous", "ok")
    step = t.begin("heal", at=time.monotonic() - 5.0)  # the heal began when the host died, 5 s ago
    t.add(step, "healed")
    assert t.rows[-1][2] >= 5.0
    start = time.monotonic()
    late = t.begin("verify", at=start)  # the table's clock is injectable: no sleep for a duration
    t.add(late, "ok", end=start + 0.25)
    assert abs(t.rows[-1][2] - 0.25) < 1e-6  # its own start, not the back-dated heal's nor the table's
