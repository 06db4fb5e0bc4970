"""Ranking of under-replicated ledgers and progress/ETA accounting (pure)."""

from __future__ import annotations

import random

import pytest

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.plan.priority import (
    AGE_WINDOW_MS,
    WorkKind,
    fragment_copies_left,
    ledger_priority,
    min_copies_left,
    order_candidates,
)
from autorecovery.plan.progress import ProgressTracker, RateMeter, estimate_copy_bytes


def md(ens, wq=2, aq=2, last=99, length=None, segments=None, state=LedgerState.CLOSED, ctime=0):
    segs = segments or (Segment(0, tuple(ens)),)
    return LedgerMetadata(
        ensemble_size=len(segs[0].ensemble), write_quorum=wq, ack_quorum=aq, segments=tuple(segs),
        state=state, last_entry_id=last if state == LedgerState.CLOSED else -1,
        length=(last + 1) * 100 if length is None else length, ctime=ctime,
    )


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


ALL = {"a:1", "b:1", "c:1", "d:1", "e:1", "f:1"}


def test_min_copies_left_counts_write_sets():
    m = md(["a:1", "b:1", "c:1"], wq=2)
    assert min_copies_left(m, set()) == 2
    assert min_copies_left(m, {"a:1"}) == 1
    assert min_copies_left(m, {"a:1", "b:1"}) == 0  # entries 0,3,.. live on a and b only
    m3 = md(["a:1", "b:1", "c:1"], wq=3)
    assert min_copies_left(m3, {"a:1", "b:1"}) == 1
    # empty closed ledger: nothing stored, nothing at stake
    assert min_copies_left(md(["a:1", "b:1", "c:1"], last=-1, length=0), {"a:1", "b:1", "c:1"}) == 2
    # a lost bookie in a segment that stores a single entry on other indexes does not count
    one = md(["a:1", "b:1", "c:1"], wq=2, last=0)
    assert min_copies_left(one, {"c:1"}) == 2


def test_open_ledger_last_segment_counts():
    m = md(["a:1", "b:1", "c:1"], wq=2, state=LedgerState.OPEN)
    assert min_copies_left(m, {"c:1"}) == 1


def test_ledger_priority_kinds():
    m = md(["a:1", "b:1", "c:1"], wq=3, aq=2)
    avail = ALL - {"a:1"}
    p = ledger_priority(1, m, ["a:1"], avail, ctime=5)
    assert p.kind == WorkKind.DATA_LOSS and p.copies_left == 2 and p.margin == 0
    # a missing replica that is registered again still counts (may be a corrupt copy)
    assert ledger_priority(1, m, ["a:1"], ALL).copies_left == 2
    # a lost bookie not yet listed by the auditor counts too
    assert ledger_priority(1, m, [], avail).kind == WorkKind.DATA_LOSS
    # placement mark: nothing listed, nothing lost
    assert ledger_priority(1, m, [], ALL).kind == WorkKind.PLACEMENT
    gone = ledger_priority(1, md(["a:1"], wq=1, aq=1), ["a:1"], avail)
    assert gone.kind == WorkKind.NO_COPY_LEFT and gone.copies_left == 0


def test_order_one_copy_before_two_copies_before_placement():
    avail = ALL - {"a:1", "b:1"}
    one_copy = ledger_priority(1, md(["a:1", "b:1", "c:1"], wq=3), ["a:1", "b:1"], avail)
    two_copy = [ledger_priority(i, md(["a:1", "d:1", "e:1"], wq=3), ["a:1"], avail) for i in (2, 3, 4)]
    placement = ledger_priority(5, md(["c:1", "d:1", "e:1"], wq=3), [], avail)
    dead = ledger_priority(6, md(["a:1"], wq=1, aq=1), ["a:1"], avail)
    known = {p.ledger_id: p for p in [one_copy, *two_copy, placement, dead]}
    for seed in range(20):
        ids = [1, 2, 3, 4, 5, 6, 7, 8]
        random.Random(seed).shuffle(ids)
        order = order_candidates(ids, known, rng=random.Random(seed))
        assert order[0] == 1
        assert set(order[1:4]) == {2, 3, 4}
        assert set(order[4:6]) == {7, 8}  # unknown: random walk after known data loss
        assert order[6:] == [6, 5]


def test_order_margin_against_ack_quorum_then_newest_ledger():
    """Stake first; within the same stake the ledger created last heals first (its metadata ctime, not
    the marker's age: bookkeeper#3773), whatever the marker ages say."""
    avail = ALL - {"a:1"}
    below_aq = ledger_priority(1, md(["a:1", "b:1"], wq=2, aq=2, ctime=5_000), ["a:1"], avail, ctime=10)
    at_aq = ledger_priority(2, md(["a:1", "b:1"], wq=2, aq=1, ctime=9_000), ["a:1"], avail, ctime=100)
    older = ledger_priority(3, md(["a:1", "b:1"], wq=2, aq=2, ctime=1_000), ["a:1"], avail, ctime=1)
    assert below_aq.ledger_ctime == 5_000
    order = order_candidates([2, 1, 3], {1: below_aq, 2: at_aq, 3: older})
    assert order == [1, 3, 2]  # 1 and 3 are below AQ; 1 is the newer ledger; 2 has a copy at AQ


