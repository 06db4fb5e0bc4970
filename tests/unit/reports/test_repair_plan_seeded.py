"""The reports' BP-54 repair plan is one plan per snapshot: the policy's random tie-breaks are seeded by
the segment, so two runs, and any split of the ledgers into Spark batches, give the same swaps (a
standalone Spark cluster and ``local[*]`` once named different targets, and so other copy times)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from autorecovery.reports import jobs
from autorecovery.reports.synthetic import generate
from autorecovery.testing.snapshot_views import ledger_view


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    snap = tmp_path_factory.mktemp("snap")
    manifest = generate(snap, ledgers=1200, bookies=24, racks=4, violations=0.2)
    view, bk = ledger_view(snap)
    locations = dict(zip(bk["bookie_id"], "/" + bk["rack"], strict=True))
    writable = list(bk["bookie_id"])
    return view, locations, (writable, []), {k: str(v) for k, v in manifest["placement"].items()}


def swaps(snapshot, batch: int) -> pd.DataFrame:
    view, locations, members, placement = snapshot
    run = jobs.repair_partition(placement, locations, members)
    frames = [view.iloc[i:i + batch] for i in range(0, len(view), batch)]
    out = pd.concat(list(run(iter(frames))))
    return out.sort_values(["ledger_id", "segment_first_entry_id", "source"]).reset_index(drop=True)


def test_the_repair_plan_is_the_same_whatever_the_run_and_the_batches(snapshot):
    a = swaps(snapshot, 100)
    assert a["fixable"].sum() > 50  # enough swaps with a choice of targets for a random pick to show
    assert a["target"].nunique() > 4
    pd.testing.assert_frame_equal(a, swaps(snapshot, 100))
    pd.testing.assert_frame_equal(a, swaps(snapshot, 1000))
    json.dumps(a.head(1).to_dict())  # plain values, as written to the swaps table
