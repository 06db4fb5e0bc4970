"""Replacement choice when the spares are too few: dead and read-only members take the spares first, a
live writable member that only lacks entries is refilled in place (pure; ``plan/targets.py``).

The case (a stock cluster of 6 bookies, an E5 segment): a bookie restarted during a write lacks the last
entries acknowledged before its crash, then another member of that segment dies. One spare is left; in
index order the live member took it and the dead one got none, so the worker reported no target and the
ledger stayed marked.
"""

from __future__ import annotations

import random

import pytest

from autorecovery.errors import NotEnoughBookiesError
from autorecovery.placement import Adherence, PlacementConfig, RackawarePolicy, StaticResolver
from autorecovery.placement.spread import SpreadReplacer
from autorecovery.plan.targets import choose_replacements, plan_fragment_copy
from autorecovery.rpc.convert import stored_on

#: six bookies in three racks; the segment's ensemble is b0..b4, b5 the one spare
RACKS = {"b0:1": "/r0", "b1:1": "/r1", "b2:1": "/r2", "b3:1": "/r0", "b4:1": "/r1", "b5:1": "/r2"}
E5 = ("b0:1", "b1:1", "b2:1", "b3:1", "b4:1")
SPARE = "b5:1"


class OrderedPolicy:
    """Offers the first bookie of ``pool`` not excluded and not a member; records every call."""

    def __init__(self, pool):
        self.pool = list(pool)
        self.calls: list[str] = []

    def replace_bookie(self, e, wq, aq, current, old, exclude):
        self.calls.append(old)
        for b in self.pool:
            if b not in exclude and b not in current:
                return type("R", (), {"bookie": b})()
        raise NotEnoughBookiesError(f"no bookie to replace {old}")


def _rackaware(writable, readonly=()):
    p = RackawarePolicy(PlacementConfig.from_properties({}), StaticResolver(RACKS), None, random.Random(5))
    p.on_cluster_changed(set(writable), set(readonly))
    return p


def test_dead_member_takes_the_only_spare_and_the_live_one_is_refilled_in_place():
    # b1 (index 1) is alive and lacks entries; b2 (index 2) is dead
    writable = set(RACKS) - {"b2:1"}
    pol = OrderedPolicy(RACKS)
    out = choose_replacements(ensemble=E5, bad_indexes=[1, 2], replace_bookie=pol.replace_bookie,
                              ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable)
    assert out == {1: "b1:1", 2: SPARE}
    assert list(out) == [1, 2]


def test_with_the_real_rackaware_policy_and_the_worker_replacer_the_result_adheres():
    writable = set(RACKS) - {"b2:1"}
    pol = _rackaware(writable)
    out = choose_replacements(ensemble=E5, bad_indexes=[1, 2], replace_bookie=SpreadReplacer(pol),
                              ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable,
                              readonly=pol.readonly_bookies)
    assert out == {1: "b1:1", 2: SPARE}
    healed = [out.get(i, b) for i, b in enumerate(E5)]
    assert pol.is_ensemble_adhering(healed, 3, 2) != Adherence.FAIL
    # the copy: b1's share comes from the other members (never from b1 itself), b5 gets b2's share
    plan = plan_fragment_copy(ensemble=E5, write_quorum=3, first=0, last=49, replacements=out,
                              readable=writable - {"b1:1"}, last_resort={"b1:1"})
    assert not plan.unsourced
    assert all(s.source not in ("b1:1", "b2:1") for s in plan.streams)
    for idx, target in ((1, "b1:1"), (2, SPARE)):
        want = {e for e in range(50) if stored_on(e, 5, 3, idx)}
        got = {e for s in plan.streams if target in s.targets for e in s.entry_ids() if stored_on(e, 5, 3, idx)}
        assert got == want, target


def test_enough_spares_keeps_upstream_index_order_and_takes_spares_for_both():
    pool = [*RACKS, "x:1", "y:1"]
    writable = set(pool) - {"b2:1"}
    pol = OrderedPolicy(pool)
    out = choose_replacements(ensemble=E5, bad_indexes=[2, 1], replace_bookie=pol.replace_bookie,
                              ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable)
    assert out == {1: SPARE, 2: "x:1"}
    assert pol.calls == ["b1:1", "b2:1"]  # one round, index order


def test_a_read_only_member_lacking_entries_is_never_refilled_in_place():
    # b1 turned read-only (cannot take adds) and b2 is dead: two need a spare, one exists
    writable = set(RACKS) - {"b1:1", "b2:1"}
    pol = OrderedPolicy(RACKS)
    with pytest.raises(NotEnoughBookiesError, match=r"index 2 \(b2:1\)"):
        choose_replacements(ensemble=E5, bad_indexes=[1, 2], replace_bookie=pol.replace_bookie,
                            ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable, readonly={"b1:1"})
    # alone, the read-only member takes the spare
    out = choose_replacements(ensemble=E5, bad_indexes=[1], replace_bookie=OrderedPolicy(RACKS).replace_bookie,
                              ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable, readonly={"b1:1"})
    assert out == {1: SPARE}


def test_two_dead_members_and_one_spare_still_name_the_index_left_without_a_target():
    writable = set(RACKS) - {"b2:1", "b3:1"}
    pol = OrderedPolicy(RACKS)
    with pytest.raises(NotEnoughBookiesError, match=r"index 3 \(b3:1\)"):
        choose_replacements(ensemble=E5, bad_indexes=[0, 2, 3], replace_bookie=pol.replace_bookie,
                            ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable)
    # the second round served the dead ones first: b2, b3, then b0
    assert pol.calls[-2:] == ["b2:1", "b3:1"]


def test_a_live_member_before_a_dead_one_with_no_spare_at_all_is_refilled_and_the_dead_one_named():
    writable = set(E5) - {"b2:1"}  # the spare is gone too
    pol = OrderedPolicy(E5)
    with pytest.raises(NotEnoughBookiesError, match=r"index 2 \(b2:1\)"):
        choose_replacements(ensemble=E5, bad_indexes=[1, 2], replace_bookie=pol.replace_bookie,
                            ensemble_size=5, write_quorum=3, ack_quorum=2, writable=writable)
