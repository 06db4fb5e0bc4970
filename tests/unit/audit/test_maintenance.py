"""Maintenance windows, the rack-loss guard and the data-first rule (audit.maintenance, pure)."""

import pytest

from autorecovery.audit.maintenance import Window, domain_of, endangered, guard_level, holds, parse_ttl, znode_name
from autorecovery.errors import ConfigError, MalformedMetadataError
from autorecovery.ledger.metadata import LedgerMetadata, LedgerState, Segment

RACK = {"a1": "/r1", "a2": "/r1", "b1": "/r2", "b2": "/r2", "c1": "/eu/z1", "c2": "/eu/z2"}


def loc(b):
    return RACK.get(b, "/default-rack")


def md(ensemble, wq, aq, last=99, state=LedgerState.CLOSED, segs=None):
    segments = segs or ((0, ensemble),)
    return LedgerMetadata(len(ensemble), wq, aq, tuple(Segment(f, tuple(e)) for f, e in segments), state=state,
                          last_entry_id=last if state == LedgerState.CLOSED else -1, length=100)


def w(kind, target, expires=10_000):
    return Window(kind, target, "drill", 0, expires)


def test_window_on_bookie_or_its_rack_holds_it_until_expiry():
    h = holds({"a1", "b1"}, {"a2", "b2"}, loc, [w("bookie", "a1"), w("rack", "/r2")], now_ms=5_000)
    assert set(h.windows) == {"a1", "b1"} and h.windows["b1"].target == "/r2"
    h = holds({"a1"}, {"a2"}, loc, [w("bookie", "a1", expires=5_000)], now_ms=5_000)
    assert h.held == frozenset(), "expired at its expiry time"


def test_guard_holds_a_domain_lost_as_a_whole_of_at_least_two():
    assert holds({"a1", "a2"}, {"b1", "b2"}, loc, [], 0, "rack").guarded == {"/r1": frozenset({"a1", "a2"})}
    assert holds({"a1", "a2"}, {"b1", "b2"}, loc, [], 0, "").held == frozenset(), "off by default"
    assert holds({"a1"}, {"a2", "b1"}, loc, [], 0, "rack").held == frozenset(), "part of a rack"
    assert holds({"a1", "b1"}, {"a2", "b2"}, loc, [], 0, "rack").held == frozenset(), "one per rack"
    # an override lifts it; a window keeps holding its own bookie
    assert holds({"a1", "a2"}, {"b1"}, loc, [w("override", "/r1")], 0, "rack").held == frozenset()
    # region level: /eu/z1 and /eu/z2 are one domain /eu
    assert holds({"c1", "c2"}, {"a1"}, loc, [], 0, "region").guarded == {"/eu": frozenset({"c1", "c2"})}
    assert domain_of("/eu/z1", "rack") == "/eu/z1" and domain_of("/eu/z1", "zone") == "/eu"


@pytest.mark.parametrize(("ens", "wq", "aq", "lost", "want"), [
    (["a", "b", "c"], 3, 2, {"a"}, False),        # 2 copies of every entry left, AQ 2
    (["a", "b", "c"], 3, 2, {"a", "b"}, True),    # 1 left < AQ
    (["a", "b"], 2, 2, {"a"}, True),              # E2/WQ2/AQ2: any loss is below AQ
    (["a", "b", "c"], 2, 1, {"a", "b"}, True),    # write set (a, b) has no copy left
    (["a", "b", "c"], 2, 1, {"a"}, False),
])
def test_endangered_counts_readable_copies_of_every_write_set(ens, wq, aq, lost, want):
    assert endangered(md(ens, wq, aq), lost) is want


def test_endangered_looks_only_at_write_sets_that_store_entries():
    # one entry (id 0) on E3/WQ2: write set (a, b); c stores nothing
    assert not endangered(md(["a", "b", "c"], 2, 2, last=0), {"c"})
    assert endangered(md(["a", "b", "c"], 2, 2, last=0), {"a"})
    # an open ledger's last segment counts every write set
    assert endangered(md(["a", "b", "c"], 2, 2, state=LedgerState.OPEN), {"c"})
    # an empty earlier segment stores nothing
    two = md(["a", "b"], 2, 1, last=9, segs=((0, ["a", "b"]), (0, ["c", "d"])))
    assert not endangered(two, {"a", "b"})


def test_ttl_names_and_records():
    assert parse_ttl("90s") == 90_000 and parse_ttl("2h") == 7_200_000 and parse_ttl("1.5m") == 90_000
    for bad in ("", "abc", "-1h", "0", "400d"):
        with pytest.raises(ConfigError, match="duration"):
            parse_ttl(bad)
    assert znode_name("rack", "/eu/r1") == "rack:%2Feu%2Fr1" and "/" not in znode_name("rack", "/a%/b")
    rec = Window("rack", "/r1", "switch swap", 1, 2, "ops")
    assert Window.from_json(rec.to_json(), "/x") == rec
    with pytest.raises(MalformedMetadataError, match="/ledgers/underreplication/maintenance/x"):
        Window.from_json(b'{"kind": "planet"}', "/ledgers/underreplication/maintenance/x")
    with pytest.raises(ConfigError, match="autorecoveryDownOutSubtreeLimit"):
        guard_level("datacenter")
    assert guard_level("NONE") == "" and guard_level("rack") == "rack"


def test_data_first_ignores_planned_losses_alone():
    from autorecovery.audit.maintenance import data_first

    m = md(["a", "b"], 2, 2)
    assert not data_first(m, {"a"}, planned={"a"}), "a planned loss below AQ waits for its window"
    assert data_first(m, {"a"}, planned=set()), "the same loss unplanned (guard-held) is copied"
    m3 = md(["a", "b", "c"], 3, 2)
    assert not data_first(m3, {"a"}, planned={"a"})
    assert data_first(m3, {"a", "b"}, planned={"a"}), "a second, unplanned failure below AQ"
