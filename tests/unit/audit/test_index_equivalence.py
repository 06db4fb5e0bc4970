"""The compact (columnar) index against the record index on random clusters: every query the auditor
makes of the index gives the same answer after every step, merges and heap compactions included."""

from __future__ import annotations

import random

import pytest

from autorecovery.audit.compact_index import CompactLedgerIndex
from autorecovery.audit.record_index import RecordLedgerIndex
from autorecovery.ledger import formats
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment


def random_metadata(rng: random.Random, bookies: list[str]) -> LedgerMetadata:
    e = rng.choice((1, 2, 3, 3, 3, 5))
    wq = rng.randint(1, e)
    aq = rng.randint(1, wq)
    firsts = sorted(rng.sample(range(0, 300), rng.choice((1, 1, 1, 2, 3))))
    state = rng.choice(list(LedgerState))
    last = rng.randint(-1, 400) if state == LedgerState.CLOSED else -1
    if state == LedgerState.CLOSED:
        firsts = [f for f in firsts if f <= max(last, 0)] or [0]
    segs = tuple(Segment(f, tuple(rng.sample(bookies, e))) for f in firsts)
    return LedgerMetadata(e, wq, aq, segs, state=state, last_entry_id=last, length=rng.randint(0, 2**40),
                          digest_type=rng.choice(list(DigestType)), password=rng.choice((b"", b"pw")))


def random_id(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.7:
        return rng.randint(0, 3000)
    if r < 0.9:
        return rng.randint(2**32 - 50, 2**32 + 50)  # ids either side of the 32-bit bookie arrays
    return rng.randint(0, 2**62)


def same_answers(a: CompactLedgerIndex, b: RecordLedgerIndex, bookies: list[str], rng: random.Random) -> None:
    assert len(a) == len(b)
    assert a.ledger_ids() == b.ledger_ids()
    ids = b.ledger_ids()
    probe = ids[:: max(1, len(ids) // 50)] + [random_id(rng) for _ in range(20)]
    for lid in probe:
        assert (lid in a) == (lid in b)
        assert a.get(lid) == b.get(lid)
        assert a.version(lid) == b.version(lid)
    assert a.total_length(probe) == b.total_length(probe)
    assert a.bookies() == b.bookies()
    for bk in [*bookies, "never:1"]:
        assert a.ledgers_of(bk) == b.ledgers_of(bk)
        assert a.in_some_ensemble(bk) == b.in_some_ensemble(bk)
    lost = rng.sample(bookies, 3)
    assert a.ledgers_to_mark(lost) == b.ledgers_to_mark(lost)
    assert (a.digest.count, a.digest.total) == (b.digest.count, b.digest.total)


@pytest.mark.parametrize("seed", range(6))
def test_compact_index_answers_as_the_record_index(seed, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(CompactLedgerIndex, "merge_min", rng.choice((1, 8, 64)))
    monkeypatch.setattr(CompactLedgerIndex, "garbage_min", rng.choice((0, 256, 4096)))
    bookies = [f"10.0.{i // 200}.{i % 200}:3181" for i in range(rng.choice((5, 40)))]
    a, b = CompactLedgerIndex(), RecordLedgerIndex()
    for step in range(1500):
        r = rng.random()
        lid = random_id(rng) if r < 0.8 or not len(b) else rng.choice(b.ledger_ids())
        if r < 0.55:
            md = random_metadata(rng, bookies)
            version = rng.choice((0, rng.randint(1, 50)))
            assert a.put(lid, md, version) == b.put(lid, md, version)
        elif r < 0.7:
            data = formats.serialize(random_metadata(rng, bookies))
            assert a.put_znode(lid, data, 7, "/x") == b.put_znode(lid, data, 7, "/x")
        elif r < 0.9 and len(b):
            old = b.get(lid)
            if old is not None:  # a rewrite of the same size (close) or a longer one (ensemble change)
                md = random_metadata(rng, bookies)
                assert a.put(lid, md, 0) == b.put(lid, md, 0)
        else:
            assert a.remove(lid) == b.remove(lid)
        if step % 150 == 0:
            same_answers(a, b, bookies, rng)
    same_answers(a, b, bookies, rng)
    assert [(lid, md) for lid, md in a.items()] == [(lid, md) for lid, md in b.items()]
    scan = {lid: md for lid, md in b.items()}
    scan.pop(next(iter(scan)))
    scan[10**12] = random_metadata(rng, bookies)
    ra, rb = a.reconcile(dict(scan)), b.reconcile(dict(scan))
    assert (ra.added, ra.removed, ra.changed) == (rb.added, rb.removed, rb.changed)
    same_answers(a, b, bookies, rng)


def test_items_sees_changes_made_while_iterating():
    a = CompactLedgerIndex()
    md = LedgerMetadata(1, 1, 1, (Segment(0, ("a:1",)),))
    for lid in range(10):
        a.put(lid, md)
    it = a.items()
    assert next(it)[0] == 0
    a.remove(5)
    a.put(3, LedgerMetadata(1, 1, 1, (Segment(0, ("b:1",)),)))
    a.put(100, md)  # added after the snapshot: not seen
    got = list(it)
    assert [lid for lid, _ in got] == [1, 2, 3, 4, 6, 7, 8, 9]
    assert got[2][1].segments[0].ensemble == ("b:1",)


def test_bytes_per_ledger_under_100_at_e3():
    a = CompactLedgerIndex()
    bookies = [f"10.1.{i // 250}.{i % 250}:3181" for i in range(1000)]
    rng = random.Random(1)
    for lid in range(50_000):
        a.put(lid, LedgerMetadata(3, 2, 2, (Segment(0, tuple(rng.sample(bookies, 3))),), state=LedgerState.CLOSED,
                                  last_entry_id=99, length=100 * 1024, password=b"pw"))
    assert a.memory_bytes() / 50_000 < 100


def test_the_auditor_index_is_the_compact_one():
    from autorecovery.audit.index import BookieLedgerIndex
    from autorecovery.roles import auditor

    assert BookieLedgerIndex is CompactLedgerIndex
    assert auditor.BookieLedgerIndex is CompactLedgerIndex
