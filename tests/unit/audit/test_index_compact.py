"""The compact BookieLedgerIndex (issue 13) against a brute-force model, and its fast znode decode
against ``formats.deserialize`` (same record, same verdict on malformed metadata)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from autorecovery.audit.index import BookieLedgerIndex
from autorecovery.audit.record_index import IdDigest
from autorecovery.errors import MalformedMetadataError
from autorecovery.ledger import formats
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.ledger.striping import bookie_holds_entries
from autorecovery.proto import bookkeeper_formats_pb2 as pb

BOOKIES = [f"10.0.0.{i}:3181" for i in range(8)]


@st.composite
def metadata(draw) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    wq = draw(st.integers(1, e))
    aq = draw(st.integers(1, wq))
    firsts = sorted(draw(st.sets(st.integers(0, 200), min_size=1, max_size=4)))
    segs = tuple(Segment(f, tuple(draw(st.permutations(BOOKIES))[:e])) for f in firsts)
    state = draw(st.sampled_from(list(LedgerState)))
    last = draw(st.integers(-1, 300)) if state == LedgerState.CLOSED else -1
    version = draw(st.sampled_from([1, 2, 3]))
    v1 = version == 1  # v1 carries no password, no custom metadata and AQ = WQ
    return LedgerMetadata(e, wq, wq if v1 else aq, segs, state=state, last_entry_id=last,
                          length=draw(st.integers(0, 2**40)), digest_type=draw(st.sampled_from(list(DigestType))),
                          password=b"" if v1 else draw(st.binary(max_size=4)), ctime=draw(st.integers(0, 2**41)),
                          custom_metadata={} if v1 else draw(st.dictionaries(st.text(max_size=3), st.binary(max_size=3),
                                                                              max_size=2)),
                          format_version=version)


def kept(md: LedgerMetadata) -> tuple:
    """What the compact index keeps of a ledger (the auditor's view)."""
    return (md.ensemble_size, md.write_quorum, md.ack_quorum, md.segments, md.state, md.last_entry_id, md.length,
            md.digest_type)


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 12), metadata(), st.integers(0, 5)),
    st.tuples(st.just("remove"), st.integers(0, 12)),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_index_matches_a_brute_force_model(seq):
    idx = BookieLedgerIndex()
    model: dict[int, tuple[LedgerMetadata, int]] = {}
    for op in seq:
        if op[0] == "put":
            _, lid, md, version = op
            old = model.get(lid)
            stale = old is not None and 0 < version < old[1]
            changed = idx.put(lid, md, version)
            if stale:
                assert not changed
            else:
                assert changed == (old is None or kept(old[0]) != kept(md))
                model[lid] = (md, version)
        else:
            _, lid = op
            assert idx.remove(lid) == (lid in model)
            model.pop(lid, None)
    assert len(idx) == len(model) and idx.ledger_ids() == sorted(model)
    for lid, (md, version) in model.items():
        got = idx.get(lid)
        assert got is not None and kept(got) == kept(md)
        assert idx.version(lid) == version
    assert [lid for lid, _ in idx.items()] == sorted(model)
    everyone = {b for md, _ in model.values() for b in md.all_bookies()}
    assert idx.bookies() == everyone
    for b in BOOKIES:
        assert idx.ledgers_of(b) == {lid for lid, (md, _) in model.items() if b in md.all_bookies()}
    lost = BOOKIES[:3]
    want: dict[int, list[str]] = {}
    for b in sorted(lost):
        for lid, (md, _) in model.items():
            if b in md.all_bookies() and bookie_holds_entries(md, b):
                want.setdefault(lid, []).append(b)
    assert {k: sorted(v) for k, v in idx.ledgers_to_mark(lost).items()} == want
    assert idx.total_length(list(range(14))) == sum(md.length for md, _ in model.values())
    d = IdDigest.of(model)
    assert (idx.digest.count, idx.digest.total) == (d.count, d.total)
    assert idx.diff({lid: md for lid, (md, _) in model.items()}).mismatches == 0


@settings(max_examples=300, deadline=None)
@given(metadata())
def test_znode_decode_gives_the_record_of_formats_deserialize(md):
    data = formats.serialize(md)
    ref = BookieLedgerIndex()
    want = ref.encode(formats.deserialize(data), 7)
    idx = BookieLedgerIndex()
    first = idx.record_from_znode(data, "/x", 7)   # unknown bookie ids: the slow path validates them
    second = idx.record_from_znode(data, "/x", 7)  # now known: the fast path for v3
    assert idx.get(0) is None
    idx.put_record(1, second)
    assert kept(idx.get(1)) == kept(formats.deserialize(data))  # (v1 keeps no length while open)
    assert first == second and len(first) == len(want)
    if md.format_version == 3:
        assert idx.fast_decodes == 1 and idx.slow_decodes == 1


