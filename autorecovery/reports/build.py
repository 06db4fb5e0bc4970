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
from autorecovery.reports import jobs, model, rollup, scenarios
from autorecovery.reports.healrate import MeasuredRate, measured_rate
from autorecovery.reports.spark_io import load, shuffle_partitions, spark_session, storage_level
from autorecovery.reports.input_checks import BadInput, check_snapshot

RECENT_DAYS = 30
#: one daemon's copy rate when neither ``--assumed-rate-mbps`` nor the snapshot's heal history gives
#: one, bytes/s (50 MB/s)
DEFAULT_RATE = 50e6


@dataclass
class Throttles:
    """How fast the cluster copies (the heal-time model, ``model.heal_time``; docs/reports.md).

    ``workers``: daemons in the snapshot (one per live bookie, as ``autoRecoveryDaemonEnabled`` runs
    them, unless ``--daemons`` names a separate fleet); ``rate_bytes_per_s``: one daemon's copy rate,
    ``min(measured or assumed rate, replicationRateByBytes)``; ``assumed``: the copy rate is not
    measured (given by ``--assumed-rate-mbps`` or its default): it sets the stream rate of every
    bound, whether or not the throttle caps the daemon rate; ``rate_source`` says where it came from;
    ``concurrent_ledgers`` and the stream caps: the daemon's keys from the
    snapshot's manifest (defaults of ``config/keys.py`` when the snapshot predates them)."""

    workers: int
    rate_bytes_per_s: float
    assumed: bool
    concurrent_ledgers: int = 4
    max_streams_per_source: int = 4
    max_streams_per_target: int = 4
    colocated: bool = True
    measured_rate: float = 0.0
    rate_source: str = ""
    live: frozenset[str] = frozenset()
    writable: frozenset[str] = frozenset()

    def heal_model(self, lost: set[str] | frozenset[str] = frozenset()) -> model.HealModel:
        """The model after losing the bookies ``lost`` (their co-located daemons with them)."""
        daemons = len(self.live - set(lost)) if self.colocated else self.workers
        return model.HealModel(daemons, self.rate_bytes_per_s, self.measured_rate / max(1, self.concurrent_ledgers),
                               self.max_streams_per_source, self.max_streams_per_target,
                               len(self.writable - set(lost)))

    def describe(self) -> dict[str, Any]:
        """The model's inputs, for summary.json."""
        return {"daemons": self.workers, "daemons_colocated_with_bookies": self.colocated,
                "daemon_rate_bytes_per_s": self.rate_bytes_per_s,
                "stream_rate_bytes_per_s": self.measured_rate / max(1, self.concurrent_ledgers),
                "replicationWorkerConcurrentLedgers": self.concurrent_ledgers,
                "replicationMaxStreamsPerSourceBookie": self.max_streams_per_source,
                "replicationMaxStreamsPerTargetBookie": self.max_streams_per_target,
                "rate_assumed": self.assumed, "rate_source": self.rate_source,
                "formula": "lower bound: max(H / (daemons x daemon_rate), R / (sources x per-source cap x "
                           "stream_rate), max_b sole_b / (per-source cap x stream_rate), "
                           "H / (targets x per-target cap x stream_rate))"}


