"""The driver side of ``autorecovery report``: run the Spark jobs, roll up, write CSV/Parquet/JSON/HTML.

Only tables sized by bookies, racks, domains, namespaces or verdicts are brought to the driver
(``toPandas`` after a Spark aggregation); per-ledger tables are written by Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from autorecovery.placement.weights import effective_weights
from autorecovery.reports import jobs, model
from autorecovery.reports.validate import check_snapshot

RECENT_DAYS = 30


@dataclass
class Throttles:
    """How fast the cluster copies: ``workers`` daemons at ``rate_bytes_per_s`` each (upstream
    ``replicationRateByBytes``; when it is off (-1), ``assumed_rate`` — measured, see bench/heal.py)."""

    workers: int
    rate_bytes_per_s: float
    assumed: bool


@dataclass
class Report:
    """What a run produced: small pandas tables by name, a JSON-able summary, chart data."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def throttles(manifest: dict, bookies: pd.DataFrame, assumed_rate: float) -> Throttles:
    rate = float(manifest.get("throttles", {}).get("replicationRateByBytes", -1))
    workers = int((bookies["state"] != "gone").sum())
    return Throttles(max(1, workers), rate if rate > 0 else assumed_rate, rate <= 0)


def _bookies(t) -> pd.DataFrame:
    return t["bookies"].toPandas()  # one row per bookie


def capacity(t, manifest: dict, rows, max_multiple: float = 3.0) -> Report:
    """Bytes per bookie/rack/zone/region, free vs used, imbalance, disk weights, growth and days to full.
    ``rows``: the capacity rows of :func:`jobs.capacity_partition`."""
    from pyspark.sql import functions as F

    per = (rows
           .groupBy("bookie_id").agg(F.sum("used_bytes").alias("used_bytes"),
                                     F.sum("recent_bytes").alias("recent_bytes"))).toPandas()
    bk = _bookies(t).merge(per, on="bookie_id", how="left").fillna({"used_bytes": 0.0, "recent_bytes": 0.0})
    bk["growth_bytes_per_day"] = bk["recent_bytes"] / RECENT_DAYS
    bk["days_until_full"] = [model.days_until_full(f, g) if f >= 0 else None
                             for f, g in zip(bk["free_bytes"], bk["growth_bytes_per_day"])]
    known = bk[bk["free_bytes"] >= 0]
    weights = effective_weights({b: float(f) for b, f in zip(known["bookie_id"], known["free_bytes"])}, max_multiple) \
        if len(known) else {}
    bk["disk_weight"] = [weights.get(b) for b in bk["bookie_id"]]
    rollups = {}
    for kind in ("rack", "zone", "region"):
        g = bk.groupby(kind).agg(bookies=("bookie_id", "count"), used_bytes=("used_bytes", "sum"),
                                 free_bytes=("free_bytes", "sum"), total_bytes=("total_bytes", "sum"),
                                 growth_bytes_per_day=("growth_bytes_per_day", "sum")).reset_index()
        g["days_until_full"] = [model.days_until_full(f, gr) for f, gr in zip(g["free_bytes"], g["growth_bytes_per_day"])]
        rollups[kind] = g
    mean = bk["used_bytes"].mean() if len(bk) else 0.0
    soonest = bk.dropna(subset=["days_until_full"]).sort_values("days_until_full").head(5)
    summary = {
        "bookies": int(len(bk)),
        "used_bytes": float(bk["used_bytes"].sum()),
        "free_bytes": float(known["free_bytes"].sum()),
        "imbalance_bookie_max_over_mean": float(bk["used_bytes"].max() / mean) if mean else None,
        "imbalance_rack_max_over_mean": float(rollups["rack"]["used_bytes"].max() / rollups["rack"]["used_bytes"].mean())
        if len(rollups["rack"]) and rollups["rack"]["used_bytes"].mean() else None,
        "growth_bytes_per_day": float(bk["growth_bytes_per_day"].sum()),
        "soonest_full": [{"bookie_id": r.bookie_id, "days": round(float(r.days_until_full), 1)}
                         for r in soonest.itertuples()],
    }
    return Report({"capacity_bookies": bk, **{f"capacity_{k}": v for k, v in rollups.items()}}, summary)


