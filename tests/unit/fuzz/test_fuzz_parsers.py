"""Issue 15 "bad input": hypothesis fuzzing of every parser that reads ZooKeeper or wire data.

Each parser is fed random bytes and mutations of valid encodings (bit flips, truncation, spliced
garbage, field-level garbage such as huge or Unicode digits). Each call must either return a value
or raise the documented project error (autorecovery/errors.py) naming the znode / key / source;
never another exception type. The runs are time-bounded for CI: ``deadline=None`` and a modest
``max_examples`` (``FUZZ_EXAMPLES`` in the environment raises it for a longer local run).

Named regression tests for the bugs fuzzing found sit at the end of the module.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autorecovery.audit.maintenance import KINDS, Window
from autorecovery.bookie.cookie import Cookie
from autorecovery.errors import (
    AutoRecoveryError,
    CompatibilityError,
    ConfigError,
    CookieError,
    MalformedMetadataError,
    UnavailableError,
)
from autorecovery.ledger import formats
from autorecovery.ledger.layout import layout_data, parse_layout
from autorecovery.ledger.metadata import DigestType, LedgerMetadata, LedgerState, Segment
from autorecovery.placement.resolvers import PulsarRackResolver
from autorecovery.proto import bookkeeper_formats_pb2 as pb
from autorecovery.rpc.convert import (
    advertised_protocols,
    decode_service_info,
    decode_service_properties,
    encode_service_info,
)
from autorecovery.zk.election import decode_vote, encode_vote, vote_seq
from autorecovery.zk.topology_source import _one_level_racks
from autorecovery.zk.ur.formats import CTIME_KINDS, decode_ctime, decode_marker, encode_ctime, encode_marker

N = int(os.environ.get("FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=N, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

ZNODE = "/ledgers/00/0000/L0001"

# -- input strategies ---------------------------------------------------------------------------------

#: tokens that reach deep branches: numbers at and past every integer limit, Unicode digits that
#: str.isdigit() accepts but int() refuses, JSON/text-format punctuation, non-UTF-8 bytes
TOKENS = [
    b"-1", b"0", b"9223372036854775807", b"-9223372036854775808", b"18446744073709551616",
    b"9" * 5000, b"1e999", b"-1e999", b"NaN", b"Infinity", b"1_0", "\u00b2".encode(), "\u0661".encode(),
    "\uff11".encode(), b"\xff\xfe", b"\x00", b"\n", b"\t", b"\r\n", b":", b"{", b"}", b"[", b"]", b'"',
    b"[" * 3000, b"{" * 3000, b"CLOSED", b"-102", b"<", b">", b"\\", b"\\x", b"#", b"'", b"\x80",
    b"\xc0\x80", b"\xed\xa0\x80",
]


def _mutate(data: bytes, ops: list[tuple[int, int, int, bytes]]) -> bytes:
    """Apply (kind, position, length, token) operations to ``data``."""
    b = bytearray(data)
    for kind, pos, ln, tok in ops:
        p = pos % (len(b) + 1)
        if kind == 0 and b:  # bit flip
            q = pos % len(b)
            b[q] ^= 1 << (ln % 8)
        elif kind == 1:  # truncate
            del b[p:]
        elif kind == 2:  # insert a token
            b[p:p] = tok
        elif kind == 3:  # replace a span by a token
            b[p:p + ln % 16] = tok
        elif kind == 4:  # delete a span
            del b[p:p + ln % 16]
        elif kind == 5:  # duplicate a span
            b[p:p] = b[p:p + ln % 64]
    return bytes(b)


_ops = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1 << 16), st.integers(0, 64),
                          st.one_of(st.sampled_from(TOKENS), st.sampled_from(TOKENS), st.sampled_from(TOKENS),
                                    st.binary(max_size=8))), min_size=1, max_size=8)


def mutated(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a valid encoding with a few mutations applied."""
    return st.one_of(
        st.binary(max_size=300),
        st.builds(_mutate, valid, _ops),
    )


#: raw values spliced into a structured document (a JSON value, a text-format scalar, a line field)
RAW = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "9" * 5000, "-" + "9" * 5000, '"x"', "[]", "{}", "null",
       "true", "1.5", "-0", "0", "-1", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
       "[" * 5000 + "]" * 5000, '"' + "a" * 3000 + '"', '"\\ud800"', "\u00b2", "\u0661", "\uff11", "0x10", "1_0", ""]


