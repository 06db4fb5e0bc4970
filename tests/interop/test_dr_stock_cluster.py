"""The disaster-recovery story of the BP-54 seed on a stock Apache BookKeeper 4.17 cluster (issue 24):
real Java bookies in two racks, ledgers written by upstream's Java client, our daemons next to every
bookie. Rack A dies: our workers heal best effort into rack B. Rack A returns: our Auditor's placement
check marks the ledgers that no longer adhere and our workers (BP-54) move a member back to rack A;
upstream's own placement check (its Auditor's, run by its client) judges both states.
Rack B dies: upstream's own client reads every acknowledged entry back, digests checked.

E3/WQ3/AQ2 (every member holds every entry, so one member per rack is enough; see
tests/e2e/test_dr_scenario.py for why E3/WQ2 cannot pass this story under any placement)."""

from __future__ import annotations

import pytest

from interop_support import PW, markers, metadata, no_errors, our_daemons, wait_until

pytestmark = pytest.mark.e2e

LEDGERS, ENTRIES = 12, 200
REPAIR = {"auditorPeriodicPlacementPolicyCheckInterval": "1",
          "repairedPlacementPolicyNotAdheringBookieEnabled": "true",
          "minNumRacksPerWriteQuorum": "2"}


def test_rack_dies_heals_returns_spreads_other_rack_dies_nothing_lost(java_cluster):
    c = java_cluster(bookies=6, racks=2)  # rack-a: 0 2 4, rack-b: 1 3 5
    rack_a, rack_b = [0, 2, 4], [1, 3, 5]
    ids_a = {c.bookie_ids[i] for i in rack_a}
    ids_b = {c.bookie_ids[i] for i in rack_b}
    w = c.writer(ledgers=LEDGERS, entries=ENTRIES, entry_size=1024, ensemble=3, wq=3, aq=2, digest="CRC32C",
                 password=PW)
    ids = [lg["ledger"] for lg in w["ledgers"]]

    def ensembles() -> list[set[str]]:
        return [set(seg.ensemble) for lid in ids for seg in metadata(c, lid).segments]

    assert all(e & ids_a and e & ids_b for e in ensembles())  # upstream's client placed across both racks
    daemons = our_daemons(c, range(6), **REPAIR)
    try:
        # -- rack A dies (bookies and their daemons): best effort into rack B ------------------------
        for i in rack_a:
            c.bookies[i].kill()
            daemons.pop(i).kill()
        wait_until(lambda: all(e <= ids_b for e in ensembles()) and not markers(c), 120,
                   "every ensemble healed into rack B")
        # upstream's own placement check (its Auditor's, run by its client with the same racks) sees
        # every healed segment in one rack: FAIL (minNumRacksPerWriteQuorum 2)
        pc = c.placement_check(ids)
        assert pc["errors"] == [] and pc["closed"] == LEDGERS, pc
        assert {f["ledger"] for f in pc["fail"]} == set(ids), pc

        # -- rack A returns: placement check + BP-54 spread every ensemble over both racks ------------
        for i in rack_a:
            c.bookies[i].start(wait=False)
        for i in rack_a:
            c.bookies[i].wait_registered(60)
        daemons.update(our_daemons(c, rack_a, **REPAIR))
        wait_until(lambda: all(e & ids_a and e & ids_b for e in ensembles()) and not markers(c), 180,
                   "every ensemble spread over both racks again")
        pc = c.placement_check(ids)  # and upstream's check agrees: no segment fails any more
        assert pc["ok"] and pc["fail"] == [] and pc["closed"] == LEDGERS, pc

        # -- rack B dies: every entry reads back from rack A with upstream's client -------------------
        for i in rack_b:
            c.bookies[i].kill()
            daemons.pop(i).kill()
        r = c.reader(ids, password=PW)
        assert r["ok"], r
        assert [(lg["entries_read"], lg["bad_entries"]) for lg in r["ledgers"]] == [(ENTRIES, 0)] * LEDGERS
        no_errors(daemons)
    finally:
        for d in daemons.values():
            d.stop()
