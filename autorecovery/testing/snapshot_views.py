"""A snapshot's ledgers joined with their segments, as the reports' per-ledger passes read them (tests).

One helper for the tests that drive :mod:`autorecovery.reports.jobs` and :mod:`~autorecovery.reports.riskpass`
on a synthetic snapshot without Spark.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq


def ledger_view(snap: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(view, bookies)`` of the snapshot directory ``snap``: one row per ledger of
    ``ledgers.parquet`` with a ``segs`` column (its segments as dicts ``first_entry_id``,
    ``last_entry_id``, ``ensemble``, in order), and ``bookies.parquet`` as read."""
    ledgers = pq.read_table(snap / "ledgers.parquet").to_pandas()
    segs = pq.read_table(snap / "segments.parquet").to_pandas()
    segs["seg"] = [{"first_entry_id": f, "last_entry_id": la, "ensemble": e}
                   for f, la, e in zip(segs["first_entry_id"], segs["last_entry_id"], segs["ensemble"], strict=True)]
    grouped = segs.sort_values(["ledger_id", "first_entry_id"]).groupby("ledger_id")["seg"].apply(list)
    view = ledgers.merge(grouped.rename("segs"), left_on="ledger_id", right_index=True)
    return view, pq.read_table(snap / "bookies.parquet").to_pandas()