def fields(*names: str) -> st.SearchStrategy[dict[str, str]]:
    """Maps of field name → raw value text (a subset of ``names`` plus maybe an unknown field)."""
    return st.dictionaries(st.sampled_from([*names, "zz"]), st.one_of(st.sampled_from(RAW), st.text(max_size=6)),
                           max_size=len(names) + 1)


def check(fn, data, errors: type[BaseException] | tuple[type[BaseException], ...], name: str | None):
    """Call ``fn(data)``; a raised exception must be one of ``errors`` (all project errors) and its
    message must name ``name``. Returns the value or None."""
    try:
        return fn(data)
    except errors as exc:
        assert isinstance(exc, AutoRecoveryError), f"{type(exc).__name__} is not a project error"
        if name is not None:
            assert name in str(exc), f"error does not name {name!r}: {exc}"
        assert len(str(exc)) < 20_000, "error message is unbounded"
        return None


ids = st.from_regex(r"\A[a-z0-9.\-]{1,12}:[0-9]{1,5}\Z")


@st.composite
def metadata(draw) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    wq = draw(st.integers(1, e))
    aq = draw(st.integers(1, wq))
    starts = sorted(draw(st.lists(st.integers(0, 10_000), min_size=1, max_size=3)))
    starts[0] = 0
    segs = tuple(Segment(s, tuple(draw(st.lists(ids, min_size=e, max_size=e, unique=True)))) for s in starts)
    state = draw(st.sampled_from(list(LedgerState)))
    v = draw(st.sampled_from([1, 2, 3]))
    if v == 1:
        aq = wq
    last = draw(st.integers(-1, 20_000)) if state == LedgerState.CLOSED else -1
    return LedgerMetadata(
        ensemble_size=e, write_quorum=wq, ack_quorum=aq, segments=segs, state=state, last_entry_id=last,
        length=draw(st.integers(0, 1 << 40)) if state == LedgerState.CLOSED else 0,
        digest_type=DigestType.CRC32 if v == 1 else draw(st.sampled_from(list(DigestType))),
        password=b"" if v == 1 else draw(st.binary(max_size=8)),
        ctime=0 if v == 1 else draw(st.integers(0, 1 << 45)),
        custom_metadata={} if v == 1 else draw(st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=2)),
        ctoken=draw(st.integers(0, 1 << 40)) if v == 3 else 0,
        format_version=v, store_ctime=v != 1,
    )


I32 = st.one_of(st.integers(-(1 << 31), (1 << 31) - 1), st.sampled_from([0, -1, 1, 2, 3, (1 << 31) - 1, -(1 << 31)]))
I64 = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.sampled_from([0, -1, -102, (1 << 63) - 1, -(1 << 63)]))


@st.composite
def garbage_proto(draw) -> pb.LedgerMetadataFormat:
    """A LedgerMetadataFormat with every field drawn from its whole range: decodes, but breaks invariants."""
    m = pb.LedgerMetadataFormat()
    m.quorumSize = draw(I32)
    m.ensembleSize = draw(I32)
    m.length = draw(I64)
    if draw(st.booleans()):
        m.lastEntryId = draw(I64)
    m.state = draw(st.sampled_from([1, 2, 3]))
    for _ in range(draw(st.integers(0, 3))):
        s = m.segment.add()
        s.firstEntryId = draw(I64)
        s.ensembleMember.extend(draw(st.lists(st.one_of(ids, st.text(max_size=6)), max_size=6)))
    if draw(st.booleans()):
        m.digestType = draw(st.sampled_from([1, 2, 3, 4]))
    if draw(st.booleans()):
        m.ackQuorumSize = draw(I32)
    if draw(st.booleans()):
        m.ctime = draw(I64)
    if draw(st.booleans()):
        m.cToken = draw(I64)
    return m


def _v3(m: pb.LedgerMetadataFormat) -> bytes:
    from google.protobuf.internal import encoder
    body = m.SerializePartialToString()
    return formats.HEADER_PREFIX + b"3\n" + encoder._VarintBytes(len(body)) + body


def _v2(m: pb.LedgerMetadataFormat) -> bytes:
    from google.protobuf import text_format
    return formats.HEADER_PREFIX + b"2\n" + text_format.MessageToString(m).encode()


