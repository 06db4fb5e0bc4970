"""ok-to-stop verdicts on hand-built ensembles (pure; audit/oktostop.py) and the auto-close rule."""

from __future__ import annotations

import pytest

from autorecovery.audit.maintenance import Window, auto_close_due
from autorecovery.audit.oktostop import fragments, ok_to_stop, summary
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment

B = [f"10.0.0.{i}:3181" for i in range(1, 8)]


def md(ensemble, wq, aq, last=99, state=LedgerState.CLOSED, segs=None):
    segments = segs or ((0, ensemble),)
    return LedgerMetadata(len(ensemble), wq, aq, tuple(Segment(f, tuple(e)) for f, e in segments), state=state,
                          last_entry_id=last if state == LedgerState.CLOSED else -1, length=100)


def test_e3_wq2_aq2_all_up_is_ok_but_drops_below_wq():
    v = ok_to_stop(B[0], [(1, md(B[:3], 2, 2))], readable=B[:3])
    # B0 is in write sets (0,1) and (2,0): each keeps one copy plus B0's own, which comes back: AQ 2 held
    assert v.ok and v.blocking == () and v.ledgers == 1 and v.fragments == 2
    assert v.below_wq_fragments == 2 and v.below_wq_ledgers == 1


def test_e2_wq2_aq2_with_one_down_blocks():
    v = ok_to_stop(B[1], [(9, md(B[:2], 2, 2))], readable=[B[1]])
    assert not v.ok and v.blocking == (9,) and v.down == (B[0],)


def test_e3_wq2_aq1_ok_with_all_up():
    v = ok_to_stop(B[0], [(1, md(B[:3], 2, 1))], readable=B[:3])
    assert v.ok and v.below_wq_fragments == 2 and v.below_wq_ledgers == 1


def test_e3_wq2_aq2_blocks_when_a_write_set_partner_is_down():
    # B1 lost: write set (B0, B1) keeps 0 readable after stopping B0
    v = ok_to_stop(B[0], [(7, md(B[:3], 2, 2))], readable=[B[0], B[2]])
    assert not v.ok and v.blocking == (7,) and v.blocking_count == 1 and v.blocking_fragments == 1
    assert B[1] in v.down and "ack quorum 2" in v.details[7] and "keep 0 readable" in v.details[7]


def test_e5_wq3_aq3_survives_none_down_not_one_neighbour():
    led = md(B[:5], 3, 3)
    assert ok_to_stop(B[0], [(1, led)], readable=B[:5]).ok
    # B4 down: write set (3,4,0) keeps only B3 after B0 stops: 1 + B0's own copy < AQ 3
    v = ok_to_stop(B[0], [(1, led)], readable=B[:4])
    assert not v.ok and v.blocking == (1,)


def test_e5_wq3_aq2_survives_one_neighbour_down_not_two():
    led = md(B[:5], 3, 2)
    assert ok_to_stop(B[0], [(1, led)], readable=B[:4]).ok  # B4 down: (3,4,0) keeps B3
    # B3 and B4 down: write set (3,4,0) keeps nothing readable
    v = ok_to_stop(B[0], [(1, led)], readable=B[:3])
    assert not v.ok and v.blocking == (1,) and v.down == (B[3], B[4])
    # a bookie of the ensemble not in B0's write sets (B2 is, via (0,1,2)); B2 alone down is fine
    assert ok_to_stop(B[0], [(1, led)], readable=[B[0], B[1], B[3], B[4]]).ok


def test_readonly_bookies_count_as_readable():
    # readable = writable | read-only: B1 read-only serves reads, so (0,1) keeps a copy
    assert ok_to_stop(B[0], [(1, md(B[:3], 2, 2))], readable=[B[0], B[1], B[2]]).ok
    assert not ok_to_stop(B[0], [(1, md(B[:3], 2, 2))], readable=[B[0], B[2]]).ok


def test_windows_and_drains_count_as_down():
    led = md(B[:3], 2, 2)
    assert ok_to_stop(B[0], [(1, led)], readable=B[:3]).ok
    v = ok_to_stop(B[0], [(1, led)], readable=B[:3], going=[B[1]])
    assert not v.ok and v.down == (B[1],)