def test_order_newer_ledger_first_then_higher_id_then_unknown_ctime():
    avail = ALL - {"a:1"}
    made = {10: 3_000, 11: 7_000, 12: 7_000, 13: 0, 14: 0}  # 13, 14: metadata without ctime
    known = {lid: ledger_priority(lid, md(["a:1", "b:1", "c:1"], wq=2, aq=1, ctime=t), ["a:1"], avail, ctime=lid)
             for lid, t in made.items()}
    assert order_candidates(list(made), known) == [12, 11, 10, 14, 13]
    placement = ledger_priority(20, md(["b:1", "c:1"], wq=2, aq=1, ctime=99_000), [], avail)
    assert order_candidates([20, *made], {**known, 20: placement})[-1] == 20  # newer never jumps a class


def test_order_skip_and_later():
    avail = ALL - {"a:1"}
    known = {i: ledger_priority(i, md(["a:1", "b:1", "c:1"], wq=2, ctime=10 - i), ["a:1"], avail, ctime=i)
             for i in (1, 2, 3)}
    assert order_candidates([1, 2, 3], known, skip={2}) == [1, 3]
    assert order_candidates([1, 2, 3], known, later={1}) == [2, 3, 1]
    # "later" only reorders within a class: known data loss still precedes unknown ledgers
    assert order_candidates([9, 1], {1: known[1]}, later={1}) == [1, 9]


def test_order_salt_spreads_equal_stake_but_keeps_the_classes():
    """With a salt, ledgers of equal stake created in the same age window come in a per-salt order
    (daemons spread over the queue); stake, the newer age window and ``later`` still order first."""
    avail = ALL - {"a:1"}
    base = 100 * AGE_WINDOW_MS
    tied = {i: ledger_priority(i, md(["a:1", "b:1", "c:1"], wq=2, aq=1, ctime=base + i), ["a:1"], avail,
                               ctime=20_000 + i)
            for i in range(1, 41)}
    urgent = ledger_priority(99, md(["a:1", "b:1"], wq=2, aq=2, ctime=1), ["a:1"], avail, ctime=50_000)
    newer = ledger_priority(98, md(["a:1", "b:1", "c:1"], wq=2, aq=1, ctime=base + AGE_WINDOW_MS), ["a:1"], avail,
                          ctime=1)
    known = {**tied, 99: urgent, 98: newer}
    firsts = set()
    for salt in range(8):
        order = order_candidates(list(known), known, salt=salt, later={5})
        assert order[:2] == [99, 98] and order[-1] == 5
        assert sorted(order[2:-1]) == [i for i in range(1, 41) if i != 5]
        assert order == order_candidates(list(reversed(list(known))), known, salt=salt, later={5})  # stable
        firsts.add(order[2])
    assert len(firsts) >= 5, firsts  # not every daemon goes for the same ledger first
    assert order_candidates(list(known), known, later={5})[2:5] == [40, 39, 38]  # no salt: newest first


def test_order_key_cache_gives_the_same_order_and_recomputes_only_changed_priorities():
    """``keys`` caches each ledger's sort key with the priority object it came from: the order is the
    one computed without it, and a ledger whose priority object changed gets a new key."""
    avail = ALL - {"a:1"}
    known = {i: ledger_priority(i, md(["a:1", "b:1", "c:1"], wq=2, aq=1), ["a:1"], avail, ctime=20_000 + 7 * i)
             for i in range(1, 30)}
    keys: dict = {}
    first = order_candidates(list(known), known, salt=3, later={4}, keys=keys)
    assert first == order_candidates(list(known), known, salt=3, later={4})
    assert set(keys) == set(known)
    cached = {lid: k for lid, (_p, k) in keys.items()}
    known[7] = ledger_priority(7, md(["a:1", "b:1"], wq=2, aq=2), ["a:1"], avail, ctime=50_000)  # now urgent
    again = order_candidates(list(known), known, salt=3, later={4}, keys=keys)
    assert again[0] == 7 and again == order_candidates(list(known), known, salt=3, later={4})
    assert all(keys[lid][1] is cached[lid] for lid in known if lid != 7)
    assert keys[7][1] is not cached[7]


