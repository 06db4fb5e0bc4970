"""Every roll-up of the fused pass in one Spark aggregation (EDGE: PySpark → one small pandas frame).

The fused pass (``jobs.fused_partition``) emits, tagged with ``part``, partition sums (capacity, risk,
heal_src, kloss, decom; repair_read, summed here) and per-ledger rows (placement verdicts, repair swaps). Each roll-up used to be
its own Spark job over the persisted rows (about 30 short jobs, mostly the JVM's fixed cost); here one
``groupBy`` over a union of projections gives them all, sized by bookies, domains, pairs and verdicts
(never by ledgers), and the reports split it on the driver (:func:`part`):

* the folding parts: their rows summed per key (``bookie_id, kind, name, outcome, namespace, current,
  what_if``);
* ``placement``: ledgers per (current, what_if, namespace) verdict, in ``rows``;
* ``repair_source`` / ``repair_target``: per source / target bookie and ``fixable``, the bytes, the
  swaps (``rows``) and the ledgers (``ledgers``: the repair rows carry 1.0 on the first row of each
  ledger and ``fixable``, :func:`jobs.fused_partition`).
"""

from __future__ import annotations

import pandas as pd

KEYS = ("part", "bookie_id", "kind", "name", "outcome", "namespace", "current", "what_if", "fixable")
VALUES = ("used_bytes", "recent_bytes", "ledgers", "lost_bytes", "heal_bytes", "bytes", "rows")
#: the parts whose rows are partition sums (``jobs._aggregating``)
FOLDING = ("capacity", "risk", "heal_src", "kloss", "decom", "repair_read")


def collect(fused) -> pd.DataFrame:
    """The one aggregation: ``KEYS`` + ``VALUES`` (null where a part has no such column), one row per key."""
    from pyspark.sql import functions as F

    def proj(where, part=None, bookie=None, rows=True):
        cols = []
        for k in KEYS:
            if k == "part" and part is not None:
                cols.append(F.lit(part).alias("part"))
            elif k == "bookie_id" and bookie is not None:
                cols.append(F.col(bookie).alias("bookie_id"))
            else:
                cols.append(F.col(k))
        return fused.where(where).select(*cols, *[F.col(v) for v in VALUES[:-1]],
                                         F.lit(1.0 if rows else None).cast("double").alias("rows"))

    part = F.col("part")
    every = (proj(part.isin(*FOLDING), rows=False)
             .unionByName(proj(part == "placement"))
             .unionByName(proj(part == "repair", "repair_source", "source"))
             .unionByName(proj(part == "repair", "repair_target", "target")))
    every = every.select(*KEYS, *VALUES)
    return every.groupBy(*KEYS).agg(*[F.sum(v).alias(v) for v in VALUES]).toPandas()


def part(sums: pd.DataFrame, name: str, cols: list[str]) -> pd.DataFrame:
    """The rows of ``name`` with ``cols`` (an ``outcome`` column as int)."""
    df = sums.loc[sums["part"] == name, cols].reset_index(drop=True)
    if "outcome" in cols:
        df["outcome"] = df["outcome"].astype("int64")
    return df


def placement_counts(sums: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(counts, by_namespace)``: ledgers per (current, what_if) verdict (column ``count``), and the 50
    namespaces with the most ledgers failing the current placement, most first."""
    p = part(sums, "placement", ["current", "what_if", "namespace", "rows"])
    counts = p.groupby(["current", "what_if"], as_index=False)["rows"].sum().rename(columns={"rows": "count"})
    counts["count"] = counts["count"].astype("int64")
    fail = p[p["current"] == "FAIL"].groupby("namespace", as_index=False)["rows"].sum().rename(columns={"rows": "count"})
    fail["count"] = fail["count"].astype("int64")
    return counts, fail.sort_values("count", ascending=False, kind="stable").head(50).reset_index(drop=True)


def repair_plan(sums: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """``(by_source, by_target, totals)`` of the BP-54 plan: bytes and swaps per source and per target
    bookie (fixable swaps), and ``ledgers`` (with a fix), ``swaps``, ``bytes`` (every row),
    ``unfixable`` (ledgers with a segment no swap fixes)."""
    out = []
    for name, col in (("repair_source", "source"), ("repair_target", "target")):
        p = part(sums, name, ["bookie_id", "fixable", "bytes", "ledgers", "rows"])
        fixable = p[p["fixable"].astype(bool)]
        by = fixable.groupby("bookie_id", as_index=False).agg(bytes=("bytes", "sum"), swaps=("rows", "sum"))
        by["swaps"] = by["swaps"].astype("int64")
        out.append(by.rename(columns={"bookie_id": col}))
    src = part(sums, "repair_source", ["fixable", "bytes", "ledgers", "rows"])
    fix = src["fixable"].astype(bool)
    totals = {"ledgers": float(src.loc[fix, "ledgers"].sum()), "swaps": float(src.loc[fix, "rows"].sum()),
              "bytes": float(src["bytes"].sum()), "unfixable": float(src.loc[~fix, "ledgers"].sum())}
    return out[0], out[1], totals