def placement_parts(t, manifest: dict, what_if: dict[str, str]) -> dict[str, Any]:
    """The executor functions of the placement report: verdicts now and under ``what_if``, and the BP-54
    repair plan under the what-if (or current) config."""
    bk = _bookies(t)
    locations = dict(zip(bk["bookie_id"], bk["location"]))
    members = (list(bk.loc[bk["state"] == "writable", "bookie_id"]), list(bk.loc[bk["state"] == "readonly", "bookie_id"]))
    current = {k: str(v) for k, v in manifest.get("placement", {}).items()}
    target = {**current, **what_if}
    return {"placement": jobs.placement_partition(current, target if what_if else None, locations, members),
            "repair": jobs.repair_partition(target, locations, members)}


def placement(t, manifest: dict, what_if: dict[str, str], out: Path, thr: Throttles, verdicts, plan) -> Report:
    """Adherence of every closed ledger now and under ``what_if``; the BP-54 repair plan under the what-if
    config (or the current one) with bytes per source and target bookie and the copy time. ``verdicts``
    and ``plan``: the rows of :func:`placement_parts`' functions."""
    from pyspark.sql import functions as F

    current = {k: str(v) for k, v in manifest.get("placement", {}).items()}
    verdicts.write.mode("overwrite").parquet(str(out / "placement_ledgers.parquet"))
    verdicts = t["ledger_view"].sparkSession.read.parquet(str(out / "placement_ledgers.parquet"))
    counts = verdicts.groupBy("current", "what_if").count().toPandas()
    by_ns = (verdicts.where(F.col("current") == "FAIL").groupBy("namespace").count()
             .orderBy(F.desc("count")).limit(50).toPandas())
    plan.write.mode("overwrite").parquet(str(out / "placement_repair_swaps.parquet"))
    plan = t["ledger_view"].sparkSession.read.parquet(str(out / "placement_repair_swaps.parquet"))
    fixable = plan.where("fixable")
    by_source = fixable.groupBy("source").agg(F.sum("bytes").alias("bytes"), F.count("*").alias("swaps")).toPandas()
    by_target = fixable.groupBy("target").agg(F.sum("bytes").alias("bytes"), F.count("*").alias("swaps")).toPandas()
    tot = plan.agg(F.countDistinct(F.when(F.col("fixable"), F.col("ledger_id"))).alias("ledgers"),
                   F.sum(F.when(F.col("fixable"), 1).otherwise(0)).alias("swaps"),
                   F.sum("bytes").alias("bytes"),
                   F.countDistinct(F.when(~F.col("fixable"), F.col("ledger_id"))).alias("unfixable")).collect()[0]
    nbytes = float(tot["bytes"] or 0.0)
    summary = {
        "policy": current.get("ensemblePlacementPolicy", ""),
        "what_if": what_if,
        "current": _verdict_counts(counts, "current"),
        "under_what_if": _verdict_counts(counts, "what_if") if what_if else None,
        "repair": {"ledgers_to_mark": int(tot["ledgers"] or 0), "swaps": int(tot["swaps"] or 0),
                   "bytes_to_copy": nbytes, "ledgers_without_fix": int(tot["unfixable"] or 0),
                   "workers": thr.workers, "rate_bytes_per_s_per_worker": thr.rate_bytes_per_s,
                   "rate_assumed": thr.assumed,
                   "copy_time_s": model.copy_time_s(nbytes, thr.workers, thr.rate_bytes_per_s)},
    }
    return Report({"placement_verdicts": counts, "placement_fail_by_namespace": by_ns,
                   "placement_repair_by_source": by_source, "placement_repair_by_target": by_target}, summary)


def _verdict_counts(counts: pd.DataFrame, col: str) -> dict[str, int]:
    g = counts.groupby(col)["count"].sum()
    return {k: int(v) for k, v in g.items() if k}


def risk_part(t) -> Any:
    """The executor function of the risk report."""
    bk = _bookies(t)
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    return jobs.risk_partition(location, ("rack", "zone", "region"))


