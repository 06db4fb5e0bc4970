"""The campaign's bound on the time under-replicated (pure: :func:`bound_episodes` over a Timeline), and
the stock campaign's ack-log reading and kind selection."""

from __future__ import annotations

import zlib

from autorecovery.testing.chaos.checks import Timeline, bound_episodes
from autorecovery.testing.chaos.schedule import STOCK_KINDS, STOCK_ONLY_KINDS, usable_kinds
from autorecovery.testing.chaos.stock import read_stock_acks
from autorecovery.testing.upstream_java import expected_payload


def _tl(first: float, healed: float | None, faults=(), polls=()) -> Timeline:
    tl = Timeline()
    tl.marked[7] = [[first, healed]]
    for f in faults:
        tl.fault(*f)
    tl.reasons[7] = list(polls)
    return tl


def test_healed_within_the_bound_of_the_last_faults_end_passes():
    # marked at 10 during a fault that ended at 50, healed at 100: 50 s after the fault's end
    (e,) = bound_episodes(_tl(10, 100, [(5, 50, "#1 bookie_kill9")]), now=200, bound_s=60)
    assert e.over_s == -10 and not e.excused and e.last_fault == "#1 bookie_kill9"
    assert e.from_s == 50 and e.span_s == 90


def test_past_the_bound_with_no_reason_is_a_violation():
    (e,) = bound_episodes(_tl(10, 130, [(5, 50, "#1 bookie_kill9")], [(60, None), (120, None)]), now=200, bound_s=60)
    assert e.over_s == 20 and not e.excused
    assert "none named" in e.describe()


def test_past_the_bound_with_a_reason_at_every_late_poll_is_excused():
    polls = [(60, None), (111, "unrecoverable: entries 3 have no readable replica"), (125, "no target bookie")]
    (e,) = bound_episodes(_tl(10, 130, [(5, 50, "#1 x")], polls), now=200, bound_s=60)
    assert e.excused and e.reason == "no target bookie"
    # one late poll without a reason is enough to fail it
    (e2,) = bound_episodes(_tl(10, 130, [(5, 50, "#1 x")], [*polls, (128, None)]), now=200, bound_s=60)
    assert not e2.excused


def test_a_later_fault_restarts_the_clock_and_an_open_episode_runs_to_now():
    faults = [(5, 20, "#1 a"), (90, 95, "#2 b")]
    (e,) = bound_episodes(_tl(10, 140, faults), now=500, bound_s=60)
    assert e.from_s == 95 and e.over_s == -15 and e.last_fault == "#2 b"
    (o,) = bound_episodes(_tl(10, None, faults[:1]), now=500, bound_s=60)
    assert not o.healed and o.end == 500 and o.over_s == 500 - 20 - 60
    # a fault that began after the heal does not count
    (h,) = bound_episodes(_tl(10, 30, [(5, 20, "#1 a"), (40, 45, "#2 late")]), now=500, bound_s=60)
    assert h.last_fault == "#1 a"


def test_episodes_are_longest_first_and_start_at_the_bookie_loss():
    tl = _tl(10, 30)
    tl.marked[8] = [[12, 90]]
    tl.bookie_lost("b:1", 8.0)
    eps = bound_episodes(tl, now=100, bound_s=60)
    assert [e.ledger for e in eps] == [8, 7] and eps[0].start == 8.0


def test_stock_ack_log_checks_each_hash_and_ignores_a_torn_line(tmp_path):
    good = zlib.crc32(expected_payload(5, 0, 64))
    log = tmp_path / "acks.log"
    log.write_text(f"5 0 {good:08x} CRC32C\n5 1 00000000 CRC32C\n9 0 {zlib.crc32(expected_payload(9, 0, 64)):08x} MAC\n9 1 ab")
    acks = read_stock_acks(log, 64)
    assert acks.count == 3 and acks.ledgers[9] == ("MAC", {0}) and acks.ledgers[5] == ("CRC32C", {0, 1})
    assert acks.bad_hashes == ["5 1 00000000 CRC32C"]


def test_stock_only_kinds_are_skipped_on_our_bookies_and_ours_on_stock():
    kinds, skipped = usable_kinds(("bookie_kill9", *STOCK_ONLY_KINDS), 3)
    assert kinds == ("bookie_kill9",) and set(skipped) == set(STOCK_ONLY_KINDS)
    kinds, skipped = usable_kinds(("bookie_torn_tail", "disk_full_during_copy", *STOCK_KINDS), 3, stock=True)
    assert "bookie_torn_tail" in skipped and "disk_full_during_copy" in skipped
    assert set(STOCK_ONLY_KINDS) <= set(kinds)
