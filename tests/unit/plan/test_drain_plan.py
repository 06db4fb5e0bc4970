"""The live drain planner (BP-56, pure): which closed segments move, to which placement-adhering
bookie, how many bytes; open ledgers wait; a drain that would break placement names the ledgers."""

from __future__ import annotations

import json

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.placement.config import PlacementConfig
from autorecovery.placement.default import DefaultPolicy
from autorecovery.placement.rackaware import RackawarePolicy
from autorecovery.placement.resolvers import PulsarRackResolver
from autorecovery.plan.drain import ASSUMED_RATE_BYTES_PER_S, plan_drain, segment_bytes


def md(segments, wq=2, aq=2, last=99, length=10_000, state=LedgerState.CLOSED):
    segs = tuple(Segment(first, tuple(ens)) for first, ens in segments)
    return LedgerMetadata(ensemble_size=len(segs[0].ensemble), write_quorum=wq, ack_quorum=aq, segments=segs,
                          state=state, last_entry_id=last if state == LedgerState.CLOSED else -1,
                          length=length if state == LedgerState.CLOSED else 0)


def rack_policy(racks: dict[str, str], **props):
    doc = {"default": {b: {"rack": r} for b, r in racks.items()}}
    p = RackawarePolicy(PlacementConfig.from_properties(props) if props else PlacementConfig(),
                        PulsarRackResolver(json.dumps(doc)), default_rack="/default-rack")
    p.on_cluster_changed(set(racks), set())
    return p


def test_every_closed_segment_naming_the_bookie_moves_and_nothing_else():
    bookies = {"a:1", "b:1", "c:1", "d:1", "e:1"}
    p = DefaultPolicy(PlacementConfig())
    p.on_cluster_changed(bookies, set())
    ledgers = {
        1: md([(0, ["a:1", "b:1", "c:1"]), (50, ["d:1", "b:1", "c:1"])]),  # a:1 in the first segment only
        2: md([(0, ["b:1", "c:1", "d:1"])]),  # not on a:1
        3: md([(0, ["a:1", "b:1", "c:1"])], state=LedgerState.OPEN),  # open: waits for its writer
    }
    plan = plan_drain("a:1", ledgers, replace_bookie=p.replace_bookie, is_adhering=p.is_ensemble_adhering,
                      writable=bookies)
    assert [(m.ledger_id, m.first_entry_id, m.last_entry_id, m.index) for m in plan.moves] == [(1, 0, 49, 0)]
    move = plan.moves[0]
    assert move.target in {"d:1", "e:1"} and move.new_ensemble == (move.target, "b:1", "c:1")
    # E3 WQ2: index 0 stores residues 0 (17 ids) and 2 (16 ids) of entries 0..49, 100 bytes each
    assert move.bytes == segment_bytes(ledgers[1], 0, 0) == 3300
    assert plan.waiting_open == [3] and not plan.blocked and not plan.done
    assert plan.eta_s(100.0) == 33.0 and plan.eta_s(0) is None
    assert plan.as_dict(ASSUMED_RATE_BYTES_PER_S)["segments"] == 1


def test_read_only_and_drained_bookies_are_never_targets_and_targets_spread():
    bookies = {"a:1", "b:1", "c:1", "d:1", "e:1"}
    p = DefaultPolicy(PlacementConfig())
    p.on_cluster_changed(bookies - {"e:1"}, {"e:1"})
    ledgers = {1: md([(0, ["a:1", "b:1", "c:1"]), (50, ["a:1", "c:1", "b:1"])])}
    plan = plan_drain("a:1", ledgers, replace_bookie=p.replace_bookie, is_adhering=p.is_ensemble_adhering,
                      writable=bookies - {"e:1"}, readonly={"e:1"})
    assert [m.target for m in plan.moves] == ["d:1", "d:1"]  # the only writable spare, reused when needed
    assert all("a:1" not in m.new_ensemble for m in plan.moves)


def test_no_spare_bookie_blocks_with_the_ledger_named():
    bookies = {"a:1", "b:1", "c:1"}
    p = DefaultPolicy(PlacementConfig())
    p.on_cluster_changed(bookies, set())
    plan = plan_drain("a:1", {7: md([(0, ["a:1", "b:1", "c:1"])])}, replace_bookie=p.replace_bookie,
                      is_adhering=p.is_ensemble_adhering, writable=bookies)
    assert not plan.moves and list(plan.blocked) == [7]
    assert "no replacement for a:1" in plan.blocked[7]


def test_last_bookie_of_its_rack_blocks_when_the_replacement_fails_placement():
    racks = {"a:1": "/r1", "b:1": "/r2", "c:1": "/r2", "d:1": "/r2"}
    p = rack_policy(racks, enforceMinNumRacksPerWriteQuorum="true", minNumRacksPerWriteQuorum="2")
    ledgers = {5: md([(0, ["a:1", "b:1"])], wq=2, aq=2), 6: md([(0, ["b:1", "c:1"])], wq=2, aq=2)}
    plan = plan_drain("a:1", ledgers, replace_bookie=p.replace_bookie, is_adhering=p.is_ensemble_adhering,
                      writable=set(racks))
    assert list(plan.blocked) == [5] and not plan.moves
    assert "a:1" in plan.blocked[5]
    # a second bookie in /r1: the same drain is possible and keeps both racks in the write set
    racks["e:1"] = "/r1"
    p = rack_policy(racks, enforceMinNumRacksPerWriteQuorum="true", minNumRacksPerWriteQuorum="2")
    plan = plan_drain("a:1", ledgers, replace_bookie=p.replace_bookie, is_adhering=p.is_ensemble_adhering,
                      writable=set(racks))
    assert not plan.blocked and [m.target for m in plan.moves] == ["e:1"]


def test_nothing_names_the_bookie_is_done():
    plan = plan_drain("z:1", {1: md([(0, ["a:1", "b:1"])])}, replace_bookie=lambda *a, **k: None,
                      is_adhering=None, writable={"a:1", "b:1"})
    assert plan.done and plan.bytes_total == 0 and plan.eta_s(1.0) == 0.0
