"""The risk part of the fused pass (``riskpass.RiskFold`` over ``riskvec.batch_losses``) against the fold it
replaced: ``whatif.ledger_losses`` per ledger, summed in Python dicts — every risk row (rack pairs with
their single-rack corrections, namespace rows), every heal source, every bookie and pair of bookies (PURE
inputs, pandas out)."""

from __future__ import annotations

import pandas as pd
import pytest

from autorecovery.ledger.pulsar_names import pulsar_names
from autorecovery.reports import jobs, model, riskpass, whatif
from autorecovery.reports.synthetic import generate
from autorecovery.testing.snapshot_views import ledger_view


def reference(frames, location, kinds, gone) -> dict[str, pd.DataFrame]:
    """The per-ledger fold of the risk pass before it ran on arrays (issue 27 item 5)."""
    tags = {b: (loc.get("rack", "unknown"), loc.get("zone", "unknown"), loc.get("region", "unknown"))
            for b, loc in location.items()}
    agg: dict[tuple, list[float]] = {}
    src: dict[tuple, list[float]] = {}
    k1: dict[str, list[float]] = {}
    k2: dict[tuple, list[float]] = {}

    def add(key, d, sign=1):
        v = agg.setdefault(key, [0.0, 0.0, 0.0])
        v[0] += sign
        v[1] += sign * d[1]
        v[2] += sign * d[2]

    for pdf in frames:
        for lv, row in jobs._views(pdf):
            ns = pulsar_names({"pulsar/managed-ledger": row.managed_ledger})[1] if row.managed_ledger else ""
            domains, singles, pairs = whatif.ledger_losses(lv, tags, jobs.damaged_of(row, gone))
            single = {}
            for kind, name, d in domains:
                if kind == "rack":
                    single[name] = d
                if kind == "rack_pair":
                    a, b = name.split("|", 1)
                    if d[0] != model.NONE:
                        add((kind, name, d[0], ""), d)
                    for r in (a, b):
                        if single[r][0] != model.NONE:
                            add((kind, name, single[r][0], ""), single[r], -1)
                elif (kind in kinds or kind == "existing") and d[0] != model.NONE:
                    add((kind, name, d[0], ""), d)
                    if ns and kind == "rack" and d[0] >= model.BELOW_AQ:
                        add((kind, name, d[0], ns), d)
                    for bk, nbytes in (d[3] or {}).items():
                        v = src.setdefault((kind, name, bk), [0.0, 0.0])
                        v[0] += nbytes
                        v[1] += (d[4] or {}).get(bk, 0.0)
            for b, d in singles:
                v = k1.setdefault(b, [0.0, 0.0, 0.0, 0.0])
                for i, x in enumerate(whatif.loss_metrics(d)):
                    v[i] += x
            for a, b, delta in pairs:
                v = k2.setdefault((a, b), [0.0, 0.0, 0.0])
                for i, x in enumerate(delta):
                    v[i] += x
    risk = pd.DataFrame([(*k, *v) for k, v in agg.items()],
                        columns=["kind", "name", "outcome", "namespace", "ledgers", "lost_bytes", "heal_bytes"])
    heal = pd.DataFrame([(*k, *v) for k, v in src.items()], columns=["kind", "name", "bookie_id", "bytes", "heal_bytes"])
    kl = pd.DataFrame([("bookie", b, *v) for b, v in k1.items()] + [("bookie_pair", f"{a}|{b}", *v, 0.0)
                                                                    for (a, b), v in k2.items()],
                      columns=["kind", "name", "ledgers", "lost_bytes", "bytes", "heal_bytes"])
    return {"risk": risk, "heal_src": heal, "kloss": kl}


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    snap = tmp_path_factory.mktemp("snap")
    generate(snap, ledgers=3000, bookies=40, racks=6, zones=3, ensemble_changes=0.2, open_fraction=0.05)
    view, bk = ledger_view(snap)
    # markers on some ledgers (copies already lost), a gone bookie, a member missing from the location table
    view["marked"] = [[bk["bookie_id"].iloc[i % 7]] if i % 9 == 0 else None for i in range(len(view))]
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    location.pop(bk["bookie_id"].iloc[3])
    return [view.iloc[i:i + 250] for i in range(0, len(view), 250)], location, frozenset({bk["bookie_id"].iloc[5]})


@pytest.mark.parametrize("kinds", [("rack", "zone", "region"), ("rack",)])
def test_risk_fold_equals_the_per_ledger_fold(snapshot, kinds):
    frames, location, gone = snapshot
    assert len(frames) > riskpass.COMPACT  # the kept sums are compacted along the way
    got = pd.concat(list(jobs.risk_partition(location, kinds, gone)(iter(frames))))
    want = reference(frames, location, kinds, gone)
    keys = {"risk": ["kind", "name", "outcome", "namespace"], "heal_src": ["kind", "name", "bookie_id"],
            "kloss": ["kind", "name"]}
    for part, key in keys.items():
        g = got[got["part"] == part].drop(columns="part").dropna(axis=1, how="all")
        g = g.astype({"outcome": "int64"}) if "outcome" in g else g
        w = want[part]
        assert len(w) and len(g) == len(w), part
        a, b = g.set_index(key).sort_index(), w.set_index(key).sort_index()[list(g.set_index(key).columns)]
        assert a.index.equals(b.index), part
        pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-12, atol=1e-6)
    # the namespace rows exist and the rack pairs carry their corrections
    r = got[got["part"] == "risk"]
    assert (r["namespace"] != "").any() and (r["kind"] == "rack_pair").any() and (r["ledgers"] < 0).any()
