"""Entry digests and round-robin striping (pure)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autorecovery.errors import DigestMismatchError
from autorecovery.ledger.digest import pack_entry, unpack_entry
from autorecovery.ledger.metadata import LedgerMetadata, Segment
from autorecovery.ledger.striping import entries_on_index, first_last_on_index, index_stores, write_set


def test_digest_round_trip_and_detects_corruption():
    body = pack_entry(7, 3, 2, 100, b"hello")
    e = unpack_entry(body, 7, 3, "b:1")
    assert (e.payload, e.lac, e.length) == (b"hello", 2, 100)
    flipped = bytearray(body)
    flipped[-1] ^= 1
    with pytest.raises(DigestMismatchError, match="ledger 7 entry 3 from b:1"):
        unpack_entry(bytes(flipped), 7, 3, "b:1")


def test_digest_detects_misplaced_entry():
    body = pack_entry(7, 3, 2, 100, b"hello")
    with pytest.raises(DigestMismatchError, match="body is for ledger 7 entry 3"):
        unpack_entry(body, 7, 4)
    with pytest.raises(DigestMismatchError, match="truncated"):
        unpack_entry(body[:10], 7, 3)


def test_write_set_round_robin():
    assert write_set(0, 3, 2) == [0, 1]
    assert write_set(2, 3, 2) == [2, 0]
    assert write_set(4, 5, 3) == [4, 0, 1]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.data())
def test_index_predicates_agree_with_write_set(e_size, data):
    wq = data.draw(st.integers(1, e_size))
    first = data.draw(st.integers(0, 50))
    last = data.draw(st.integers(first - 1, first + 30))
    for idx in range(e_size):
        expected = [e for e in range(first, last + 1) if idx in write_set(e, e_size, wq)]
        assert list(entries_on_index(first, last, idx, e_size, wq)) == expected
        assert all(index_stores(idx, e, e_size, wq) for e in expected)
        lo, hi = first_last_on_index(first, last, idx, e_size, wq)
        assert (lo, hi) == ((expected[0], expected[-1]) if expected else (-1, -1))


def test_segment_replacement_only_touches_its_segment():
    md = LedgerMetadata(3, 2, 2, (Segment(0, ("a:1", "b:1", "c:1")), Segment(5, ("a:1", "b:1", "d:1"))))
    new = md.with_segment_replaced(0, {"a:1": "x:1"})
    assert new.segments[0].ensemble == ("x:1", "b:1", "c:1")
    assert new.segments[1].ensemble == ("a:1", "b:1", "d:1")
    assert md.ensemble_at(4) == ("a:1", "b:1", "c:1") and md.ensemble_at(5)[2] == "d:1"
    with pytest.raises(KeyError):
        md.with_segment_replaced(3, {"a:1": "x:1"})
