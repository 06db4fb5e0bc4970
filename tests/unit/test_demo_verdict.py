"""The demo's one verdict line is made of the checks it ran (autorecovery.cli.demo_verdict)."""

from __future__ import annotations

from autorecovery.cli.demo_verdict import FAILED_STEP, verdict, verdict_exit_code


def test_every_check_held_is_a_pass_counting_them():
    line = verdict(["start ZooKeeper + 6 bookies in 3 racks", "write 20 ledgers", "kill -9 one bookie"])
    assert line == "demo: PASS — 3 of 3 checks held"
    assert verdict_exit_code(line) == 0


def test_a_failed_check_is_a_fail_naming_it_and_counting_what_held_before():
    steps = ["start ZooKeeper + 6 bookies in 3 racks", FAILED_STEP]
    line = verdict(steps, ["write 20 ledgers x 500 entries (E3/WQ2/AQ2): 19 ledgers, 9500 entries acknowledged"])
    assert line == ("demo: FAIL — 1 check held, then failed: write 20 ledgers x 500 entries (E3/WQ2/AQ2): "
                    "19 ledgers, 9500 entries acknowledged")
    assert verdict_exit_code(line) == 1


def test_several_failures_are_all_named():
    line = verdict(["a", "b", FAILED_STEP, FAILED_STEP], ["x: lost", "y: late"])
    assert line == "demo: FAIL — 2 checks held, then failed: x: lost; y: late"


def test_no_check_at_all_is_not_a_pass():
    line = verdict([])
    assert line == "demo: FAIL — no check ran" and verdict_exit_code(line) == 1