def test_open_ledger_counts_every_write_set_of_its_last_segment():
    led = md(B[:4], 2, 2, state=LedgerState.OPEN)
    assert len(list(fragments(led))) == 4
    v = ok_to_stop(B[0], [(3, led)], readable=[B[0], B[2], B[3]])  # B1 down: write set (0,1) blocks
    assert not v.ok and v.blocking == (3,)
    # closed at entry 1 instead: write sets (0,1) and (1,2) only; stopping B3 is fine with B1 down
    closed = md(B[:4], 2, 2, last=1)
    assert len(list(fragments(closed))) == 2 and ok_to_stop(B[3], [(3, closed)], readable=[B[0], B[2], B[3]]).ok
    assert not v.ok and v.blocking == (3,)


def test_closed_ledger_with_an_empty_last_segment_never_blocks_on_it():
    # entries 0..9 on B0..B2; last segment (from 10) on B3..B5 stores nothing (closed at 9)
    led = md(B[:3], 3, 3, last=9, segs=((0, B[:3]), (10, B[3:6])))
    v = ok_to_stop(B[3], [(4, led)], readable=[B[3]])  # B4, B5 down: would block if the segment counted
    assert v.ok and v.ledgers == 0 and v.fragments == 0


def test_closed_short_ledger_only_counts_write_sets_with_entries():
    # one entry (id 0) on E3/WQ2: only write set (B0, B1) stores anything
    led = md(B[:3], 2, 2, last=0)
    v = ok_to_stop(B[2], [(1, led)], readable=[B[2]])
    assert v.ok and v.fragments == 0
    assert not ok_to_stop(B[0], [(1, led)], readable=[B[0], B[2]]).ok


def test_blocking_list_is_bounded_count_is_exact():
    leds = [(i, md(B[:3], 2, 2)) for i in range(50)]
    v = ok_to_stop(B[0], leds, readable=[B[0], B[2]], limit=5)
    assert not v.ok and len(v.blocking) == 5 and v.blocking_count == 50
    assert "and 45 more" in summary(v)


def test_bookie_already_down_is_ok_and_says_so():
    v = ok_to_stop(B[0], [(1, md(B[:3], 2, 2))], readable=B[1:3])
    assert not v.registered
    assert "already down" in summary(v)


def test_summary_names_window_decision():
    v = ok_to_stop(B[0], [(1, md(B[:3], 3, 2))], readable=B[:3])
    assert v.ok and "a 600 s maintenance window would be opened" in summary(v, 600, True)
    d = v.to_dict()
    assert d["ok"] is True and d["blocking_ledgers"] == [] and d["ledgers_on_bookie"] == 1


def w(target, *, auto=True, seen=5, kind="bookie"):
    return Window(kind, target, "restart", 0, 10_000, "", auto_close=auto, lost_seen_ms=seen)


@pytest.mark.parametrize("win, available, named, closes", [
    (w(B[0]), {B[0]}, set(), True),
    (w(B[0]), set(), set(), False),           # not back yet
    (w(B[0]), {B[0]}, {B[0]}, False),         # a marker still names it
    (w(B[0], seen=0), {B[0]}, set(), False),  # never seen down: opened on a running bookie
    (w(B[0], auto=False), {B[0]}, set(), False),
    (w("/rack1", kind="rack"), {B[0]}, set(), False),
])
def test_auto_close_rule(win, available, named, closes):
    assert (auto_close_due([win], available, named) == [win]) is closes


def test_window_record_round_trip_keeps_new_fields_and_old_records_parse():
    x = Window("bookie", B[0], "r", 1, 2, "me", auto_close=True, lost_seen_ms=3, acked_ms=4)
    assert Window.from_json(x.to_json(), "/p") == x
    old = b'{"kind": "bookie", "target": "a:1", "reason": "r", "started_ms": 1, "expires_ms": 2}'
    y = Window.from_json(old, "/p")
    assert not y.auto_close and y.lost_seen_ms == 0 and b"auto_close" not in y.to_json()
