"""IdDigest (issue 9's index consistency check): order-independent, O(1) add/remove, sets differ →
digests differ."""

from hypothesis import given
from hypothesis import strategies as st

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.record_index import IdDigest
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment


@given(st.sets(st.integers(0, 2**63 - 1), max_size=50), st.randoms())
def test_digest_is_order_independent_and_removal_undoes_addition(ids, rnd):
    order = list(ids)
    rnd.shuffle(order)
    a, b = IdDigest.of(ids), IdDigest.of(order)
    assert (a.count, a.total) == (b.count, b.total)
    extra = 2**62 + 12345
    if extra not in ids:
        b.add(extra)
        assert (a.count, a.total) != (b.count, b.total)
        b.discard(extra)
        assert (a.count, a.total) == (b.count, b.total)


def test_same_count_different_ids_differ():
    # a plain sum of ids would call {1, 4} and {2, 3} equal
    assert IdDigest.of([1, 4]).total != IdDigest.of([2, 3]).total


def test_index_keeps_its_digest_current():
    md = LedgerMetadata(2, 2, 2, (Segment(0, ("a:1", "b:1")),), state=LedgerState.CLOSED, last_entry_id=0, length=1)
    idx = BookieLedgerIndex()
    for lid in (5, 6, 7):
        idx.put(lid, md)
    idx.put(6, md)  # unchanged re-put
    idx.remove(5)
    idx.remove(99)  # not indexed
    want = IdDigest.of([6, 7])
    assert (idx.digest.count, idx.digest.total) == (want.count, want.total)
