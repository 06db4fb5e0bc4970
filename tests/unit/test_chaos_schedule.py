"""Issue 26: the chaos campaign's seeded schedule and its under-replication timeline (pure logic)."""

from __future__ import annotations

import pytest

from autorecovery.testing.chaos.runner import Report
from autorecovery.testing.chaos.checks import Timeline
from autorecovery.testing.chaos.schedule import (
    ALL_KINDS,
    CHEAP_KINDS,
    KINDS,
    LIGHT_KINDS,
    NETFILTER_KINDS,
    NOT_AVAILABLE,
    ZK_ENSEMBLE_KINDS,
    parse_kinds,
    schedule,
    usable_kinds,
)


def test_same_seed_same_schedule_other_seed_other_schedule():
    a, b, c = schedule(7, 50, 5), schedule(7, 50, 5), schedule(8, 50, 5)
    assert a == b and a != c
    assert [f.seq for f in a] == list(range(1, 51))
    assert {f.kind for f in a} <= set(CHEAP_KINDS) and all(0 <= f.target < 5 for f in a)
    assert all(0.5 <= f.hold_s <= 5.0 for f in schedule(1, 100, 4, min_hold_s=0.5, max_hold_s=5.0))


@pytest.mark.parametrize(("args", "kw", "needle"), [
    ((1, 0, 5), {}, "--faults must be >= 1"),
    ((1, 5, 3), {}, "--bookies must be >= 4"),
    ((1, 5, 5, ("bookie_kill9", "rm_rf")), {}, "'rm_rf'"),
    ((1, 5, 5), {"min_hold_s": 3.0, "max_hold_s": 1.0}, "hold bounds"),
])
def test_bad_arguments_are_named(args, kw, needle):
    with pytest.raises(ValueError, match=needle.replace("-", r"\-").replace("'", ".")):
        schedule(*args, **kw)


def test_every_cheap_kind_is_described():
    assert set(CHEAP_KINDS) <= set(KINDS)


def test_timeline_longest_span_starts_at_the_bookie_loss_and_ends_at_the_heal():
    tl = Timeline()
    tl.bookie_lost("b1", 10.0)
    tl.observe({1, 2}, 11.0)   # both marked one second after the loss
    tl.observe({2}, 13.0)      # 1 healed: 3 s under-replicated
    tl.bookie_lost("b2", 20.0)
    tl.observe({2, 3}, 21.0)   # 3 marked after the second loss
    tl.observe(set(), 22.5)    # 2 healed at 22.5 (12.5 s since b1), 3 at 22.5 (2.5 s since b2)
    assert tl.healed == 3 and len(tl.marked) == 3
    assert tl.longest_under_replicated_s(100.0) == pytest.approx(12.5)
    tl.observe({4}, 30.0)      # still marked: counted up to now
    assert tl.longest(100.0) == (pytest.approx(80.0), 4)


def test_a_ledger_marked_again_after_a_heal_starts_a_new_episode():
    tl = Timeline()
    tl.bookie_lost("b1", 10.0)
    tl.observe({1}, 11.0)
    tl.observe(set(), 14.0)    # healed: 4 s
    tl.bookie_lost("b2", 200.0)
    tl.observe({1}, 201.0)
    tl.observe(set(), 206.0)   # healed again: 6 s, not 196 s from the first marking
    assert tl.longest(300.0) == (pytest.approx(6.0), 1) and tl.healed == 1


def test_report_fails_on_any_must_be_zero_figure_or_an_unread_entry():
    ok = Report(seed=1, schedule=[], skipped_kinds={}, entries_acked=10, entries_read_back=10)
    assert ok.passed and "PASS" in ok.to_text()
    for bad in ({"locks_left": 1}, {"copies_missing": 2}, {"error_lines": 1}, {"entries_read_back": 9},
                {"settle_timeouts": ["timed out waiting for two replicas checks"]},
                {"fault_errors": ["#3 x"]}, {"daemons_dead": 1}):
        r = Report(seed=1, schedule=[], skipped_kinds={}, **{"entries_acked": 10, "entries_read_back": 10, **bad})
        assert not r.passed and "FAIL" in r.to_text(), bad


def test_ensemble_kinds_are_skipped_with_a_reason_on_one_zookeeper():
    kinds, skipped = usable_kinds(ALL_KINDS, 1)
    assert not set(kinds) & set(ZK_ENSEMBLE_KINDS) and "bookie_kill9" in kinds
    assert all("--zk-members 3" in skipped[k] for k in ZK_ENSEMBLE_KINDS)
    kinds3, skipped3 = usable_kinds(ALL_KINDS, 3)
    assert kinds3 == ALL_KINDS and not set(skipped3) & set(ZK_ENSEMBLE_KINDS)


def test_weighted_kinds_are_drawn_in_proportion_and_unweighted_lists_draw_as_before():
    assert parse_kinds("a, b:3 ,c,") == ("a", "b", "b", "b", "c")
    assert schedule(7, 50, 5, parse_kinds(",".join(CHEAP_KINDS))) == schedule(7, 50, 5, CHEAP_KINDS)
    plan = schedule(3, 2000, 5, parse_kinds("zk_conn_cut:9,bookie_kill9"))
    share = sum(f.kind == "zk_conn_cut" for f in plan) / len(plan)
    assert 0.85 <= share <= 0.95, share
    for bad in ("bookie_kill9:0", "bookie_kill9:x", "bookie_kill9:101"):
        with pytest.raises(ValueError, match=f"'{bad}'.*1..100"):
            parse_kinds(bad)


def test_light_kinds_start_no_process_and_are_all_known():
    assert set(LIGHT_KINDS) <= set(CHEAP_KINDS) and set(NETFILTER_KINDS) <= set(CHEAP_KINDS)
    assert not {"bookie_kill9", "slow_link", "disk_full_during_copy", "daemon_kill9"} & set(LIGHT_KINDS)
    assert not set(NOT_AVAILABLE) & set(KINDS)  # what is printed as not built is no kind the runner takes
