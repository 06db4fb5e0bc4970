"""Heal episodes (audit/episodes.py) and the overview reducer and layout (audit/overview.py): pure."""

from __future__ import annotations

import json
import random

import pytest

from autorecovery.audit import episodes as E
from autorecovery.audit import overview as O

T0 = 1_700_000_000_000


def _ep(n: int = 4) -> E.Episode:
    return E.opened("bookie-lost", "b3:3181", {i: 1000 * i for i in range(1, n + 1)}, T0, "b1:3181")


def test_ids_round_trip_and_compact():
    ids = set(range(10_000, 30_000, 2)) | {0, 2**62}
    text = E.encode_ids(ids)
    assert E.decode_ids(text) == ids
    assert len(text) < 2_000  # 10,001 ids in under 2 KB


def test_heal_in_two_steps_then_closed_with_figures():
    ep = _ep()
    assert (ep.ledgers_marked, ep.bytes_marked, ep.ledgers_left) == (4, 10_000, 4)
    ep, healed = E.advance(ep, {3, 4}, (), (), {1: 1000, 2: 2000}, T0 + 2_000, workers={"w1": 2})
    assert healed == [1, 2] and ep.open
    assert (ep.ledgers_healed, ep.bytes_healed, ep.ledgers_left) == (2, 3000, 2)
    assert ep.rate_bytes_per_s(T0 + 2_000) == pytest.approx(1500.0)
    assert ep.eta_s(T0 + 2_000) == pytest.approx(7000 / 1500)
    ep, _ = E.advance(ep, set(), (), (), {3: 3000, 4: 4000}, T0 + 5_000, workers={"w2": 2}, copied_to={"b4": 2})
    assert ep.state == "healed" and ep.closed_ms == T0 + 5_000 and ep.duration_s == 5.0
    assert (ep.ledgers_healed, ep.bytes_healed, ep.ledgers_left) == (4, 10_000, 0)
    assert ep.workers == {"w1": 2, "w2": 2} and ep.copied_to == {"b4": 2}
    assert "healed after 5.0 s: 4 ledgers, 10000 bytes healed" in E.log_line(ep)


def test_unrecoverable_rest_closes_after_settle_and_says_so():
    ep, _ = E.advance(_ep(2), {2}, {2}, (), {1: 1000}, T0 + 1_000, settle_ms=10_000)
    assert ep.open and ep.ledgers_unrecoverable == 1
    ep, _ = E.advance(ep, {2}, {2}, (), {}, T0 + 11_000, settle_ms=10_000)
    assert ep.state == "unrecoverable" and ep.ledgers_left == 1 and ep.ledgers_healed == 1
    ep2, _ = E.advance(_ep(1), {1}, (), {1}, {}, T0 + 70_000)
    assert ep2.state == "blocked"


def test_record_json_round_trip_is_bounded():
    rng = random.Random(7)
    ep = E.opened("placement", "x" * 500, {rng.randrange(1 << 40): 1 for _ in range(20_000)}, T0, "a")
    data = E.encode(ep, max_bytes=20_000)
    assert len(data) <= 20_000
    back = E.decode(data, "e-0000000001")
    assert back.name == "e-0000000001" and len(back.subject) == E.MAX_SUBJECT
    assert len(back.ids) + back.ids_dropped == ep.ledgers_marked and back.ids_dropped > 0
    assert E.decode(E.encode(_ep()), "n").ids == frozenset({1, 2, 3, 4})


@pytest.mark.parametrize("data, word", [
    (b"\xff\xfe", "not JSON"), (b"[1]", "not a JSON object"), (b'{"v": 2}', "field v"),
    (json.dumps({"v": 1, "kind": "nope"}).encode(), "field kind"),
    (E.encode(_ep())[:-9], "not JSON"),
    (E.encode(_ep()).replace(b'"ledgers_marked": 4', b'"ledgers_marked": -1'), "field ledgers_marked"),
    (E.encode(_ep()).replace(b'"ids": "', b'"ids": "!!'), "field ids"),
])
def test_bad_records_give_one_line_naming_the_field(data, word):
    with pytest.raises(ValueError) as ei:
        E.decode(data)
    assert word in str(ei.value) and "\n" not in str(ei.value)


def test_names_are_capped_and_drop_keeps_open_ones():
    counts = E.credit({}, {f"w{i}": 1 for i in range(30)}, cap=4)
    assert len(counts) == 5 and counts[E.OTHERS] == 26
    names = [f"e-{i:010d}" for i in range(6)]
    assert E.to_drop(names, ["e-0000000000"], keep=4) == ["e-0000000001", "e-0000000002"]


def _inputs(**kw) -> O.Inputs:
    base = dict(auditor="b1:3181", enabled=True, writable=frozenset({"b1:3181", "b2:3181"}),
                readonly=frozenset(), known=frozenset({"b1:3181", "b2:3181", "b3:3181"}),
                state={"auditor": "b1:3181", "elected_ms": T0, "lost": {"b3:3181": T0 + 1},
                       "underreplicated": {"ledgers": 2, "bytes": 3000}, "checks": {}},
                maintenance={}, guard={}, marked=2, in_progress={7: "w1"}, unrecoverable=0,
                ctimes={"checkallledgers": T0, "placementpolicycheck": None, "replicascheck": None},
                progress=None, episodes=[_ep()], now_ms=T0 + 60_000)
    base.update(kw)
    return O.Inputs(**base)  # type: ignore[arg-type]


def test_overview_reduces_the_cluster():
    doc = O.build(_inputs())
    assert doc["health"] == "HEALTH_WARN"
    assert doc["bookies"]["down"] == [{"bookie_id": "b3:3181", "since_ms": T0 + 1}]
    assert doc["underreplicated"]["bytes"] == 3000 and doc["underreplicated"]["in_progress_by_worker"] == {"w1": 1}
    assert doc["checks"]["check_all_ledgers"]["last_ms"] == T0 and doc["checks"]["bookie_check"]["last_ms"] is None
    assert doc["heal"]["open_episodes"][0]["ledgers_marked"] == 4 and doc["heal"]["source"] == "episodes"
    text = O.format_overview(doc)
    assert "health: HEALTH_WARN" in text and "down: b3:3181 since 2023-11-14" in text
    assert "under-replicated: 2 ledgers, 3.0 KB" in text and "bookie-lost" in text


def test_overview_of_another_auditors_state_and_no_auditor():
    doc = O.build(_inputs(auditor=None, state={"auditor": "old:3181", "underreplicated": {"bytes": 5}}))
    assert doc["health"] == "HEALTH_ERR" and "no auditor elected" in doc["health_reasons"]
    assert doc["underreplicated"]["bytes"] is None  # a stale figure is never shown as current
    assert "none elected" in O.format_overview(doc)


def test_history_lines_newest_first():
    closed, _ = E.advance(_ep(1), set(), (), (), {1: 1000}, T0 + 3_000)
    items = [_ep().as_dict(T0), {**closed.as_dict(T0), "name": "e-2"}]
    text = O.format_history(items, T0 + 10_000, ["bad heal episode /x: field v"])
    lines = text.splitlines()
    assert lines[0].startswith("e-2") and "healed in 3.0 s" in lines[0]
    assert lines[-1] == "error: bad heal episode /x: field v"
    assert O.format_history([], T0) == "No heal episode recorded."
