"""Progress and ETA that converge (issue 9): a recorded re-replication fed through the pure progress
module with a fake clock.

The recording: the marker set one daemon's backlog refresh saw while three workers healed 24 ledgers
of 1-8 MB at a steady 4 MB/s in total (each ledger's completion time is when the cluster finished its
bytes; the observing node copied every third ledger itself, in 1 MB chunks), observed every 0.5 s.
With the old per-worker 30 s window the ETA went 86 -> 39 -> 413 -> 320 -> ... -> null.
"""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from autorecovery.plan.progress import ClusterRate, ProgressTracker, blocked_summary

MB = 1_000_000
RATE = 4 * MB  # bytes/s, the whole cluster


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def recording(seed: int = 9):
    """(time offset s, {ledger id: bytes left}, {ledger id: bytes this node copied since last step})."""
    rng = random.Random(seed)
    sizes = {lid: rng.randint(1, 8) * MB for lid in range(1, 25)}
    # three workers copy in parallel; each ledger takes size / (RATE / 3) seconds on its worker
    finish, workers = {}, [0.0, 0.0, 0.0]
    for lid, size in sizes.items():
        w = min(range(3), key=lambda i: workers[i])
        begin = workers[w]
        workers[w] += size / (RATE / 3)
        finish[lid] = (workers[w], w, begin)
    steps, t = [], 0.0
    end = max(f for f, _, _ in finish.values())
    while t <= end + 1.0:
        left = {}
        for lid, (f, w, begin) in finish.items():
            if f <= t:
                continue
            left[lid] = sizes[lid]
            if w == 0 and t > begin:  # this node's own copy streams: its estimate shrinks by 1 MB chunks
                copied = int((t - begin) * (RATE / 3)) // MB * MB
                left[lid] = max(0, sizes[lid] - copied)
        steps.append((t, left))
        t += 0.5
    return sizes, finish, steps


@pytest.mark.parametrize("seed", [3, 5, 9])
def test_eta_converges_monotonically_and_ends_at_zero(seed):
    c = Clock()
    t0 = c.t
    _sizes, finish, steps = recording(seed)
    tracker = ProgressTracker(c)
    etas: list[float | None] = []
    truth: list[float] = []
    end = max(f for f, _, _ in finish.values())
    for offset, left in steps:
        c.t = t0 + offset
        tracker.set_backlog(left)
        snap = tracker.snapshot()
        etas.append(snap.eta_s)
        truth.append(max(0.0, end - offset))
    known = [(e, tr) for e, tr in zip(etas, truth, strict=True) if e is not None]
    # an ETA is known after the first completions, and from then on always (no "null" in the middle)
    first = next(i for i, e in enumerate(etas) if e is not None)
    assert first <= 8 and all(e is not None for e in etas[first:]), etas
    # non-increasing within a tolerance of about one ledger's share (the old window jumped 39 -> 413)
    for (a, _), (b, _) in pairwise(known):
        assert b <= a + max(3.0, 0.25 * a), (a, b, known)
    assert max(e for e, _ in known) <= 1.3 * known[0][0]
    # it tracks the truth over the last half: within 60% or 3 s (work in flight on other workers is
    # invisible until it completes, and a ledger here is up to 8 MB = 6 s of one worker), against
    # 3x too long with the old per-worker window (test below)
    half = len(known) // 2
    for e, tr in known[half:]:
        assert abs(e - tr) <= max(3.0, 0.6 * tr), (e, tr)
    assert etas[-1] == 0.0 and tracker.snapshot().ledgers_remaining == 0
    assert tracker.snapshot().rate_bytes_per_s == 0.0  # the episode is over