def risk(t, manifest: dict, thr: Throttles, rows) -> Report:
    """For every rack, zone, region and pair of racks: ledgers and bytes that lose every copy of some
    entry, fall below AQ, or lose only a copy; bytes to heal and heal time; rolled up by namespace.
    ``rows``: the rows of :func:`risk_part`'s function."""
    from pyspark.sql import functions as F

    bk = _bookies(t)
    agg = (rows
           .groupBy("kind", "name", "outcome", "namespace")
           .agg(F.sum("ledgers").alias("ledgers"), F.sum("lost_bytes").alias("lost_bytes"),
                F.sum("heal_bytes").alias("heal_bytes"))).toPandas()
    totals = agg[agg["namespace"] == ""].drop(columns="namespace")
    single = totals[totals["kind"] == "rack"].set_index(["name", "outcome"])
    racks = sorted(set(bk["rack"]))
    pair_rows = totals[totals["kind"] == "rack_pair"].set_index(["name", "outcome"])
    rows = []
    for i, a in enumerate(racks):  # pair(a, b) = rows for ledgers on both + single(a) + single(b)
        for b in racks[i + 1:]:
            name = f"{a}|{b}"
            for outcome in (model.LOSS, model.BELOW_AQ, model.COPY):
                v = [0.0, 0.0, 0.0]
                for src, key in ((pair_rows, (name, outcome)), (single, (a, outcome)), (single, (b, outcome))):
                    if key in src.index:
                        r = src.loc[key]
                        v = [v[0] + r["ledgers"], v[1] + r["lost_bytes"], v[2] + r["heal_bytes"]]
                if round(v[0]) > 0:
                    rows.append({"kind": "rack_pair", "name": name, "outcome": outcome, "ledgers": round(v[0]),
                                 "lost_bytes": max(0.0, v[1]), "heal_bytes": max(0.0, v[2])})
    domains = pd.concat([totals[totals["kind"] != "rack_pair"], pd.DataFrame(rows)], ignore_index=True) \
        if rows else totals[totals["kind"] != "rack_pair"].copy()
    domains["ledgers"] = domains["ledgers"].round().astype("int64")
    domains["outcome_name"] = domains["outcome"].map(model.OUTCOME_NAMES)
    wide = domains.pivot_table(index=["kind", "name"], columns="outcome_name",
                               values=["ledgers", "lost_bytes", "heal_bytes"], aggfunc="sum", fill_value=0)
    wide.columns = [f"{a}_{b}" for a, b in wide.columns]
    wide = wide.reset_index()
    for col in ("ledgers_data_loss", "ledgers_below_ack_quorum", "ledgers_copy_lost", "heal_bytes_copy_lost",
                "heal_bytes_below_ack_quorum", "heal_bytes_data_loss", "lost_bytes_data_loss"):
        if col not in wide:
            wide[col] = 0
    wide["heal_bytes"] = wide["heal_bytes_copy_lost"] + wide["heal_bytes_below_ack_quorum"] + wide["heal_bytes_data_loss"]
    wide["heal_time_s"] = [model.copy_time_s(h, max(1, thr.workers - 1), thr.rate_bytes_per_s) for h in wide["heal_bytes"]]
    wide = wide.sort_values(["ledgers_data_loss", "ledgers_below_ack_quorum", "heal_bytes"], ascending=False)
    by_ns = agg[(agg["namespace"] != "") & (agg["kind"] == "rack") & (agg["outcome"] >= model.BELOW_AQ)]
    by_ns = by_ns.assign(outcome_name=by_ns["outcome"].map(model.OUTCOME_NAMES)).drop(columns="outcome")
    # a domain that holds every bookie (one region, one zone) trivially loses everything: listed, never "worst"
    size = {("rack", k): v for k, v in bk.groupby("rack").size().items()}
    size.update({("zone", k): v for k, v in bk.groupby("zone").size().items()})
    size.update({("region", k): v for k, v in bk.groupby("region").size().items()})
    everything = [f"{r.kind} {r.name}" for r in wide.itertuples() if size.get((r.kind, r.name)) == len(bk)]
    partial = wide[[f"{k} {n}" not in everything for k, n in zip(wide["kind"], wide["name"])]]
    worst = partial.iloc[0] if len(partial) else None
    summary = {
        "domains": int(len(wide)),
        "worst": None if worst is None else {
            "kind": worst["kind"], "name": worst["name"], "ledgers_data_loss": int(worst["ledgers_data_loss"]),
            "ledgers_below_ack_quorum": int(worst["ledgers_below_ack_quorum"]),
            "heal_bytes": float(worst["heal_bytes"]), "heal_time_s": worst["heal_time_s"]},
        "domains_holding_every_bookie": everything,
        "racks_whose_loss_loses_data": sorted(wide.loc[(wide["kind"] == "rack") & (wide["ledgers_data_loss"] > 0),
                                                       "name"].tolist()),
        "workers": thr.workers, "rate_bytes_per_s_per_worker": thr.rate_bytes_per_s, "rate_assumed": thr.assumed,
    }
    return Report({"risk_domains": wide, "risk_by_namespace": by_ns}, summary)