def test_fragment_copies_left():
    ens = ("a:1", "b:1", "c:1")
    assert fragment_copies_left(ens, 2, 0, 9, {0}, {"b:1", "c:1"}) == 1
    assert fragment_copies_left(ens, 2, 0, 9, {0, 1}, {"c:1"}) == 0
    assert fragment_copies_left(ens, 3, 0, 9, {0}, {"b:1", "c:1"}) == 2
    assert fragment_copies_left(ens, 2, 0, -1, {0}, set()) == 2
    # a single entry 1 lives on indexes 1, 2: index 0 is not involved
    assert fragment_copies_left(ens, 2, 1, 1, {0}, {"b:1", "c:1"}) == 2


def test_estimate_copy_bytes():
    m = md(["a:1", "b:1", "c:1"], wq=2, last=29, length=3000)  # 30 entries, 100 B each
    assert estimate_copy_bytes(m, {"a:1"}) == 2000  # index 0 stores 20 of 30 entries
    assert estimate_copy_bytes(m, {"a:1", "b:1"}) == 4000
    assert estimate_copy_bytes(m, set()) == 0
    m3 = md(["a:1", "b:1", "c:1"], wq=3, last=9, length=1000)
    assert estimate_copy_bytes(m3, {"c:1"}) == 1000
    assert estimate_copy_bytes(md(["a:1", "b:1", "c:1"], state=LedgerState.OPEN), {"a:1"}) == 0
    two = md(None, wq=2, last=9, length=1000, segments=(Segment(0, ("a:1", "b:1", "c:1")), Segment(5, ("d:1", "b:1", "c:1"))))
    # segment 0 holds entries 0..4, index 0 stores 0,2,3 -> 3 entries; segment 1 has no lost bookie
    assert estimate_copy_bytes(two, {"a:1"}) == 300


def test_rate_meter_window():
    c = Clock()
    r = RateMeter(c, window_s=10)
    assert r.rate() == 0.0
    for _ in range(10):
        c.t += 1
        r.add(1000)
    assert r.rate() == pytest.approx(1000.0)
    c.t += 20
    assert r.rate() == 0.0


def test_progress_tracker_eta_and_blocked():
    c = Clock()
    t = ProgressTracker(c, window_s=10)
    t.set_backlog({1: 10_000, 2: 5_000, 3: 1_000})
    snap = t.snapshot()
    assert snap.ledgers_remaining == 3 and snap.bytes_remaining == 16_000 and snap.eta_s is None  # no rate yet
    t.start(1, 10_000)
    for _ in range(5):
        c.t += 1
        t.copied(1, 1_000)
    snap = t.snapshot()
    assert snap.bytes_remaining == 11_000 and snap.ledgers_in_progress == 1 and snap.worker_bytes_remaining == 5_000
    assert snap.worker_rate_bytes_per_s == pytest.approx(1000.0)
    assert snap.rate_bytes_per_s == pytest.approx(1000.0)  # 5,000 bytes in 5 s of cluster progress
    assert snap.eta_s == pytest.approx(11.0)
    t.block(3, "no eligible target bookie: not enough bookies")
    t.finish(1, replicated=True)
    snap = t.snapshot()
    assert snap.ledgers_done == 1 and snap.ledgers_remaining == 1 and snap.bytes_remaining == 5_000
    assert snap.blocked == {3: "no eligible target bookie: not enough bookies"}
    assert snap.blocked_summary == "blocked: 1 ledger, no eligible target bookie"
    doc = snap.as_dict()
    assert doc["cluster"]["blocked"] == {"3": "no eligible target bookie: not enough bookies"}
    assert doc["cluster"]["ledgers_blocked"] == 1 and doc["worker"]["ledgers_done"] == 1
    t.set_backlog({})  # the markers are gone: blocked reasons go with them
    snap = t.snapshot()
    assert snap.blocked == {} and snap.ledgers_remaining == 0 and snap.eta_s == 0.0

def test_unrecoverable_reason_is_one_wording_from_the_side_znode_document():
    from autorecovery.plan.progress import blocked_reason_kind, unrecoverable_reason

    doc = {"entries": [[0, 9], [12, 12]], "entry_count": 11, "waiting_for": ["10.0.0.3:3181"],
           "reason": "11 entries that no bookie of the ensemble holds (answers: NOT_REGISTERED)"}
    assert unrecoverable_reason(doc) == (
        "unrecoverable: entries 0-9, 12 have no readable replica (11 entries that no bookie of the ensemble "
        "holds (answers: NOT_REGISTERED)); it may come back if 10.0.0.3:3181 returns")
    assert unrecoverable_reason({"entries": [[3, 4]], "waiting_for": []}).endswith("entries 3-4 have no readable "
                                                                                 "replica; needs an operator")
    many = unrecoverable_reason({"entries": [[i, i] for i in range(0, 100, 2)]})
    assert "0, 2, 4" in many and "(50 ranges)" in many and "98" not in many  # bounded
    assert unrecoverable_reason({}) == "unrecoverable: entries (unknown) have no readable replica; needs an operator"
    assert blocked_reason_kind(unrecoverable_reason(doc)) == "unrecoverable"