def test_rate_is_the_cluster_rate_not_this_workers():
    """The observing node copies a third of the bytes; the rate it reports is the cluster's."""
    c = Clock()
    t0 = c.t
    _sizes, _finish, steps = recording(seed=3)
    tracker = ProgressTracker(c)
    rates = []
    for offset, left in steps:
        c.t = t0 + offset
        tracker.set_backlog(left)
        if left:
            rates.append(tracker.snapshot().rate_bytes_per_s)
    settled = rates[len(rates) // 2:]
    assert all(0.6 * RATE <= r <= 1.4 * RATE for r in settled), settled


def test_no_eta_while_everything_is_blocked_and_blocked_work_is_reported_apart():
    c = Clock()
    tracker = ProgressTracker(c)
    tracker.set_backlog({1: 2 * MB, 2: 2 * MB, 3: 1 * MB, 4: 1 * MB, 5: 4 * MB})
    c.t += 2
    tracker.set_backlog({2: 2 * MB, 3: 1 * MB, 4: 1 * MB, 5: 4 * MB})  # ledger 1 done: 1 MB/s
    snap = tracker.snapshot()
    assert snap.rate_bytes_per_s == pytest.approx(1 * MB) and snap.eta_s == pytest.approx(8.0)
    for lid in (2, 3, 4, 5):
        tracker.block(lid, f"no eligible target bookie: not enough bookies for ledger {lid}")
    snap = tracker.snapshot()
    assert snap.eta_s is None and snap.ledgers_remaining == 0 and snap.bytes_remaining == 0
    assert len(snap.blocked) == 4 and snap.blocked_summary == "blocked: 4 ledgers, no eligible target bookie"
    # one unblocks: an ETA for it alone, the others still apart
    tracker.unblock(5)
    snap = tracker.snapshot()
    assert snap.ledgers_remaining == 1 and snap.bytes_remaining == 4 * MB and snap.eta_s == pytest.approx(4.0)
    assert blocked_summary(snap.blocked) == "blocked: 3 ledgers, no eligible target bookie"


def test_finished_work_is_cleared_and_a_stall_gives_no_eta():
    c = Clock()
    tracker = ProgressTracker(c, stall_after_s=60)
    tracker.set_backlog({1: MB, 2: MB})
    c.t += 1
    tracker.set_backlog({2: MB})
    assert tracker.snapshot().eta_s == pytest.approx(1.0)
    c.t += 30  # nothing completes: the ETA ran out, but it is not a stall yet
    assert tracker.snapshot().eta_s == 0.0
    c.t += 40
    snap = tracker.snapshot()
    assert snap.eta_s is None and snap.stalled_s == pytest.approx(70.0)
    tracker.set_backlog({})  # the queue emptied (another worker finished it): nothing left, ETA 0
    snap = tracker.snapshot()
    assert snap.ledgers_remaining == 0 and snap.eta_s == 0.0 and snap.stalled_s == 0.0 and snap.blocked == {}


def test_cluster_rate_counts_streaming_bytes_but_not_replans():
    c = Clock()
    r = ClusterRate(c)
    r.observe({1: 10 * MB})
    c.t += 2
    r.observe({1: 8 * MB})
    assert r.rate == pytest.approx(1 * MB)
    assert r.eta_s(8 * MB, 1, 0) == pytest.approx(8.0)
    c.t += 1
    assert r.eta_s(8 * MB, 1, 0) == pytest.approx(7.0)  # falls one second per second between completions
    r.observe({1: 9 * MB})  # an estimate going up is not negative progress
    assert r.rate == pytest.approx(1 * MB)


def test_the_old_per_worker_window_fails_these_checks():
    """Contrast (what issue 9 saw): this worker's bytes over a 30 s window against the whole cluster's
    backlog is three times too slow a rate, so the ETA is far off mid-run and ends null, not 0."""
    from autorecovery.plan.progress import RateMeter

    c = Clock()
    t0 = c.t
    sizes, finish, steps = recording(9)
    end = max(f for f, _, _ in finish.values())
    meter, prev, etas = RateMeter(c, 30.0), {}, []
    for offset, left in steps:
        c.t = t0 + offset
        for lid, (_f, w, _b) in finish.items():
            if w == 0 and left.get(lid, 0) < prev.get(lid, sizes[lid]):
                meter.add(prev.get(lid, sizes[lid]) - left.get(lid, 0))
        prev = {lid: left.get(lid, 0) for lid in sizes}
        rem, r = sum(left.values()), meter.rate()
        etas.append((rem / r if r > 0 and rem else None, end - offset))
    mid = etas[len(etas) // 2]
    assert mid[0] is not None and mid[0] > 2 * mid[1]
    assert etas[-1][0] is None