@dataclass
class Report:
    """What a run produced: small pandas tables by name, a JSON-able summary, chart data."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def throttles(manifest: dict, bookies: pd.DataFrame, assumed_rate: float | None, daemons: int | None = None,
              measured: MeasuredRate | None = None) -> Throttles:
    """The heal-time inputs: the snapshot's worker keys, its live bookies and the copy rate.
    ``assumed_rate``: one daemon's copy rate given by the user (bytes/s; ``bench/heal.py`` measures
    one); None → ``measured`` (from the snapshot's heal history, :mod:`reports.healrate`) when there is
    one, else :data:`DEFAULT_RATE`. Only a measured rate gives ``assumed`` False."""
    from autorecovery.config.keys.table import KEY_BY_NAME

    thr = manifest.get("throttles", {})

    def key(name: str) -> int:
        try:
            return int(float(thr[name]))
        except (KeyError, ValueError, TypeError):
            return int(KEY_BY_NAME[name].default)

    if assumed_rate is not None:
        source = f"given: --assumed-rate-mbps {assumed_rate / 1e6:g}"
    elif measured is not None:
        assumed_rate = measured.bytes_per_s
        source = (f"measured: the snapshot's heal history, {measured.episodes} closed episode"
                  f"{'s' if measured.episodes != 1 else ''}")
    else:
        assumed_rate = DEFAULT_RATE
        source = f"default: {DEFAULT_RATE / 1e6:g} MB/s, the default of --assumed-rate-mbps; the snapshot has no heal history"
    rate = float(key("replicationRateByBytes"))
    live = frozenset(bookies.loc[bookies["state"] != "gone", "bookie_id"])
    writable = frozenset(bookies.loc[bookies["state"] == "writable", "bookie_id"])
    daemon_rate = min(assumed_rate, rate) if rate > 0 else assumed_rate
    return Throttles(max(1, daemons if daemons else len(live)), daemon_rate, not source.startswith("measured"),
                     max(1, key("replicationWorkerConcurrentLedgers")), key("replicationMaxStreamsPerSourceBookie"),
                     key("replicationMaxStreamsPerTargetBookie"), colocated=not daemons, measured_rate=assumed_rate,
                     rate_source=source, live=live, writable=writable)


def read_history(snapshot: Path) -> MeasuredRate | None:
    """The copy rate measured from ``history.json`` (written by ``autorecovery export`` from
    ``underreplication/history``); None when the snapshot has none (synthetic, or older) or no closed
    episode healed bytes.

    Raises:
        BadInput: ``history.json`` is not JSON with an ``episodes`` list (names the file).
    """
    p = Path(snapshot) / "history.json"
    if not p.is_file():
        return None
    try:
        doc = json.loads(p.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{p}: not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    eps = doc.get("episodes") if isinstance(doc, dict) else None
    if not isinstance(eps, list):
        raise BadInput(f"{p}: expected an object with an 'episodes' list")
    return measured_rate(e for e in eps if isinstance(e, dict))


def _heal(ht: model.HealTime) -> dict[str, Any]:
    return {"heal_time_s": ht.seconds, "heal_limited_by": ht.limited_by}


def _bookies(t) -> pd.DataFrame:
    """One row per bookie, read from Spark once per run (a copy: callers may add columns)."""
    if "bookies_pd" not in t:
        t["bookies_pd"] = t["bookies"].toPandas()
    return t["bookies_pd"].copy()


def capacity(t, manifest: dict, per: pd.DataFrame, max_multiple: float = 3.0) -> Report:
    """Bytes per bookie/rack/zone/region, free vs used, imbalance, disk weights, growth and days to full.
    ``per``: the rows of :func:`jobs.capacity_partition` summed per bookie (``bookie_id, used_bytes,
    recent_bytes, ledgers``; :func:`rollup.collect`)."""
    bk = _bookies(t).merge(per, on="bookie_id", how="left").fillna({"used_bytes": 0.0, "recent_bytes": 0.0,
                                                                     "ledgers": 0.0})
    bk["ledgers"] = bk["ledgers"].astype("int64")
    # a bookie that did not answer GET_BOOKIE_INFO (-1) has unknown disk figures: null, never summed
    bk["disk_known"] = bk["free_bytes"] >= 0
    bk["free_bytes"] = bk["free_bytes"].where(bk["disk_known"]).astype("float64")
    bk["total_bytes"] = bk["total_bytes"].where(bk["disk_known"] & (bk["total_bytes"] >= 0)).astype("float64")
    bk["growth_bytes_per_day"] = bk["recent_bytes"] / RECENT_DAYS
    bk["days_until_full"] = [model.days_until_full(f, g) if k else None
                             for f, g, k in zip(bk["free_bytes"], bk["growth_bytes_per_day"], bk["disk_known"], strict=True)]
    known = bk[bk["disk_known"]]
    weights = effective_weights({b: float(f) for b, f in zip(known["bookie_id"], known["free_bytes"], strict=True)}, max_multiple) \
        if len(known) else {}
    bk["disk_weight"] = [weights.get(b) for b in bk["bookie_id"]]
    rollups = {}
    for kind in ("rack", "zone", "region"):
        g = bk.groupby(kind).agg(bookies=("bookie_id", "count"), used_bytes=("used_bytes", "sum"),
                                 free_bytes=("free_bytes", lambda x: x.sum(min_count=1)),
                                 total_bytes=("total_bytes", lambda x: x.sum(min_count=1)),
                                 disk_unknown_bookies=("disk_known", lambda x: int((~x).sum())),
                                 growth_bytes_per_day=("growth_bytes_per_day", "sum"),
                                 growth_known_bytes_per_day=("growth_bytes_per_day",
                                                             lambda x: x[bk.loc[x.index, "disk_known"]].sum()),
                                 ).reset_index()
        # days to full from the bookies whose disk is known only (their free space, their growth); a domain
        # with no known disk has no figure, never "full in 0 days"
        g["days_until_full"] = [model.days_until_full(f, gr) if f == f else None
                                for f, gr in zip(g["free_bytes"], g["growth_known_bytes_per_day"], strict=True)]
        rollups[kind] = g.drop(columns="growth_known_bytes_per_day")
    mean = bk["used_bytes"].mean() if len(bk) else 0.0
    soonest = bk.dropna(subset=["days_until_full"]).sort_values("days_until_full").head(5)
    live = bk[bk["state"] != "gone"]
    summary = {
        "bookies": int(len(bk)),
        "used_bytes": float(bk["used_bytes"].sum()),
        "free_bytes": float(known["free_bytes"].sum()),
        "total_bytes": float(known["total_bytes"].sum(min_count=1)) if len(known) else None,
        "bookies_disk_unknown": sorted(bk.loc[~bk["disk_known"], "bookie_id"].tolist()),
        "imbalance_bookie_max_over_mean": float(bk["used_bytes"].max() / mean) if mean else None,
        "imbalance_rack_max_over_mean": float(rollups["rack"]["used_bytes"].max() / rollups["rack"]["used_bytes"].mean())
        if len(rollups["rack"]) and rollups["rack"]["used_bytes"].mean() else None,
        "growth_bytes_per_day": float(bk["growth_bytes_per_day"].sum()),
        "soonest_full": [{"bookie_id": r.bookie_id, "days": round(float(r.days_until_full), 1)}
                         for r in soonest.itertuples()],
        # spread over the live bookies (writable and read-only): used bytes and ledgers per bookie
        "distribution": {"used_bytes": model.spread(live["used_bytes"].tolist()),
                         "ledgers": model.spread(live["ledgers"].tolist()),
                         "free_bytes_known": model.spread(live.loc[live["disk_known"], "free_bytes"].tolist())},
    }
    return Report({"capacity_bookies": bk, **{f"capacity_{k}": v for k, v in rollups.items()}}, summary)


def placement_parts(t, manifest: dict, what_if: dict[str, str]) -> dict[str, Any]:
    """The executor functions of the placement report: verdicts now and under ``what_if``, and the BP-54
    repair plan under the what-if (or current) config."""
    bk = _bookies(t)
    locations = dict(zip(bk["bookie_id"], bk["location"], strict=True))
    members = (list(bk.loc[bk["state"] == "writable", "bookie_id"]), list(bk.loc[bk["state"] == "readonly", "bookie_id"]))
    current = {k: str(v) for k, v in manifest.get("placement", {}).items()}
    target = {**current, **what_if}
    return {"placement": jobs.placement_partition(current, target if what_if else None, locations, members),
            "repair": jobs.repair_partition(target, locations, members, reads=True)}


def write_ledger_tables(out: Path, verdicts, plan) -> None:
    """The per-ledger tables, written by Spark (never collected): ``placement_ledgers.parquet`` (the rows
    of :func:`jobs.placement_partition`) and ``placement_repair_swaps.parquet`` (:func:`jobs.repair_partition`)."""
    verdicts.write.mode("overwrite").parquet(str(out / "placement_ledgers.parquet"))
    plan.write.mode("overwrite").parquet(str(out / "placement_repair_swaps.parquet"))


def placement(manifest: dict, what_if: dict[str, str], thr: Throttles, sums: pd.DataFrame) -> Report:
    """Adherence of every closed ledger now and under ``what_if``; the BP-54 repair plan under the what-if
    config (or the current one) with bytes per source and target bookie and the copy time. ``sums``:
    :func:`rollup.collect` (the placement and repair rows of :func:`placement_parts`' functions)."""
    current = {k: str(v) for k, v in manifest.get("placement", {}).items()}
    counts, by_ns = rollup.placement_counts(sums)
    by_source, by_target, tot = rollup.repair_plan(sums)
    nbytes = tot["bytes"]
    # the swaps copy each replaced member's share from a readable copy (the member itself when it is
    # writable or read-only, the entries' other copies; a gone bookie serves nothing) to the new member
    # named by the plan: the heal-time model with every daemon and the plan's own targets
    rd = rollup.part(sums, "repair_read", ["bookie_id", "bytes", "heal_bytes"])
    reads = model.SourceReads.from_bookies(dict(zip(rd["bookie_id"], rd["bytes"], strict=True)),
                                           dict(zip(rd["bookie_id"], rd["heal_bytes"].fillna(0.0), strict=True)))
    ht = model.heal_time(nbytes, reads, thr.heal_model(), dict(zip(by_target["target"], by_target["bytes"], strict=True)))
    summary = {
        "policy": current.get("ensemblePlacementPolicy", ""),
        "what_if": what_if,
        "current": _verdict_counts(counts, "current"),
        "under_what_if": _verdict_counts(counts, "what_if") if what_if else None,
        "repair": {"ledgers_to_mark": int(round(tot["ledgers"])), "swaps": int(round(tot["swaps"])),
                   "bytes_to_copy": nbytes, "ledgers_without_fix": int(round(tot["unfixable"])),
                   "workers": thr.workers, "rate_bytes_per_s_per_worker": thr.rate_bytes_per_s,
                   "rate_assumed": thr.assumed, "rate_source": thr.rate_source,
                   "copy_time_s": ht.seconds, "copy_limited_by": ht.limited_by},
    }
    return Report({"placement_verdicts": counts, "placement_fail_by_namespace": by_ns,
                   "placement_repair_by_source": by_source, "placement_repair_by_target": by_target}, summary)


def _verdict_counts(counts: pd.DataFrame, col: str) -> dict[str, int]:
    g = counts.groupby(col)["count"].sum()
    return {k: int(v) for k, v in g.items() if k}


def _members(bk: pd.DataFrame) -> tuple[list[str], list[str]]:
    return (list(bk.loc[bk["state"] == "writable", "bookie_id"]), list(bk.loc[bk["state"] == "readonly", "bookie_id"]))


def _decommission_part(manifest: dict, bk: pd.DataFrame, bookie: str) -> Any:
    current = {k: str(v) for k, v in manifest.get("placement", {}).items()}
    return jobs.decommission_partition(bookie, current, dict(zip(bk["bookie_id"], bk["location"], strict=True)), _members(bk))


def _added_placement(t, manifest: dict, bk: pd.DataFrame, what_if: dict[str, str], rack: str, n: int) -> dict[str, Any]:
    """The BP-54 repair plan with ``n`` new writable bookies in ``rack`` (one more pass over the ledgers):
    ledgers to mark, swaps and ledgers without a fix, as ``placement.repair`` reports them."""
    from pyspark.sql import functions as F

    same = bk[bk["rack"] == rack]
    loc = str(same["location"].iloc[0]) if len(same) else f"/{rack}"
    new = [f"added-{rack}-{i}:3181" for i in range(n)]
    locations = {**dict(zip(bk["bookie_id"], bk["location"], strict=True)), **{b: loc for b in new}}
    w, r = _members(bk)
    current = {k: str(v) for k, v in manifest.get("placement", {}).items()}
    plan = t["ledger_view"].mapInPandas(jobs.non_empty(jobs.repair_partition({**current, **what_if}, locations, (w + new, r))),
                                        jobs.REPAIR_SCHEMA)
    tot = plan.agg(F.countDistinct(F.when(F.col("fixable"), F.col("ledger_id"))).alias("ledgers"),
                   F.sum(F.when(F.col("fixable"), 1).otherwise(0)).alias("swaps"),
                   F.sum(F.when(F.col("target").isin(new), F.col("bytes")).otherwise(0.0)).alias("to_new"),
                   F.countDistinct(F.when(~F.col("fixable"), F.col("ledger_id"))).alias("unfixable")).collect()[0]
    return {"location": loc, "ledgers_to_mark": int(tot["ledgers"] or 0), "swaps": int(tot["swaps"] or 0),
            "bytes_to_new_bookies": float(tot["to_new"] or 0.0), "ledgers_without_fix": int(tot["unfixable"] or 0)}


def risk_part(t, bookie_sets: bool = True) -> Any:
    """The executor function of the risk report."""
    bk = _bookies(t)
    location = {r.bookie_id: {"rack": r.rack, "zone": r.zone, "region": r.region} for r in bk.itertuples()}
    gone = frozenset(bk.loc[bk["state"] == "gone", "bookie_id"])
    return jobs.risk_partition(location, ("rack", "zone", "region"), gone, bookie_sets)


def _domain_members(bk: pd.DataFrame, kind: str, name: str) -> frozenset[str]:
    if kind == "rack_pair":
        return frozenset(bk.loc[bk["rack"].isin(name.split("|", 1)), "bookie_id"])
    return frozenset(bk.loc[bk[kind] == name, "bookie_id"])


def _source_reads(per: pd.DataFrame) -> dict[tuple[str, str], model.SourceReads]:
    """(kind, name) → what healing it reads (:class:`model.SourceReads`), from the ``heal_src`` rows
    summed per (kind, name, bookie_id): ``bytes`` = the bookie's even share of the healed entries it
    holds a copy of, ``heal_bytes`` = the bytes only it holds a copy of."""
    out = {}
    for (kind, name), g in per.groupby(["kind", "name"]):
        out[(kind, name)] = model.SourceReads.from_bookies(dict(zip(g["bookie_id"], g["bytes"], strict=True)),
                                                            dict(zip(g["bookie_id"], g["heal_bytes"].fillna(0.0), strict=True)))
    return out


def risk(t, manifest: dict, thr: Throttles, agg: pd.DataFrame, src_sums: pd.DataFrame | None = None) -> Report:
    """For every rack, zone, region and pair of racks: ledgers and bytes that lose every copy of some
    entry, fall below AQ, or lose only a copy; bytes to heal and heal time; rolled up by namespace.
    ``agg``: the rows of :func:`risk_part`'s function summed per (kind, name, outcome, namespace);
    ``src_sums``: its ``heal_src`` rows summed per (kind, name, bookie_id) (:func:`rollup.collect`)."""
    bk = _bookies(t)
    existing = agg[(agg["kind"] == "existing") & (agg["namespace"] == "")]
    agg = agg[agg["kind"] != "existing"]
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
    # heal time from the daemons and bookies that survive the domain (model.heal_time); the source bound
    # needs the bytes read per bookie, computed for racks, zones and regions (not for rack pairs)
    sources = _source_reads(src_sums) if src_sums is not None else {}
    heals = [model.heal_time(h, sources.get((k, n)), thr.heal_model(_domain_members(bk, k, n)))
             for k, n, h in zip(wide["kind"], wide["name"], wide["heal_bytes"], strict=True)]
    wide["heal_time_s"] = [h.seconds for h in heals]
    wide["heal_limited_by"] = [h.limited_by for h in heals]
    wide["surviving_daemons"] = [thr.heal_model(_domain_members(bk, k, n)).daemons
                                 for k, n in zip(wide["kind"], wide["name"], strict=True)]
    wide = wide.sort_values(["ledgers_data_loss", "ledgers_below_ack_quorum", "heal_bytes"], ascending=False)
    by_ns = agg[(agg["namespace"] != "") & (agg["kind"] == "rack") & (agg["outcome"] >= model.BELOW_AQ)]
    by_ns = by_ns.assign(outcome_name=by_ns["outcome"].map(model.OUTCOME_NAMES)).drop(columns="outcome")
    # a domain that holds every bookie (one region, one zone) trivially loses everything: listed, never "worst"
    size = {("rack", k): v for k, v in bk.groupby("rack").size().items()}
    size.update({("zone", k): v for k, v in bk.groupby("zone").size().items()})
    size.update({("region", k): v for k, v in bk.groupby("region").size().items()})
    everything = [f"{r.kind} {r.name}" for r in wide.itertuples() if size.get((r.kind, r.name)) == len(bk)]
    partial = wide[[f"{k} {n}" not in everything for k, n in zip(wide["kind"], wide["name"], strict=True)]]
    worst = partial.iloc[0] if len(partial) else None
    summary = {
        "domains": int(len(wide)),
        "worst": None if worst is None else {
            "kind": worst["kind"], "name": worst["name"], "ledgers_data_loss": int(worst["ledgers_data_loss"]),
            "ledgers_below_ack_quorum": int(worst["ledgers_below_ack_quorum"]),
            "heal_bytes": float(worst["heal_bytes"]), "heal_time_s": worst["heal_time_s"],
            "heal_limited_by": worst["heal_limited_by"], "surviving_daemons": int(worst["surviving_daemons"])},
        "domains_holding_every_bookie": everything,
        "racks_whose_loss_loses_data": sorted(wide.loc[(wide["kind"] == "rack") & (wide["ledgers_data_loss"] > 0),
                                                       "name"].tolist()),
        "workers": thr.workers, "rate_bytes_per_s_per_worker": thr.rate_bytes_per_s, "rate_assumed": thr.assumed,
        "rate_source": thr.rate_source,
        "heal_model": thr.describe(),
        "existing_damage": _existing(existing, bk, thr, sources.get(("existing", ""))),
        "open_ledgers_lac": "read at export" if t.get("lac_read") else
        "unknown: snapshot written before the lac column; open ledgers' last segments counted empty",
    }
    return Report({"risk_domains": wide, "risk_by_namespace": by_ns}, summary)


def _existing(rows: pd.DataFrame, bk: pd.DataFrame, thr: Throttles,
              reads: model.SourceReads | None = None) -> dict[str, Any]:
    """The damage already there (copies on gone bookies and on the replicas markers name), nothing more lost."""
    gone = sorted(bk.loc[bk["state"] == "gone", "bookie_id"])
    by = {int(r.outcome): r for r in rows.itertuples()}

    def n(o: int) -> int:
        return int(round(by[o].ledgers)) if o in by else 0

    heal = float(sum(r.heal_bytes for r in by.values()))
    return {"gone_bookies": gone, "ledgers_data_loss": n(model.LOSS), "ledgers_below_ack_quorum": n(model.BELOW_AQ),
            "ledgers_copy_lost": n(model.COPY), "lost_bytes": float(sum(r.lost_bytes for r in by.values())),
            "heal_bytes": heal, **_heal(model.heal_time(heal, reads, thr.heal_model(frozenset(gone))))}


def write(report: Report, out: Path) -> None:
    """Each table as CSV and Parquet under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, df in report.tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
        df.to_parquet(out / f"{name}.parquet", index=False)


def run(snapshot: Path, out: Path, which: str, *, master: str | None = None, what_if: dict[str, str] | None = None,
        assumed_rate: float | None = None, spark=None, spark_conf: dict[str, str] | None = None,
        progress: Callable[[str], None] | None = None, daemons: int | None = None,
        decommission: str | None = None, add_bookies: tuple[str, int] | None = None,
        k_bookies: bool = True) -> dict[str, Any]:
    """Run ``which`` (capacity | placement | risk | all) on ``snapshot``; write everything under ``out``.

    ``assumed_rate``: one daemon's copy rate (bytes/s, measured by ``bench/heal.py``; None: the rate
    measured from the snapshot's ``history.json`` when it has closed heal episodes, else
    :data:`DEFAULT_RATE`, said in ``heal_model.rate_source``); ``daemons``: a
    separate fleet of that many daemons (default: one per live bookie, lost with it). What-ifs (sections
    of summary.json): with risk and ``k_bookies``, ``what_if_bookies`` (worst loss of 1, 2, 3 bookies);
    ``decommission`` (a bookie id) → ``what_if_decommission``; ``add_bookies`` ((rack, n)) →
    ``what_if_add_bookies``; with capacity and placement, ``capacity_after_bp54``.

    Returns the JSON summary (also written to ``out/summary.json``, with ``out/report.html``). Spark's own
    log (and any executor stack trace) goes to ``out/spark.log`` when this call starts Spark.

    ``progress`` is called with the name of each step as it starts (the CLI shows it on a terminal).

    Raises:
        BadInput: not a complete, readable snapshot, or a ``history.json`` that is not one (names the
            file; checked before Spark starts).
    """
    from autorecovery.reports.html import render

    step = progress or (lambda _name: None)
    step("checking the snapshot")
    manifest = check_snapshot(snapshot)
    measured = read_history(snapshot)  # before Spark starts: a bad history.json is bad input
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own = spark is None
    if own:
        step("starting Spark")
    spark = spark or spark_session(master, conf=spark_conf, log_path=out / "spark.log")
    if own and "spark.sql.shuffle.partitions" not in (spark_conf or {}):
        # the ledger view is one shuffle (segments grouped per ledger); each partition one fused task
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(manifest)))
    try:
        if not str(spark.sparkContext.master).startswith("local"):
            # where the executors' Python came from (a shipped archive or a shared path): spark_env.json
            from autorecovery.reports.spark_io import executor_environment

            (out / "spark_env.json").write_text(json.dumps({"master": spark.sparkContext.master,
                                                            "executors": executor_environment(spark)}, indent=2))
        step("reading the snapshot")
        t = load(spark, snapshot)
        from pyspark import StorageLevel

        level = getattr(StorageLevel, storage_level(manifest))
        t["ledger_view"].persist(level)
        bk = _bookies(t)
        thr = throttles(manifest, bk, assumed_rate, daemons, measured)
        if decommission and decommission not in set(bk["bookie_id"]):
            raise BadInput(f"--decommission {decommission}: no such bookie in snapshot {snapshot}")
        fns: dict[str, Any] = {}
        if which in ("capacity", "all"):
            fns["capacity"] = jobs.capacity_partition(int(manifest["time_ms"]) - RECENT_DAYS * jobs.DAY_MS)
        if which in ("placement", "all"):
            fns.update(placement_parts(t, manifest, what_if or {}))
        if which in ("risk", "all"):
            fns["risk"] = risk_part(t, k_bookies)
        if decommission:
            fns["decom"] = _decommission_part(manifest, bk, decommission)
        # one pass over the ledgers feeds every report (views built once per batch); kept for the roll-ups
        fused = t["ledger_view"].mapInPandas(jobs.fused_partition(fns), jobs.FUSED_SCHEMA)
        fused = fused.persist(level)

        def part(name: str, schema: str):
            cols = [c.split()[0] for c in schema.split(", ")]
            return fused.where(fused.part == name).select(*cols)

        parts: dict[str, Report] = {}
        if "placement" in fns:
            step("one pass over the ledgers; placement verdicts and the BP-54 plan to Parquet")
            write_ledger_tables(out, part("placement", jobs.PLACEMENT_SCHEMA), part("repair", jobs.REPAIR_SCHEMA))
        step("every roll-up in one aggregation")
        sums = rollup.collect(fused)
        if "capacity" in fns:
            step("capacity")
            parts["capacity"] = capacity(t, manifest, rollup.part(sums, "capacity", ["bookie_id", "used_bytes",
                                                                                     "recent_bytes", "ledgers"]))
        if "placement" in fns:
            step("placement and the BP-54 plan")
            parts["placement"] = placement(manifest, what_if or {}, thr, sums)
        if "risk" in fns:
            step("risk per failure domain")
            parts["risk"] = risk(t, manifest, thr,
                                 rollup.part(sums, "risk", ["kind", "name", "outcome", "namespace", "ledgers",
                                                            "lost_bytes", "heal_bytes"]),
                                 rollup.part(sums, "heal_src", ["kind", "name", "bookie_id", "bytes", "heal_bytes"]))
        extra: dict[str, Any] = {}
        if "risk" in fns and k_bookies:
            step("worst loss of 1, 2 and 3 bookies")
            extra["what_if_bookies"] = scenarios.bookie_losses(
                t, rollup.part(sums, "kloss", ["kind", "name", "ledgers", "lost_bytes", "bytes", "heal_bytes"]), bk, thr)
        if decommission:
            extra["what_if_decommission"] = scenarios.decommission(
                rollup.part(sums, "decom", ["kind", "bookie_id", "current", "what_if", "bytes", "ledgers"]),
                decommission, bk, thr)
        if "capacity" in parts and "placement" in parts:
            tabs = parts["placement"].tables
            extra["capacity_after_bp54"] = scenarios.after_bp54(parts["capacity"].tables["capacity_bookies"],
                                                                tabs["placement_repair_by_source"],
                                                                tabs["placement_repair_by_target"])
        if add_bookies and "capacity" in parts:
            extra["what_if_add_bookies"] = scenarios.add_bookies(
                parts["capacity"].tables["capacity_bookies"], add_bookies[0], add_bookies[1],
                _added_placement(t, manifest, bk, what_if or {}, *add_bookies) if "placement" in parts else None)
        summary = {"snapshot": str(snapshot), "snapshot_time_ms": manifest.get("time_ms"),
                   "instance_id": manifest.get("instance_id"), "ledgers": manifest.get("counts", {}).get("ledgers"),
                   **{k: v.summary for k, v in parts.items()}, **extra}
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
