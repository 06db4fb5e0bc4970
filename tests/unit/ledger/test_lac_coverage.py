"""The LAC read's coverage rule (upstream RRQuorumCoverageSet.checkCovered), pure logic."""

from __future__ import annotations

import pytest

from autorecovery.ledger.lac_coverage import lac_read_covered


def test_all_known_is_covered_none_known_is_not() -> None:
    assert lac_read_covered(3, 2, 2, {0, 1, 2})
    assert not lac_read_covered(3, 2, 2, set())


def test_no_striping_needs_e_minus_aq_plus_one() -> None:
    # E = WQ = 3, AQ = 2: any 2 known bookies (E - AQ + 1) suffice, 1 does not
    assert all(lac_read_covered(3, 3, 2, k) for k in ({0, 1}, {1, 2}, {0, 2}))
    assert not any(lac_read_covered(3, 3, 2, {i}) for i in range(3))
    # AQ = 1: every bookie must answer (an entry acked by one bookie may be on any of them)
    assert not lac_read_covered(3, 3, 1, {0, 1})
    assert lac_read_covered(3, 3, 1, {0, 1, 2})


def test_striped_ensemble_checks_each_write_quorum() -> None:
    # E=4 WQ=2 AQ=2: quorums {0,1},{1,2},{2,3},{3,0}; losing 0 and 2 leaves each quorum one known
    assert lac_read_covered(4, 2, 2, {1, 3})
    # losing 0 and 1 leaves quorum {0,1} with 2 (= AQ) unknown
    assert not lac_read_covered(4, 2, 2, {2, 3})
    # E=5 WQ=3 AQ=2: two adjacent unknown bookies share a quorum
    assert not lac_read_covered(5, 3, 2, {2, 3, 4})
    assert lac_read_covered(5, 3, 3, {2, 3, 4})


@pytest.mark.parametrize("e,wq,aq", [(2, 3, 2), (3, 2, 3), (3, 2, 0)])
def test_bad_sizes_are_refused(e: int, wq: int, aq: int) -> None:
    with pytest.raises(ValueError, match=f"E={e} WQ={wq} AQ={aq}"):
        lac_read_covered(e, wq, aq, {0})
