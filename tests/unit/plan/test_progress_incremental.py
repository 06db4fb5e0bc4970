"""The end of a pass updates the cluster rate from the ledgers that changed only (issue 29: the
per-ledger cost was O(backlog)); the figures are those of a full recount."""

from __future__ import annotations

import random

from autorecovery.plan.progress import ProgressTracker


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _full(tracker: ProgressTracker) -> None:
    """Make ``tracker`` recount the whole backlog where it would look at the changed ledgers only."""
    tracker.cluster.observe_some = lambda _changed, empty: tracker._observe()  # type: ignore[method-assign]


def test_incremental_end_of_pass_equals_a_full_recount():
    for seed in range(20):
        rng = random.Random(seed)
        clock = Clock()
        fast, full = ProgressTracker(clock), ProgressTracker(clock)
        _full(full)
        backlog = {lid: rng.randrange(1, 10_000) for lid in range(200)}
        for t in (fast, full):
            t.set_backlog(backlog)
        active: list[int] = []
        for _step in range(400):
            clock.t += rng.random()
            op = rng.random()
            if op < 0.3 and backlog:
                lid = rng.choice(sorted(backlog))
                if lid not in active:
                    active.append(lid)
                    planned = rng.randrange(0, 20_000) if rng.random() < 0.5 else backlog[lid]
                    for t in (fast, full):
                        t.start(lid)
                        t.plan(lid, planned)
            elif op < 0.6 and active:
                lid = rng.choice(active)
                n = rng.randrange(0, 5000)
                for t in (fast, full):
                    t.copied(lid, n)
            elif op < 0.9 and active:
                lid = active.pop(rng.randrange(len(active)))
                ok = rng.random() < 0.8
                if ok:
                    backlog.pop(lid, None)
                for t in (fast, full):
                    t.finish(lid, ok)
            else:
                backlog = {lid: b for lid, b in backlog.items() if rng.random() < 0.95}
                for t in (fast, full):
                    t.set_backlog(backlog)
            assert fast.cluster.done_bytes == full.cluster.done_bytes, (seed, _step)
            assert fast.cluster._last == full.cluster._last, (seed, _step)
            assert fast.cluster.rate == full.cluster.rate, (seed, _step)