def v3(m: pb.LedgerMetadataFormat) -> bytes:
    body = m.SerializePartialToString()
    from google.protobuf.internal import encoder
    return formats.HEADER_PREFIX + b"3\n" + encoder._VarintBytes(len(body)) + body


def good() -> pb.LedgerMetadataFormat:
    m = pb.LedgerMetadataFormat(quorumSize=2, ensembleSize=3, length=10, lastEntryId=5, state=3, ackQuorumSize=2)
    s = m.segment.add()
    s.firstEntryId = 0
    s.ensembleMember.extend(BOOKIES[:3])
    return m


def bad_variants() -> list[bytes]:
    out = []
    m = good(); m.ackQuorumSize = 3; out.append(v3(m))  # AQ > WQ
    m = good(); m.quorumSize = 4; out.append(v3(m))  # WQ > E
    m = good(); del m.segment[:]; out.append(v3(m))  # no segment
    m = good(); m.segment[0].ensembleMember.append(BOOKIES[4]); out.append(v3(m))  # E mismatch
    m = good(); s = m.segment.add(); s.firstEntryId = 0; s.ensembleMember.extend(BOOKIES[:3]); out.append(v3(m))
    m = good(); m.segment[0].ensembleMember[1] = "readonly"; out.append(v3(m))  # not a bookie id
    m = good(); m.segment[0].ensembleMember[1] = "bad id!"; out.append(v3(m))
    out.append(v3(good())[:-3])  # truncated
    out.append(formats.HEADER_PREFIX + b"3\n" + b"\xff\xff\xff")  # length prefix beyond the data
    out.append(formats.HEADER_PREFIX + b"9\n" + v3(good())[len(formats.HEADER_PREFIX) + 2:])  # unknown version
    out.append(b"not ledger metadata")
    return out


@pytest.mark.parametrize("data", bad_variants())
def test_malformed_metadata_is_refused_by_both_paths_even_with_known_bookies(data):
    idx = BookieLedgerIndex()
    idx.record_from_znode(v3(good()))  # every bookie of the variants is known valid from here on
    with pytest.raises(MalformedMetadataError):
        formats.deserialize(data, "/x")
    with pytest.raises(MalformedMetadataError, match="/x"):
        idx.put_znode(3, data, path="/x")
    assert 3 not in idx and len(idx) == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_random_bodies_get_the_same_verdict(body):
    idx = BookieLedgerIndex()
    idx.record_from_znode(v3(good()))
    data = formats.HEADER_PREFIX + b"3\n" + bytes([len(body)]) + body
    try:
        want = BookieLedgerIndex().encode(formats.deserialize(data))
    except MalformedMetadataError:
        want = None
    try:
        got = idx.record_from_znode(data)
    except MalformedMetadataError:
        got = None
    assert (want is None) == (got is None)
    if got is not None:
        assert kept(idx._decode(got)) == kept(formats.deserialize(data))


def test_a_stale_version_is_ignored_and_an_unknown_one_applies():
    md1 = LedgerMetadata(2, 2, 2, (Segment(0, tuple(BOOKIES[:2])),))
    md2 = LedgerMetadata(2, 2, 2, (Segment(0, tuple(BOOKIES[2:4])),))
    idx = BookieLedgerIndex()
    assert idx.put(1, md1, 10)
    assert not idx.put(1, md2, 9), "an older read must not undo a newer one"
    assert idx.ledgers_of(BOOKIES[0]) == {1}
    assert idx.put(1, md2, 11) and idx.ledgers_of(BOOKIES[0]) == frozenset()
    assert idx.put(1, md1, 0), "version 0 (unknown, e.g. a reconcile) always applies"
    assert not idx.put(1, md1, 12) and idx.version(1) == 12, "same content: only the version moves"


def test_memory_per_ledger_is_compact():
    idx = BookieLedgerIndex()
    for lid in range(2000):
        idx.put(lid, LedgerMetadata(3, 2, 2, (Segment(0, (BOOKIES[lid % 8], BOOKIES[(lid + 1) % 8],
                                                          BOOKIES[(lid + 2) % 8])),),
                                    state=LedgerState.CLOSED, last_entry_id=99, length=4096, password=b"p" * 20))
    assert idx.memory_bytes() / 2000 < 400  # bytes per ledger, bookie sets included (was ~1.6 KB)