def _use(md: LedgerMetadata) -> None:
    """Exercise what callers do with decoded metadata: it must hold together."""
    assert md.ensemble_size >= md.write_quorum >= md.ack_quorum >= 1
    _ = md.all_bookies, md.last_ensemble  # computed properties: they must not raise
    for i in range(len(md.segments)):
        md.segment_end(i)
    again = formats.deserialize(formats.serialize(md), ZNODE)
    assert again.segments == md.segments and again.state == md.state


# -- ledger metadata ----------------------------------------------------------------------------------

@FUZZ
@given(mutated(metadata().map(formats.serialize)))
def test_fuzz_ledger_metadata_bytes(data):
    md = check(lambda d: formats.deserialize(d, ZNODE), data, MalformedMetadataError, ZNODE)
    if md is not None:
        _use(md)


@FUZZ
@given(garbage_proto(), st.sampled_from([_v3, _v2]))
def test_fuzz_ledger_metadata_fields_violating_invariants(m, enc):
    md = check(lambda d: formats.deserialize(d, ZNODE), enc(m), MalformedMetadataError, ZNODE)
    if md is not None:
        _use(md)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from([t.decode("latin-1") for t in TOKENS]), st.text(max_size=10)), max_size=8),
       st.lists(st.sampled_from(["\n", "\t"]), min_size=8, max_size=8))
def test_fuzz_ledger_metadata_v1_lines(fields, seps):
    text = "".join(f + seps[i % 8] for i, f in enumerate(fields))
    data = formats.HEADER_PREFIX + b"1\n" + text.encode("utf-8", "surrogatepass")
    md = check(lambda d: formats.deserialize(d, ZNODE), data, MalformedMetadataError, ZNODE)
    if md is not None:
        _use(md)


# -- LAYOUT -------------------------------------------------------------------------------------------

@FUZZ
@given(st.lists(st.one_of(st.sampled_from(RAW), st.text(max_size=8), st.sampled_from(["1", "2", "flat", "hierarchical"])),
                min_size=1, max_size=4),
       st.lists(st.sampled_from(["\n", ":", " ", "\r\n"]), min_size=4, max_size=4))
def test_fuzz_layout_fields(parts, seps):
    data = "".join(p + seps[i] for i, p in enumerate(parts)).encode("utf-8", "surrogatepass")
    check(lambda d: parse_layout(d, "/ledgers/LAYOUT"), data, CompatibilityError, "/ledgers/LAYOUT")


