"""``placement_adherence``: the placement check judges where an ensemble's members are, a down or read-only
member keeping its rack (ours), while ``is_ensemble_adhering`` keeps upstream's rule (such a member gives no
rack). The stock hour found why: with upstream's rule, every check during an outage FAILed the E3/WQ2 and
E5/WQ3 ledgers naming the bookie, BP-54 re-marked 15-43 ledgers every 20 s that its repair could not (and need
not) move, and the under-replication queue never emptied."""

from __future__ import annotations

from _placement_testkit import bid, make

from autorecovery.placement import Adherence, RackawarePolicy, RegionawarePolicy

RACKS = {bid(20): "/rack-a", bid(21): "/rack-b", bid(22): "/rack-c",
         bid(23): "/rack-a", bid(24): "/rack-b", bid(25): "/rack-c"}
# the hour's ledger 5 (E5/WQ3): every write set spans 2 racks while all six are writable
E5 = [bid(21), bid(24), bid(22), bid(25), bid(20)]
E3 = [bid(20), bid(21), bid(22)]


def test_a_down_or_read_only_member_keeps_its_rack_for_the_placement_check():
    down_22 = make(RackawarePolicy, RACKS, writable=set(RACKS) - {bid(22)})
    assert down_22.is_ensemble_adhering(E5, 3, 2) == Adherence.FAIL  # upstream: (21, 24, 22) has rack b only
    assert down_22.placement_adherence(E5, 3, 2) == Adherence.MEETS_STRICT
    ro_21 = make(RackawarePolicy, RACKS, writable=set(RACKS) - {bid(21)}, readonly={bid(21)})
    assert ro_21.is_ensemble_adhering(E3, 2, 2) == Adherence.FAIL
    assert ro_21.placement_adherence(E3, 2, 2) == Adherence.MEETS_STRICT


def test_a_real_violation_still_fails_and_an_unplaceable_member_counts_nothing():
    down_23 = make(RackawarePolicy, RACKS, writable=set(RACKS) - {bid(23)})
    one_rack = [bid(20), bid(23), bid(22)]  # write set (20, 23): rack a twice, 23 down or not
    assert down_23.placement_adherence(one_rack, 2, 2) == Adherence.FAIL
    unknown = make(RackawarePolicy, RACKS)  # 127.0.0.99 is in no rack the resolver knows
    assert unknown.placement_adherence([bid(20), bid(99), bid(22)], 2, 2) == Adherence.FAIL
    everyone = make(RackawarePolicy, RACKS)
    assert everyone.placement_adherence(E5, 3, 2) == everyone.is_ensemble_adhering(E5, 3, 2) == Adherence.MEETS_STRICT


def test_region_aware_counts_a_down_member_in_its_region_and_rack():
    regions = {bid(i): f"/region-{'xy'[i % 2]}/rack-{i}" for i in range(20, 26)}
    ens = [bid(20), bid(21), bid(22)]
    all_up = make(RegionawarePolicy, regions)
    down = make(RegionawarePolicy, regions, writable=set(regions) - {bid(21)})
    assert down.placement_adherence(ens, 2, 2) == all_up.is_ensemble_adhering(ens, 2, 2)
    assert down.is_ensemble_adhering(ens, 2, 2) == Adherence.FAIL  # upstream's rule: 21 gives nothing
