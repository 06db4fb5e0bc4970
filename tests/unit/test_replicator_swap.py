"""The guarded ensemble swap of roles/replicator.py (issue 12): every CAS guard, without servers."""

from __future__ import annotations

import pytest

from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment
from autorecovery.roles.replicator import _Refused, swap_members

OLD = ("a:1", "b:1", "c:1")


def md(segs, closed=True):
    return LedgerMetadata(3, 2, 2, tuple(Segment(f, tuple(e)) for f, e in segs),
                          state=LedgerState.CLOSED if closed else LedgerState.OPEN, last_entry_id=99 if closed else -1)


def test_swaps_only_members_that_are_still_the_old_ones():
    out, swapped = swap_members(md([(0, OLD)]), 0, OLD, {1: "x:1"})
    assert out.segments[0].ensemble == ("a:1", "x:1", "c:1") and swapped == {"b:1": "x:1"}
    # someone replaced b already: nothing left to swap
    assert swap_members(md([(0, ("a:1", "y:1", "c:1"))]), 0, OLD, {1: "x:1"}) is None


def test_guards_refuse_a_gone_segment_an_open_last_segment_and_duplicates():
    with pytest.raises(_Refused, match="gone"):
        swap_members(md([(0, OLD)]), 50, OLD, {1: "x:1"})
    with pytest.raises(_Refused, match="open last segment"):
        swap_members(md([(0, OLD)], closed=False), 0, OLD, {1: "x:1"})
    with pytest.raises(_Refused, match="duplicate"):
        swap_members(md([(0, OLD)]), 0, OLD, {1: "c:1"})
    # an earlier segment of an open ledger may be swapped
    out, _ = swap_members(md([(0, OLD), (50, ("a:1", "d:1", "c:1"))], closed=False), 0, OLD, {1: "x:1"})
    assert out.segments[0].ensemble[1] == "x:1" and out.state == LedgerState.OPEN