@FUZZ
@given(mutated(st.sampled_from([layout_data(), b"1\nflat:1", b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"])))
def test_fuzz_layout(data):
    check(lambda d: parse_layout(d, "/ledgers/LAYOUT"), data, CompatibilityError, "/ledgers/LAYOUT")


# -- underreplication / election znodes -----------------------------------------------------------------

@FUZZ
@given(mutated(st.builds(encode_marker, st.lists(ids, max_size=3), st.one_of(st.none(), st.integers(0, 1 << 45)))))
def test_fuzz_underreplication_marker(data):
    path = "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    m = check(lambda d: decode_marker(d, path), data, CompatibilityError, path)
    if m is not None:
        list(m.replica)


@FUZZ
@given(st.sampled_from(sorted(CTIME_KINDS)), st.data())
def test_fuzz_ctime_znodes(which, data):
    raw = data.draw(mutated(st.builds(lambda ms: encode_ctime(which, ms), I64)))
    v = decode_ctime(which, raw)
    assert isinstance(v, int)
    path = f"/ledgers/underreplication/{which}Ctime"
    strict = check(lambda d: decode_ctime(which, d, path), raw, UnavailableError, path)
    assert strict is None or strict == v


@FUZZ
@given(mutated(st.builds(encode_vote, ids)))
def test_fuzz_auditor_vote_and_lock(data):
    v = decode_vote(data)
    assert v is None or isinstance(v, str)


@FUZZ
@given(st.text(max_size=30))
def test_fuzz_vote_sequence_names(name):
    assert isinstance(vote_seq("V_" + name), int)


@FUZZ
@given(fields("replica", "ctime"))
def test_fuzz_underreplication_marker_fields(f):
    path = "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    data = "".join(f"{k}: {v}\n" for k, v in f.items()).encode("utf-8", "surrogatepass")
    check(lambda d: decode_marker(d, path), data, CompatibilityError, path)
    assert decode_vote(data.replace(b"replica", b"bookieId")) is None or True


@FUZZ
@given(st.one_of(st.sampled_from(RAW), st.text(max_size=6)), fields("bookieHost", "journalDir", "ledgerDirs", "instanceId", "indexDirs"))
def test_fuzz_cookie_fields(version, f):
    src = "/ledgers/cookies/10.0.0.1:3181"
    text = version + "\n" + "".join(f"{k}: {v}\n" for k, v in f.items())
    check(lambda t: Cookie.parse(t, src), text, CookieError, src)


# -- bookie registration --------------------------------------------------------------------------------

@FUZZ
@given(mutated(st.builds(encode_service_info, st.text(max_size=10), st.integers(0, 65535),
                         st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))))
def test_fuzz_bookie_service_info(data):
    path = "/ledgers/available/10.0.0.1:3181"
    got = check(lambda d: decode_service_info(d, path), data, MalformedMetadataError, path)
    assert got is None or (isinstance(got[0], str) and isinstance(got[1], int))
    assert isinstance(decode_service_properties(data), dict)
    assert all(isinstance(p, str) for p in advertised_protocols(data))


# -- Pulsar rack JSON -----------------------------------------------------------------------------------

_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
                     lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                     max_leaves=12)


def _pulsar_doc(doc) -> bytes:
    import json
    return json.dumps(doc).encode()


_rack_docs = st.one_of(
    _json.map(_pulsar_doc),
    st.dictionaries(st.text(max_size=5), st.dictionaries(ids, st.fixed_dictionaries(
        {"rack": st.one_of(st.text(max_size=8), _json), "hostname": st.one_of(st.text(max_size=8), _json)}), max_size=3),
        max_size=2).map(_pulsar_doc),
)


@FUZZ
@given(mutated(_rack_docs))
def test_fuzz_pulsar_rack_json(data):
    r = check(PulsarRackResolver, data, MalformedMetadataError, "/bookies")
    if r is not None:
        assert len(r.resolve(["10.0.0.1:3181", "h:1"])) == 2
    assert _one_level_racks(data) in (True, False)


# -- cookies --------------------------------------------------------------------------------------------

_cookies = st.builds(lambda h, j, i, idx, v3: (
    f"3\n{h}\n{j}\n1\t{j}\n" if v3 else Cookie(h, j, f"1\t{j}", i, index_dirs=idx).to_text()).encode(),
    ids, st.text(max_size=8), st.one_of(st.none(), st.text(max_size=8)), st.one_of(st.none(), st.text(max_size=8)),
    st.booleans())


@FUZZ
@given(mutated(_cookies))
def test_fuzz_cookie_text(data):
    src = "/ledgers/cookies/10.0.0.1:3181"
    text = data.decode("utf-8", "replace")
    c = check(lambda t: Cookie.parse(t, src), text, CookieError, src)
    if c is not None:
        assert c.mismatch(c) is None


# -- maintenance records -------------------------------------------------------------------------------

_windows = st.builds(lambda k, t, r, s, e: Window(k, t, r, s, e).to_json(),
                     st.sampled_from(KINDS), st.text(max_size=8), st.text(max_size=8), I64, I64)


@FUZZ
@given(mutated(_windows))
def test_fuzz_maintenance_records(data):
    where = "/ledgers/underreplication/maintenance/bookie:h:1"
    w = check(lambda d: Window.from_json(d, where), data, MalformedMetadataError, where)
    if w is not None:
        assert w.kind in KINDS
        w.expired(0)
        _ = w.znode_name  # a computed property: it must not raise


@FUZZ
@given(fields("kind", "target", "reason", "started_ms", "expires_ms", "by"), st.sampled_from(KINDS))
def test_fuzz_maintenance_record_fields(f, kind):
    f.setdefault("kind", f'"{kind}"')
    data = ("{" + ", ".join(f'"{k}": {v}' for k, v in f.items()) + "}").encode("utf-8", "surrogatepass")
    where = "/ledgers/underreplication/maintenance/bookie:h:1"
    check(lambda d: Window.from_json(d, where), data, MalformedMetadataError, where)


# -- config ---------------------------------------------------------------------------------------------

def _config_keys() -> list[str]:
    from autorecovery.config import keys as K
    return sorted(K.KEY_BY_NAME) + sorted(K.PULSAR_ALIASES) + sorted(K.PULSAR_POLICY_SWITCHES)


@FUZZ
@given(st.data())
def test_fuzz_config_maps(data):
    from autorecovery.config.load import load_settings
    keys = _config_keys()
    props = data.draw(st.dictionaries(
        st.one_of(st.sampled_from(keys), st.text(max_size=12)),
        st.one_of(st.sampled_from([t.decode("latin-1") for t in TOKENS]), st.text(max_size=20),
                  st.sampled_from(["true", "false", "", " ", "zk+hierarchical://h:2181/ledgers", "h:1"])),
        max_size=6))
    props.setdefault("zkServers", "127.0.0.1:2181")
    try:
        load_settings(overrides=props)
    except ConfigError as exc:
        assert str(exc)


# -- regressions for the bugs fuzzing found (docs/security.md "Hostile input handled") ------------------

@pytest.mark.parametrize("data", [
    "\u00b2\nflat:1".encode(),  # str.isdigit() accepts "²", int() refuses it: ValueError escaped
    "1\nflat:\u0661".encode(),  # same in the manager version
    b"9" * 5000 + b"\nflat:1",  # more than 4300 digits: ValueError escaped
    b"1\nflat:" + b"9" * 5000,
])
def test_regression_layout_unicode_and_huge_digits(data):
    with pytest.raises(CompatibilityError, match="/ledgers/LAYOUT"):
        parse_layout(data, "/ledgers/LAYOUT")


@pytest.mark.parametrize("key", ["zkDigestAuthFile", "httpAdminTokenFile"])
def test_regression_config_file_path_with_a_nul_byte(key):
    # open() raised ValueError("embedded null byte"), which escaped load_settings
    from autorecovery.config.load import load_settings
    with pytest.raises(ConfigError, match=key):
        load_settings(overrides={"zkServers": "127.0.0.1:2181", key: "/etc/secret\x00x"})


def test_regression_pem_path_with_a_nul_byte():
    from autorecovery.config.tls import read_pem
    with pytest.raises(ConfigError, match="tlsCertificatePath"):
        read_pem("/etc/cert\x00x", "tlsCertificatePath")


@pytest.mark.parametrize("value", ["1e999", "-1e999", "[" * 100_000 + "]" * 100_000])
def test_regression_maintenance_infinite_time_or_deep_nesting(value):
    # int(float("inf")) raised OverflowError, deep nesting RecursionError: both escaped
    data = f'{{"kind": "bookie", "target": "h:1", "started_ms": {value}, "expires_ms": 1}}'.encode()
    where = "/ledgers/underreplication/maintenance/bookie:h:1"
    with pytest.raises(MalformedMetadataError, match=where) as ei:
        Window.from_json(data, where)
    assert len(str(ei.value)) < 1000


def _service_info_with_bad_property() -> bytes:
    good = encode_service_info("10.0.0.1", 3181, {"K": "v"})
    assert b"\x0a\x01K" in good
    return good.replace(b"\x0a\x01K", b"\x0a\x01\x80")  # the property key is not UTF-8


def test_regression_service_info_non_utf8_map_entry():
    # upb decodes map strings when read: UnicodeDecodeError escaped decode_service_properties; and
    # decode_service_info raised a bare DecodeError naming no bookie
    data = _service_info_with_bad_property()
    path = "/ledgers/available/10.0.0.1:3181"
    assert decode_service_properties(data) == {}
    # the endpoints themselves are fine: the bookie stays reachable
    assert advertised_protocols(data) == ("grpc",)
    assert decode_service_info(data, path) == ("10.0.0.1", 3181)
    with pytest.raises(MalformedMetadataError, match=path):
        decode_service_info(b"\xff\xff\xff", path)


def test_regression_ledger_metadata_non_utf8_custom_key():
    # the key came back as bytes: deserialize accepted it, and every later rewrite of the ledger (the
    # worker replacing a bookie) failed with TypeError/UnicodeDecodeError
    from google.protobuf.internal import encoder
    m = pb.LedgerMetadataFormat(quorumSize=1, ensembleSize=1, length=0, state=1)
    s = m.segment.add()
    s.firstEntryId = 0
    s.ensembleMember.append("a:1")
    e = m.customMetadata.add()
    e.key, e.value = "K", b"v"
    body = m.SerializeToString().replace(b"\x0a\x01K", b"\x0a\x01\x80")
    data = formats.HEADER_PREFIX + b"3\n" + encoder._VarintBytes(len(body)) + body
    with pytest.raises(MalformedMetadataError, match=f"{ZNODE}.*custom metadata key"):
        formats.deserialize(data, ZNODE)


BIG = b"x" * 1_000_000  # a znode's size limit


@pytest.mark.parametrize("call", [
    lambda: formats.deserialize(formats.HEADER_PREFIX + b"2\n" + BIG, ZNODE),
    lambda: decode_marker(BIG, "/m"),
    lambda: Cookie.parse("4\n" + BIG.decode(), "/c"),
    lambda: Cookie.parse(BIG.decode(), "/c"),
    lambda: parse_layout(BIG, "/ledgers/LAYOUT"),
    lambda: parse_layout(b"1\n" + BIG, "/ledgers/LAYOUT"),
])
def test_regression_error_messages_stay_bounded(call):
    # parse errors quoted the whole 1 MB znode into the message (and every log line carrying it)
    with pytest.raises(AutoRecoveryError) as ei:
        call()
    assert len(str(ei.value)) < 2000


def _v3_with(segments: list[tuple[int, list[str]]]) -> bytes:
    m = pb.LedgerMetadataFormat(quorumSize=1, ensembleSize=1, length=0, state=1)
    for first, members in segments:
        s = m.segment.add()
        s.firstEntryId = first
        s.ensembleMember.extend(members)
    return _v3(m)


@pytest.mark.parametrize("data", [
    _v3_with([(0, ["a:1"]), (0, ["b:1"])]),  # two segments starting at the same entry
    _v3_with([(0, ["a:1"]), (5, ["b:1"]), (5, ["c:1"])]),
    formats.HEADER_PREFIX + b"1\n1\n1\n0\n0\ta:1\n0\tb:1\n",
    _v3_with([(0, [""])]),  # members upstream's BookieId.parse refuses
    _v3_with([(0, ["a b:1"])]),
    _v3_with([(0, ["h/x:1"])]),
    _v3_with([(0, ["readonly"])]),
    _v3_with([(0, ["h\u00e9:1"])]),
    formats.HEADER_PREFIX + b"1\n1\n1\n0\n0\t\n",
])
def test_regression_ledger_metadata_upstream_parse_invariants(data):
    # decoded fine but upstream's parse (newEnsembleEntry of BookieId.parse) refuses these: a rewrite
    # would have carried them on, and with_segment_replaced only ever touched the first duplicate
    with pytest.raises(MalformedMetadataError, match=ZNODE):
        formats.deserialize(data, ZNODE)


def test_upstream_bookie_id_charset_still_accepted():
    md = formats.deserialize(_v3_with([(0, ["[::1]:3181"]), (3, ["bk-1.example_x:3181"])]), ZNODE)
    assert md.segments[1].ensemble == ("bk-1.example_x:3181",)


@FUZZ
@given(st.data())
def test_fuzz_config_file_and_env(data):
    """A bk_server.conf of mutated bytes and BK_ environment variables: ConfigError or Settings."""
    import tempfile

    from autorecovery.config.load import load_settings
    keys = _config_keys()
    valid = "".join(f"{k}={v}\n" for k, v in data.draw(st.dictionaries(
        st.sampled_from(keys), st.sampled_from([t.decode("latin-1") for t in TOKENS] + ["true", "1", "h:1"]),
        max_size=5)).items()).encode("latin-1") + b"zkServers=127.0.0.1:2181\n"
    raw = data.draw(mutated(st.just(valid)))
    env = {f"BK_{k}": v for k, v in data.draw(st.dictionaries(
        st.sampled_from(keys), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
        max_size=3)).items()}
    with tempfile.TemporaryDirectory() as d:
        conf = os.path.join(d, "bk_server.conf")
        with open(conf, "wb") as f:
            f.write(raw)
        try:
            load_settings(conf, env=env, require_metadata=False)
        except ConfigError as exc:
            assert str(exc)


@FUZZ
@given(mutated(_cookies))
def test_fuzz_cookie_file_and_instance_id_bytes(data):
    """The cookie file's and INSTANCEID znode's raw bytes (read_dir_cookie, _utf8)."""
    import tempfile
    from pathlib import Path

    from autorecovery.bookie.cookie import _utf8, dir_cookie_path, read_dir_cookie
    with tempfile.TemporaryDirectory() as d:
        path = dir_cookie_path(Path(d))
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        check(read_dir_cookie, Path(d), CookieError, str(path))
    text = check(lambda raw: _utf8(raw, "/ledgers/INSTANCEID"), data, CookieError, "/ledgers/INSTANCEID")
    assert text is None or isinstance(text, str)
