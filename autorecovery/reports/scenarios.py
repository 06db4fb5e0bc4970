"""The what-ifs of ``autorecovery report`` on the driver: losing any k bookies, decommissioning a bookie,
adding bookies to a rack, capacity after the BP-54 plan (EDGE: Spark aggregates → small pandas tables).

The per-ledger figures come from :mod:`autorecovery.reports.whatif` inside the executors (the risk pass
and, for k = 3, one more pass over the ledgers); only per-bookie and per-pair sums reach the driver.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from autorecovery.reports import jobs, model, whatif

K3_CANDIDATES = 20


def _fig(v: tuple[float, float, float]) -> dict[str, Any]:
    return {"ledgers_data_loss": int(round(v[0])), "lost_bytes": max(0.0, float(v[1])),
            "ledgers_below_ack_quorum": int(round(v[2]))}


def bookie_losses(t, kloss: pd.DataFrame, bk: pd.DataFrame, thr, top: int = 3, candidates: int = K3_CANDIDATES) -> dict[str, Any]:
    """``what_if_bookies`` of summary.json: for k = 1, 2, 3 the ``top`` worst sets of k bookies (named)
    with the ledgers that lose data or fall below AQ and the bytes lost for good, on top of the damage
    already there. k = 1, 2 exact; k = 3 the worst triple containing one of the ``candidates`` worst pairs
    (see :mod:`whatif`). ``kloss``: the ``kloss`` rows of ``jobs.risk_partition`` summed per (kind, name)
    (``rollup.collect``)."""
    from pyspark.sql import functions as F

    agg = kloss.rename(columns={"ledgers": "dl", "lost_bytes": "lost", "bytes": "below", "heal_bytes": "heal"})
    singles = {r.name: (r.dl, r.lost, r.below) for r in agg.itertuples() if r.kind == "bookie"}
    heal1 = {r.name: r.heal for r in agg.itertuples() if r.kind == "bookie"}
    corr = {tuple(r.name.split("|", 1)): (r.dl, r.lost, r.below) for r in agg.itertuples() if r.kind == "bookie_pair"}
    live = sorted(bk.loc[bk["state"] != "gone", "bookie_id"])
    k1 = sorted(((b, singles.get(b, (0.0, 0.0, 0.0))) for b in live),
                key=lambda kv: (whatif.severity(*kv[1]), kv[0]), reverse=True)[:top]
    k2 = whatif.worst_pairs(singles, corr, top, live)
    pairs = dict(whatif.worst_pairs(singles, corr, candidates, live))
    k3: list = []
    if pairs and len(live) >= 3:
        # only the ledgers holding a member of a candidate pair can correct a triple (triple_corrections
        # gives [] for the others): Spark drops the rest before Python sees them
        cand = sorted({b for pair in pairs for b in pair})
        held = t["ledger_view"].where(F.arrays_overlap(F.flatten(F.col("segs.ensemble")), F.array(*map(F.lit, cand))))
        tri = (held.mapInPandas(jobs.triple_partition(list(pairs), frozenset(bk.loc[bk["state"] == "gone", "bookie_id"])),
                                            jobs.TRIPLE_SCHEMA)
               .groupBy("name").agg(F.sum("ledgers").alias("dl"), F.sum("lost_bytes").alias("lost"),
                                    F.sum("below").alias("below"))).toPandas()
        tcorr = {tuple(r.name.split("|")): (r.dl, r.lost, r.below) for r in tri.itertuples()}
        k3 = whatif.worst_triples(pairs, singles, tcorr, live, top)

    def row(ids: tuple[str, ...], v: tuple[float, float, float], heal: float | None = None) -> dict[str, Any]:
        d = {"bookies": list(ids), **_fig(v)}
        if heal is not None:
            d["heal_bytes"] = float(heal)
            d.update({"heal_time_s": (ht := model.heal_time(heal, None, thr.heal_model(frozenset(ids)))).seconds,
                      "heal_limited_by": ht.limited_by})
        return d

    return {
        "k1": [row((b,), v, heal1.get(b, 0.0)) for b, v in k1],
        "k2": [row(ids, v) for ids, v in k2],
        "k3": [row(ids, v) for ids, v in k3],
        "method": {"k1": "exact", "k2": "exact (every pair sharing a ledger, plus the worst singles' pairs)",
                   "k3": f"search: each of the {len(pairs)} worst pairs extended by every bookie, exact figures for "
                         "those triples; a lower bound of the worst triple",
                   "ranked_by": "ledgers losing data, then bytes lost, then ledgers below AQ",
                   "includes_existing_damage": True},
    }


def decommission(df: pd.DataFrame, bookie: str, bk: pd.DataFrame, thr) -> dict[str, Any]:
    """``what_if_decommission`` of summary.json from the ``decom`` rows of
    :func:`jobs.decommission_partition` (summed per key, ``rollup.collect``): bytes and ledgers to move,
    per target bookie, the heal time (the bookie's daemon keeps running; sources = the other copies),
    verdicts before → after."""
    tg = df[df["kind"] == "target"].groupby("bookie_id")[["bytes", "ledgers"]].sum()
    src = df[df["kind"] == "source"].groupby("bookie_id")["bytes"].sum()
    sole = df[df["kind"] == "sole"].groupby("bookie_id")["bytes"].sum()
    ver = df[df["kind"] == "verdict"].groupby(["current", "what_if"])[["ledgers", "bytes"]].sum().reset_index()
    unpl = df[df["kind"] == "unplaceable"]
    rank = {"FAIL": 0, "MEETS_SOFT": 1, "MEETS_STRICT": 2}
    worse = ver[[rank.get(a, 0) > rank.get(b, 0) for a, b in zip(ver["current"], ver["what_if"], strict=True)]]
    nbytes = float(tg["bytes"].sum()) + float(unpl["bytes"].sum())
    ht = model.heal_time(float(tg["bytes"].sum()), model.SourceReads.from_bookies(src.to_dict(), sole.to_dict()),
                         thr.heal_model(), tg["bytes"].to_dict())
    return {"bookie": bookie, "known": bool((bk["bookie_id"] == bookie).any()),
            "segments_to_move": int(round(tg["ledgers"].sum() + unpl["ledgers"].sum())),
            "bytes_to_move": nbytes,
            "targets": [{"bookie_id": b, "bytes": float(r.bytes), "segments": int(round(r.ledgers))}
                        for b, r in tg.sort_values("bytes", ascending=False).iterrows()],
            "segments_without_target": int(round(unpl["ledgers"].sum())),
            "verdicts": [{"before": r.current, "after": r.what_if, "segments": int(round(r.ledgers))}
                         for r in ver.itertuples()],
            "segments_losing_placement": int(round(worse["ledgers"].sum())),
            "move_time_s": ht.seconds, "move_limited_by": ht.limited_by}


def add_bookies(cap_bk: pd.DataFrame, rack: str, n: int, placement_repair: dict[str, Any] | None = None) -> dict[str, Any]:
    """``what_if_add_bookies`` of summary.json: ``n`` new bookies in ``rack``, each with the rack's median
    known disk (the cluster's when the rack has none): the rack's and the cluster's free space and days
    until full before and after (growth unchanged: new bookies take new ledgers, placement spreads them),
    and the rack count (a new rack gives placement one more failure domain)."""
    in_rack = cap_bk[cap_bk["rack"] == rack]
    known = in_rack.loc[in_rack["disk_known"], "total_bytes"].dropna()
    if not len(known):
        known = cap_bk.loc[cap_bk["disk_known"], "total_bytes"].dropna()
    per = float(known.median()) if len(known) else None
    racks_before = int(cap_bk.loc[cap_bk["state"] != "gone", "rack"].nunique())
    new_rack = rack not in set(cap_bk.loc[cap_bk["state"] != "gone", "rack"])

    def figures(df: pd.DataFrame, extra: float) -> dict[str, Any]:
        k = df[df["disk_known"]]
        free = float(k["free_bytes"].sum()) + extra if len(k) or extra else None
        growth = float(k["growth_bytes_per_day"].sum())
        return {"free_bytes": free, "days_until_full": model.days_until_full(free, growth) if free is not None else None}

    add = n * per if per is not None else 0.0
    return {"rack": rack, "bookies_added": n, "disk_bytes_each": per, "new_rack": new_rack,
            "racks_before": racks_before, "racks_after": racks_before + (1 if new_rack and n > 0 else 0),
            "rack_before": figures(in_rack, 0.0), "rack_after": figures(in_rack, add),
            "cluster_before": figures(cap_bk, 0.0), "cluster_after": figures(cap_bk, add),
            "placement_after": placement_repair}


def after_bp54(cap_bk: pd.DataFrame, by_source: pd.DataFrame, by_target: pd.DataFrame) -> dict[str, Any]:
    """``capacity_after_bp54`` of summary.json: used bytes per bookie once the BP-54 plan has run (each
    swap moves the replaced member's bytes from ``source`` to ``target``), its spread, and the bookies
    whose known free space would go negative."""
    used = dict(zip(cap_bk["bookie_id"], cap_bk["used_bytes"], strict=True))
    free = {b: f for b, f, k in zip(cap_bk["bookie_id"], cap_bk["free_bytes"], cap_bk["disk_known"], strict=True) if k}
    for b, x in zip(by_source.get("source", []), by_source.get("bytes", []), strict=True):
        used[b] = used.get(b, 0.0) - float(x)
        if b in free:
            free[b] += float(x)
    for b, x in zip(by_target.get("target", []), by_target.get("bytes", []), strict=True):
        used[b] = used.get(b, 0.0) + float(x)
        if b in free:
            free[b] -= float(x)
    live = set(cap_bk.loc[cap_bk["state"] != "gone", "bookie_id"])
    vals = [max(0.0, v) for b, v in used.items() if b in live]
    return {"used_bytes": model.spread(vals), "bookies_over_capacity": sorted(b for b, f in free.items() if f < 0),
            "free_bytes_known": float(sum(free.values()))}