def write(report: Report, out: Path) -> None:
    """Each table as CSV and Parquet under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, df in report.tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
        df.to_parquet(out / f"{name}.parquet", index=False)


def run(snapshot: Path, out: Path, which: str, *, master: str | None = None, what_if: dict[str, str] | None = None,
        assumed_rate: float = 50e6, spark=None, spark_conf: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``which`` (capacity | placement | risk | all) on ``snapshot``; write everything under ``out``.

    Returns the JSON summary (also written to ``out/summary.json``, with ``out/report.html``). Spark's own
    log (and any executor stack trace) goes to ``out/spark.log`` when this call starts Spark.

    ``progress`` is called with the name of each step as it starts (the CLI shows it on a terminal).

    Raises:
        BadInput: not a complete, readable snapshot (names the file; checked before Spark starts).
    """
    from autorecovery.reports.html import render

    step = progress or (lambda _name: None)
    step("checking the snapshot")
    manifest = check_snapshot(snapshot)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own = spark is None
    if own:
        step("starting Spark")
    spark = spark or jobs.spark_session(master, conf=spark_conf, log_path=out / "spark.log")
    try:
        step("reading the snapshot")
        t = jobs.load(spark, snapshot)
        t["ledger_view"].cache()
        bk = _bookies(t)
        thr = throttles(manifest, bk, assumed_rate)
        fns: dict[str, Any] = {}
        if which in ("capacity", "all"):
            fns["capacity"] = jobs.capacity_partition(int(manifest["time_ms"]) - RECENT_DAYS * jobs.DAY_MS)
        if which in ("placement", "all"):
            fns.update(placement_parts(t, manifest, what_if or {}))
        if which in ("risk", "all"):
            fns["risk"] = risk_part(t)
        # one pass over the ledgers feeds every report (views built once per batch); kept for the roll-ups
        from pyspark import StorageLevel

        fused = t["ledger_view"].mapInPandas(jobs.fused_partition(fns), jobs.FUSED_SCHEMA)
        fused = fused.persist(StorageLevel.MEMORY_AND_DISK)

        def part(name: str, schema: str):
            cols = [c.split()[0] for c in schema.split(", ")]
            return fused.where(fused.part == name).select(*cols)

        parts: dict[str, Report] = {}
        if "capacity" in fns:
            step("capacity: one pass over the ledgers")
            parts["capacity"] = capacity(t, manifest, part("capacity", jobs.CAPACITY_SCHEMA))
        if "placement" in fns:
            step("placement and the BP-54 plan")
            parts["placement"] = placement(t, manifest, what_if or {}, out, thr,
                                           part("placement", jobs.PLACEMENT_SCHEMA), part("repair", jobs.REPAIR_SCHEMA))
        if "risk" in fns:
            step("risk per failure domain")
            parts["risk"] = risk(t, manifest, thr, part("risk", jobs.RISK_SCHEMA))
        summary = {"snapshot": str(snapshot), "snapshot_time_ms": manifest.get("time_ms"),
                   "instance_id": manifest.get("instance_id"), "ledgers": manifest.get("counts", {}).get("ledgers"),
                   **{k: v.summary for k, v in parts.items()}}
        step("writing tables, summary.json and report.html")
        for rep in parts.values():
            write(rep, out)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default))
        files = [p.name for p in out.iterdir() if p.name != "report.html"]
        (out / "report.html").write_text(render(summary, {k: v.tables for k, v in parts.items()}, files))
        return summary
    finally:
        if own:
            spark.stop()


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    return str(o)
