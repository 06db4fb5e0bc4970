"""The fused pass of the Spark job without Spark: folding parts emit one frame per partition, with the
same sums as the parts run alone, and the risk part's namespace rows are the ones the report shows."""

from __future__ import annotations

import pandas as pd
import pytest

from autorecovery.reports import jobs, model
from autorecovery.reports.synthetic import generate
from autorecovery.testing.snapshot_views import ledger_view


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    snap = tmp_path_factory.mktemp("snap")
    generate(snap, ledgers=1500, bookies=30, racks=5)
    view, bk = ledger_view(snap)
    view["marked"] = [[bk["bookie_id"].iloc[0]] if i % 5 == 0 else None for i in range(len(view))]
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    return [view.iloc[i:i + 200] for i in range(0, len(view), 200)], location


def test_folding_parts_emit_once_per_partition_with_the_sums_of_the_parts_alone(batches):
    frames, location = batches
    gone = frozenset({next(iter(location))})
    parts = {"capacity": jobs.capacity_partition(0),
             "risk": jobs.risk_partition(location, ("rack", "zone", "region"), gone)}
    fused = list(jobs.fused_partition(parts)(iter(frames)))
    cap = [f for f in fused if (f["part"] == "capacity").all()]
    assert len(cap) == 1  # 8 batches, one frame
    alone = pd.concat(list(jobs.capacity_partition(0)(iter(frames))))
    got = cap[0].set_index("bookie_id")[["used_bytes", "recent_bytes", "ledgers"]].sort_index()
    pd.testing.assert_frame_equal(got, alone.set_index("bookie_id").sort_index(), check_dtype=False)
    risk = pd.concat([f for f in fused if f["part"].isin(["risk", "kloss", "heal_src"]).all()])
    alone = pd.concat(list(jobs.risk_partition(location, ("rack", "zone", "region"), gone)(iter(frames))))
    key = ["part", "kind", "name", "outcome", "namespace", "bookie_id"]
    vals = ["ledgers", "lost_bytes", "heal_bytes", "bytes"]
    norm = [d.reindex(columns=key + vals).fillna({"outcome": -1, "namespace": "", "bookie_id": ""})
            .astype({"outcome": "int64"}).groupby(key)[vals].sum() for d in (risk, alone)]
    pd.testing.assert_frame_equal(norm[0], norm[1], check_dtype=False)
    r = alone[alone["part"] == "risk"]
    by_ns = r[r["namespace"] != ""]
    assert len(by_ns) and set(by_ns["kind"]) == {"rack"} and (by_ns["outcome"] >= model.BELOW_AQ).all()
    # every rack's per-namespace rows add up to its total (per outcome)
    tot = r[(r["namespace"] == "") & (r["kind"] == "rack") & (r["outcome"] >= model.BELOW_AQ)]
    s = by_ns.groupby(["name", "outcome"])["ledgers"].sum()
    t = tot.set_index(["name", "outcome"])["ledgers"]
    assert (s.reindex(t.index).fillna(0) <= t).all() and s.sum() > 0
